//! Review of the select's one-block nodes (chan/select/nodes.rs, 5dc30d2), the lazily
//! drawn quick-pass order (ceb1a1b) and the inlined select calls (af0b6dd), from safe
//! code only: selected operations that outlive (or not) the future that made them,
//! futures dropped while registered, values of odd sizes and alignments in a node,
//! selects of many and removed operations, racing selects, cancelled async selects,
//! panicking wakers, and the fairness of the lazily drawn order.

mod chan_common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Weak};
use std::task::{Poll, Wake, Waker};
use std::time::{Duration, Instant};

use chan_common::{assert_fair, poll_with, watchdog, Drops, Rng};
use weft::chan::{after, bounded, never, unbounded, Receiver, Select, Sender};

/// A waker (safe: `std::task::Wake`) that counts its wakes.
struct Plain(AtomicUsize);

impl Wake for Plain {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn plain() -> (Arc<Plain>, Waker) {
    let p = Arc::new(Plain(AtomicUsize::new(0)));
    (p.clone(), Waker::from(p))
}

/// A waker whose last handle panics when it is dropped (armed), and whose wake panics
/// (armed): user code that a select's nodes run when they drop or wake it.
struct Bomb {
    armed: AtomicBool,
}

impl Wake for Bomb {
    fn wake(self: Arc<Self>) {
        if self.armed.load(SeqCst) {
            panic!("a waker that panics in wake");
        }
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if self.armed.load(SeqCst) {
            panic!("a waker that panics in wake");
        }
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.armed.load(SeqCst) && !std::thread::panicking() {
            panic!("a waker whose drop panics");
        }
    }
}

fn bomb() -> (Weak<Bomb>, Waker) {
    let b = Arc::new(Bomb {
        armed: AtomicBool::new(false),
    });
    (Arc::downgrade(&b), Waker::from(b))
}

fn arm(b: &Weak<Bomb>) {
    b.upgrade().expect("alive").armed.store(true, SeqCst);
}

// ---------------------------------------------------------------------------------
// Panicking wakers and the block's drop.
// ---------------------------------------------------------------------------------

/// The block of a full round holds a waker clone in every node. When one of those
/// wakers panics as it is dropped (user code: the last handle of a task's waker), the
/// block's drop must still drop the other nodes and free the block (as the boxed
/// nodes did: a `Vec<Box<_>>` drops the rest after a panicking element).
///
/// Three receives wait (registered with waker `w1`, a bomb); a value comes for the
/// third, and the select is polled again with `w2`, which the winning node keeps. The
/// future goes, then the selected operation is performed: the block's drop drops node
/// 0 (a `w1`), node 1 (the last `w1`: its drop panics), node 2 (`w2`).
#[test]
fn panicking_waker_drop_in_the_block_drops_the_other_nodes() {
    watchdog(20, || {
        let (_t0, r0) = unbounded::<u32>();
        let (_t1, r1) = unbounded::<u32>();
        let (t2, r2) = unbounded::<u32>();
        let (b1, w1) = bomb();
        let (p2, w2) = plain();
        let w2_weak = Arc::downgrade(&p2);
        drop(p2);
        let mut sel = Select::new();
        sel.recv(&r0);
        sel.recv(&r1);
        let i2 = sel.recv(&r2);
        let op = {
            let mut fut = std::pin::pin!(sel.select_async());
            assert!(poll_with(fut.as_mut(), &w1).is_pending());
            t2.send_blocking(7).unwrap();
            match poll_with(fut.as_mut(), &w2) {
                Poll::Ready(op) => op,
                Poll::Pending => panic!("a value is there"),
            }
        };
        drop(w1);
        drop(w2);
        assert!(b1.strong_count() > 0, "the losing nodes keep clones of w1");
        assert!(w2_weak.strong_count() > 0, "the winning node keeps w2");
        assert_eq!(op.index(), i2);
        arm(&b1);
        let r = catch_unwind(AssertUnwindSafe(|| op.recv(&r2)));
        assert!(r.is_err(), "the bomb went off in the block's drop");
        assert_eq!(b1.strong_count(), 0, "every w1 dropped");
        assert_eq!(
            w2_weak.strong_count(),
            0,
            "a node after the one whose waker panicked was never dropped (leaked with \
             the whole block)"
        );
    });
}

/// A select's future dropped after its group was won for a send that holds a waiting
/// receiver (another select's, paired with it): the drop lets the receiver go, waking
/// it, and that waker panics. The select's other node, registered on another channel,
/// must still come off that channel's list before the block is freed: a send there
/// afterwards would follow a freed node.
#[test]
fn partner_waker_panics_while_a_won_select_future_is_dropped() {
    watchdog(20, || {
        let (t0, r0) = bounded::<u32>(0);
        let (t1, r1) = unbounded::<u32>();
        let mut sel = Select::new();
        let s = sel.send(&t0);
        sel.recv(&r1);
        let mut fut = Box::pin(sel.select_async());
        // Registered: the send on `t0`'s senders, the receive on `r1`'s receivers.
        assert!(poll_with(fut.as_mut(), Waker::noop()).is_pending());

        // A second select receives on `r0`: it pairs with the waiting send (wins the
        // first select's group for it) and waits for the value with a waker that will
        // panic when woken.
        let mut sel2 = Select::new();
        sel2.recv(&r0);
        let (bw, bomb_waker) = bomb();
        let mut fut2 = Box::pin(sel2.select_async());
        assert!(poll_with(fut2.as_mut(), &bomb_waker).is_pending());
        arm(&bw);

        // Dropped unpolled: the first select lets its partner go (waking the bomb).
        let r = catch_unwind(AssertUnwindSafe(move || drop(fut)));
        assert!(r.is_err(), "the partner's waker panicked: {s}");
        bw.upgrade().unwrap().armed.store(false, SeqCst);

        // Whatever the first select left on `r1`'s list is followed here.
        t1.send_blocking(5).unwrap();
        assert_eq!(r1.try_recv(), Ok(5));
        // A new select of the same shape (likely in the freed block's memory) waits on
        // `r1` and gets the next value.
        let mut sel3 = Select::new();
        sel3.send(&t0);
        let i = sel3.recv(&r1);
        {
            let mut fut3 = std::pin::pin!(sel3.select_async());
            let (_p, w) = plain();
            assert!(poll_with(fut3.as_mut(), &w).is_pending());
            t1.send_blocking(6).unwrap();
            match poll_with(fut3.as_mut(), &w) {
                Poll::Ready(op) => {
                    assert_eq!(op.index(), i);
                    assert_eq!(op.recv(&r1), Ok(6));
                }
                Poll::Pending => panic!("the value for the new select was lost"),
            }
        }
        drop(fut2);
        drop(bomb_waker);
    });
}

// ---------------------------------------------------------------------------------
// The selected operation and the future that made it.
// ---------------------------------------------------------------------------------

/// Registers `sel` (polled once by hand), sends `v` on `tx`, polls again, and drops
/// the future: the selected operation of a full round, which holds the whole block,
/// outlives the future that made it.
fn full_round_op<'a, T: Send>(
    sel: &'a mut Select<'a>,
    tx: &Sender<T>,
    v: T,
) -> weft::chan::SelectedOperation<'a> {
    let (_p, w) = plain();
    let mut fut = Box::pin(sel.select_async());
    assert!(
        poll_with(fut.as_mut(), &w).is_pending(),
        "nothing ready yet"
    );
    assert!(tx.send_blocking(v).is_ok(), "open");
    let op = match poll_with(fut.as_mut(), &w) {
        Poll::Ready(op) => op,
        Poll::Pending => panic!("the value came"),
    };
    drop(fut);
    op
}

