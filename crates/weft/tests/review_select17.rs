//! Adversarial review of the select changes of s17-sel (merged in e8938e8): the quick
//! pass's inline `Stash`, the group kept with the `Machine` (a selected node's group
//! pointer dangles once the select returns), inline operations (`Ops`), and
//! `SelectedOperation`'s Send/Sync. Safe code only: every value must be dropped
//! exactly once, none lost, FIFO kept where crossbeam keeps it, and a misuse must
//! panic rather than misbehave. Meant to be run under valgrind too (small sizes).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use weft::chan::{after, bounded, never, tick, unbounded, Receiver, Select, Sender};

/// Counts drops of a value; `id` identifies it, `check` guards against torn or
/// misplaced bytes.
struct Counted {
    id: u64,
    check: u64,
    drops: Arc<AtomicUsize>,
}

impl Counted {
    fn new(id: u64, drops: &Arc<AtomicUsize>) -> Counted {
        Counted {
            id,
            check: !id,
            drops: drops.clone(),
        }
    }
    fn id(&self) -> u64 {
        assert_eq!(self.check, !self.id, "a value's bytes were damaged");
        self.id
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        assert_eq!(self.check, !self.id, "a damaged value dropped");
        self.drops.fetch_add(1, SeqCst);
    }
}

/// Values of a chosen size and alignment, each with a byte pattern checked when it is
/// received and when it is dropped, and a drop count.
macro_rules! sized {
    ($name:ident, $align:literal, $pad:literal) => {
        #[repr(C, align($align))]
        struct $name {
            id: u32,
            check: u32,
            drops: &'static AtomicUsize,
            pad: [u8; $pad],
        }
        impl $name {
            fn new(id: u32, drops: &'static AtomicUsize) -> Self {
                let mut pad = [0u8; $pad];
                for (k, b) in pad.iter_mut().enumerate() {
                    *b = (id as usize + k) as u8;
                }
                $name {
                    id,
                    check: !id,
                    drops,
                    pad,
                }
            }
            fn verify(&self) -> u32 {
                assert_eq!(self.check, !self.id);
                for (k, b) in self.pad.iter().enumerate() {
                    assert_eq!(*b, (self.id as usize + k) as u8);
                }
                assert_eq!(
                    std::ptr::from_ref(self) as usize % $align,
                    0,
                    "a misaligned value"
                );
                self.id
            }
        }
        impl Drop for $name {
            fn drop(&mut self) {
                self.verify();
                self.drops.fetch_add(1, SeqCst);
            }
        }
    };
}

// Sizes around the 32-byte stash: 16, 24, 32 (inline), 40 (boxed), alignments 8 to 64.
sized!(S16, 8, 0);
sized!(S24, 8, 8);
sized!(S32, 8, 16);
sized!(S40, 8, 24);
sized!(S32A16, 16, 16);
sized!(S32A32, 32, 16);
sized!(S64A64, 64, 48);
sized!(S16A64, 64, 0);

/// Sends ids 0..n, selects each: even ones are dropped unperformed (must go back
/// first, in order), odd ones received. Every value dropped once at the end.
macro_rules! size_case {
    ($ty:ident) => {{
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        const N: u32 = 12;
        let (tx, rx) = bounded::<$ty>(N as usize);
        for i in 0..N {
            tx.send_blocking($ty::new(i, &DROPS)).unwrap();
        }
        let mut got = Vec::new();
        for k in 0..2 * N {
            let mut sel = Select::new();
            let (_t2, r2) = unbounded::<$ty>();
            sel.recv(&r2);
            let i = sel.recv(&rx);
            let op = sel.select();
            assert_eq!(op.index(), i);
            if k.is_multiple_of(2) {
                // Dropped unperformed: the value goes back to the front.
                drop(op);
            } else {
                let v = op.recv(&rx).unwrap();
                got.push(v.verify());
            }
        }
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "FIFO kept");
        assert_eq!(DROPS.load(SeqCst), N as usize);
        // Large values take the boxed path too when a full round ran: a waiting
        // select woken by a sender.
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                tx.send_blocking($ty::new(100, &DROPS)).unwrap();
            });
            let mut sel = Select::new();
            sel.recv(&rx);
            let op = sel.select();
            drop(op);
        });
        assert_eq!(rx.try_recv().unwrap().verify(), 100);
        assert_eq!(DROPS.load(SeqCst), N as usize + 1);
    }};
}

#[test]
fn sizes_and_alignments_round_trip_and_give_back() {
    size_case!(S16);
    size_case!(S24);
    size_case!(S32);
    size_case!(S40);
    size_case!(S32A16);
    size_case!(S32A32);
    size_case!(S64A64);
    size_case!(S16A64);
}

