//! Session 38, second review of the latest fixes (31bc911, a28a4f6), from safe code
//! only: `OrderedSender::spawn_async`'s cancellation, `OrderedReceiver::drop`, the
//! in-place drop of a dropped channel's values, and bounded channels whose values take
//! more than 256 MiB (now a list of blocks, not a ring). Every wait is bounded.

mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{panic_message, watchdog};
use weft::chan::{self, SendTimeoutError, TryRecvError, TrySendError};

fn rt(n: usize) -> weft::Runtime {
    weft::Builder::new()
        .worker_threads(n)
        .interactive_threads(0)
        .build()
        .unwrap()
}

fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    f.poll(&mut cx)
}

fn within<T>(rt: &weft::Runtime, secs: u64, f: impl Future<Output = T>) -> T {
    rt.block_on(weft::time::timeout(Duration::from_secs(secs), f))
        .expect("hang")
}

// ---------------------------------------------------------------------------------
// OrderedSender::spawn_async's cancellation
// ---------------------------------------------------------------------------------

/// A `spawn_async` waiting for room is admitted by a receive (the receive moves its
/// handle into the freed slot and wakes it), and its future is dropped before it is
/// polled again (a timeout or select that fires at the same moment). The handle WAS
/// queued: the receiver gets it. The doc promises cancellation only "if the future is
/// dropped before the work's handle is queued"; the work must run and its result
/// reach the receiver, not a cancelled `JoinError`. (Failed with the first fix, an
/// abort guard disarmed only by the next poll; since then the channel carries handles
/// that cancel their work only when dropped unreceived.)
#[test]
fn spawn_async_admitted_then_dropped_before_its_next_poll_keeps_queued_work() {
    watchdog(20, || {
        let rt = rt(2);
        let _g = rt.enter();
        for cap in [1usize, 2] {
            let (tx, rx) = chan::ordered::<u32>(cap);
            // Fill the queue with quick work.
            for i in 0..cap as u32 {
                tx.spawn(async move { i }).unwrap();
            }
            let finished = Arc::new(AtomicUsize::new(0));
            let f = finished.clone();
            let mut fut = Box::pin(tx.spawn_async(async move {
                weft::time::sleep(Duration::from_millis(50)).await;
                f.fetch_add(1, SeqCst);
                100
            }));
            assert!(
                poll_once(fut.as_mut()).is_pending(),
                "cap {cap}: the queue is full"
            );
            // One receive frees a slot: the waiting spawn's handle moves into it.
            assert_eq!(within(&rt, 5, rx.recv()).unwrap().unwrap(), 0);
            // Dropped before its next poll (it would have answered Ok(())).
            drop(fut);
            for i in 1..cap as u32 {
                assert_eq!(within(&rt, 5, rx.recv()).unwrap().unwrap(), i);
            }
            // The handle is in the queue ...
            let got = within(&rt, 5, rx.recv())
                .unwrap_or_else(|_| panic!("cap {cap}: the handle was queued"));
            drop(tx);
            // ... and its work must not have been cancelled.
            match got {
                Ok(v) => assert_eq!(v, 100),
                Err(e) => panic!(
                    "cap {cap}: queued work cancelled when its spawn_async was dropped \
                     (receiver got {e:?}; finished={})",
                    finished.load(SeqCst)
                ),
            }
            assert!(within(&rt, 5, rx.recv()).is_err());
        }
    });
}

/// The receiver is gone: a `spawn_async` that runs to the end joins its work and hands
/// its result back (nothing cancels it); one dropped while joining cancels
/// the work, which never finishes, and what it owns is dropped once.
#[test]
fn spawn_async_on_a_gone_receiver_joins_or_cancels_when_dropped_while_joining() {
    watchdog(20, || {
        let rt = rt(2);
        let _g = rt.enter();
        let (tx, rx) = chan::ordered::<u32>(2);
        drop(rx);
        // Run to the end: the result comes back in the error.
        let r = within(
            &rt,
            5,
            tx.spawn_async(async {
                weft::time::sleep(Duration::from_millis(20)).await;
                7
            }),
        );
        assert_eq!(r.unwrap_err().into_inner().unwrap(), 7);
        // Dropped while joining: the work is cancelled.
        let finished = Arc::new(AtomicUsize::new(0));
        let owned = common::counter();
        let (f, o) = (finished.clone(), common::DropCounter(owned.clone()));
        let mut fut = Box::pin(tx.spawn_async(async move {
            let _o = o;
            weft::time::sleep(Duration::from_millis(100)).await;
            f.fetch_add(1, SeqCst);
            8
        }));
        assert!(
            poll_once(fut.as_mut()).is_pending(),
            "joining 100 ms of work"
        );
        drop(fut);
        common::wait_until("the cancelled work drops what it owns", || {
            common::load(&owned) == 1
        });
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(
            finished.load(SeqCst),
            0,
            "work ran on after its spawn was dropped"
        );
        assert_eq!(common::load(&owned), 1);
        // spawn and spawn_fiber still join their work.
        assert_eq!(tx.spawn(async { 9 }).unwrap_err().into_inner().unwrap(), 9);
        assert_eq!(tx.spawn_fiber(|| 10).unwrap_err().into_inner().unwrap(), 10);
    });
}

