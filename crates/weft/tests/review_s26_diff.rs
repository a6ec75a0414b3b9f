//! Review of the library changes since e682c9c (session 26), from safe code: `Notified`
//! storing its waker before it announces WAITING (`Waiter::prime`), `Barrier`
//! registering before it counts the arrival, readiness wakers dropped after the lock,
//! Unix streams no longer taking a short read as drained. Every test runs under a
//! watchdog; every loop is bounded.

// Tasks hand futures out on purpose.
#![allow(clippy::async_yields_async)]

mod common;
use common::net::{pair, send_with_fd};
use common::{owning_waker, poll_once, waker_owning_pending};

use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::time::{Duration, Instant};

use common::{with_limit, Rng};
use weft::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use weft::net::{TcpStream, UnixStream};
use weft::sync::{Barrier, Notify};
use weft::Runtime;

const LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- helpers

fn rt(n: usize) -> Runtime {
    weft::Builder::new().worker_threads(n).build().unwrap()
}

/// What a [`boxed_waker`] and all its clones share.
struct Shared {
    /// Clones made so far.
    clones: AtomicUsize,
    /// The clone (1-based) that panics; 0: none.
    panic_at: AtomicUsize,
    /// Wakes (by value or by reference).
    wakes: AtomicUsize,
    /// The thread to unpark on a wake.
    thread: Mutex<Option<std::thread::Thread>>,
}

/// A waker whose every clone is a new allocation (so no clone `will_wake` another, as
/// with any executor whose waker data is not shared), counting clones and wakes; its
/// clone number `panic_at` panics.
fn boxed_waker(panic_at: usize) -> (Arc<Shared>, Waker) {
    let sh = Arc::new(Shared {
        clones: AtomicUsize::new(0),
        panic_at: AtomicUsize::new(panic_at),
        wakes: AtomicUsize::new(0),
        thread: Mutex::new(None),
    });
    static VT: RawWakerVTable = RawWakerVTable::new(b_clone, b_wake, b_wake_by_ref, b_drop);
    // Each vtable function's contract: `p` came from `Box::into_raw` of a
    // `Box<Arc<Shared>>` owned by the `RawWaker` it was called on.
    unsafe fn b_clone(p: *const ()) -> RawWaker {
        // SAFETY: `p` is a live `Box<Arc<Shared>>` (the contract above).
        let sh = unsafe { &*(p as *const Arc<Shared>) };
        let n = sh.clones.fetch_add(1, SeqCst) + 1;
        if n == sh.panic_at.load(SeqCst) {
            panic!("waker clone {n} panics");
        }
        RawWaker::new(Box::into_raw(Box::new(sh.clone())) as *const (), &VT)
    }
    unsafe fn b_wake(p: *const ()) {
        // SAFETY: as above; the waker is consumed, so its box is freed once, here.
        unsafe {
            b_wake_by_ref(p);
            b_drop(p);
        }
    }
    unsafe fn b_wake_by_ref(p: *const ()) {
        // SAFETY: `p` is a live `Box<Arc<Shared>>` (the contract above).
        let sh = unsafe { &*(p as *const Arc<Shared>) };
        sh.wakes.fetch_add(1, SeqCst);
        if let Some(t) = &*sh.thread.lock().unwrap() {
            t.unpark();
        }
    }
    unsafe fn b_drop(p: *const ()) {
        // SAFETY: `p` owns its box, given up here once.
        drop(unsafe { Box::from_raw(p as *mut Arc<Shared>) });
    }
    let raw = RawWaker::new(Box::into_raw(Box::new(sh.clone())) as *const (), &VT);
    // SAFETY: the vtable follows the RawWaker contract (a boxed Arc behind the pointer).
    (sh, unsafe { Waker::from_raw(raw) })
}

/// A waker that unparks the current thread and panics at its clone number
/// `panic_at` (0: never).
fn parking_waker(panic_at: usize) -> (Arc<Shared>, Waker) {
    let (sh, w) = boxed_waker(panic_at);
    *sh.thread.lock().unwrap() = Some(std::thread::current());
    (sh, w)
}

