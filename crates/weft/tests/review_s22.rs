//! Review of session 22's changes, from safe code only:
//!
//! - the list's push and pop by place (`chan/flavors/list.rs`: `try_push_from`,
//!   `try_pop_into`, their inline fast cases and out-of-line rests, `move_head`,
//!   `wait_written`): counts around block boundaries, every head/tail offset, niche
//!   values (the source `Option` overwritten with `None` unread), zero-sized,
//!   over-aligned and panicking-drop values, channels dropped with values left, from
//!   other threads;
//! - the ring's slot found once (`chan/flavors/ring.rs`, `At`) and its inline
//!   first-lap prefault check: capacities 1, 2, 31, 32, 1000, a `bounded(1_000_000)`
//!   in its first lap, rings of large values whose prefault step is one or two slots;
//! - the inlined fast paths and out-of-line waits (`chan/core.rs`, `mod.rs`, `ops.rs`):
//!   send futures completed on the fast path and polled again, moved between polls;
//!   receive futures of small and large (out-of-line, over 1 KiB) values polled by
//!   hand, moved, cancelled at every point, dropped with their runtime; ping-pong
//!   between threads, fibers and tasks (a lost wakeup hangs); many producers and
//!   consumers of every kind at once; `try_send`/`try_recv` racing `close`; `len`
//!   against the capacity; selects over lists and rings while some close.
//!
//! Every test runs under a watchdog, so a hang fails it.

mod chan_common;
mod common;

use std::fmt;
use std::future::Future;
use std::num::{NonZeroU16, NonZeroU64, NonZeroU8};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use chan_common::{
    check_exactly_once, count_waker, drop_after, fiber_on, join_within, make, poll_once, poll_with,
    rt2, wait_for, Drops, Msg, Rng,
};
use weft::chan::{
    bounded, unbounded, Receiver, RecvError, Select, Sender, TryRecvError, TrySendError,
};

/// Values per block of the list (`list::BLOCK_CAP`).
const BLOCK: usize = 31;
/// The channel's largest ring: a larger capacity buffers in a list (sends locked).
const RING_MAX: usize = 1 << 20;
use common::{big_thread, big_watchdog as watchdog, BIG_STACK};

/// `f` on a scoped thread with a [`BIG_STACK`].
fn big_scoped<'scope, T: Send + 'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    f: impl FnOnce() -> T + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, T> {
    std::thread::Builder::new()
        .stack_size(BIG_STACK)
        .spawn_scoped(s, f)
        .unwrap()
}

/// Polls `fut` once with a no-op waker.
fn poll_noop<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// Byte `i` of value `id`'s payload.
fn pattern(id: usize, i: usize) -> u8 {
    (id.wrapping_mul(131).wrapping_add(i.wrapping_mul(7)) % 251) as u8
}

/// A value of `N` payload bytes derived from its id, whose drop checks those bytes and
/// counts itself in its [`Drops`], failing on a second drop.
struct Val<const N: usize> {
    id: usize,
    bytes: [u8; N],
    drops: Drops,
}

impl<const N: usize> Val<N> {
    fn new(drops: &Drops, id: usize) -> Self {
        // (Not `array::from_fn`: a debug build's takes many copies of a large array.)
        let mut bytes = [0u8; N];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = pattern(id, i);
        }
        Val {
            id,
            bytes,
            drops: drops.clone(),
        }
    }

    fn intact(&self) -> bool {
        self.bytes
            .iter()
            .enumerate()
            .all(|(i, b)| *b == pattern(self.id, i))
    }

    fn check(&self) {
        assert!(self.intact(), "value {} of {N} bytes: changed", self.id);
    }
}

impl<const N: usize> Drop for Val<N> {
    fn drop(&mut self) {
        assert!(
            self.intact(),
            "dropping value {}: its bytes changed",
            self.id
        );
        self.drops
            .record(self.id, format_args!("value {}", self.id));
    }
}

impl<const N: usize> fmt::Debug for Val<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Val<{N}>({})", self.id)
    }
}

/// Every one of `n` values dropped exactly once.
fn all_once(drops: &Drops, n: usize, what: &str) {
    let bad: Vec<_> = (0..n)
        .map(|i| (i, drops.get(i)))
        .filter(|&(_, c)| c != 1)
        .take(10)
        .collect();
    assert!(bad.is_empty(), "{what}: (id, drops) not once: {bad:?}");
}

// ---------------------------------------------------------------------------------
// The list, one thread: block boundaries, offsets, shapes of values.
// ---------------------------------------------------------------------------------

/// `n` values into an unbounded channel (three ways of sending by turns), `popped`
/// of them out (three ways of receiving), then the handles dropped (the receiver on
/// another thread, first or last): in order, intact, each dropped exactly once, the
/// rest dropped when the last receiver goes.
fn boundary_case<const N: usize>(n: usize, popped: usize, rx_first: bool) {
    let drops = Drops::new(n);
    let (tx, rx) = unbounded::<Val<N>>();
    for i in 0..n {
        let v = Val::new(&drops, i);
        match i % 3 {
            0 => tx.try_send(v).unwrap(),
            1 => tx.send_blocking(v).unwrap(),
            _ => assert!(matches!(poll_once(tx.send(v)), Some(Ok(())))),
        }
    }
    assert_eq!(tx.len(), n, "n {n}");
    for i in 0..popped {
        let v = match i % 3 {
            0 => rx.try_recv().unwrap(),
            1 => rx.recv_blocking().unwrap(),
            _ => poll_once(rx.recv()).expect("a value was there").unwrap(),
        };
        assert_eq!(v.id, i, "n {n}: out of order");
        v.check();
    }
    assert_eq!(rx.len(), n - popped, "n {n} popped {popped}");
    assert_eq!(drops.total(), popped);
    if rx_first {
        std::thread::spawn(move || drop(rx)).join().unwrap();
        assert_eq!(
            drops.total(),
            n,
            "n {n}: the last receiver's drop leaves values undropped"
        );
        let extra = Drops::new(1);
        let e = tx.try_send(Val::new(&extra, 0)).unwrap_err();
        assert!(e.is_disconnected());
        drop(e);
        assert_eq!(extra.get(0), 1);
        drop(tx);
    } else {
        drop(tx);
        // The rest can still be received after the last sender went.
        if popped < n {
            let v = rx.try_recv().unwrap();
            assert_eq!(v.id, popped);
        }
        std::thread::spawn(move || {
            let _ = rx.len();
            drop(rx)
        })
        .join()
        .unwrap();
    }
    all_once(
        &drops,
        n,
        &format!("n {n} popped {popped} rx_first {rx_first}"),
    );
}

/// Counts around the list's blocks of 31 (30, 31, 32, 62, 63, 64, ... 1000), partly
/// received, dropped in either order: each value received in order or dropped once.
#[test]
fn list_counts_around_block_boundaries_drop_each_value_once() {
    watchdog(30, || {
        for n in [
            0usize, 1, 2, 30, 31, 32, 33, 61, 62, 63, 64, 65, 93, 94, 1000,
        ] {
            let mut pops = vec![0, 1, n / 2, n.saturating_sub(1), n, BLOCK, BLOCK + 1];
            pops.retain(|&p| p <= n);
            pops.dedup();
            for &popped in &pops {
                for rx_first in [false, true] {
                    boundary_case::<0>(n, popped, rx_first);
                    boundary_case::<24>(n, popped, rx_first);
                }
            }
            boundary_case::<2048>(n, n / 2, true);
            boundary_case::<2048>(n, n, false);
        }
    });
}

/// The queue kept `lag` values long (0 to 70) while hundreds pass: every pair of head
/// and tail offsets within their blocks, the pop's fast case and its rest, a block's
/// last slot and the boundary, each met with the other side anywhere; FIFO throughout.
#[test]
fn list_every_head_and_tail_offset_in_lockstep() {
    watchdog(30, || {
        for lag in 0..=70u64 {
            let (tx, rx) = unbounded::<u64>();
            let mut next = 0;
            for i in 0..lag + 4 * BLOCK as u64 + 7 {
                if i % 2 == 0 {
                    tx.try_send(i).unwrap();
                } else {
                    tx.send_blocking(i).unwrap();
                }
                if i >= lag {
                    assert_eq!(rx.try_recv(), Ok(next), "lag {lag}");
                    next += 1;
                }
                assert_eq!(rx.len() as u64, i + 1 - next, "lag {lag}");
            }
            drop(tx);
            while let Ok(v) = rx.try_recv() {
                assert_eq!(v, next, "lag {lag}");
                next += 1;
            }
            assert_eq!(next, lag + 4 * BLOCK as u64 + 7);
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        }
    });
}