#[test]
fn odd_sizes_without_drop() {
    // 31, 32, 33 bytes of align 1; a ZST; a u128 (align 16).
    fn case<T: Send + PartialEq + std::fmt::Debug + Clone>(v: T) {
        let (tx, rx) = unbounded::<T>();
        tx.send_blocking(v.clone()).unwrap();
        tx.send_blocking(v.clone()).unwrap();
        let mut sel = Select::new();
        sel.recv(&rx);
        drop(sel.select());
        let mut sel = Select::new();
        sel.recv(&rx);
        assert_eq!(sel.select().recv(&rx), Ok(v.clone()));
        assert_eq!(rx.try_recv(), Ok(v));
        assert!(rx.try_recv().is_err());
    }
    case([7u8; 31]);
    case([8u8; 32]);
    case([9u8; 33]);
    case(());
    case(u128::MAX - 5);
    case(String::from("a string of the select"));
    case(vec![1u64; 100]);
}

#[test]
fn zst_with_drop_counts() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Z;
    impl Drop for Z {
        fn drop(&mut self) {
            DROPS.fetch_add(1, SeqCst);
        }
    }
    let (tx, rx) = bounded::<Z>(3);
    for _ in 0..3 {
        tx.send_blocking(Z).unwrap();
    }
    for _ in 0..5 {
        let mut sel = Select::new();
        sel.recv(&rx);
        drop(sel.select());
    }
    assert_eq!(DROPS.load(SeqCst), 0, "a given-back ZST is not dropped");
    let mut sel = Select::new();
    sel.recv(&rx);
    drop(sel.select().recv(&rx).unwrap());
    assert_eq!(DROPS.load(SeqCst), 1);
    drop(tx);
    drop(rx);
    assert_eq!(DROPS.load(SeqCst), 3);
}

#[test]
fn dropped_op_value_comes_before_disconnected() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = unbounded();
    tx.send_blocking(Counted::new(1, &drops)).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let op = sel.select();
    drop(tx);
    // The channel is disconnected and its buffer empty while the op holds the value.
    drop(op);
    assert_eq!(rx.recv_blocking().unwrap().id(), 1);
    assert!(rx.recv_blocking().is_err());
    assert_eq!(drops.load(SeqCst), 1);
}

#[test]
fn receiver_side_close_while_op_holds_value() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = unbounded();
    tx.send_blocking(Counted::new(1, &drops)).unwrap();
    tx.send_blocking(Counted::new(2, &drops)).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let op = sel.select();
    rx.close();
    drop(op);
    // Whatever close's policy for buffered values, each is dropped exactly once.
    let mut seen = Vec::new();
    while let Ok(v) = rx.try_recv() {
        seen.push(v.id());
    }
    assert!(seen == [1, 2] || seen.is_empty(), "{seen:?}");
    drop(tx);
    drop(rx);
    assert_eq!(drops.load(SeqCst), 2);
}

#[test]
fn wrong_receiver_same_type_panics_and_gives_back() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx1, rx1) = unbounded();
    let (tx2, rx2) = unbounded();
    tx1.send_blocking(Counted::new(1, &drops)).unwrap();
    tx2.send_blocking(Counted::new(2, &drops)).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx1);
    let op = sel.select();
    let r = catch_unwind(AssertUnwindSafe(|| op.recv(&rx2)));
    assert!(r.is_err(), "another channel's receiver must be refused");
    assert_eq!(drops.load(SeqCst), 0);
    assert_eq!(rx1.try_recv().unwrap().id(), 1);
    assert_eq!(rx2.try_recv().unwrap().id(), 2);
    assert_eq!(drops.load(SeqCst), 2);
}

#[test]
fn wrong_receiver_other_type_and_timer_and_never_panic() {
    let (tx, rx) = unbounded::<[u64; 4]>();
    let (_t2, rx2) = unbounded::<String>();
    let timer = after(Duration::ZERO);
    let nev = never::<[u64; 4]>();
    for k in 0..4 {
        tx.send_blocking([k; 4]).unwrap();
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.select();
        let r = catch_unwind(AssertUnwindSafe(|| match k {
            0 => drop(op.recv(&rx2)),
            1 => drop(op.recv(&timer)),
            2 => drop(op.recv(&nev)),
            _ => drop(op.send(&tx, [9; 4])),
        }));
        assert!(r.is_err(), "case {k} must panic");
        assert_eq!(rx.try_recv(), Ok([k; 4]), "case {k}: the value went back");
    }
}