/// The operation of a full round performed or dropped after its future went, and the
/// reverse (the operation dropped while the future lives, then the future).
#[test]
fn op_and_future_dropped_in_either_order() {
    watchdog(20, || {
        let drops = Drops::new(8);
        let (t0, r0) = unbounded();
        let (t1, r1) = bounded(0);
        let (_t2, r2) = bounded::<chan_common::Tracked>(3);
        // Performed after the future went.
        {
            let mut sel = Select::new();
            sel.recv(&r1);
            let i = sel.recv(&r0);
            sel.recv(&r2);
            let op = full_round_op(&mut sel, &t0, drops.make(0));
            assert_eq!(op.index(), i);
            assert_eq!(op.recv(&r0).unwrap().id, 0);
        }
        assert_eq!(drops.get(0), 1);
        // Dropped unperformed after the future went: the value goes back.
        {
            let mut sel = Select::new();
            sel.recv(&r1);
            sel.recv(&r0);
            let op = full_round_op(&mut sel, &t0, drops.make(1));
            drop(op);
        }
        assert_eq!(drops.get(1), 0);
        assert_eq!(r0.try_recv().unwrap().id, 1);
        assert_eq!(drops.get(1), 1);
        // The operation dropped first, the future after (by hand).
        {
            let (_p, w) = plain();
            let mut sel = Select::new();
            sel.recv(&r0);
            sel.recv(&r2);
            let mut fut = Box::pin(sel.select_async());
            assert!(poll_with(fut.as_mut(), &w).is_pending());
            t0.send_blocking(drops.make(2)).unwrap();
            let Poll::Ready(op) = poll_with(fut.as_mut(), &w) else {
                panic!("ready")
            };
            drop(op);
            drop(fut);
        }
        assert_eq!(r0.try_recv().unwrap().id, 2);
        // A rendezvous partner (a thread) completes into a node of a full round.
        std::thread::scope(|s| {
            let (_p, w) = plain();
            let mut sel = Select::new();
            sel.recv(&r2);
            let i = sel.recv(&r1);
            let mut fut = Box::pin(sel.select_async());
            assert!(poll_with(fut.as_mut(), &w).is_pending());
            let d = drops.clone();
            let h = s.spawn(move || assert!(t1.send_blocking(d.make(3)).is_ok(), "received"));
            let t0 = Instant::now();
            let op = loop {
                if let Poll::Ready(op) = poll_with(fut.as_mut(), &w) {
                    break op;
                }
                assert!(t0.elapsed() < Duration::from_secs(10), "hang");
                std::thread::sleep(Duration::from_millis(1));
            };
            drop(fut);
            assert_eq!(op.index(), i);
            assert_eq!(op.recv(&r1).unwrap().id, 3);
            h.join().unwrap();
        });
        assert_eq!(drops.total(), 4);
    });
}