/// `values` through a channel of capacity `cap` in chunks that fit it, sent and
/// received each of three ways by turns: every value comes out equal, in order.
fn roundtrip<T: Clone + PartialEq + fmt::Debug + Send + 'static>(values: &[T]) {
    for cap in [Some(1), Some(5), Some(64), Some(RING_MAX + 1), None] {
        let (tx, rx) = make::<T>(cap);
        let chunk_max = cap.unwrap_or(usize::MAX).min(40);
        let mut sent = 0;
        while sent < values.len() {
            let chunk = chunk_max.min(values.len() - sent);
            for (k, v) in values.iter().enumerate().skip(sent).take(chunk) {
                let v = v.clone();
                match k % 3 {
                    0 => tx.try_send(v).unwrap(),
                    1 => assert!(matches!(poll_once(tx.send(v)), Some(Ok(())))),
                    _ => tx.send_blocking(v).unwrap(),
                }
            }
            for (k, want) in values.iter().enumerate().skip(sent).take(chunk) {
                let got = match k % 3 {
                    0 => rx.try_recv().unwrap(),
                    1 => poll_once(rx.recv()).expect("a value was there").unwrap(),
                    _ => rx.recv_blocking().unwrap(),
                };
                assert_eq!(
                    &got,
                    want,
                    "{} cap {cap:?} #{k}",
                    std::any::type_name::<T>()
                );
            }
            sent += chunk;
        }
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    }
}

/// An enum with a niche in each of its payloads.
#[derive(Clone, PartialEq, Debug)]
enum Niche {
    A(Box<u32>),
    B,
    C(NonZeroU16),
    D(&'static str),
}

/// Values whose type has niches (the push overwrites its source `Option<T>` with
/// `None` unread, the pop copies the slot into a `MaybeUninit`): `Option<Box>` with its
/// own `None` among them, `NonZero`, `&'static str`, `char`, `bool`, nested options,
/// enums, `String`, `Vec`: every value comes out equal on every flavour.
#[test]
fn values_with_niches_come_out_equal() {
    watchdog(30, || {
        let n = 100;
        roundtrip(
            &(0..n)
                .map(|i| (i % 3 != 0).then(|| Box::new(i as u64 * 3)))
                .collect::<Vec<_>>(),
        );
        roundtrip(
            &(0..n)
                .map(|i| match i % 4 {
                    0 => None,
                    1 => Some(None),
                    _ => Some(Some(Box::new(i as u16))),
                })
                .collect::<Vec<_>>(),
        );
        roundtrip(
            &(1..=n as u64)
                .map(|i| NonZeroU64::new(i * 0x0101).unwrap())
                .collect::<Vec<_>>(),
        );
        roundtrip(
            &(0..n)
                .map(|i| NonZeroU8::new((i % 256) as u8))
                .collect::<Vec<_>>(),
        );
        const WORDS: [&str; 4] = ["", "a", "weft", "a longer string, static"];
        roundtrip(&(0..n).map(|i| WORDS[i % 4]).collect::<Vec<_>>());
        roundtrip(
            &(0..n)
                .map(|i| char::from_u32(0x1F600 + i as u32).unwrap())
                .collect::<Vec<_>>(),
        );
        roundtrip(&(0..n).map(|i| i % 3 == 0).collect::<Vec<_>>());
        roundtrip(
            &(0..n)
                .map(|i| [None, Some(false), Some(true)][i % 3])
                .collect::<Vec<_>>(),
        );
        roundtrip(
            &(0..n)
                .map(|i| match i % 4 {
                    0 => Niche::A(Box::new(i as u32)),
                    1 => Niche::B,
                    2 => Niche::C(NonZeroU16::new(i as u16 + 1).unwrap()),
                    _ => Niche::D(WORDS[i % 4]),
                })
                .collect::<Vec<_>>(),
        );
        roundtrip(
            &(0..n)
                .map(|i| {
                    if i % 2 == 0 {
                        Ok(Box::new(i as u32))
                    } else {
                        Err(i as u8)
                    }
                })
                .collect::<Vec<Result<Box<u32>, u8>>>(),
        );
        roundtrip(&(0..n).map(|i| "x".repeat(i % 9)).collect::<Vec<_>>());
        roundtrip(&(0..n).map(|i| vec![i as u8; i % 5]).collect::<Vec<_>>());
        roundtrip(&(0..n).map(|_| ()).collect::<Vec<_>>());
        roundtrip(
            &(0..n)
                .map(|i| (i % 2 == 0).then_some(()))
                .collect::<Vec<_>>(),
        );
    });
}

/// `Option<Box<Val>>` values, `None` among them, some received and some left in a
/// channel that is then dropped: every boxed value dropped exactly once.
#[test]
fn optional_boxed_values_are_dropped_once() {
    watchdog(30, || {
        for cap in [Some(1), Some(40), Some(RING_MAX + 1), None] {
            let n = 100;
            let drops = Drops::new(n);
            let (tx, rx) = make::<Option<Box<Val<8>>>>(cap);
            let room = cap.unwrap_or(usize::MAX);
            let mut sent = 0;
            let mut got = 0;
            while sent < n {
                while sent < n && sent - got < room {
                    let v = (sent % 3 != 1).then(|| Box::new(Val::new(&drops, sent)));
                    tx.try_send(v).unwrap();
                    sent += 1;
                }
                // Receive about half of what is there.
                let take = (sent - got).div_ceil(2);
                for _ in 0..take {
                    let v = rx.try_recv().unwrap();
                    match v {
                        Some(b) => {
                            assert_eq!(b.id, got);
                            b.check();
                        }
                        None => assert_eq!(got % 3, 1),
                    }
                    got += 1;
                }
            }
            drop(rx);
            drop(tx);
            for i in 0..n {
                let want = usize::from(i % 3 != 1);
                assert_eq!(drops.get(i), want, "cap {cap:?} value {i}");
            }
        }
    });
}

/// Zero-sized values with a drop count: through unbounded and bounded channels from
/// two threads, across many blocks, some left in the channel: made == dropped.
#[test]
fn zero_sized_values_with_drop_are_counted() {
    counted_zst!(Z, MADE, DROPPED);
    watchdog(30, || {
        for cap in [Some(1), Some(31), Some(RING_MAX + 1), None] {
            let (tx, rx) = make::<Z>(cap);
            let senders: Vec<_> = (0..2)
                .map(|_| {
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        for _ in 0..1000 {
                            tx.send_blocking(Z::new()).unwrap();
                        }
                    })
                })
                .collect();
            let keep = cap.map_or(400, |c| c.min(400));
            for _ in 0..2000 - keep {
                drop(rx.recv_timeout(Duration::from_secs(10)).unwrap());
            }
            for s in senders {
                s.join().unwrap();
            }
            assert_eq!(rx.len(), keep, "cap {cap:?}");
            drop(rx);
            assert_eq!(
                MADE.load(SeqCst),
                DROPPED.load(SeqCst),
                "cap {cap:?}: values left were not dropped"
            );
            drop(tx);
        }
        assert_eq!(MADE.load(SeqCst), DROPPED.load(SeqCst));
    });
}

/// Cache-line aligned.
#[derive(Clone, Copy, PartialEq, Debug)]
#[repr(align(64))]
struct Align64 {
    id: u64,
    tail: [u8; 40],
}

/// Page aligned, so every list slot and ring slot of it starts a page.
#[derive(Clone, Copy, PartialEq, Debug)]
#[repr(align(4096))]
struct Align4096 {
    id: u64,
    tail: [u8; 300],
}