#[test]
fn recv_on_selected_send_panics() {
    let (tx, rx) = bounded::<u32>(1);
    let mut sel = Select::new();
    sel.send(&tx);
    let op = sel.select();
    assert!(catch_unwind(AssertUnwindSafe(|| op.recv(&rx))).is_err());
    // The room the send saw was not used up.
    tx.try_send(1).unwrap();
    assert_eq!(rx.try_recv(), Ok(1));
}

/// crossbeam compares the receiver's own address and panics for a clone; weft
/// compares the channel's, so a clone of the selected receiver is accepted. A
/// difference, not a hazard: the same channel, so the same `T`.
#[test]
fn clone_of_selected_receiver_is_accepted() {
    let (tx, rx) = unbounded::<u8>();
    tx.send_blocking(5).unwrap();
    let rx2 = rx.clone();
    let mut sel = Select::new();
    sel.recv(&rx);
    assert_eq!(sel.select().recv(&rx2), Ok(5));
}

#[test]
fn op_dropped_while_unwinding_gives_back() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = bounded(2);
    tx.send_blocking(Counted::new(1, &drops)).unwrap();
    tx.send_blocking(Counted::new(2, &drops)).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut sel = Select::new();
        sel.recv(&rx);
        let _op = sel.select();
        panic!("while holding a selected operation");
    }));
    assert!(r.is_err());
    assert_eq!(rx.try_recv().unwrap().id(), 1);
    assert_eq!(rx.try_recv().unwrap().id(), 2);
    assert_eq!(drops.load(SeqCst), 2);
}

/// A value whose drop panics, received through the select and dropped by the caller:
/// the panic is the caller's; the channel stays usable.
#[test]
fn panicking_drop_of_a_received_value() {
    struct Bomb(u32);
    impl Drop for Bomb {
        fn drop(&mut self) {
            if self.0 == 1 {
                panic!("bomb");
            }
        }
    }
    let (tx, rx) = unbounded();
    tx.send_blocking(Bomb(1)).unwrap();
    tx.send_blocking(Bomb(2)).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut sel = Select::new();
        sel.recv(&rx);
        drop(sel.select().recv(&rx).unwrap());
    }));
    assert!(r.is_err());
    let mut sel = Select::new();
    sel.recv(&rx);
    assert_eq!(sel.select().recv(&rx).unwrap().0, 2);
}

#[test]
fn op_performed_or_dropped_on_another_thread() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = unbounded();
    for i in 0..4 {
        tx.send_blocking(Counted::new(i, &drops)).unwrap();
    }
    for k in 0..4u64 {
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.select();
        std::thread::scope(|s| {
            s.spawn(|| {
                if k.is_multiple_of(2) {
                    drop(op);
                } else {
                    assert_eq!(op.recv(&rx).unwrap().id(), k / 2);
                }
            });
        });
    }
    assert_eq!(rx.try_recv().unwrap().id(), 2);
    assert_eq!(rx.try_recv().unwrap().id(), 3);
    assert_eq!(drops.load(SeqCst), 4);
}

/// Selected by a full round (a node, not the stash), then moved to another thread.
#[test]
fn full_round_op_moved_to_another_thread() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = bounded::<Counted>(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..4 {
                tx.send_blocking(Counted::new(i, &drops)).unwrap();
            }
        });
        let mut got = Vec::new();
        while got.len() < 4 {
            let mut sel = Select::new();
            let (_t, never_ready) = unbounded::<Counted>();
            sel.recv(&never_ready);
            sel.recv(&rx);
            let op = sel.select();
            let keep = got.len() % 2 == 1;
            let v = std::thread::scope(|s2| {
                s2.spawn(|| {
                    if keep {
                        Some(op.recv(&rx).unwrap().id())
                    } else {
                        drop(op);
                        None
                    }
                })
                .join()
                .unwrap()
            });
            match v {
                Some(id) => got.push(id),
                None => got.push(rx.recv_blocking().unwrap().id()),
            }
        }
        assert_eq!(got, [0, 1, 2, 3]);
    });
    assert_eq!(drops.load(SeqCst), 4);
}