/// A future dropped while registered (at every stage a hand-driven poll can leave it),
/// then values sent and channels closed: nothing points at the freed block, no value
/// is lost or dropped twice.
#[test]
fn future_dropped_while_registered_then_sent_and_closed() {
    watchdog(30, || {
        let n = if cfg!(debug_assertions) { 300 } else { 2000 };
        let drops = Drops::new(n * 3);
        let mut rng = Rng::new(chan_common::seed());
        let mut received = 0;
        for round in 0..n {
            let (t0, r0) = bounded::<chan_common::Tracked>(0);
            let (t1, r1) = unbounded();
            let (t2, r2) = bounded(1);
            let tick = after(Duration::from_millis(rng.below(3)));
            let nev = never::<u8>();
            {
                let mut sel = Select::new();
                sel.recv(&nev);
                sel.recv(&r0);
                sel.recv(&r1);
                sel.send(&t2);
                sel.recv(&tick);
                if rng.below(2) == 0 {
                    sel.remove(0);
                }
                let (_p, w) = plain();
                let mut fut = Box::pin(sel.select_async());
                let polls = rng.below(3);
                let mut done = false;
                for _ in 0..=polls {
                    if let Poll::Ready(op) = poll_with(fut.as_mut(), &w) {
                        // Ready at once: the send (room) or the timer; dropped
                        // unperformed, which releases what it holds.
                        drop(op);
                        done = true;
                        break;
                    }
                }
                let _ = done;
                if rng.below(2) == 0 {
                    t1.send_blocking(drops.make(round * 3)).unwrap();
                }
                drop(fut);
            }
            // After the drop: everything reaches plain receivers.
            t1.send_blocking(drops.make(round * 3 + 1)).unwrap();
            t2.send_blocking(drops.make(round * 3 + 2)).unwrap();
            drop((t1, t2));
            while let Ok(v) = r1.try_recv() {
                drop(v);
                received += 1;
            }
            assert!(r2.recv_timeout(Duration::from_secs(5)).is_ok());
            received += 1;
            drop(t0);
            assert!(r0.try_recv().is_err());
        }
        assert_eq!(drops.total(), received);
        let sent: usize = (0..n * 3).map(|i| drops.get(i)).sum();
        assert_eq!(sent, received);
        for i in 0..n * 3 {
            assert!(drops.get(i) <= 1, "value {i} dropped twice");
        }
    });
}