/// A spawn_async that completes normally keeps its work: many of them, each awaited
/// on a full queue that a slow receiver drains, deliver every result in order.
#[test]
fn spawn_async_completing_normally_loses_no_result() {
    watchdog(20, || {
        let rt = rt(2);
        let (tx, rx) = chan::ordered::<u32>(1);
        let producer = rt.spawn(async move {
            for i in 0..40u32 {
                tx.spawn_async(async move {
                    if i % 3 == 0 {
                        weft::time::sleep(Duration::from_millis(1)).await;
                    }
                    i
                })
                .await
                .unwrap();
            }
        });
        let mut got = Vec::new();
        while let Ok(r) = within(&rt, 5, rx.recv()) {
            got.push(r.expect("work cancelled"));
        }
        common::join_within(producer, 5).unwrap();
        assert_eq!(got, (0..40).collect::<Vec<_>>());
    });
}

// ---------------------------------------------------------------------------------
// OrderedReceiver::drop
// ---------------------------------------------------------------------------------

/// Handles put back by a cancelled receive (`back`) and handles still in the channel:
/// dropping the receiver cancels all of them, each owned value dropped once.
#[test]
fn ordered_receiver_drop_cancels_put_back_and_queued_handles() {
    watchdog(20, || {
        let rt = rt(2);
        let _g = rt.enter();
        let (tx, rx) = chan::ordered::<u32>(8);
        let finished = Arc::new(AtomicUsize::new(0));
        let owned = common::counter();
        for i in 0..4u32 {
            let (f, o) = (finished.clone(), common::DropCounter(owned.clone()));
            tx.spawn(async move {
                let _o = o;
                weft::time::sleep(Duration::from_millis(300)).await;
                f.fetch_add(1, SeqCst);
                i
            })
            .unwrap();
        }
        // Receives dropped while joining: the head handle is put back (in `back`),
        // the other three stay in the channel.
        for _ in 0..2 {
            let mut r = Box::pin(rx.recv());
            assert!(poll_once(r.as_mut()).is_pending());
            drop(r);
        }
        drop(rx);
        common::wait_until("the cancelled work drops what it owns", || {
            common::load(&owned) == 4
        });
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(finished.load(SeqCst), 0, "queued or put-back work ran on");
        assert_eq!(common::load(&owned), 4);
        drop(tx);
    });
}

// ---------------------------------------------------------------------------------
// A dropped channel's values: dropped in place, once each, the rest leaked after a
// panicking Drop
// ---------------------------------------------------------------------------------

/// A value with an id; its drop counts per id and panics for the bomb.
struct Val {
    id: usize,
    bomb: bool,
    drops: Arc<Vec<AtomicUsize>>,
    _pad: [u8; 24],
}

impl Drop for Val {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, SeqCst);
        if self.bomb {
            panic!("bomb {} dropped", self.id);
        }
    }
}

/// Puts `vals` (oldest first) in a channel as values given back by cancelled receives
/// (the channel's `front`, filled from its front), so that with values sent after it
/// the drained deque has wrapped around.
fn give_back<T>(tx: &chan::Sender<T>, rx: &chan::Receiver<T>, vals: Vec<T>) {
    let mut futs: Vec<_> = vals.iter().map(|_| Box::pin(rx.recv())).collect();
    for f in &mut futs {
        assert!(poll_once(f.as_mut()).is_pending(), "the channel is empty");
    }
    for v in vals {
        assert!(tx.try_send(v).is_ok(), "handed to a waiting receive");
    }
    // The newest first: each goes to the front, so the oldest ends up first.
    while let Some(f) = futs.pop() {
        drop(f);
    }
}