/// Polls `f` to completion on this thread with a parking waker, panicking with "hang"
/// after `secs`.
fn block_on_thread<F: Future>(f: F, secs: u64) -> F::Output {
    let (_sh, w) = parking_waker(0);
    let mut f = pin!(f);
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Poll::Ready(v) = poll_once(f.as_mut(), &w) {
            return v;
        }
        let now = Instant::now();
        assert!(now < deadline, "hang: a wait was never woken");
        std::thread::park_timeout(deadline - now);
    }
}

// ------------------------------------------------ Notify: panicking waker clones

/// BUG (found here, fixed in this branch): `Notified::poll` primes its node with a
/// clone of the waker before it moves the word to WAITING, so that a panicking `clone`
/// changes nothing; but `Waiter::register` then called `set_waker` again, which clones
/// again whenever the stored clone does not `will_wake` the context's waker, which is
/// the case for every waker whose clones do not share their data pointer (here: one
/// box per clone). A second clone that panicked did so after the CAS to WAITING and
/// before the node went on the list: WAITING with an empty list, as before the change.
/// The next `notify_one` took the locked path, found nobody (a `debug_assert` panic in
/// debug builds) and in release builds stored no permit: the notification was lost.
#[test]
fn notify_second_clone_panic_at_registration_loses_no_permit() {
    with_limit(LIMIT, || {
        let n = Notify::new();
        let (sh, w) = boxed_waker(2);
        {
            let mut f = pin!(n.notified());
            // Whether the poll panics or not (it need not clone twice), nothing may be
            // left behind once the future is gone.
            let _ = catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut(), &w)));
        }
        let r = catch_unwind(AssertUnwindSafe(|| n.notify_one()));
        assert!(
            r.is_ok(),
            "notify_one panicked: the word says WAITING, nobody waits"
        );
        let mut g = pin!(n.notified());
        assert!(
            poll_once(g.as_mut(), Waker::noop()).is_ready(),
            "the permit of the notify_one is lost"
        );
        drop(sh);
    });
}

/// The same future kept alive: after a first poll with a waker whose clones are
/// distinct, a `notify_one` reaches it (it is on the list, or the poll panicked before
/// changing anything and the permit is stored).
#[test]
fn notify_distinct_clone_waker_is_woken_or_leaves_the_permit() {
    with_limit(LIMIT, || {
        for panic_at in [0, 1, 2, 3] {
            let n = Notify::new();
            let (sh, w) = boxed_waker(panic_at);
            let mut f = pin!(n.notified());
            let r = catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut(), &w)));
            let r2 = catch_unwind(AssertUnwindSafe(|| n.notify_one()));
            assert!(r2.is_ok(), "panic_at {panic_at}: notify_one panicked");
            match r {
                Ok(Poll::Pending) => {
                    assert_eq!(sh.wakes.load(SeqCst), 1, "panic_at {panic_at}: not woken");
                    assert!(poll_once(f.as_mut(), Waker::noop()).is_ready());
                }
                Ok(Poll::Ready(())) => panic!("ready with nothing stored"),
                Err(_) => {
                    // The poll changed nothing: the future may be polled again and
                    // finds the permit.
                    assert!(
                        poll_once(f.as_mut(), Waker::noop()).is_ready(),
                        "panic_at {panic_at}: the permit is lost"
                    );
                }
            }
        }
    });
}

/// Successive polls with different wakers, the second one's clone panicking: the node
/// stays on the list with the first waker, a `notify_one` wakes that one, and the
/// future completes; or it is dropped and the notification passes on.
#[test]
fn notify_second_poll_with_panicking_waker_keeps_the_wait() {
    with_limit(LIMIT, || {
        for drop_it in [false, true] {
            for notify_first in [false, true] {
                let n = Notify::new();
                let (a, wa) = boxed_waker(0);
                let (_b, wb) = boxed_waker(1);
                let mut f = Box::pin(n.notified());
                assert!(poll_once(f.as_mut(), &wa).is_pending());
                if notify_first {
                    n.notify_one();
                    assert_eq!(a.wakes.load(SeqCst), 1);
                }
                let r = catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut(), &wb)));
                if !notify_first {
                    assert!(r.is_err(), "the second waker's clone panics");
                    n.notify_one();
                    assert_eq!(a.wakes.load(SeqCst), 1, "the first waker is not woken");
                } else {
                    // Completed already: the poll returns without cloning.
                    assert!(matches!(r, Ok(Poll::Ready(()))));
                    continue;
                }
                if drop_it {
                    drop(f);
                    // Chosen and dropped: passed on as the permit.
                    let mut g = pin!(n.notified());
                    assert!(poll_once(g.as_mut(), Waker::noop()).is_ready());
                } else {
                    assert!(poll_once(f.as_mut(), Waker::noop()).is_ready());
                    let mut g = pin!(n.notified());
                    assert!(poll_once(g.as_mut(), Waker::noop()).is_pending());
                }
            }
        }
    });
}