// ---------------------------------------------------------------------------------
// Values of odd sizes and alignments in the block.
// ---------------------------------------------------------------------------------

#[repr(C, align(4096))]
#[derive(Clone, PartialEq, Debug)]
struct Page {
    tag: u64,
    bytes: [u8; 100],
}

/// A value through a full round (registered select, value handed to its node),
/// received, and another dropped unperformed (given back), for each `T`.
fn through_a_full_round<T: Send + Clone + PartialEq + std::fmt::Debug>(a: T, b: T) {
    let (t0, r0) = unbounded::<T>();
    let (t1, r1) = bounded::<T>(0);
    let (t2, r2) = bounded::<T>(1);
    let nev = never::<T>();
    let mut sel = Select::new();
    sel.recv(&r1);
    sel.recv(&nev);
    let i = sel.recv(&r0);
    sel.recv(&r2);
    let (_p, w) = plain();
    {
        let mut fut = Box::pin(sel.select_async());
        assert!(poll_with(fut.as_mut(), &w).is_pending());
        t0.send_blocking(a.clone()).unwrap();
        let Poll::Ready(op) = poll_with(fut.as_mut(), &w) else {
            panic!("ready")
        };
        drop(fut);
        assert_eq!(op.index(), i);
        assert_eq!(op.recv(&r0).as_ref(), Ok(&a));
    }
    {
        let mut fut = Box::pin(sel.select_async());
        assert!(poll_with(fut.as_mut(), &w).is_pending());
        t2.send_blocking(b.clone()).unwrap();
        let Poll::Ready(op) = poll_with(fut.as_mut(), &w) else {
            panic!("ready")
        };
        drop(op);
        drop(fut);
    }
    assert_eq!(r2.try_recv().as_ref(), Ok(&b));
    // A full round selects a send (nothing is ready in the quick pass: t1 is a
    // rendezvous channel, a thread receives on it).
    std::thread::scope(|s| {
        let mut sel = Select::new();
        let i = sel.send(&t1);
        let h = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn_scoped(s, || r1.recv_timeout(Duration::from_secs(10)))
            .unwrap();
        let op = sel
            .select_timeout(Duration::from_secs(10))
            .expect("a receiver");
        assert_eq!(op.index(), i);
        assert!(op.send(&t1, a.clone()).is_ok(), "sent");
        assert_eq!(h.join().unwrap().as_ref(), Ok(&a));
    });
}

/// On a thread with a large stack: a debug build moves the 64 KiB values through
/// several frames.
fn big_stack(f: impl FnOnce() + Send + 'static) {
    let h = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(f)
        .unwrap();
    h.join().unwrap();
}

#[test]
fn page_aligned_huge_and_zero_sized_values_in_the_block() {
    big_stack(|| {
        through_a_full_round(
            Page {
                tag: 1,
                bytes: [7; 100],
            },
            Page {
                tag: 2,
                bytes: [9; 100],
            },
        );
        through_a_full_round((), ());
        through_a_full_round(String::from("a"), String::from("b"));
        through_a_full_round(1u8, 2u8);
    });
}

/// Huge values in the nodes, boxed and by value.
#[test]
fn huge_values_in_the_block() {
    big_stack(|| {
        let mut big = Box::new([0u8; 1 << 16]);
        for (k, b) in big.iter_mut().enumerate() {
            *b = k as u8;
        }
        through_a_full_round(big.clone(), Box::new([5u8; 1 << 16]));
        through_a_full_round(*big, [2u8; 1 << 16]);
    });
}