#[test]
fn reuse_select_after_selection_timeout_and_try() {
    let (tx, rx) = unbounded::<u32>();
    let (tx2, rx2) = bounded::<u32>(1);
    let mut sel = Select::new();
    let a = sel.recv(&rx);
    let b = sel.send(&tx2);
    // Selected the send; performed.
    let op = sel.select();
    assert_eq!(op.index(), b);
    op.send(&tx2, 1).unwrap();
    // Nothing ready now: timeouts and try.
    assert!(sel.select_timeout(Duration::from_millis(2)).is_err());
    assert!(sel.try_select().is_err());
    assert!(sel.ready_timeout(Duration::from_millis(2)).is_err());
    tx.send_blocking(7).unwrap();
    let op = sel.select();
    assert_eq!(op.index(), a);
    drop(op);
    let op = sel.try_select().unwrap();
    assert_eq!(op.recv(&rx), Ok(7));
    assert_eq!(rx2.try_recv(), Ok(1));
    let op = sel.select_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(op.index(), b);
    drop(op);
}

/// More than 4 operations (spilled to a `Vec`), removals, and the same receiver added
/// several times; also more than 32 (no quick pass at all).
#[test]
fn spill_remove_and_duplicates() {
    for n in [3usize, 4, 5, 8, 33, 40] {
        let drops = Arc::new(AtomicUsize::new(0));
        let chans: Vec<(Sender<Counted>, Receiver<Counted>)> = (0..n).map(|_| bounded(4)).collect();
        let mut sel = Select::new();
        let mut idx = Vec::new();
        for (_, r) in &chans {
            idx.push(sel.recv(r));
        }
        // The first receiver again, twice.
        let dup1 = sel.recv(&chans[0].1);
        let dup2 = sel.recv(&chans[0].1);
        assert_eq!(idx, (0..n).collect::<Vec<_>>());
        assert_eq!((dup1, dup2), (n, n + 1));
        // Remove every operation but the last channel's and the duplicates.
        for &i in &idx[..n - 1] {
            sel.remove(i);
        }
        let mut sel2 = sel.clone();
        chans[0].0.send_blocking(Counted::new(0, &drops)).unwrap();
        chans[n - 1]
            .0
            .send_blocking(Counted::new(1, &drops))
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..2 {
            let op = sel2.select();
            let i = op.index();
            assert!(i == dup1 || i == dup2 || i == n - 1, "selected {i}");
            let r = if i == n - 1 {
                &chans[n - 1].1
            } else {
                &chans[0].1
            };
            let _ = sel.try_select().map(drop);
            got.push(op.recv(r).unwrap().id());
        }
        got.sort_unstable();
        assert_eq!(got, [0, 1], "n = {n}");
        assert!(sel.try_select().is_err());
        assert_eq!(drops.load(SeqCst), 2);
    }
}

/// Timers in the same select as a ready channel; a timer's op dropped unperformed
/// gives its instant back (it fires again for the next select).
#[test]
fn timers_with_channels() {
    let (tx, rx) = unbounded::<u32>();
    let t = after(Duration::ZERO);
    let k = tick(Duration::from_millis(1));
    std::thread::sleep(Duration::from_millis(2));
    let mut seen = [0usize; 3];
    for i in 0..30 {
        tx.send_blocking(i).unwrap();
        let mut sel = Select::new();
        let a = sel.recv(&rx);
        let b = sel.recv(&t);
        let c = sel.recv(&k);
        let op = sel.select();
        match op.index() {
            i if i == a => {
                seen[0] += 1;
                if seen[0].is_multiple_of(2) {
                    op.recv(&rx).unwrap();
                }
            }
            i if i == b => {
                seen[1] += 1;
                drop(op);
                // Given back: still there.
                assert!(t.try_recv().is_ok());
            }
            i if i == c => {
                seen[2] += 1;
                if seen[2].is_multiple_of(2) {
                    op.recv(&k).unwrap();
                }
            }
            _ => unreachable!(),
        }
    }
    let mut left = 0;
    while rx.try_recv().is_ok() {
        left += 1;
    }
    assert_eq!(left + seen[0] / 2, 30);
    // `after` fires once: taken by the try_recv above if it was selected.
    assert!(seen[1] <= 1);
}