/// Ping-pong across two threads: each `notify_one` is followed by an
/// acknowledgement, so a lost one stalls. The waiter's first poll of each wait uses a
/// waker that panics at a random clone (first or second), then it waits with a good
/// one.
#[test]
fn notify_ping_pong_with_random_clone_panics() {
    with_limit(LIMIT, || {
        const ROUNDS: usize = 2_000;
        let n = Arc::new(Notify::new());
        let (ack_tx, ack_rx) = mpsc::channel::<()>();
        let n2 = n.clone();
        let waiter = std::thread::spawn(move || {
            let mut rng = Rng(0x1234_5678_9abc);
            for _ in 0..ROUNDS {
                let mut f = pin!(n2.notified());
                let (_sh, bad) = boxed_waker(1 + (rng.next() % 3) as usize);
                let first = catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut(), &bad)));
                if !matches!(first, Ok(Poll::Ready(()))) {
                    block_on_thread(f, 5);
                }
                ack_tx.send(()).unwrap();
            }
        });
        let mut rng = Rng(0xfeed_beef);
        for i in 0..ROUNDS {
            if rng.next().is_multiple_of(2) {
                std::thread::yield_now();
            }
            let r = catch_unwind(AssertUnwindSafe(|| n.notify_one()));
            assert!(r.is_ok(), "round {i}: notify_one panicked");
            ack_rx
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("hang: round {i}'s notification was lost"));
        }
        waiter.join().unwrap();
    });
}

/// `notify_waiters` racing the first polls of futures made before it, some of which
/// panic in a waker clone at that poll and are then awaited with a good waker: every
/// one completes.
#[test]
fn notify_waiters_races_first_polls_with_panicking_clones() {
    with_limit(LIMIT, || {
        const ROUNDS: usize = 150;
        const THREADS: usize = 3;
        let n = Arc::new(Notify::new());
        for round in 0..ROUNDS {
            let made = Arc::new(std::sync::Barrier::new(THREADS + 1));
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (n, made) = (n.clone(), made.clone());
                    std::thread::spawn(move || {
                        let mut f = pin!(n.notified());
                        made.wait();
                        let (_sh, bad) = boxed_waker(1 + (round + t) % 3);
                        let first = catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut(), &bad)));
                        if !matches!(first, Ok(Poll::Ready(()))) {
                            block_on_thread(f, 5);
                        }
                    })
                })
                .collect();
            made.wait();
            if round.is_multiple_of(2) {
                std::thread::yield_now();
            }
            n.notify_waiters();
            for h in hs {
                h.join().unwrap();
            }
        }
        // Nobody left waiting, no permit stored.
        let mut g = pin!(n.notified());
        assert!(poll_once(g.as_mut(), Waker::noop()).is_pending());
    });
}