/// Zero-sized values that count their drops, through full rounds and give-backs.
#[test]
fn zero_sized_values_counted_through_full_rounds() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Z;
    impl Drop for Z {
        fn drop(&mut self) {
            DROPS.fetch_add(1, SeqCst);
        }
    }
    watchdog(20, || {
        let (t0, r0) = unbounded::<Z>();
        let (_t1, r1) = unbounded::<Z>();
        let (_p, w) = plain();
        let mut sel = Select::new();
        sel.recv(&r1);
        sel.recv(&r0);
        for k in 0..200 {
            let mut fut = Box::pin(sel.select_async());
            assert!(poll_with(fut.as_mut(), &w).is_pending());
            t0.send_blocking(Z).unwrap();
            let Poll::Ready(op) = poll_with(fut.as_mut(), &w) else {
                panic!("ready")
            };
            if k % 2 == 0 {
                drop(op.recv(&r0).unwrap());
            } else {
                drop(op);
                drop(r0.try_recv().unwrap());
            }
        }
        assert_eq!(DROPS.load(SeqCst), 200);
    });
}

// ---------------------------------------------------------------------------------
// Many and removed operations; reuse.
// ---------------------------------------------------------------------------------

/// More than 32 operations (no quick pass) and exactly 32, some removed, reused after
/// failed tries and timeouts: the full round finds the one ready, each index right.
#[test]
fn many_and_removed_operations_reused() {
    watchdog(30, || {
        for n in [31usize, 32, 33, 70] {
            let chans: Vec<(Sender<usize>, Receiver<usize>)> = (0..n)
                .map(|k| if k % 3 == 0 { bounded(0) } else { unbounded() })
                .collect();
            let (st, sr) = bounded::<usize>(1);
            let mut sel = Select::new();
            for (_, r) in &chans {
                sel.recv(r);
            }
            let s = sel.send(&st);
            for k in (0..n).step_by(5) {
                sel.remove(k);
            }
            // The send is ready; nothing else.
            let op = sel.try_select().expect("the send has room");
            assert_eq!(op.index(), s);
            op.send(&st, 99).unwrap();
            // Full buffer: nothing ready.
            assert!(sel.try_select().is_err());
            assert!(sel.select_timeout(Duration::from_millis(2)).is_err());
            assert_eq!(sr.try_recv(), Ok(99));
            sel.remove(s);
            assert!(sel.try_select().is_err());
            for (k, (tx, rx)) in chans.iter().enumerate() {
                if k % 3 == 0 {
                    continue;
                }
                tx.send_blocking(k).unwrap();
                if k % 5 == 0 {
                    // Removed: not selected, the value stays.
                    assert!(sel.try_select().is_err(), "a removed operation selected");
                    assert!(sel.select_timeout(Duration::from_millis(1)).is_err());
                    assert_eq!(rx.try_recv(), Ok(k));
                } else {
                    let op = sel.select_timeout(Duration::from_secs(5));
                    let op = op.expect("ready");
                    assert_eq!(op.index(), k);
                    assert_eq!(op.recv(rx), Ok(k));
                }
            }
            // A rendezvous partner on a thread, found by a registered full round.
            std::thread::scope(|s| {
                let k = (0..n).find(|k| k % 3 == 0 && k % 5 != 0).unwrap();
                let tx = &chans[k].0;
                s.spawn(move || tx.send_blocking(k).unwrap());
                let op = sel.select_timeout(Duration::from_secs(10)).expect("sender");
                assert_eq!(op.index(), k);
                assert_eq!(op.recv(&chans[k].1), Ok(k));
            });
        }
    });
}

// ---------------------------------------------------------------------------------
// A waker that panics while a round takes a value.
// ---------------------------------------------------------------------------------