/// A select waiting in a full round is woken by a close: the receive is selected with
/// "disconnected", or (raced) with a value sent just before. Nothing is lost.
#[test]
fn waiting_select_woken_by_close_or_value() {
    for round in 0..200u64 {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = bounded::<Counted>(if round.is_multiple_of(2) { 0 } else { 1 });
        let (tx2, rx2) = unbounded::<Counted>();
        std::thread::scope(|s| {
            let d = drops.clone();
            let tx = &tx;
            s.spawn(move || {
                if round.is_multiple_of(3) {
                    let _ = tx.try_send(Counted::new(round, &d));
                }
                tx.close();
            });
            s.spawn(|| {
                if round.is_multiple_of(5) {
                    tx2.send_blocking(Counted::new(1000 + round, &drops))
                        .unwrap();
                }
            });
            let mut got = 0;
            loop {
                let mut sel = Select::new();
                let a = sel.recv(&rx);
                sel.recv(&rx2);
                let op = match sel.select_timeout(Duration::from_secs(60)) {
                    Ok(op) => op,
                    Err(_) => panic!("a close must wake the select"),
                };
                if op.index() == a {
                    if round.is_multiple_of(7) {
                        drop(op);
                        match rx.try_recv() {
                            Ok(v) => {
                                v.id();
                                got += 1;
                                continue;
                            }
                            Err(_) => break,
                        }
                    }
                    match op.recv(&rx) {
                        Ok(v) => {
                            v.id();
                            got += 1;
                        }
                        Err(_) => break,
                    }
                } else {
                    op.recv(&rx2).unwrap();
                }
            }
            assert!(got <= 1);
        });
        drop((tx, rx, tx2, rx2));
        let made = usize::from(round.is_multiple_of(3)) + usize::from(round.is_multiple_of(5));
        // A try_send into a full zero-capacity channel fails (its value dropped too).
        assert_eq!(drops.load(SeqCst), made, "round {round}");
    }
}

/// Many threads select over shared channels (receives and sends, rendezvous and
/// buffered), dropping some selected operations unperformed: every value is received
/// or left in a channel exactly once. The groups of finished selects are freed while
/// other selects' senders scan the lists: run under valgrind to catch a node left
/// behind pointing at a freed group.
#[test]
fn stress_conservation_with_drops() {
    const THREADS: usize = 4;
    let per = if cfg!(debug_assertions) { 300 } else { 3000 };
    for cap in [0usize, 1, 3] {
        let drops = Arc::new(AtomicUsize::new(0));
        let made = Arc::new(AtomicUsize::new(0));
        let chans: Vec<(Sender<Counted>, Receiver<Counted>)> =
            (0..3).map(|_| bounded(cap)).collect();
        let received = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let chans = &chans;
                let drops = &drops;
                let made = &made;
                let received = &received;
                s.spawn(move || {
                    let mut x = t as u64 * 7 + 1;
                    let mut next = || {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x
                    };
                    for i in 0..per {
                        let mut sel = Select::new();
                        let mut ops = Vec::new();
                        for (c, (tx, rx)) in chans.iter().enumerate() {
                            if (c + t).is_multiple_of(2) {
                                ops.push((sel.send(tx), c, false));
                            }
                            ops.push((sel.recv(rx), c, true));
                        }
                        let op = match sel.select_timeout(Duration::from_millis(20)) {
                            Ok(op) => op,
                            Err(_) => continue,
                        };
                        let &(_, c, recv) = ops.iter().find(|o| o.0 == op.index()).unwrap();
                        let dropit = next().is_multiple_of(4);
                        if dropit {
                            drop(op);
                        } else if recv {
                            if let Ok(v) = op.recv(&chans[c].1) {
                                v.id();
                                received.fetch_add(1, SeqCst);
                            }
                        } else {
                            made.fetch_add(1, SeqCst);
                            let id = (t * per + i) as u64;
                            op.send(&chans[c].0, Counted::new(id, drops)).unwrap();
                        }
                    }
                });
            }
        });
        let mut left = 0;
        for (_, rx) in &chans {
            while let Ok(v) = rx.try_recv() {
                v.id();
                left += 1;
            }
        }
        let made = made.load(SeqCst);
        assert_eq!(received.load(SeqCst) + left, made, "cap {cap}");
        assert_eq!(drops.load(SeqCst), made, "cap {cap}");
    }
}

/// `select_async` futures polled once (some registered, some selected) and dropped at
/// once, while other threads send and receive: nothing may keep pointing at a
/// dropped future's group, and no value is lost or doubled.
#[test]
fn select_async_cancelled_at_every_poll() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = bounded::<Counted>(0);
    let (tx2, rx2) = bounded::<Counted>(1);
    let n = if cfg!(debug_assertions) { 400 } else { 4000 };
    let received = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..n {
                tx.send_blocking(Counted::new(i, &drops)).unwrap();
            }
            drop(tx);
        });
        s.spawn(|| {
            for i in 0..n {
                tx2.send_blocking(Counted::new(n + i, &drops)).unwrap();
            }
            drop(tx2);
        });
        let mut polls = 0u64;
        let mut closed = [false; 2];
        while !(closed[0] && closed[1]) {
            polls += 1;
            assert!(polls < 100_000_000, "bounded");
            let mut sel = Select::new();
            sel.recv(&rx);
            sel.recv(&rx2);
            let mut fut = std::pin::pin!(sel.select_async());
            let mut cx = Context::from_waker(Waker::noop());
            // Poll a few times, then drop (cancel) whatever state it is in.
            for _ in 0..(polls % 3) {
                if let Poll::Ready(op) = fut.as_mut().poll(&mut cx) {
                    let i = op.index();
                    let r = if i == 0 { &rx } else { &rx2 };
                    if polls.is_multiple_of(5) {
                        drop(op);
                    } else {
                        match op.recv(r) {
                            Ok(v) => {
                                v.id();
                                received.fetch_add(1, SeqCst);
                            }
                            Err(_) => closed[i] = true,
                        }
                    }
                    break;
                }
            }
        }
    });
    assert_eq!(received.load(SeqCst), 2 * n as usize);
    assert_eq!(drops.load(SeqCst), 2 * n as usize);
}