/// Tasks, fibers and threads waiting on one Notify, each round woken by
/// `notify_waiters`: nothing is missed.
#[test]
fn notify_tasks_fibers_threads_many_rounds() {
    with_limit(LIMIT, || {
        let rt = rt(2);
        const ROUNDS: usize = 100;
        let n = Arc::new(Notify::new());
        let done = Arc::new(AtomicUsize::new(0));
        for round in 0..ROUNDS {
            let ready = Arc::new(AtomicUsize::new(0));
            let mut joins = Vec::new();
            let mut threads = Vec::new();
            for k in 0..3 {
                let (n, ready, done) = (n.clone(), ready.clone(), done.clone());
                match k {
                    0 => joins.push(rt.spawn(async move {
                        let f = n.notified();
                        ready.fetch_add(1, SeqCst);
                        f.await;
                        done.fetch_add(1, SeqCst);
                    })),
                    1 => joins.push(rt.block_on(async move {
                        weft::fiber::spawn(move || {
                            let f = n.notified();
                            ready.fetch_add(1, SeqCst);
                            weft::wait(f);
                            done.fetch_add(1, SeqCst);
                        })
                    })),
                    _ => {
                        threads.push(std::thread::spawn(move || {
                            let f = n.notified();
                            ready.fetch_add(1, SeqCst);
                            block_on_thread(f, 5);
                            done.fetch_add(1, SeqCst);
                        }));
                    }
                }
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while ready.load(SeqCst) < 3 {
                assert!(
                    Instant::now() < deadline,
                    "hang: round {round} never started"
                );
                std::thread::yield_now();
            }
            n.notify_waiters();
            for j in joins {
                j.join().unwrap();
            }
            for t in threads {
                t.join().unwrap();
            }
        }
        assert_eq!(done.load(SeqCst), 3 * ROUNDS);
    });
}

// ------------------------------------------------ Barrier: panicking waker clones

/// A barrier of 3: the member at each position of a generation polls first with a
/// waker whose clone panics, and is replaced by a good one; the generation completes
/// with exactly one leader, and the next generation too.
#[test]
fn barrier_panicking_clone_at_every_member() {
    with_limit(LIMIT, || {
        const N: usize = 3;
        for bad_at in 0..N {
            for panic_at in [1, 2] {
                let b = Barrier::new(N);
                let mut futs: Vec<Pin<Box<dyn Future<Output = weft::sync::BarrierWaitResult>>>> =
                    Vec::new();
                let mut leaders = 0;
                let mut ready = 0;
                for pos in 0..N {
                    if pos == bad_at {
                        let (_sh, bad) = boxed_waker(panic_at);
                        let mut f = Box::pin(b.wait());
                        let r = catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut(), &bad)));
                        match r {
                            Err(_) => drop(f), // nothing counted
                            Ok(Poll::Pending) => futs.push(f),
                            Ok(Poll::Ready(res)) => {
                                ready += 1;
                                leaders += res.is_leader() as usize;
                                continue;
                            }
                        }
                        if futs.len() + ready > pos {
                            continue;
                        }
                    }
                    let mut f = Box::pin(b.wait());
                    match poll_once(f.as_mut(), Waker::noop()) {
                        Poll::Pending => futs.push(f),
                        Poll::Ready(res) => {
                            ready += 1;
                            leaders += res.is_leader() as usize;
                        }
                    }
                }
                for mut f in futs {
                    match poll_once(f.as_mut(), Waker::noop()) {
                        Poll::Ready(res) => {
                            ready += 1;
                            leaders += res.is_leader() as usize;
                        }
                        Poll::Pending => {
                            panic!("bad_at {bad_at} panic_at {panic_at}: a member not released")
                        }
                    }
                }
                assert_eq!((ready, leaders), (N, 1), "bad_at {bad_at}");
                // The next generation starts from zero arrivals.
                let mut a = Box::pin(b.wait());
                assert!(poll_once(a.as_mut(), Waker::noop()).is_pending());
                let mut c = Box::pin(b.wait());
                assert!(poll_once(c.as_mut(), Waker::noop()).is_pending());
                let mut d = Box::pin(b.wait());
                assert!(poll_once(d.as_mut(), Waker::noop()).is_ready());
                assert!(poll_once(a.as_mut(), Waker::noop()).is_ready());
                assert!(poll_once(c.as_mut(), Waker::noop()).is_ready());
            }
        }
    });
}