/// A select's round takes a waiting sender's value into its node and wakes the sender,
/// whose waker panics: the panic leaves the select's poll with the value in the node
/// and nothing in the machine's flags saying so. The caller catches the panic and drops
/// the future afterwards (not while unwinding): the value must go back to the channel,
/// not be dropped with the block.
#[test]
fn value_taken_while_a_sender_waker_panics_is_not_lost() {
    watchdog(20, || {
        let drops = Drops::new(1);
        let (t0, r0) = bounded::<chan_common::Tracked>(0);
        let (_t1, r1) = unbounded::<chan_common::Tracked>();
        let (bw, bomb_waker) = bomb();
        let mut send = Box::pin(t0.send(drops.make(0)));
        assert!(poll_with(send.as_mut(), &bomb_waker).is_pending());
        arm(&bw);
        let mut sel = Select::new();
        sel.recv(&r1);
        sel.recv(&r0);
        let mut fut = Box::pin(sel.select_async());
        let r = catch_unwind(AssertUnwindSafe(|| poll_with(fut.as_mut(), Waker::noop())));
        bw.upgrade().unwrap().armed.store(false, SeqCst);
        match r {
            Err(_) => {
                drop(fut);
                // The sender was told its value was taken.
                assert!(matches!(
                    poll_with(send.as_mut(), Waker::noop()),
                    Poll::Ready(Ok(()))
                ));
                assert_eq!(drops.get(0), 0, "the value was dropped with the block");
                assert_eq!(r0.try_recv().map(|v| v.id), Ok(0), "the value is lost");
            }
            Ok(Poll::Ready(op)) => {
                // No panic reached the select (the wake ran elsewhere): nothing to see.
                assert_eq!(op.recv(&r0).unwrap().id, 0);
                drop(fut);
            }
            Ok(Poll::Pending) => panic!("a sender waits"),
        }
        drop(send);
        drop(bomb_waker);
    });
}

// ---------------------------------------------------------------------------------
// Racing selects.
// ---------------------------------------------------------------------------------

/// Two selecting receivers on threads race for each rendezvous sender (a selecting
/// sender and a plain one), some dropping their selected operation unperformed (the
/// value goes back): every value is received exactly once.
#[test]
fn racing_selects_for_rendezvous_partners() {
    watchdog(60, || {
        let n = if cfg!(debug_assertions) { 1500 } else { 6000 };
        let drops = Drops::new(2 * n);
        let (t0, r0) = bounded::<chan_common::Tracked>(0);
        let (_tq, rq) = unbounded::<chan_common::Tracked>();
        let got = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|s| {
            for who in 0..2u64 {
                let (r0, rq, got) = (r0.clone(), rq.clone(), got.clone());
                s.spawn(move || {
                    let mut rng = Rng::new(who + 11);
                    loop {
                        let mut sel = Select::new();
                        sel.recv(&rq);
                        let i = sel.recv(&r0);
                        let op = sel.select_timeout(Duration::from_secs(20)).expect("hang");
                        assert_eq!(op.index(), i);
                        if rng.below(8) == 0 {
                            drop(op);
                            continue;
                        }
                        match op.recv(&r0) {
                            Ok(v) => {
                                assert!(v.id < 2 * n);
                                got.fetch_add(1, SeqCst);
                            }
                            Err(_) => return,
                        }
                    }
                });
            }
            drop(r0);
            let (t1, d1) = (t0.clone(), drops.clone());
            s.spawn(move || {
                for i in 0..n {
                    t1.send_blocking(d1.make(i)).unwrap();
                }
            });
            let mut rng = Rng::new(5);
            for i in n..2 * n {
                let (_tn, rn) = bounded::<chan_common::Tracked>(0);
                let mut sel = Select::new();
                sel.recv(&rn);
                let k = sel.send(&t0);
                if rng.below(2) == 0 {
                    sel.recv(&rn);
                }
                loop {
                    let op = sel.select_timeout(Duration::from_secs(20)).expect("hang");
                    assert_eq!(op.index(), k);
                    if rng.below(6) == 0 {
                        drop(op);
                        continue;
                    }
                    op.send(&t0, drops.make(i)).unwrap();
                    break;
                }
            }
            drop(t0);
        });
        assert_eq!(got.load(SeqCst), 2 * n);
        assert_eq!(drops.total(), 2 * n);
        for i in 0..2 * n {
            assert_eq!(drops.get(i), 1, "value {i}");
        }
    });
}

// ---------------------------------------------------------------------------------
// Async selects on a runtime, cancelled at random points; a runtime dropped.
// ---------------------------------------------------------------------------------