/// Over-aligned values (64 and 4096 bytes) through every buffer, between two threads,
/// past several blocks and laps: intact and in order.
#[test]
fn over_aligned_values_arrive_intact() {
    watchdog(30, || {
        for cap in [Some(1), Some(3), Some(40), Some(RING_MAX + 1), None] {
            let (tx, rx) = make::<Align64>(cap);
            let (ptx, prx) = make::<Align4096>(cap);
            let s = std::thread::spawn(move || {
                for i in 0..200u64 {
                    let b = (i % 251) as u8;
                    tx.send_blocking(Align64 {
                        id: i,
                        tail: [b; 40],
                    })
                    .unwrap();
                    ptx.send_blocking(Align4096 {
                        id: i,
                        tail: [b; 300],
                    })
                    .unwrap();
                }
            });
            for i in 0..200u64 {
                let b = (i % 251) as u8;
                let v = rx.recv_timeout(Duration::from_secs(10)).unwrap();
                assert_eq!(
                    v,
                    Align64 {
                        id: i,
                        tail: [b; 40]
                    },
                    "cap {cap:?}"
                );
                let p = prx.recv_timeout(Duration::from_secs(10)).unwrap();
                assert_eq!(
                    p,
                    Align4096 {
                        id: i,
                        tail: [b; 300]
                    },
                    "cap {cap:?}"
                );
            }
            s.join().unwrap();
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
            assert_eq!(prx.try_recv(), Err(TryRecvError::Disconnected));
        }
    });
}

/// A value whose drop panics while `armed`.
struct Bomb {
    id: usize,
    drops: Drops,
    armed: bool,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.drops.record(self.id, format_args!("bomb {}", self.id));
        if self.armed && !std::thread::panicking() {
            panic!("bomb {} goes off", self.id);
        }
    }
}

impl fmt::Debug for Bomb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bomb({})", self.id)
    }
}