/// A registered member re-polled with a waker whose clone panics: `wait` is an `async
/// fn`, so the panic ends its future (the suspended `BarrierWait` is dropped while
/// unwinding) and the arrival is withdrawn; the generation then needs another member,
/// and the old waker is never woken.
#[test]
fn barrier_second_poll_with_panicking_waker_withdraws() {
    with_limit(LIMIT, || {
        let b = Barrier::new(2);
        let (a, wa) = boxed_waker(0);
        let (_bad, wbad) = boxed_waker(1);
        let mut f = Box::pin(b.wait());
        assert!(poll_once(f.as_mut(), &wa).is_pending());
        let r = catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut(), &wbad)));
        assert!(r.is_err());
        drop(f);
        let mut g = Box::pin(b.wait());
        assert!(poll_once(g.as_mut(), Waker::noop()).is_pending());
        let mut h = Box::pin(b.wait());
        let got = poll_once(h.as_mut(), Waker::noop()).map(|r| r.is_leader());
        assert_eq!(got, Poll::Ready(true));
        let got = poll_once(g.as_mut(), Waker::noop()).map(|r| r.is_leader());
        assert_eq!(got, Poll::Ready(false));
        assert_eq!(a.wakes.load(SeqCst), 0);
    });
}

/// Threads cycling a barrier, each arrival first polled with a waker that panics at a
/// random clone and, if that poll panicked, arriving again with a good one: every
/// generation has one leader, and none stalls.
#[test]
fn barrier_threads_with_random_clone_panics() {
    with_limit(LIMIT, || {
        const THREADS: usize = 3;
        const GENS: usize = 300;
        let b = Arc::new(Barrier::new(THREADS));
        let leaders = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (b, leaders) = (b.clone(), leaders.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(0x9e37_79b9 + t as u64);
                    for _ in 0..GENS {
                        let (_sh, bad) = boxed_waker(1 + (rng.next() % 3) as usize);
                        let mut f = Box::pin(b.wait());
                        let r = match catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut(), &bad)))
                        {
                            Ok(Poll::Ready(r)) => r,
                            Ok(Poll::Pending) => block_on_thread(f, 5),
                            Err(_) => {
                                drop(f);
                                block_on_thread(b.wait(), 5)
                            }
                        };
                        leaders.fetch_add(r.is_leader() as usize, SeqCst);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(leaders.load(SeqCst), GENS);
    });
}

// ------------------------------------------------ readiness: wakers dropped after the lock