fn drop_case(cap: Option<usize>, given: usize, sent: usize, bomb: Option<usize>) {
    let n = given + sent;
    let drops = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
    let mk = |id| Val {
        id,
        bomb: Some(id) == bomb,
        drops: drops.clone(),
        _pad: [0; 24],
    };
    let (tx, rx) = match cap {
        Some(c) => chan::bounded::<Val>(c),
        None => chan::unbounded::<Val>(),
    };
    give_back(&tx, &rx, (0..given).map(mk).collect());
    for id in given..n {
        assert!(tx.try_send(mk(id)).is_ok(), "room for {id}");
    }
    assert_eq!(rx.len(), n, "cap {cap:?}");
    drop(tx);
    let what = format!("cap {cap:?}, {given} given back, {sent} sent, bomb {bomb:?}");
    let r = catch_unwind(AssertUnwindSafe(|| drop(rx)));
    let counts: Vec<usize> = drops.iter().map(|d| d.load(SeqCst)).collect();
    match bomb {
        None => {
            assert!(r.is_ok(), "{what}");
            assert_eq!(counts, vec![1; n], "{what}: each value dropped once");
        }
        Some(b) => {
            let p = r.expect_err("the bomb's panic reaches the dropper");
            assert_eq!(
                panic_message(&*p),
                Some(format!("bomb {b} dropped")),
                "{what}"
            );
            // Oldest first: those before the bomb dropped once, the bomb once, the
            // rest leaked (documented), none twice.
            let mut want = vec![1; b + 1];
            want.resize(n, 0);
            assert_eq!(counts, want, "{what}");
        }
    }
}

/// Dropped channels holding given-back values (a deque filled from its front, then
/// wrapping around as the buffer's values follow), in a ring, an unbounded list and a
/// bounded list: every value dropped exactly once; with a bomb anywhere, the ones
/// before it dropped once, the rest leaked, none twice.
#[test]
fn dropped_channel_drops_each_value_once_even_around_a_wrapped_deque_and_a_bomb() {
    watchdog(20, || {
        for cap in [Some(8), None, Some((1 << 20) + 1)] {
            for (given, sent) in [(0, 1), (1, 0), (2, 3), (3, 5), (0, 6)] {
                let n = given + sent;
                drop_case(cap, given, sent, None);
                for b in 0..n {
                    drop_case(cap, given, sent, Some(b));
                }
            }
        }
    });
}