/// A value whose drop panics, left in a channel (over two list blocks) whose last
/// receiver is then dropped: the panic comes out of that drop, the values before it
/// were dropped once, none twice; the channel's other end is dropped cleanly after.
/// Then a send future holding such a value, waiting on a full channel, is dropped: the
/// panic comes out of its drop and the channel goes on working (no node left behind).
#[test]
fn panicking_drops_leave_the_channel_sound() {
    watchdog(30, || {
        for cap in [Some(100), Some(RING_MAX + 1), None] {
            let n = 70;
            let drops = Drops::new(n);
            let (tx, rx) = make::<Bomb>(cap);
            for id in 0..n {
                tx.try_send(Bomb {
                    id,
                    drops: drops.clone(),
                    armed: id == 40,
                })
                .unwrap();
            }
            let r = catch_unwind(AssertUnwindSafe(move || drop(rx)));
            assert!(r.is_err(), "cap {cap:?}: the bomb did not go off");
            for i in 0..=40 {
                assert_eq!(drops.get(i), 1, "cap {cap:?}: value {i}");
            }
            drop(tx);
            for i in 0..n {
                assert!(drops.get(i) <= 1, "cap {cap:?}: value {i} dropped twice");
            }
        }

        // A waiting send future holding a bomb, dropped.
        for cap in [Some(1), Some(0)] {
            let drops = Drops::new(4);
            let bomb = |id, armed| Bomb {
                id,
                drops: drops.clone(),
                armed,
            };
            let (tx, rx) = make::<Bomb>(cap);
            if cap == Some(1) {
                tx.try_send(bomb(0, false)).unwrap();
            }
            let mut f = Box::pin(tx.send(bomb(1, true)));
            assert!(poll_noop(f.as_mut()).is_pending());
            let r = catch_unwind(AssertUnwindSafe(move || drop(f)));
            assert!(r.is_err(), "cap {cap:?}: the bomb did not go off");
            assert_eq!(drops.get(1), 1);
            if cap == Some(1) {
                assert_eq!(rx.try_recv().unwrap().id, 0);
                tx.try_send(bomb(2, false)).unwrap();
                assert_eq!(rx.try_recv().unwrap().id, 2);
            } else {
                // No sender waits any more: nothing to receive.
                assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
                let h = std::thread::spawn(move || rx.recv_timeout(Duration::from_secs(10)));
                tx.send_timeout(bomb(2, false), Duration::from_secs(10))
                    .unwrap();
                assert_eq!(h.join().unwrap().unwrap().id, 2);
            }
            drop(tx);
            for i in 0..3 {
                if cap == Some(0) && i == 0 {
                    continue;
                }
                assert_eq!(drops.get(i), 1, "cap {cap:?}: value {i}");
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// The futures: fast paths, polled again, moved, cancelled.
// ---------------------------------------------------------------------------------

/// A send future that completed at its first poll (the inline fast path) and is then
/// polled again panics (the promise of `send polled after completion`), moved in its
/// box between the polls; its value is delivered once and not dropped by the future.
/// The same after a completion through a wait.
#[test]
fn a_completed_send_polled_again_panics_without_a_second_send() {
    watchdog(30, || {
        for cap in [Some(1), Some(40), Some(RING_MAX + 1), None] {
            let drops = Drops::new(2);
            let (tx, rx) = make::<Val<16>>(cap);
            {
                let mut f = Box::pin(tx.send(Val::new(&drops, 0)));
                assert!(matches!(poll_noop(f.as_mut()), Poll::Ready(Ok(()))));
                let mut moved = f;
                let again = catch_unwind(AssertUnwindSafe(|| poll_noop(moved.as_mut()).is_ready()));
                let payload = again.expect_err("a completed send polled again did not panic");
                let msg = common::panic_message(&*payload).unwrap_or_default();
                assert!(msg.contains("after completion"), "cap {cap:?}: {msg:?}");
            }
            assert_eq!(drops.get(0), 0, "cap {cap:?}: the sent value was dropped");
            assert_eq!(rx.len(), 1);
            let v = rx.try_recv().unwrap();
            assert_eq!(v.id, 0);
            drop(v);
            assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);

            // Completed through a wait (a bounded channel kept full first).
            if let Some(c) = cap.filter(|&c| c <= 40) {
                let fill = Drops::new(c);
                for i in 0..c {
                    tx.try_send(Val::new(&fill, i)).unwrap();
                }
                let mut f = Box::pin(tx.send(Val::new(&drops, 1)));
                assert!(poll_noop(f.as_mut()).is_pending());
                assert_eq!(rx.try_recv().unwrap().id, 0);
                let deadline = Instant::now() + Duration::from_secs(5);
                while poll_noop(f.as_mut()).is_pending() {
                    assert!(Instant::now() < deadline, "hang: the send never completed");
                    std::thread::yield_now();
                }
                let again = catch_unwind(AssertUnwindSafe(|| poll_noop(f.as_mut()).is_ready()));
                assert!(again.is_err(), "cap {cap:?}: polled again, no panic");
                drop(f);
                for i in 1..c {
                    assert_eq!(rx.try_recv().unwrap().id, i);
                }
                assert_eq!(rx.try_recv().unwrap().id, 1);
                all_once(&fill, c, "fill");
            }
            drop((tx, rx));
            assert_eq!(drops.get(0), 1);
            assert!(drops.get(1) <= 1);
        }
    });
}

/// A send future waiting on a full channel (and on a rendezvous one), its box moved to
/// another thread and polled there with a second waker: room made (a receive) wakes
/// that waker, the next poll completes, and the value arrives once.
#[test]
fn a_waiting_send_moved_between_polls_is_woken_and_completes() {
    watchdog(30, || {
        for cap in [Some(0), Some(1), Some(2)] {
            let drops = Drops::new(8);
            let (tx, rx) = make::<Val<1500>>(cap);
            let c = cap.unwrap();
            for i in 0..c {
                tx.try_send(Val::new(&drops, i)).unwrap();
            }
            let id = c;
            std::thread::scope(|s| {
                let mut f = Box::pin(tx.send(Val::new(&drops, id)));
                let (_, first_waker) = count_waker();
                assert!(poll_with(f.as_mut(), &first_waker).is_pending());
                let (second, second_waker) = count_waker();
                let f = big_scoped(s, move || {
                    let mut f = f;
                    assert!(poll_with(f.as_mut(), &second_waker).is_pending());
                    f
                })
                .join()
                .unwrap();
                // Make room (or, on a rendezvous channel, take the value).
                let got = rx.recv_timeout(Duration::from_secs(5)).unwrap();
                assert_eq!(got.id, if c == 0 { id } else { 0 });
                got.check();
                drop(got);
                wait_for("the send's second waker", 5, || second.0.load(SeqCst) > 0);
                let mut f = f;
                assert!(matches!(
                    poll_with(f.as_mut(), &second_waker_clone(&second)),
                    Poll::Ready(Ok(()))
                ));
            });
            let mut want: Vec<usize> = (1..c).collect();
            if c > 0 {
                want.push(id);
            }
            for w in want {
                let v = rx.try_recv().unwrap();
                assert_eq!(v.id, w, "cap {cap:?}");
                v.check();
            }
            assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
            all_once(&drops, c + 1, &format!("cap {cap:?}"));
        }
    });
}

/// A waker of `count` (another handle to the same counter).
fn second_waker_clone(count: &Arc<chan_common::CountWake>) -> Waker {
    Waker::from(count.clone())
}

/// The life of a receive future of `Val<N>` on each flavour, polled by hand: found a
/// value at once; waited, its box moved to another thread and polled there with a
/// second waker, woken by a send and completed; waited, handed a value, dropped
/// unpolled (the value stays in the channel); waited and dropped with nothing sent
/// (a later value is not swallowed); waited and woken by the last sender's drop
/// (`Err`). Every value received or dropped once.
fn recv_future_lifecycle<const N: usize>() {
    for cap in [Some(0), Some(1), Some(3), Some(RING_MAX + 1), None] {
        let drops = Drops::new(16);
        let d = &drops;
        let (tx, rx) = make::<Val<N>>(cap);
        let mut used = 0;

        // Found at once (not on a rendezvous channel, which buffers nothing).
        if cap != Some(0) {
            tx.try_send(Val::new(d, used)).unwrap();
            let mut f = Box::pin(rx.recv());
            match poll_noop(f.as_mut()) {
                Poll::Ready(Ok(v)) => {
                    assert_eq!(v.id, used);
                    v.check();
                }
                other => panic!("cap {cap:?}: {:?}", other.map(|r| r.map(|v| v.id))),
            }
            used += 1;
        }

        // Waits; moved to another thread and polled there; woken by a send.
        std::thread::scope(|s| {
            let (_, first_waker) = count_waker();
            let mut f = Box::pin(rx.recv());
            assert!(poll_with(f.as_mut(), &first_waker).is_pending());
            let (second, second_waker) = count_waker();
            let mut f = big_scoped(s, move || {
                let mut f = f;
                assert!(poll_with(f.as_mut(), &second_waker).is_pending());
                f
            })
            .join()
            .unwrap();
            let id = used;
            let tx2 = tx.clone();
            let v = Val::new(d, id);
            let sender = big_scoped(s, move || {
                tx2.send_timeout(v, Duration::from_secs(5)).is_ok()
            });
            wait_for("the receive's second waker", 5, || {
                second.0.load(SeqCst) > 0
            });
            match poll_with(f.as_mut(), &second_waker_clone(&second)) {
                Poll::Ready(Ok(v)) => {
                    assert_eq!(v.id, id, "cap {cap:?}");
                    v.check();
                }
                other => panic!(
                    "cap {cap:?}: woken but {:?}",
                    other.map(|r| r.map(|v| v.id))
                ),
            }
            assert!(sender.join().unwrap());
        });
        used += 1;

        // Waits, is handed a value, is dropped without another poll: the value is
        // the channel's again.
        {
            let mut f = Box::pin(rx.recv());
            assert!(poll_noop(f.as_mut()).is_pending());
            let id = used;
            std::thread::scope(|s| {
                let tx2 = tx.clone();
                let v = Val::new(d, id);
                // (On a rendezvous channel the send pairs with the waiting future.)
                let h = big_scoped(s, move || {
                    tx2.send_timeout(v, Duration::from_secs(5)).is_ok()
                });
                assert!(h.join().unwrap());
            });
            drop(f);
            let v = rx.try_recv().unwrap_or_else(|e| {
                panic!("cap {cap:?}: a value handed to a dropped receive is gone ({e:?})")
            });
            assert_eq!(v.id, id);
            v.check();
            used += 1;
        }

        // Waits, dropped with nothing sent: a later value is not swallowed.
        {
            let mut f = Box::pin(rx.recv());
            assert!(poll_noop(f.as_mut()).is_pending());
            drop(f);
            if cap == Some(0) {
                assert!(tx.try_send(Val::new(d, used)).is_err_and(|e| e.is_full()));
            } else {
                tx.try_send(Val::new(d, used)).unwrap();
                assert_eq!(rx.try_recv().unwrap().id, used);
            }
            used += 1;
        }

        // Waits; woken by the last sender's drop.
        {
            let (count, waker) = count_waker();
            let mut f = Box::pin(rx.recv());
            assert!(poll_with(f.as_mut(), &waker).is_pending());
            // The last sender, dropped on another thread.
            std::thread::spawn(move || drop(tx)).join().unwrap();
            wait_for("the receive's wake at the close", 5, || {
                count.0.load(SeqCst) > 0
            });
            assert!(matches!(
                poll_with(f.as_mut(), &waker),
                Poll::Ready(Err(RecvError))
            ));
        }
        all_once(&drops, used, &format!("{N} bytes, cap {cap:?}"));
    }
}

/// [`recv_future_lifecycle`] for small values (inline polls) and values of 1024,
/// 1025 (the first out-of-line size), 4 KiB and 64 KiB.
#[test]
fn recv_futures_of_small_and_large_values_through_their_whole_life() {
    watchdog(30, || {
        recv_future_lifecycle::<0>();
        recv_future_lifecycle::<8>();
        recv_future_lifecycle::<1024>();
        recv_future_lifecycle::<1025>();
        recv_future_lifecycle::<4096>();
        recv_future_lifecycle::<65536>();
    });
}

/// A receiving task drops its receive future after a random number of polls (0 to 2,
/// each one waking itself) while a thread sends: every value arrives exactly once,
/// small and large (out-of-line) values, every flavour.
fn cancelled_receives_lose_nothing<const N: usize>(n: usize, seed: u64) {
    let rt = rt2();
    for cap in [
        Some(0),
        Some(1),
        Some(2),
        Some(31),
        Some(RING_MAX + 1),
        None,
    ] {
        let drops = Drops::new(n);
        let (tx, rx) = make::<Val<N>>(cap);
        let d = drops.clone();
        let sender = big_thread(move || {
            for i in 0..n {
                tx.send_timeout(Val::new(&d, i), Duration::from_secs(10))
                    .unwrap();
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let consumer = rt.spawn(async move {
            let mut rng = Rng::new(seed);
            let mut got = Vec::with_capacity(n);
            loop {
                match drop_after(rng.below(3), rx.recv()).await {
                    Some(Ok(v)) => {
                        v.check();
                        got.push(v.id);
                    }
                    Some(Err(_)) => break,
                    None => {}
                }
            }
            got
        });
        sender.join().unwrap();
        let mut got = join_within(consumer, 20).unwrap();
        got.sort_unstable();
        assert_eq!(got, (0..n).collect::<Vec<_>>(), "{N} bytes, cap {cap:?}");
        all_once(&drops, n, &format!("{N} bytes, cap {cap:?}"));
    }
}

/// [`cancelled_receives_lose_nothing`] for 16-byte and 2 KiB values.
#[test]
fn cancelled_receives_in_tasks_lose_nothing() {
    watchdog(30, || {
        cancelled_receives_lose_nothing::<16>(1500, 22);
        cancelled_receives_lose_nothing::<2048>(400, 23);
    });
}

/// Large values (32 and 64 KiB: list blocks of 1 and 2 MiB) between two threads on
/// unbounded and small bounded channels, the receiver using `wait(rx.recv())` (the
/// out-of-line receive), `recv_timeout` and `try_recv` by turns, past block
/// boundaries; then a channel dropped with large values left in two blocks: every
/// value whole, in order, dropped once.
#[test]
fn large_values_through_lists_and_rings_between_threads() {
    fn run<const N: usize>(cap: Option<usize>, n: usize) {
        let drops = Drops::new(n + 2 * BLOCK + 1);
        let (tx, rx) = make::<Val<N>>(cap);
        let d = drops.clone();
        let s = big_thread(move || {
            for i in 0..n {
                tx.send_timeout(Val::new(&d, i), Duration::from_secs(10))
                    .unwrap();
            }
        });
        let r = big_thread(move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut i = 0;
            while i < n {
                let v = match i % 3 {
                    0 => weft::wait(rx.recv()).unwrap(),
                    1 => rx.recv_timeout(Duration::from_secs(10)).unwrap(),
                    _ => match rx.try_recv() {
                        Ok(v) => v,
                        Err(TryRecvError::Empty) => {
                            assert!(Instant::now() < deadline, "hang: try_recv");
                            std::thread::yield_now();
                            continue;
                        }
                        Err(e) => panic!("{e:?}"),
                    },
                };
                assert_eq!(v.id, i, "{N} bytes cap {cap:?}");
                v.check();
                i += 1;
            }
            assert!(weft::wait(rx.recv()).is_err());
        });
        s.join().unwrap();
        r.join().unwrap();
        all_once(&drops, n, &format!("{N} bytes cap {cap:?}"));

        if cap.is_none() {
            // Left in two blocks (and part of a third) when the channel goes.
            let (tx, rx) = unbounded::<Val<N>>();
            for i in n..n + 2 * BLOCK + 1 {
                tx.try_send(Val::new(&drops, i)).unwrap();
            }
            assert_eq!(rx.try_recv().unwrap().id, n);
            drop(tx);
            drop(rx);
            all_once(&drops, n + 2 * BLOCK + 1, "left in the channel");
        }
    }
    watchdog(30, || {
        run::<32768>(None, 100);
        run::<32768>(Some(4), 40);
        run::<65536>(None, 70);
        run::<65536>(Some(1), 20);
        run::<4096>(None, 300);
    });
}

/// A runtime dropped while its tasks wait: in `recv` on unbounded channels (small and
/// large values), in `send` on full bounded ones and a rendezvous one, and a fiber in
/// `recv_blocking`. The waiting sends' values are dropped once with their tasks; the
/// buffered ones stay; afterwards each channel works from a plain thread, no value
/// going to a dead waiter.
#[test]
fn a_runtime_dropped_while_tasks_wait_leaves_the_channels_working() {
    watchdog(30, || {
        let drops = Drops::new(16);
        let d = &drops;
        let rt = rt2();
        let (utx, urx) = unbounded::<Val<8>>();
        let (ltx, lrx) = unbounded::<Val<4096>>();
        let (btx, brx) = bounded::<Val<8>>(1);
        let (bltx, blrx) = bounded::<Val<4096>>(1);
        let (ztx, zrx) = bounded::<Val<8>>(0);
        let (ftx, frx) = unbounded::<Val<2048>>();
        btx.try_send(Val::new(d, 0)).unwrap();
        bltx.try_send(Val::new(d, 1)).unwrap();
        let started = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        {
            let (r, s) = (urx.clone(), started.clone());
            handles.push(rt.spawn(async move {
                s.fetch_add(1, SeqCst);
                let v = r.recv().await;
                panic!("received {:?}", v.map(|v| v.id));
            }));
        }
        {
            let (r, s) = (lrx.clone(), started.clone());
            handles.push(rt.spawn(async move {
                s.fetch_add(1, SeqCst);
                let v = r.recv().await;
                panic!("received {:?}", v.map(|v| v.id));
            }));
        }
        for (tx, id) in [(btx.clone(), 2), (ztx.clone(), 4)] {
            let (v, s) = (Val::new(d, id), started.clone());
            handles.push(rt.spawn(async move {
                s.fetch_add(1, SeqCst);
                let r = tx.send(v).await;
                panic!("sent: {}", r.is_ok());
            }));
        }
        {
            let (tx, v, s) = (bltx.clone(), Val::new(d, 3), started.clone());
            handles.push(rt.spawn(async move {
                s.fetch_add(1, SeqCst);
                let r = tx.send(v).await;
                panic!("sent: {}", r.is_ok());
            }));
        }
        {
            let (r, s) = (frx.clone(), started.clone());
            let _fiber = fiber_on(&rt, move || {
                s.fetch_add(1, SeqCst);
                let v = r.recv_blocking();
                panic!("received {:?}", v.map(|v| v.id));
            });
        }
        wait_for("the waiters to start", 10, || started.load(SeqCst) == 6);
        std::thread::sleep(Duration::from_millis(50));
        drop(rt);
        for id in [2, 3, 4] {
            assert_eq!(drops.get(id), 1, "the waiting send of value {id}");
        }
        assert_eq!(drops.get(0) + drops.get(1), 0, "buffered values dropped");
        drop(handles);

        utx.try_send(Val::new(d, 5)).unwrap();
        assert_eq!(urx.try_recv().unwrap().id, 5);
        ltx.try_send(Val::new(d, 6)).unwrap();
        let v = lrx.try_recv().unwrap();
        assert_eq!(v.id, 6);
        v.check();
        drop(v);
        ftx.try_send(Val::new(d, 7)).unwrap();
        assert_eq!(frx.try_recv().unwrap().id, 7);
        assert_eq!(brx.try_recv().unwrap().id, 0);
        btx.try_send(Val::new(d, 8)).unwrap();
        assert_eq!(brx.try_recv().unwrap().id, 8);
        assert_eq!(blrx.try_recv().unwrap().id, 1);
        bltx.try_send(Val::new(d, 9)).unwrap();
        assert_eq!(blrx.try_recv().unwrap().id, 9);
        assert_eq!(zrx.try_recv().unwrap_err(), TryRecvError::Empty);
        match ztx.try_send(Val::new(d, 10)) {
            Err(TrySendError::Full(v)) => assert_eq!(v.id, 10),
            other => panic!("a rendezvous send with no receiver: {other:?}"),
        }
        drop((utx, urx, ltx, lrx, btx, brx, bltx, blrx, ztx, zrx, ftx, frx));
        all_once(&drops, 11, "after the runtime's drop");
    });
}

// ---------------------------------------------------------------------------------
// Many at once.
// ---------------------------------------------------------------------------------

/// A message with a drop record.
struct Item {
    msg: Msg,
    id: usize,
    drops: Drops,
}

impl Drop for Item {
    fn drop(&mut self) {
        self.drops
            .record(self.id, format_args!("item {:?}", self.msg));
    }
}

impl fmt::Debug for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Item{:?}", self.msg)
    }
}

/// Each sender's messages in increasing order within one consumer's log.
fn per_sender_in_order(log: &[Msg], what: &str) {
    let mut last: std::collections::HashMap<usize, usize> = Default::default();
    for &(s, n) in log {
        if let Some(&prev) = last.get(&s) {
            assert!(prev < n, "{what}: sender {s}: {n} after {prev}");
        }
        last.insert(s, n);
    }
}

/// Six producers (two threads, two fibers, two tasks) and five consumers (a blocking
/// thread, a spinning `try_recv` thread, a fiber, two tasks) on one channel of
/// capacity `cap`: every message once, each sender's in order per consumer, each
/// dropped once.
fn mpmc_of_every_kind(cap: Option<usize>, per: usize) {
    const SENDERS: usize = 6;
    let rt = rt2();
    let drops = Drops::new(SENDERS * per);
    let (tx, rx) = make::<Item>(cap);
    let item = {
        let drops = drops.clone();
        move |s: usize, n: usize| Item {
            msg: (s, n),
            id: s * per + n,
            drops: drops.clone(),
        }
    };

    let mut producers = Vec::new();
    let mut threads = Vec::new();
    for s in 0..SENDERS {
        let (tx, item) = (tx.clone(), item.clone());
        match s % 3 {
            0 => threads.push(std::thread::spawn(move || {
                for n in 0..per {
                    if n % 2 == 0 {
                        tx.send_blocking(item(s, n)).unwrap();
                    } else {
                        let mut v = item(s, n);
                        loop {
                            match tx.try_send(v) {
                                Ok(()) => break,
                                Err(TrySendError::Full(back)) => {
                                    v = back;
                                    std::thread::yield_now();
                                }
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                    }
                }
            })),
            1 => producers.push(fiber_on(&rt, move || {
                for n in 0..per {
                    tx.send_blocking(item(s, n)).unwrap();
                }
            })),
            _ => producers.push(rt.spawn(async move {
                for n in 0..per {
                    tx.send(item(s, n)).await.unwrap();
                }
            })),
        }
    }
    drop(tx);

    let log = |v: Item| {
        let m = v.msg;
        drop(v);
        m
    };
    let mut consumers = Vec::new();
    let mut consumer_threads = Vec::new();
    {
        let rx = rx.clone();
        consumer_threads.push(std::thread::spawn(move || {
            let mut got = Vec::new();
            while let Ok(v) = rx.recv_blocking() {
                got.push(log(v));
            }
            got
        }));
    }
    {
        let rx = rx.clone();
        consumer_threads.push(std::thread::spawn(move || {
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match rx.try_recv() {
                    Ok(v) => got.push(log(v)),
                    Err(TryRecvError::Empty) => {
                        assert!(Instant::now() < deadline, "hang: try_recv consumer");
                        std::thread::yield_now();
                    }
                    Err(TryRecvError::Disconnected) => return got,
                }
            }
        }));
    }
    {
        let rx = rx.clone();
        consumers.push(fiber_on(&rt, move || {
            let mut got = Vec::new();
            while let Ok(v) = rx.recv_blocking() {
                got.push(log(v));
            }
            got
        }));
    }
    for _ in 0..2 {
        let rx = rx.clone();
        consumers.push(rt.spawn(async move {
            let mut got = Vec::new();
            while let Ok(v) = rx.recv().await {
                got.push(log(v));
            }
            got
        }));
    }
    drop(rx);

    for t in threads {
        t.join().unwrap();
    }
    for p in producers {
        join_within(p, 20).unwrap();
    }
    let mut logs = Vec::new();
    for c in consumer_threads {
        logs.push(c.join().unwrap());
    }
    for c in consumers {
        logs.push(join_within(c, 20).unwrap());
    }
    for (i, l) in logs.iter().enumerate() {
        per_sender_in_order(l, &format!("cap {cap:?} consumer {i}"));
    }
    check_exactly_once(&logs, SENDERS, per);
    all_once(&drops, SENDERS * per, &format!("cap {cap:?}"));
}

/// [`mpmc_of_every_kind`] on an unbounded channel (hundreds of blocks) and a bounded
/// one too large for a ring (a list whose sends take the lock).
#[test]
fn mpmc_of_every_kind_on_lists() {
    watchdog(30, || {
        mpmc_of_every_kind(None, 3000);
        mpmc_of_every_kind(Some(RING_MAX + 1), 1000);
    });
}

/// [`mpmc_of_every_kind`] on rings of capacity 1, 2, 31, 32 and 1000.
#[test]
fn mpmc_of_every_kind_on_rings() {
    watchdog(30, || {
        for cap in [1, 2, 31, 32, 1000] {
            mpmc_of_every_kind(Some(cap), 800);
        }
    });
}

/// A `bounded(1_000_000)` in its first lap (lazily faulted in, prefaulted a step
/// ahead): many producers and consumers of every kind for a few thousand values
/// (crossing the first prefault steps); then one thread fills 5000, drains half in
/// order, and drops the channel with the rest: each dropped once.
#[test]
fn a_huge_ring_in_its_first_lap() {
    watchdog(30, || {
        mpmc_of_every_kind(Some(1_000_000), 1000);

        let n = 5000;
        let drops = Drops::new(n);
        let (tx, rx) = bounded::<Val<8>>(1_000_000);
        for i in 0..n {
            tx.try_send(Val::new(&drops, i)).unwrap();
        }
        assert_eq!(rx.len(), n);
        assert!(!tx.is_full());
        for i in 0..n / 2 {
            let v = rx.try_recv().unwrap();
            assert_eq!(v.id, i);
        }
        assert_eq!(tx.len(), n - n / 2);
        drop(rx);
        assert_eq!(drops.total(), n);
        drop(tx);
        all_once(&drops, n, "bounded(1_000_000)");
    });
}

/// Rings of large values whose prefault step is one slot (32 KiB values) or two
/// (20 000 bytes), their first lap and a few more, between two threads: every value
/// whole, in order, dropped once; then a fresh ring filled whole in its first lap and
/// dropped full.
#[test]
fn rings_of_large_values_prefaulting_one_or_two_slots_a_step() {
    fn run<const N: usize>(cap: usize, n: usize) {
        let drops = Drops::new(n + cap);
        let (tx, rx) = bounded::<Val<N>>(cap);
        let d = drops.clone();
        let s = big_thread(move || {
            for i in 0..n {
                tx.send_timeout(Val::new(&d, i), Duration::from_secs(10))
                    .unwrap();
            }
        });
        for i in 0..n {
            let v = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(v.id, i, "{N} bytes cap {cap}");
            v.check();
        }
        s.join().unwrap();
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
        drop(rx);

        let (tx, rx) = bounded::<Val<N>>(cap);
        for i in n..n + cap {
            tx.try_send(Val::new(&drops, i)).unwrap();
        }
        assert!(tx.is_full());
        assert_eq!(rx.len(), cap);
        let back = tx.try_send(Val::new(&drops, n)).unwrap_err();
        assert!(back.is_full());
        std::mem::forget(back.into_inner()); // a second value of id `n`: not counted
        drop(tx);
        drop(rx);
        all_once(&drops, n + cap, &format!("{N} bytes cap {cap}"));
    }
    watchdog(30, || {
        run::<32768>(16, 60);
        run::<32768>(9, 40);
        run::<20000>(24, 80);
        run::<20000>(14, 50);
    });
}

/// A ping-pong message: an id and `N` words derived from it.
#[derive(Debug)]
struct Pkt<const N: usize>(u64, [u64; N]);

impl<const N: usize> Pkt<N> {
    fn new(id: u64) -> Self {
        let mut w = [0u64; N];
        for (i, x) in w.iter_mut().enumerate() {
            *x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64;
        }
        Pkt(id, w)
    }

    /// The id, after checking every word.
    fn id(&self) -> u64 {
        for (i, x) in self.1.iter().enumerate() {
            assert_eq!(*x, self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64);
        }
        self.0
    }
}

/// Sends even ids up to `rounds`, each after the reply to the one before.
fn lead_blocking<const N: usize>(tx: Sender<Pkt<N>>, rx: Receiver<Pkt<N>>, rounds: u64) {
    let mut id = 0;
    tx.send_blocking(Pkt::new(id)).unwrap();
    while id < rounds {
        let r = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(r.id(), id + 1);
        id += 2;
        tx.send_blocking(Pkt::new(id)).unwrap();
    }
}

/// [`lead_blocking`] with `await`.
async fn lead_async<const N: usize>(tx: Sender<Pkt<N>>, rx: Receiver<Pkt<N>>, rounds: u64) {
    let mut id = 0;
    tx.send(Pkt::new(id)).await.unwrap();
    while id < rounds {
        let r = rx.recv().await.unwrap();
        assert_eq!(r.id(), id + 1);
        id += 2;
        tx.send(Pkt::new(id)).await.unwrap();
    }
}

/// Replies to each message with the next id until the leader goes.
fn echo_blocking<const N: usize>(rx: Receiver<Pkt<N>>, tx: Sender<Pkt<N>>) {
    while let Ok(p) = rx.recv_blocking() {
        if tx.send_blocking(Pkt::new(p.id() + 1)).is_err() {
            break;
        }
    }
}

/// [`echo_blocking`] with `await`.
async fn echo_async<const N: usize>(rx: Receiver<Pkt<N>>, tx: Sender<Pkt<N>>) {
    while let Ok(p) = rx.recv().await {
        if tx.send(Pkt::new(p.id() + 1)).await.is_err() {
            break;
        }
    }
}

/// Request and reply between two parties (`kind`: thread and task, fiber and task,
/// task and fiber, thread and thread), `rounds` times, over two channels of capacity
/// `cap`: a lost wakeup hangs (and fails the watchdog); every reply is the request's
/// id plus one, intact.
fn ping_pong<const N: usize>(rt: &weft::Runtime, cap: Option<usize>, rounds: u64, kind: usize) {
    let (atx, brx) = make::<Pkt<N>>(cap);
    let (btx, arx) = make::<Pkt<N>>(cap);
    match kind {
        0 => {
            let e = rt.spawn(echo_async(brx, btx));
            big_thread(move || lead_blocking(atx, arx, rounds))
                .join()
                .unwrap();
            join_within(e, 20).unwrap();
        }
        1 => {
            let e = rt.spawn(echo_async(brx, btx));
            let l = fiber_on(rt, move || lead_blocking(atx, arx, rounds));
            join_within(l, 20).unwrap();
            join_within(e, 20).unwrap();
        }
        2 => {
            let e = fiber_on(rt, move || echo_blocking(brx, btx));
            let l = rt.spawn(lead_async(atx, arx, rounds));
            join_within(l, 20).unwrap();
            join_within(e, 20).unwrap();
        }
        _ => {
            let e = big_thread(move || echo_blocking(brx, btx));
            big_thread(move || lead_blocking(atx, arx, rounds))
                .join()
                .unwrap();
            e.join().unwrap();
        }
    }
}

/// [`ping_pong`] between threads, fibers and tasks, on unbounded, one-slot and
/// rendezvous channels, with one-word values and 2400-byte ones (out-of-line polls).
#[test]
fn ping_pong_between_every_kind_never_loses_a_wakeup() {
    watchdog(30, || {
        let rt = rt2();
        for cap in [None, Some(1), Some(0)] {
            for kind in 0..4 {
                ping_pong::<1>(&rt, cap, 3000, kind);
                ping_pong::<300>(&rt, cap, 1000, kind);
            }
        }
    });
}

/// `try_send` from three threads and `try_recv` from one racing `close` (from the
/// sender or the receiver side): a send that succeeded is received exactly once, one
/// that failed hands its value back; no send succeeds once a close has returned; the
/// receiver sees `Disconnected` only after the last successful send's value.
#[test]
fn try_send_and_try_recv_racing_close() {
    watchdog(30, || {
        for (round, cap) in [None, Some(1), Some(31), Some(1000), Some(RING_MAX + 1)]
            .into_iter()
            .cycle()
            .take(20)
            .enumerate()
        {
            let per = 4000;
            let drops = Drops::new(3 * per);
            let (tx, rx) = make::<Val<8>>(cap);
            let closed = Arc::new(AtomicBool::new(false));
            let senders: Vec<_> = (0..3)
                .map(|s| {
                    let (tx, d, closed) = (tx.clone(), drops.clone(), closed.clone());
                    std::thread::spawn(move || {
                        let mut ok = Vec::new();
                        for n in 0..per {
                            let id = s * per + n;
                            let was_closed = closed.load(SeqCst);
                            match tx.try_send(Val::new(&d, id)) {
                                Ok(()) => {
                                    assert!(!was_closed, "a send succeeded after close");
                                    ok.push(id);
                                }
                                Err(TrySendError::Full(v)) => drop(v),
                                Err(TrySendError::Disconnected(v)) => {
                                    assert_eq!(v.id, id);
                                    drop(v);
                                }
                            }
                        }
                        ok
                    })
                })
                .collect();
            let receiver = {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let deadline = Instant::now() + Duration::from_secs(20);
                    loop {
                        match rx.try_recv() {
                            Ok(v) => {
                                v.check();
                                got.push(v.id);
                            }
                            Err(TryRecvError::Empty) => {
                                assert!(Instant::now() < deadline, "hang: receiver");
                                std::hint::spin_loop();
                            }
                            Err(TryRecvError::Disconnected) => return got,
                        }
                    }
                })
            };
            // Let them run a little (longer on odd rounds), then close.
            common::spin_for(Duration::from_micros(200 * (round as u64 % 4)));
            let first = if round % 2 == 0 {
                tx.close()
            } else {
                rx.close()
            };
            assert!(first);
            closed.store(true, SeqCst);
            let mut ok: Vec<usize> = senders
                .into_iter()
                .flat_map(|s| s.join().unwrap())
                .collect();
            let mut got = receiver.join().unwrap();
            // The receiver stopped at `Disconnected`: nothing may be left behind.
            assert_eq!(
                rx.try_recv().map(|v| v.id),
                Err(TryRecvError::Disconnected),
                "cap {cap:?}: a value after Disconnected"
            );
            ok.sort_unstable();
            got.sort_unstable();
            assert_eq!(got.len(), ok.len(), "cap {cap:?} round {round}");
            assert_eq!(got, ok, "cap {cap:?} round {round}");
            drop((tx, rx));
            all_once(&drops, 3 * per, &format!("cap {cap:?} round {round}"));
        }
    });
}

/// Two threads `try_send` and two `try_recv` in tight loops (spinning when full or
/// empty), so that claims race on both cores: on rings of 2, 31, 32 and 1024 slots, a
/// `bounded(1_000_000)` in its first lap, a bounded list and an unbounded one. A value
/// written to another claim's slot, read twice or lost shows as changed bytes, a
/// double drop or a count off.
#[test]
fn tight_try_loops_race_their_claims() {
    watchdog(30, || {
        let per = 40_000;
        for cap in [
            Some(2),
            Some(31),
            Some(32),
            Some(1024),
            Some(1_000_000),
            Some(RING_MAX + 1),
            None,
        ] {
            let drops = Drops::new(2 * per);
            let (tx, rx) = make::<Val<24>>(cap);
            let received = Arc::new(AtomicUsize::new(0));
            let producers: Vec<_> = (0..2)
                .map(|p| {
                    let (tx, d) = (tx.clone(), drops.clone());
                    std::thread::spawn(move || {
                        let deadline = Instant::now() + Duration::from_secs(20);
                        for n in 0..per {
                            let mut v = Val::new(&d, p * per + n);
                            loop {
                                match tx.try_send(v) {
                                    Ok(()) => break,
                                    Err(TrySendError::Full(back)) => {
                                        assert!(Instant::now() < deadline, "hang: full");
                                        v = back;
                                        std::hint::spin_loop();
                                    }
                                    Err(e) => panic!("{e:?}"),
                                }
                            }
                        }
                    })
                })
                .collect();
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    let (rx, received) = (rx.clone(), received.clone());
                    std::thread::spawn(move || {
                        let deadline = Instant::now() + Duration::from_secs(20);
                        let mut last = [None::<usize>; 2];
                        while received.load(SeqCst) < 2 * per {
                            match rx.try_recv() {
                                Ok(v) => {
                                    v.check();
                                    let (p, n) = (v.id / per, v.id % per);
                                    assert!(last[p].is_none_or(|l| l < n), "out of order");
                                    last[p] = Some(n);
                                    received.fetch_add(1, SeqCst);
                                }
                                Err(TryRecvError::Empty) => {
                                    assert!(Instant::now() < deadline, "hang: empty");
                                    std::hint::spin_loop();
                                }
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                    })
                })
                .collect();
            for p in producers {
                p.join().unwrap();
            }
            for c in consumers {
                c.join().unwrap();
            }
            assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
            all_once(&drops, 2 * per, &format!("cap {cap:?}"));
        }
    });
}

/// `len()` read from a third thread while two threads `try_send` and two `try_recv`:
/// never above the capacity of a bounded channel; for an unbounded one never above
/// the sends begun so far less those received. `is_empty` and `is_full` are called
/// too (no crash, no hang).
#[test]
fn len_stays_within_the_capacity_under_contention() {
    watchdog(30, || {
        for cap in [Some(1), Some(2), Some(31), Some(32), None] {
            let (tx, rx) = make::<u64>(cap);
            let stop = Arc::new(AtomicBool::new(false));
            let begun = Arc::new(AtomicUsize::new(0));
            let mut workers = Vec::new();
            for _ in 0..2 {
                let (tx, stop, begun) = (tx.clone(), stop.clone(), begun.clone());
                workers.push(std::thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(SeqCst) {
                        begun.fetch_add(1, SeqCst);
                        if tx.try_send(i).is_err() {
                            begun.fetch_sub(1, SeqCst);
                            std::thread::yield_now();
                        }
                        i += 1;
                    }
                }));
            }
            for _ in 0..2 {
                let (rx, stop) = (rx.clone(), stop.clone());
                workers.push(std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        if rx.try_recv().is_err() {
                            std::thread::yield_now();
                        }
                    }
                }));
            }
            let deadline = Instant::now() + Duration::from_millis(300);
            let mut reads = 0u64;
            while Instant::now() < deadline {
                let len = rx.len();
                let bound = begun.load(SeqCst);
                match cap {
                    Some(c) => assert!(len <= c, "cap {c}: len {len}"),
                    None => assert!(len <= bound, "unbounded: len {len}, sends begun {bound}"),
                }
                let _ = (tx.is_empty(), rx.is_empty(), tx.is_full(), rx.is_full());
                reads += 1;
            }
            stop.store(true, SeqCst);
            for w in workers {
                w.join().unwrap();
            }
            assert!(reads > 0);
            let left = rx.len();
            let mut drained = 0;
            while rx.try_recv().is_ok() {
                drained += 1;
            }
            assert_eq!(drained, left, "cap {cap:?}: len said {left}");
            assert!(rx.is_empty() && tx.is_empty());
        }
    });
}