/// Writes to `w` until its send buffer is full (the peer does not read), and keeps it
/// so until the writable readiness is seen clear.
fn fill(w: &weft::net::OwnedWriteHalf<TcpStream>) {
    let chunk = vec![7u8; 65536];
    for _ in 0..3 {
        for _ in 0..10_000 {
            match w.try_write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// The read slot holds the last clone of a waker owning a pending listed
/// `writable()` of the same stream (the other direction); a new reader replaces it.
/// And the write slot holding a waker that owns a pending listed `readable()`.
#[test]
fn slot_waker_owning_the_other_directions_listed_wait_is_replaced() {
    with_limit(LIMIT, || {
        let rt = rt(1);
        let (s, c) = pair(&rt);
        let (mut r, w) = s.into_split();
        fill(&w);
        let w = Arc::new(w);
        let w2 = w.clone();
        let other = Box::pin(async move {
            let _ = w2.writable().await;
        });
        let ow = waker_owning_pending(other);
        let mut buf = [0u8; 16];
        assert!(Pin::new(&mut r)
            .poll_read(&mut Context::from_waker(&ow), &mut buf)
            .is_pending());
        drop(ow);
        // Replacing the read slot's waker drops `other` (and its listed entry).
        assert!(Pin::new(&mut r)
            .poll_read(&mut Context::from_waker(Waker::noop()), &mut buf)
            .is_pending());

        // The write slot, owning a listed readable() of the read half.
        let r = Arc::new(r);
        let r2 = r.clone();
        let other = Box::pin(async move {
            let _ = r2.readable().await;
        });
        let ow = waker_owning_pending(other);
        let mut w = Arc::try_unwrap(w).unwrap_or_else(|_| panic!("the other writable() is gone"));
        let data = [1u8; 4096];
        assert!(Pin::new(&mut w)
            .poll_write(&mut Context::from_waker(&ow), &data)
            .is_pending());
        drop(ow);
        assert!(Pin::new(&mut w)
            .poll_write(&mut Context::from_waker(Waker::noop()), &data)
            .is_pending());
        // The stream still works both ways: the peer drains, the write goes on.
        let r = Arc::try_unwrap(r).unwrap_or_else(|_| panic!("the readable() is gone"));
        let total = rt.block_on(async move {
            let mut c = c;
            let mut got = 0usize;
            let mut buf = vec![0u8; 65536];
            let mut w = w;
            let writer = weft::spawn(async move {
                use weft::io::AsyncWriteExt;
                w.write_all(b"end").await.unwrap();
                w
            });
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let n = weft::time::timeout(Duration::from_secs(5), c.read(&mut buf))
                    .await
                    .expect("hang: the peer's read")
                    .unwrap();
                got += n;
                if n >= 3 && &buf[n - 3..n] == b"end" {
                    break;
                }
                assert!(Instant::now() < deadline, "hang");
            }
            drop(writer.await.unwrap());
            drop(r);
            got
        });
        assert!(total > 3);
    });
}

/// A listed `readable()` whose waker owns another listed `readable()` of the same
/// stream is woken by an event: the waker is taken by the dispatch and dropped by
/// its wake, outside every lock; the stream goes on working. Both directions.
#[test]
fn listed_waker_owning_a_listed_wait_woken_by_an_event() {
    with_limit(LIMIT, || {
        let rt = rt(1);
        let (s, c) = pair(&rt);
        let s = Arc::new(s);
        for round in 0..20 {
            let s2 = s.clone();
            let mut inner = Box::pin(async move {
                let _ = s2.readable().await;
            });
            assert!(poll_once(inner.as_mut(), Waker::noop()).is_pending());
            let s3 = s.clone();
            let mut inner_w = Box::pin(async move {
                let _ = s3.writable().await;
            });
            // Writable at once on a fresh stream: fine either way.
            let _ = poll_once(inner_w.as_mut(), Waker::noop());
            let gone = common::counter();
            let flag = common::DropCounter(gone.clone());
            let ow = owning_waker(async move {
                drop(inner);
                drop(inner_w);
                drop(flag);
            });
            let mut mine = Box::pin(s.readable());
            if poll_once(mine.as_mut(), &ow).is_ready() {
                panic!("round {round}: readable with nothing sent");
            }
            drop(ow);
            // The peer writes: the event takes `mine`'s entry and wakes (drops) the
            // owning waker on the driver's thread.
            c.try_write(b"x").unwrap();
            // Not re-polled meanwhile (that would replace the entry's waker): the
            // dispatch's wake is what drops it.
            let deadline = Instant::now() + Duration::from_secs(5);
            while common::load(&gone) == 0 {
                assert!(Instant::now() < deadline, "hang: round {round}");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(poll_once(mine.as_mut(), Waker::noop()).is_ready());
            let mut b = [0u8; 8];
            assert_eq!(s.try_read(&mut b).unwrap(), 1);
            // Drained: the readiness is cleared by the `WouldBlock`.
            assert_eq!(
                s.try_read(&mut b).unwrap_err().kind(),
                io::ErrorKind::WouldBlock
            );
            // The worker is alive.
            assert_eq!(rt.block_on(async { 5 }), 5);
        }
    });
}

// ------------------------------------------------ Unix streams with SCM_RIGHTS

fn pattern_byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// A plain thread sends `total` bytes of the pattern in random chunks, every few of
/// them carrying a descriptor, with random pauses.
fn fd_sender(
    tx: std::os::unix::net::UnixStream,
    total: usize,
    seed: u64,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut rng = Rng(seed);
        let mut at = 0;
        let mut tx = tx;
        while at < total {
            let len = (1 + rng.next() as usize % 20_000).min(total - at);
            let chunk: Vec<u8> = (at..at + len).map(pattern_byte).collect();
            let mut off = 0;
            if rng.next().is_multiple_of(3) {
                off = send_with_fd(&tx, &chunk);
            }
            io::Write::write_all(&mut tx, &chunk[off..]).unwrap();
            at += len;
            if rng.next().is_multiple_of(16) {
                std::thread::sleep(Duration::from_micros(rng.next() % 500));
            }
        }
    })
}

/// Checks and counts what a reader got.
fn check(at: &mut usize, got: &[u8]) {
    for (k, &b) in got.iter().enumerate() {
        assert_eq!(b, pattern_byte(*at + k), "byte {} of the stream", *at + k);
    }
    *at += got.len();
}

/// Reads `rx` to its end with blocking reads (each within 5 s, else panics with
/// `stalled`), checking every byte; returns how many came.
fn read_checking(mut rx: UnixStream, stalled: &str) -> usize {
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut at = 0;
    loop {
        let n = io::Read::read(&mut rx, &mut buf).expect(stalled);
        if n == 0 {
            break at;
        }
        check(&mut at, &buf[..n]);
    }
}

/// 2 MiB with descriptors attached to a third of its chunks, read by a task, a fiber
/// and a plain thread (one stream each): every byte in order, none stalls.
#[test]
fn unix_stream_fds_large_transfer_task_fiber_thread() {
    with_limit(Duration::from_secs(40), || {
        const TOTAL: usize = 2 << 20;
        let rt = rt(2);
        let mut senders = Vec::new();
        let mut readers: Vec<Box<dyn FnOnce() -> usize>> = Vec::new();
        for kind in 0..3u64 {
            let (tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
            let rx = rt.block_on(async move { UnixStream::from_std(rx).unwrap() });
            senders.push(fd_sender(tx, TOTAL, 0xabcdef + kind));
            match kind {
                0 => {
                    let h = rt.spawn(async move {
                        let mut rx = rx;
                        let mut buf = vec![0u8; 65536];
                        let mut at = 0;
                        loop {
                            let n = weft::time::timeout(Duration::from_secs(5), rx.read(&mut buf))
                                .await
                                .expect("hang: a task's read stalled with data queued")
                                .unwrap();
                            if n == 0 {
                                break at;
                            }
                            check(&mut at, &buf[..n]);
                        }
                    });
                    readers.push(Box::new(move || h.join().unwrap()));
                }
                1 => {
                    let h = rt.block_on(async move {
                        weft::fiber::spawn(move || {
                            read_checking(rx, "a fiber's read stalled with data queued")
                        })
                    });
                    readers.push(Box::new(move || h.join().unwrap()));
                }
                _ => {
                    let h = std::thread::spawn(move || {
                        read_checking(rx, "a thread's read stalled with data queued")
                    });
                    readers.push(Box::new(move || h.join().unwrap()));
                }
            }
        }
        for s in senders {
            s.join().unwrap();
        }
        for r in readers {
            assert_eq!(r(), TOTAL);
        }
    });
}

/// Each message carries a descriptor and the reader waits for all of them to be
/// queued before it reads: every read stops at a message boundary, short of its
/// buffer, with the rest queued and no new edge coming.
#[test]
fn unix_stream_many_fd_messages_queued_before_reading() {
    with_limit(LIMIT, || {
        let rt = rt(2);
        for kind in 0..2 {
            let (tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
            let rx = rt.block_on(async move { UnixStream::from_std(rx).unwrap() });
            const MSGS: usize = 50;
            let mut at = 0;
            for _ in 0..MSGS {
                let chunk: Vec<u8> = (at..at + 10).map(pattern_byte).collect();
                assert_eq!(send_with_fd(&tx, &chunk), 10);
                at += 10;
            }
            std::thread::sleep(Duration::from_millis(50));
            let got = if kind == 0 {
                rt.block_on(async move {
                    let mut rx = rx;
                    let mut buf = [0u8; 4096];
                    let mut at = 0;
                    for _ in 0..MSGS * 2 {
                        if at == MSGS * 10 {
                            break;
                        }
                        let n = weft::time::timeout(Duration::from_secs(2), rx.read(&mut buf))
                            .await
                            .expect("hang: queued messages after a descriptor")
                            .unwrap();
                        check(&mut at, &buf[..n]);
                    }
                    at
                })
            } else {
                let h = rt.block_on(async move {
                    weft::fiber::spawn(move || {
                        let mut rx = rx;
                        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                        let mut buf = [0u8; 4096];
                        let mut at = 0;
                        for _ in 0..MSGS * 2 {
                            if at == MSGS * 10 {
                                break;
                            }
                            let n = io::Read::read(&mut rx, &mut buf)
                                .expect("hang: queued messages after a descriptor");
                            check(&mut at, &buf[..n]);
                        }
                        at
                    })
                });
                h.join().unwrap()
            };
            assert_eq!(got, MSGS * 10);
            drop(tx);
        }
    });
}