/// A task and a fiber wait in a select when the runtime is dropped; afterwards the
/// channels are used from this thread (anything still pointing at a freed group
/// would be followed here).
#[test]
fn runtime_dropped_while_selects_wait() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = bounded::<Counted>(0);
    let (tx2, rx2) = unbounded::<Counted>();
    {
        let rt = weft::Runtime::new().unwrap();
        let (r1, r2) = (rx.clone(), rx2.clone());
        let started = Arc::new(AtomicUsize::new(0));
        let st = started.clone();
        rt.spawn(async move {
            st.fetch_add(1, SeqCst);
            let mut sel = Select::new();
            sel.recv(&r1);
            sel.recv(&r2);
            let op = sel.select_async().await;
            drop(op);
        });
        let (r1, r2) = (rx.clone(), rx2.clone());
        let st = started.clone();
        let _enter = rt.enter();
        let _f = weft::fiber::spawn(move || {
            st.fetch_add(1, SeqCst);
            let mut sel = Select::new();
            sel.recv(&r1);
            sel.recv(&r2);
            let op = sel.select_timeout(Duration::from_secs(3600));
            drop(op);
        });
        drop(_enter);
        let t0 = std::time::Instant::now();
        while started.load(SeqCst) < 2 && t0.elapsed() < Duration::from_secs(60) {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        rt.shutdown_timeout(Duration::from_secs(5));
    }
    // A rendezvous send needs a receiver: the selects are gone, so only this one.
    std::thread::scope(|s| {
        s.spawn(|| {
            let v = rx.recv_timeout(Duration::from_secs(60)).expect("the value");
            v.id();
        });
        tx.send_blocking(Counted::new(1, &drops)).unwrap();
    });
    tx2.send_blocking(Counted::new(2, &drops)).unwrap();
    assert_eq!(rx2.try_recv().unwrap().id(), 2);
    drop((tx, rx, tx2, rx2));
    assert_eq!(drops.load(SeqCst), 2);
}

/// `mem::forget` of a selected operation (safe code) leaks its value: crossbeam's
/// forgotten operation leaks too. What matters here: the channel must not wait for
/// it for ever (a receiver of the closed channel must still end).
#[test]
// Pre-existing (fails the same at 823e70c, before the stash): the quick pass takes its
// value through `recv_fast_held`, counted in flight until `taken` or a give-back.
#[ignore = "finding: a forgotten SelectedOperation keeps the channel's in-flight count up for ever: a receiver of the closed, drained channel never sees Disconnected"]
fn forgotten_op_does_not_hang_receivers() {
    let (tx, rx) = unbounded::<u32>();
    tx.send_blocking(1).unwrap();
    tx.send_blocking(2).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    std::mem::forget(sel.select());
    drop(tx);
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Ok(2));
    let r = rx.recv_timeout(Duration::from_secs(5));
    assert!(
        matches!(r, Err(weft::chan::RecvTimeoutError::Disconnected)),
        "{r:?}"
    );
}

/// The `Select` dropped (or changed) while its selected operation lives: the
/// operation keeps only the receiver, not the select.
#[test]
fn op_outlives_its_select() {
    let (_t, other) = unbounded::<String>();
    let (tx, rx) = unbounded::<String>();
    tx.send_blocking("one".into()).unwrap();
    tx.send_blocking("two".into()).unwrap();
    let mut sel = Select::new();
    let i = sel.recv(&rx);
    let op = sel.select();
    sel.remove(i);
    for _ in 0..6 {
        sel.recv(&other);
    }
    drop(sel);
    assert_eq!(op.recv(&rx).as_deref(), Ok("one"));
    let mut sel = Select::new();
    sel.recv(&rx);
    let op = sel.select();
    drop(sel);
    drop(op);
    assert_eq!(rx.try_recv().as_deref(), Ok("two"));
}