/// Many blocks' worth of values in an unbounded channel (31, 32, 62, 63, 64, 1000),
/// some received, then the last sender and the last receiver dropped at once on two
/// other threads: every value received once or dropped once.
#[test]
fn handles_dropped_at_once_on_other_threads() {
    watchdog(30, || {
        for n in [31, 32, 62, 63, 64, 1000] {
            for round in 0..20 {
                let drops = Drops::new(n);
                let (tx, rx) = unbounded::<Val<8>>();
                for i in 0..n {
                    tx.try_send(Val::new(&drops, i)).unwrap();
                }
                let take = (round * 7) % (n + 1);
                for i in 0..take {
                    assert_eq!(rx.try_recv().unwrap().id, i);
                }
                let barrier = Arc::new(Barrier::new(2));
                let b = barrier.clone();
                let a = std::thread::spawn(move || {
                    b.wait();
                    drop(tx);
                });
                let b = barrier.clone();
                let c = std::thread::spawn(move || {
                    b.wait();
                    drop(rx);
                });
                a.join().unwrap();
                c.join().unwrap();
                all_once(&drops, n, &format!("n {n} round {round}"));
            }
        }
    });
}

/// A plain sender racing the close of an unbounded channel that it fills across
/// block boundaries, while a receiver blocks in `recv_blocking`: the receiver gets
/// exactly the values whose sends succeeded, then `Err`.
#[test]
fn close_racing_pushes_across_blocks_with_a_blocked_receiver() {
    watchdog(30, || {
        for round in 0..40u64 {
            let n = 3000;
            let drops = Drops::new(n);
            let (tx, rx) = unbounded::<Val<8>>();
            let t2 = tx.clone();
            let d = drops.clone();
            let sender = std::thread::spawn(move || {
                let mut ok = 0;
                for i in 0..n {
                    match t2.send_blocking(Val::new(&d, i)) {
                        Ok(()) => ok += 1,
                        Err(e) => {
                            assert_eq!(e.0.id, i);
                            drop(e);
                            for j in i + 1..n {
                                assert!(t2.try_send(Val::new(&d, j)).is_err());
                            }
                            break;
                        }
                    }
                }
                ok
            });
            let receiver = std::thread::spawn(move || {
                let mut next = 0;
                while let Ok(v) = rx.recv_blocking() {
                    assert_eq!(v.id, next);
                    next += 1;
                }
                next
            });
            common::spin_for(Duration::from_micros(50 * (round % 8)));
            tx.close();
            let ok = sender.join().unwrap();
            let got = receiver.join().unwrap();
            assert_eq!(got, ok, "round {round}");
            drop(tx);
            all_once(&drops, n, &format!("round {round}"));
        }
    });
}