#[test]
fn async_selects_cancelled_at_random_points_on_a_runtime() {
    watchdog(60, || {
        let n = if cfg!(debug_assertions) { 400 } else { 3000 };
        let drops = Drops::new(2 * n);
        let rt = weft::Runtime::new().unwrap();
        let (ta, ra) = bounded::<chan_common::Tracked>(0);
        let (tb, rb) = bounded::<chan_common::Tracked>(2);
        let got = Arc::new(AtomicUsize::new(0));
        let (d1, d2, got2) = (drops.clone(), drops.clone(), got.clone());
        rt.block_on(async move {
            let got = got2;
            let p1 = weft::spawn(async move {
                for i in 0..n {
                    ta.send(d1.make(i)).await.unwrap();
                }
            });
            let p2 = weft::spawn(async move {
                for i in n..2 * n {
                    tb.send(d2.make(i)).await.unwrap();
                }
            });
            let mut hs = Vec::new();
            for who in 0..3u64 {
                let (ra, rb, got) = (ra.clone(), rb.clone(), got.clone());
                hs.push(weft::spawn(async move {
                    let mut rng = Rng::new(who + 100);
                    let tm = never::<()>();
                    let mut closed = [false; 2];
                    let mut rounds = 0u64;
                    while !(closed[0] && closed[1]) {
                        rounds += 1;
                        assert!(rounds < 10_000_000);
                        let mut sel = Select::new();
                        if !closed[0] {
                            sel.recv(&ra);
                        } else {
                            sel.recv(&tm);
                        }
                        if !closed[1] {
                            sel.recv(&rb);
                        } else {
                            sel.recv(&tm);
                        }
                        let polls = rng.below(4);
                        let Some(op) = chan_common::drop_after(polls, sel.select_async()).await
                        else {
                            weft::task::yield_now().await;
                            continue;
                        };
                        let i = op.index();
                        if rng.below(5) == 0 {
                            drop(op);
                            continue;
                        }
                        let r = if i == 0 { &ra } else { &rb };
                        match op.recv(r) {
                            Ok(v) => {
                                assert!(v.id < 2 * n);
                                got.fetch_add(1, SeqCst);
                            }
                            Err(_) => closed[i] = true,
                        }
                    }
                }));
            }
            drop((ra, rb));
            p1.await.unwrap();
            p2.await.unwrap();
            for h in hs {
                h.await.unwrap();
            }
        });
        drop(rt);
        assert_eq!(got.load(SeqCst), 2 * n);
        for i in 0..2 * n {
            assert_eq!(drops.get(i), 1, "value {i}");
        }
    });
}

/// The runtime is dropped while tasks wait in selects that registered (a send with
/// no room, a rendezvous receive, a far timer); the channels work from this thread
/// afterwards, and no value is lost.
#[test]
fn runtime_dropped_while_full_round_selects_wait() {
    watchdog(30, || {
        let drops = Drops::new(3);
        let (ta, ra) = bounded::<chan_common::Tracked>(0);
        let (tb, rb) = bounded::<chan_common::Tracked>(1);
        tb.send_blocking(drops.make(0)).unwrap();
        {
            let rt = weft::Runtime::new().unwrap();
            let started = Arc::new(AtomicUsize::new(0));
            for _ in 0..4 {
                let (ra, tb, st) = (ra.clone(), tb.clone(), started.clone());
                rt.spawn(async move {
                    let far = after(Duration::from_secs(3600));
                    let mut sel = Select::new();
                    sel.recv(&ra);
                    sel.send(&tb);
                    sel.recv(&far);
                    st.fetch_add(1, SeqCst);
                    let op = sel.select_async().await;
                    drop(op);
                });
            }
            chan_common::wait_for("the tasks", 20, || started.load(SeqCst) == 4);
            std::thread::sleep(Duration::from_millis(20));
            rt.shutdown_timeout(Duration::from_secs(5));
        }
        assert_eq!(rb.try_recv().unwrap().id, 0);
        tb.send_blocking(drops.make(1)).unwrap();
        assert_eq!(rb.try_recv().unwrap().id, 1);
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(ra.recv_timeout(Duration::from_secs(10)).unwrap().id, 2);
            });
            ta.send_blocking(drops.make(2)).unwrap();
        });
        assert_eq!(drops.total(), 3);
    });
}

// ---------------------------------------------------------------------------------
// Fairness of the lazily drawn order.
// ---------------------------------------------------------------------------------