/// Two selected operations of one receiver alive at once: each holds its own value.
/// Dropped in the order they were taken, the second given back goes in front of the
/// first (each give-back goes to the front): the channel's order changes. Crossbeam
/// cannot show this (its unperformed operation panics on drop); recorded as weft's
/// behaviour, values intact and each dropped once.
#[test]
fn two_outstanding_ops_give_back_in_drop_order() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = unbounded();
    for i in 1..=3 {
        tx.send_blocking(Counted::new(i, &drops)).unwrap();
    }
    let mut sel = Select::new();
    sel.recv(&rx);
    let a = sel.select();
    let b = sel.select();
    drop(a);
    drop(b);
    let order: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok().map(|v| v.id())).collect();
    assert_eq!(order, [2, 1, 3]);
    assert_eq!(drops.load(SeqCst), 3);
}

/// The same hazard without a select: a receive future that a sender handed its value
/// to, then forgotten. Shows whether the forgotten-operation hang is the select's own
/// or the channel's in-flight design (see `forgotten_op_does_not_hang_receivers`).
#[test]
#[ignore = "finding (the channel's, not the select's): a forgotten receive future holding a handed value keeps the in-flight count up: Disconnected never comes"]
fn forgotten_recv_future_does_not_hang_receivers() {
    use std::future::Future;
    use std::task::{Context, Waker};
    let (tx, rx) = unbounded::<u32>();
    let mut fut = Box::pin(rx.recv());
    let mut cx = Context::from_waker(Waker::noop());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    tx.send_blocking(1).unwrap();
    std::mem::forget(fut);
    drop(tx);
    let r = rx.recv_timeout(Duration::from_secs(5));
    assert!(
        matches!(r, Err(weft::chan::RecvTimeoutError::Disconnected)),
        "{r:?}"
    );
}

/// A value given back while another receiver waits (a blocking receive, or another
/// thread's select in a full round) goes to that receiver, before Disconnected when
/// the senders are gone meanwhile.
#[test]
fn given_back_value_reaches_a_waiting_receiver_before_disconnected() {
    for case in 0..8u64 {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = unbounded::<Counted>();
        tx.send_blocking(Counted::new(case, &drops)).unwrap();
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.select();
        let waiting = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                waiting.store(1, SeqCst);
                let mut got = Vec::new();
                loop {
                    let r = if case.is_multiple_of(2) {
                        rx.recv_timeout(Duration::from_secs(60))
                            .map_err(|e| format!("{e:?}"))
                    } else {
                        let mut sel = Select::new();
                        sel.recv(&rx);
                        match sel.select_timeout(Duration::from_secs(60)) {
                            Ok(op) => op.recv(&rx).map_err(|e| format!("{e:?}")),
                            Err(e) => Err(format!("{e:?}")),
                        }
                    };
                    match r {
                        Ok(v) => got.push(v.id()),
                        Err(e) => return (got, e),
                    }
                }
            });
            while waiting.load(SeqCst) == 0 {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(2));
            if case % 4 < 2 {
                drop(tx);
                drop(op);
            } else {
                drop(op);
                drop(tx);
            }
            let (got, end) = h.join().unwrap();
            assert_eq!(got, [case], "case {case}");
            assert!(!end.contains("Timeout"), "case {case}: {end}");
        });
        assert_eq!(drops.load(SeqCst), 1);
    }
}

/// `select!`'s send arm evaluates its value only when that arm is selected (as in
/// crossbeam): every value made is dropped exactly once.
#[test]
fn macro_send_arm_values_counted() {
    let drops = Arc::new(AtomicUsize::new(0));
    let made = AtomicUsize::new(0);
    let mk = |id| {
        made.fetch_add(1, SeqCst);
        Counted::new(id, &drops)
    };
    let (tx, rx) = bounded::<Counted>(4);
    let (tx2, rx2) = bounded::<Counted>(1);
    for i in 0..3 {
        tx.send_blocking(mk(i)).unwrap();
    }
    for i in 0..8 {
        weft::select! {
            recv(rx) -> v => { v.unwrap().id(); }
            send(tx2, mk(100 + i)) -> r => { r.unwrap(); }
            default(Duration::from_millis(1)) => {}
        }
    }
    while let Ok(v) = rx2.try_recv() {
        v.id();
    }
    drop((tx, rx, tx2));
    assert_eq!(drops.load(SeqCst), made.load(SeqCst));
}