// ---------------------------------------------------------------------------------
// Select.
// ---------------------------------------------------------------------------------

/// A select (blocking on a thread, and `select_async` in a task) over three unbounded
/// and three bounded channels (capacities 1, 2, 31), each fed by its own producer
/// that sends its count and drops its sender, at different paces so some close while
/// others still send: every value received once, each channel's in order.
#[test]
fn select_over_lists_and_rings_while_some_close() {
    fn producers(
        caps: &[Option<usize>],
        counts: &[usize],
    ) -> (Vec<Receiver<Msg>>, Vec<std::thread::JoinHandle<()>>) {
        let mut rxs = Vec::new();
        let mut hs = Vec::new();
        for (c, (&cap, &count)) in caps.iter().zip(counts).enumerate() {
            let (tx, rx) = make::<Msg>(cap);
            rxs.push(rx);
            hs.push(std::thread::spawn(move || {
                for n in 0..count {
                    tx.send_blocking((c, n)).unwrap();
                    if c % 2 == 0 && n % 100 == 0 {
                        std::thread::yield_now();
                    }
                }
            }));
        }
        (rxs, hs)
    }
    /// A select over the receivers still open, and the receiver of each of its
    /// operation indices.
    fn select_open<'a>(rxs: &'a [Receiver<Msg>], open: &[bool]) -> (Select<'a>, Vec<usize>) {
        let mut sel = Select::new();
        let mut idx = Vec::new();
        for (i, rx) in rxs.iter().enumerate() {
            if open[i] {
                assert_eq!(sel.recv(rx), idx.len(), "operations indexed in order");
                idx.push(i);
            }
        }
        (sel, idx)
    }
    fn check(caps: &[Option<usize>], counts: &[usize], got: &[Msg], what: &str) {
        let mut next = vec![0; caps.len()];
        for &(c, n) in got {
            assert_eq!(n, next[c], "{what}: channel {c} out of order");
            next[c] += 1;
        }
        assert_eq!(next, counts, "{what}: counts");
    }
    watchdog(30, || {
        let caps = [None, Some(1), None, Some(2), None, Some(31)];
        let counts = [5000, 300, 60, 2000, 31, 1000];

        // Blocking, on this thread.
        let (rxs, hs) = producers(&caps, &counts);
        let mut got = Vec::new();
        let mut open: Vec<bool> = vec![true; rxs.len()];
        while open.iter().any(|&o| o) {
            let (mut sel, idx) = select_open(&rxs, &open);
            let op = sel
                .select_timeout(Duration::from_secs(10))
                .expect("hang: no operation ready");
            let i = idx[op.index()];
            match op.recv(&rxs[i]) {
                Ok(m) => got.push(m),
                Err(_) => open[i] = false,
            }
        }
        for h in hs {
            h.join().unwrap();
        }
        check(&caps, &counts, &got, "select");

        // `select_async`, in a task.
        let rt = rt2();
        let (rxs, hs) = producers(&caps, &counts);
        let task = rt.spawn(async move {
            let mut got = Vec::new();
            let mut open: Vec<bool> = vec![true; rxs.len()];
            while open.iter().any(|&o| o) {
                let (mut sel, idx) = select_open(&rxs, &open);
                let op = sel.select_async().await;
                let i = idx[op.index()];
                match op.recv(&rxs[i]) {
                    Ok(m) => got.push(m),
                    Err(_) => open[i] = false,
                }
            }
            got
        });
        let got = join_within(task, 30).unwrap();
        for h in hs {
            h.join().unwrap();
        }
        check(&caps, &counts, &got, "select_async");

        // `select!` over one list and one ring, with a default timeout.
        let (rxs, hs) = producers(&[None, Some(3)], &[700, 400]);
        let (a, b) = (&rxs[0], &rxs[1]);
        let mut got = Vec::new();
        let (mut a_open, mut b_open) = (true, true);
        let deadline = Instant::now() + Duration::from_secs(20);
        while a_open || b_open {
            assert!(Instant::now() < deadline, "hang: select! loop");
            let never = weft::chan::never::<Msg>();
            weft::select! {
                recv(if a_open { a } else { &never }) -> m => match m {
                    Ok(m) => got.push(m),
                    Err(_) => a_open = false,
                },
                recv(if b_open { b } else { &never }) -> m => match m {
                    Ok(m) => got.push(m),
                    Err(_) => b_open = false,
                },
                default(Duration::from_millis(20)) => {}
            }
        }
        for h in hs {
            h.join().unwrap();
        }
        check(&[None, Some(3)], &[700, 400], &got, "select!");
    });
}