thread_local! {
    static ZST_DROPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static ZST_BOMB_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// A zero-sized value: drops counted per thread; the `ZST_BOMB_AT`-th drop panics.
struct Zst;

impl Drop for Zst {
    fn drop(&mut self) {
        let n = ZST_DROPS.get() + 1;
        ZST_DROPS.set(n);
        if n == ZST_BOMB_AT.get() {
            panic!("zst bomb");
        }
    }
}

/// Zero-sized values in a dropped channel (ring, lists; some given back): each
/// dropped once; with the k-th drop panicking, exactly k drops happen.
#[test]
fn dropped_channel_of_zero_sized_values_drops_each_once() {
    watchdog(20, || {
        for cap in [Some(8), None, Some((1 << 20) + 1)] {
            for bomb in [None, Some(1), Some(4), Some(8)] {
                ZST_DROPS.set(0);
                ZST_BOMB_AT.set(bomb.unwrap_or(usize::MAX));
                let (tx, rx) = match cap {
                    Some(c) => chan::bounded::<Zst>(c),
                    None => chan::unbounded::<Zst>(),
                };
                give_back(&tx, &rx, vec![Zst, Zst, Zst]);
                for _ in 0..5 {
                    assert!(tx.try_send(Zst).is_ok());
                }
                assert_eq!(ZST_DROPS.get(), 0, "nothing dropped yet");
                drop(tx);
                let r = catch_unwind(AssertUnwindSafe(|| drop(rx)));
                let dropped = ZST_DROPS.get();
                ZST_BOMB_AT.set(usize::MAX);
                match bomb {
                    None => {
                        assert!(r.is_ok());
                        assert_eq!(dropped, 8, "cap {cap:?}");
                    }
                    Some(k) => {
                        assert!(r.is_err(), "cap {cap:?} bomb {k}");
                        assert_eq!(dropped, k, "cap {cap:?} bomb {k}: drops after the panic");
                    }
                }
            }
        }
    });
}

const MIB: usize = 1 << 20;

/// A 1 MiB value with an id.
struct Huge {
    id: usize,
    bomb: bool,
    drops: Arc<Vec<AtomicUsize>>,
    pad: [u8; MIB],
}

impl Drop for Huge {
    fn drop(&mut self) {
        assert_eq!(self.pad[0], self.id as u8, "a torn value");
        self.drops[self.id].fetch_add(1, SeqCst);
        if self.bomb {
            panic!("huge bomb {}", self.id);
        }
    }
}

/// 1 MiB values in a dropped ring (capacity 8) and a dropped bounded list (capacity
/// 300: 300 MiB of values), some given back: each dropped once, with or without a
/// bomb, and the values are whole when dropped.
#[test]
fn dropped_channel_of_huge_values_drops_each_once() {
    common::big_watchdog(20, || {
        for cap in [8usize, 300] {
            for bomb in [None, Some(0), Some(2), Some(4)] {
                let n = 5;
                let drops = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>());
                let mk = |id: usize| {
                    let mut v = Box::new(Huge {
                        id,
                        bomb: Some(id) == bomb,
                        drops: drops.clone(),
                        pad: [0; MIB],
                    });
                    v.pad[0] = id as u8;
                    v
                };
                let (tx, rx) = chan::bounded::<Huge>(cap);
                assert_eq!(tx.capacity(), Some(cap));
                give_back(&tx, &rx, vec![*mk(0), *mk(1)]);
                for id in 2..n {
                    assert!(tx.try_send(*mk(id)).is_ok());
                }
                assert_eq!(rx.len(), n);
                drop(tx);
                let r = catch_unwind(AssertUnwindSafe(|| drop(rx)));
                let counts: Vec<usize> = drops.iter().map(|d| d.load(SeqCst)).collect();
                match bomb {
                    None => {
                        assert!(r.is_ok(), "cap {cap}");
                        assert_eq!(counts, vec![1; n], "cap {cap}");
                    }
                    Some(b) => {
                        let p = r.expect_err("the bomb's panic reaches the dropper");
                        assert_eq!(panic_message(&*p), Some(format!("huge bomb {b}")));
                        let mut want = vec![1; b + 1];
                        want.resize(n, 0);
                        assert_eq!(counts, want, "cap {cap} bomb {b}");
                    }
                }
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// Bounded channels whose values take more than 256 MiB: a list, same semantics
// ---------------------------------------------------------------------------------

type Mib = [u8; MIB];
const K64: usize = 64 << 10;

fn val<const N: usize>(id: u8) -> Box<[u8; N]> {
    let mut v: Box<[u8; N]> = vec![0u8; N].into_boxed_slice().try_into().unwrap();
    v[0] = id;
    v[N - 1] = id;
    v
}

fn mib(id: u8) -> Box<Mib> {
    val::<MIB>(id)
}

/// Fills a bounded channel of `N`-byte values to its capacity and checks what a full
/// bounded channel promises: `len`, `is_full`, `try_send` Full, `send_timeout` timing
/// out with the value back, a select's send not ready, a blocked sender admitted by a
/// receive, FIFO order, and the closed channel's drain.
fn full_channel_semantics<const N: usize>(cap: usize) {
    let (tx, rx) = chan::bounded::<[u8; N]>(cap);
    assert_eq!(tx.capacity(), Some(cap));
    assert_eq!(rx.capacity(), Some(cap));
    assert!(rx.is_empty() && !tx.is_full());
    for i in 0..cap {
        assert!(
            tx.try_send(*val::<N>(i as u8)).is_ok(),
            "cap {cap}: room for {i}"
        );
        assert_eq!(tx.len(), i + 1, "cap {cap}");
    }
    assert!(tx.is_full() && rx.is_full(), "cap {cap}");
    match tx.try_send(*val::<N>(200)) {
        Err(TrySendError::Full(v)) => assert_eq!(v[0], 200),
        _ => panic!("cap {cap}: a send into a full channel"),
    }
    let t = Instant::now();
    match tx.send_timeout(*val::<N>(201), Duration::from_millis(30)) {
        Err(SendTimeoutError::Timeout(v)) => assert_eq!((v[0], v[N - 1]), (201, 201)),
        _ => panic!("cap {cap}: send_timeout into a full channel"),
    }
    assert!(
        t.elapsed() >= Duration::from_millis(25),
        "cap {cap}: timed out early"
    );
    {
        let mut sel = chan::Select::new();
        sel.send(&tx);
        assert!(
            sel.try_ready().is_err(),
            "cap {cap}: a full channel's send is ready"
        );
        let mut sel = chan::Select::new();
        sel.recv(&rx);
        assert_eq!(
            sel.try_ready().ok(),
            Some(0),
            "cap {cap}: a value to receive"
        );
    }
    assert_eq!(tx.len(), cap, "cap {cap}: a failed send changed the length");
    // A blocked sender, admitted by one receive.
    let tx2 = tx.clone();
    let blocked = common::big_thread(move || tx2.send_blocking(*val::<N>(202)).is_ok());
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        !blocked.is_finished(),
        "cap {cap}: a send into a full channel went through"
    );
    assert_eq!(tx.len(), cap);
    let first = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!((first[0], first[N - 1]), (0, 0));
    let _ = first;
    let t = Instant::now();
    while !blocked.is_finished() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(blocked.join().unwrap(), "cap {cap}: the blocked send");
    assert_eq!(tx.len(), cap, "cap {cap}: full again");
    assert!(tx.is_full());
    {
        let mut sel = chan::Select::new();
        sel.send(&tx);
        assert!(sel.try_ready().is_err(), "cap {cap}: full again, yet ready");
    }
    // One receive makes room for exactly one send.
    let _ = rx.try_recv().unwrap();
    assert!(!tx.is_full());
    {
        let mut sel = chan::Select::new();
        sel.send(&tx);
        assert_eq!(
            sel.try_ready().ok(),
            Some(0),
            "cap {cap}: room, yet not ready"
        );
    }
    assert!(tx.try_send(*val::<N>(203)).is_ok());
    assert!(matches!(
        tx.try_send(*val::<N>(204)),
        Err(TrySendError::Full(_))
    ));
    drop(tx);
    // Closed: the rest drain in FIFO order, then Disconnected.
    let mut want: Vec<u8> = (2..cap).map(|i| i as u8).collect();
    want.extend([202, 203]);
    let mut got = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(v) => {
                assert_eq!(v[0], v[N - 1]);
                got.push(v[0]);
            }
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => panic!("cap {cap}: empty before disconnected"),
        }
        assert!(got.len() <= cap + 2);
    }
    assert_eq!(got, want, "cap {cap}");
}

/// 4097 values of 64 KiB (just over 256 MiB: a list since the fix) behave as a ring
/// of 8 or 4096 of them (256 MiB exactly: still a ring) does.
#[test]
fn bounded_list_of_big_values_keeps_bounded_semantics() {
    common::big_watchdog(20, || {
        full_channel_semantics::<K64>(8);
        full_channel_semantics::<K64>(4097);
    });
}

/// `bounded::<[u8; 4096]>(100_000)` (400 MB of values: a list) and
/// `bounded::<[u8; 1 << 20]>(300)`: created without touching that memory, counted and
/// ordered as bounded channels, and dropped with values in them.
#[test]
fn big_bounded_capacities_from_the_brief() {
    common::big_watchdog(20, || {
        let (tx, rx) = chan::bounded::<[u8; 4096]>(100_000);
        assert_eq!(tx.capacity(), Some(100_000));
        for i in 0..100u8 {
            tx.try_send([i; 4096]).unwrap();
        }
        assert_eq!((rx.len(), rx.is_full()), (100, false));
        for i in 0..50u8 {
            assert_eq!(rx.try_recv().unwrap(), [i; 4096]);
        }
        assert_eq!(tx.len(), 50);
        drop(rx);
        assert!(matches!(
            tx.try_send([0; 4096]),
            Err(TrySendError::Disconnected(_))
        ));
        let (tx, rx) = chan::bounded::<Mib>(300);
        tx.try_send(*mib(1)).unwrap();
        tx.try_send(*mib(2)).unwrap();
        assert_eq!((tx.len(), tx.is_full()), (2, false));
        assert_eq!(rx.try_recv().unwrap()[0], 1);
        assert_eq!(rx.try_recv().unwrap()[0], 2);
        assert!(rx.is_empty());
        tx.try_send(*mib(3)).unwrap();
        drop((tx, rx));
    });
}