/// `select_async`'s future polled again after it returned an operation (allowed to
/// misbehave, not to be unsound): its machine, whose group was won and whose
/// selected node is gone, must panic or select anew, never touch what it gave away.
#[test]
fn select_async_polled_after_ready() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let drops = Arc::new(AtomicUsize::new(0));
    for quick in [true, false] {
        let (tx, rx) = bounded::<Counted>(0);
        let (tx2, rx2) = unbounded::<Counted>();
        let mut sel = Select::new();
        sel.recv(&rx);
        sel.recv(&rx2);
        if quick {
            tx2.send_blocking(Counted::new(1, &drops)).unwrap();
        }
        tx2.send_blocking(Counted::new(2, &drops)).unwrap();
        let mut fut = Box::pin(sel.select_async());
        let mut cx = Context::from_waker(Waker::noop());
        std::thread::scope(|s| {
            let op = if quick {
                match fut.as_mut().poll(&mut cx) {
                    Poll::Ready(op) => op,
                    Poll::Pending => panic!("a value was ready"),
                }
            } else {
                // Registered on both (the rendezvous has no sender yet, and the
                // buffered channel's value is taken first only if the quick pass
                // saw it: drain it so the round registers).
                let v = rx2.try_recv().unwrap();
                v.id();
                assert!(fut.as_mut().poll(&mut cx).is_pending());
                s.spawn(|| tx.send_blocking(Counted::new(3, &drops)).unwrap());
                let mut polls = 0;
                loop {
                    polls += 1;
                    assert!(polls < 10_000_000);
                    if let Poll::Ready(op) = fut.as_mut().poll(&mut cx) {
                        break op;
                    }
                    std::thread::yield_now();
                }
            };
            let first = op.index();
            let r = if first == 0 { &rx } else { &rx2 };
            op.recv(r).unwrap().id();
            // Again: a panic is fine (the full round's machine panics: its selected
            // node is gone), a second operation is fine (the quick pass runs anew).
            tx2.send_blocking(Counted::new(4, &drops)).unwrap();
            let again = catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx)));
            if let Ok(Poll::Ready(op)) = again {
                let r = if op.index() == 0 { &rx } else { &rx2 };
                op.recv(r).unwrap().id();
            }
        });
        drop(fut);
        while let Ok(v) = rx2.try_recv() {
            v.id();
        }
    }
    // 1, 2, 4 (quick); 2, 3, 4 (full round): six values, each dropped once.
    assert_eq!(drops.load(SeqCst), 6);
}

/// `SelectedOperation` is `Send` and `Sync` (performed on another thread above).
#[test]
fn selected_operation_is_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<weft::chan::SelectedOperation<'static>>();
    is::<Select<'static>>();
}

/// Operations selected in fibers (quick and full-round), carried out of the fiber
/// through its join handle and performed or dropped on this thread; fibers that
/// block in a select while others send.
#[test]
fn ops_cross_fibers_and_threads() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct V(u32);
    impl Drop for V {
        fn drop(&mut self) {
            assert!(self.0 < N || (1000..1000 + N).contains(&self.0));
            DROPS.fetch_add(1, SeqCst);
        }
    }
    const N: u32 = 40;
    let rt = weft::Runtime::new().unwrap();
    let _enter = rt.enter();
    let (tx, rx): (&'static Sender<V>, &'static Receiver<V>) = {
        let (t, r) = bounded::<V>(0);
        (Box::leak(Box::new(t)), Box::leak(Box::new(r)))
    };
    let (tx2, rx2): (&'static Sender<V>, &'static Receiver<V>) = {
        let (t, r) = bounded::<V>(8);
        (Box::leak(Box::new(t)), Box::leak(Box::new(r)))
    };
    let sender = weft::fiber::spawn(move || {
        for i in 0..N {
            tx.send_blocking(V(i)).unwrap();
            tx2.send_blocking(V(1000 + i)).unwrap();
        }
    });
    let mut got = 0u32;
    let mut k = 0u32;
    while got < 2 * N {
        k += 1;
        assert!(k < 100_000, "bounded");
        let h = weft::fiber::spawn(move || {
            let mut sel = Select::new();
            sel.recv(rx);
            sel.recv(rx2);
            sel.select_timeout(Duration::from_secs(60)).ok()
        });
        let Some(op) = h.join().unwrap() else {
            panic!("a select timed out with senders running");
        };
        let r = if op.index() == 0 { rx } else { rx2 };
        if k.is_multiple_of(3) {
            drop(op);
        } else {
            drop(op.recv(r).unwrap());
            got += 1;
        }
    }
    sender.join().unwrap();
    assert!(rx.try_recv().is_err() && rx2.try_recv().is_err());
    assert_eq!(DROPS.load(SeqCst), 2 * N as usize);
}