/// How often each operation of `sel` is selected over `rounds` selections (each
/// selected operation completed by `complete`).
fn shares(rounds: usize, ops: usize, mut select: impl FnMut() -> usize) -> Vec<f64> {
    let mut counts = vec![0usize; ops];
    for _ in 0..rounds {
        counts[select()] += 1;
    }
    counts.iter().map(|&c| c as f64 / rounds as f64).collect()
}

fn rounds() -> usize {
    if cfg!(debug_assertions) {
        6000
    } else {
        30000
    }
}

/// Three ready receives among empty, rendezvous and never operations, all decided in
/// the quick pass: each wins a third.
#[test]
fn lazy_order_fair_among_ready_in_the_quick_pass() {
    watchdog(60, || {
        let n = rounds();
        let (_e0, r_empty) = unbounded::<u32>();
        let (ta, ra) = unbounded::<u32>();
        let (_z, r_zero) = bounded::<u32>(0);
        let (tb, rb) = bounded::<u32>(n + 1);
        let nev = never::<u32>();
        let (tc, rc) = unbounded::<u32>();
        let (_e1, r_empty2) = bounded::<u32>(4);
        for i in 0..n as u32 {
            ta.send_blocking(i).unwrap();
            tb.send_blocking(i).unwrap();
            tc.send_blocking(i).unwrap();
        }
        let rxs = [&r_empty, &ra, &r_zero, &rb, &nev, &rc, &r_empty2];
        let mut sel = Select::new();
        for r in rxs {
            sel.recv(r);
        }
        let s = shares(n, rxs.len(), || {
            let op = sel.select();
            let i = op.index();
            op.recv(rxs[i]).unwrap();
            i
        });
        assert_fair(&s, &[1, 3, 5], "quick pass");
    });
}

/// Ready operations the quick pass cannot decide (a closed channel, a rendezvous
/// sender waiting) between ones it can: the full round continues in the drawn order,
/// and each ready operation still wins its share.
#[test]
fn lazy_order_fair_when_the_full_round_continues() {
    watchdog(60, || {
        let n = rounds();
        let (ta, ra) = unbounded::<u32>();
        let (_e, r_empty) = unbounded::<u32>();
        let (tclosed, rclosed) = unbounded::<u32>();
        drop(tclosed);
        let (tb, rb) = bounded::<u32>(n + 1);
        for i in 0..n as u32 {
            ta.send_blocking(i).unwrap();
            tb.send_blocking(i).unwrap();
        }
        let rxs = [&r_empty, &ra, &rclosed, &rb];
        let mut sel = Select::new();
        for r in rxs {
            sel.recv(r);
        }
        let s = shares(n, rxs.len(), || {
            let op = sel.select();
            let i = op.index();
            let r = op.recv(rxs[i]);
            assert_eq!(r.is_err(), i == 2);
            i
        });
        assert_fair(&s, &[1, 2, 3], "closed in between");
        // try_select, with a removed operation first.
        let mut sel = Select::new();
        let gone = sel.recv(&r_empty);
        for r in rxs {
            sel.recv(r);
        }
        sel.remove(gone);
        let s = shares(n, rxs.len() + 1, || {
            let op = sel.try_select().expect("ready");
            let i = op.index();
            let _ = op.recv(rxs[i - 1]);
            i
        });
        assert_fair(&s, &[2, 3, 4], "try_select, one removed");
    });
}

/// Over 32 operations (no quick pass), three ready ones spread out: a third each.
#[test]
fn order_fair_without_the_quick_pass() {
    watchdog(60, || {
        let n = rounds() / 2;
        let chans: Vec<(Sender<u32>, Receiver<u32>)> = (0..40).map(|_| unbounded()).collect();
        let ready = [3usize, 20, 39];
        for &k in &ready {
            for i in 0..n as u32 {
                chans[k].0.send_blocking(i).unwrap();
            }
        }
        let mut sel = Select::new();
        for (_, r) in &chans {
            sel.recv(r);
        }
        let s = shares(n, chans.len(), || {
            let op = sel.select();
            let i = op.index();
            op.recv(&chans[i].1).unwrap();
            i
        });
        assert_fair(&s, &ready, "40 operations");
    });
}
