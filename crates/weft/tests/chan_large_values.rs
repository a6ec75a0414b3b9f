//! Large values through every send and receive path, after the paths were changed to
//! copy a value as few times as possible (a send future keeps its value only in its
//! wait node, the buffer's pop writes straight into the receiver's place, `wait`
//! pins the future where it was passed). Each value arrives whole (every word
//! checked), and is dropped exactly once whether it was received, given back by a
//! failed or timed-out send, dropped with an unpolled or a cancelled future, or left
//! in the channel.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{counter, load, with_timeout, workers};
use weft::chan::{self, SendTimeoutError, TrySendError};

// 8 KiB: large enough for every path to copy it with `memcpy`, small enough for
// a debug build's frames, which hold several copies, on a fiber's stack.
const WORDS: usize = 1024;

/// A large value whose every word is derived from its id, counted while alive.
struct Big {
    words: Box<[u64; WORDS]>,
    inline: [u64; WORDS],
    live: Arc<AtomicUsize>,
}

impl Big {
    fn new(id: u64, live: &Arc<AtomicUsize>) -> Big {
        live.fetch_add(1, SeqCst);
        let mut inline = [0; WORDS];
        for (i, w) in inline.iter_mut().enumerate() {
            *w = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64;
        }
        Big {
            words: Box::new(inline),
            inline,
            live: live.clone(),
        }
    }

    /// The id's seed, after checking that no word was lost or mixed with another value's.
    fn check(&self) -> u64 {
        let seed = self.inline[0];
        for (i, w) in self.inline.iter().enumerate() {
            assert_eq!(*w, seed ^ i as u64, "word {i} of a value changed");
        }
        assert_eq!(
            &self.inline, &*self.words,
            "the inline copy and the boxed one differ"
        );
        seed
    }
}

impl Drop for Big {
    fn drop(&mut self) {
        self.live.fetch_sub(1, SeqCst);
    }
}

fn seed(id: u64) -> u64 {
    id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

#[test]
fn a_send_future_keeps_its_value_once() {
    // The future holds the value in one place (its node), not two: moving it copies
    // one value's worth, not two.
    let (tx, _rx) = chan::bounded::<[u8; 32768]>(1);
    let fut = tx.send([0; 32768]);
    assert!(
        std::mem::size_of_val(&fut) < 2 * 32768,
        "a send future of a 32 KiB value takes {} bytes",
        std::mem::size_of_val(&fut)
    );
}

#[test]
fn large_values_arrive_whole_on_every_flavour_from_tasks_fibers_and_threads() {
    with_timeout(|| {
        let rt = workers(2);
        let live = counter();
        for cap in [Some(0), Some(1), Some(8), None] {
            let (tx, rx) = match cap {
                Some(n) => chan::bounded::<Big>(n),
                None => chan::unbounded::<Big>(),
            };
            const N: u64 = 60;
            // A task sends a third, a fiber a third, a plain thread the rest.
            let t = {
                let (tx, live) = (tx.clone(), live.clone());
                rt.spawn(async move {
                    for i in 0..N / 3 {
                        assert!(tx.send(Big::new(i, &live)).await.is_ok());
                    }
                })
            };
            let f = {
                let (tx, live) = (tx.clone(), live.clone());
                let _enter = rt.enter();
                weft::fiber::spawn(move || {
                    for i in N / 3..2 * N / 3 {
                        assert!(tx.send_blocking(Big::new(i, &live)).is_ok());
                    }
                })
            };
            let p = {
                let live = live.clone();
                std::thread::spawn(move || {
                    for i in 2 * N / 3..N {
                        assert!(tx.send_blocking(Big::new(i, &live)).is_ok());
                    }
                })
            };
            // Half received by an async task, half by this thread.
            let r = {
                let rx = rx.clone();
                rt.spawn(async move {
                    let mut seeds = Vec::new();
                    for _ in 0..N / 2 {
                        seeds.push(rx.recv().await.expect("senders alive").check());
                    }
                    seeds
                })
            };
            let mut seeds: Vec<u64> = (0..N - N / 2)
                .map(|_| rx.recv_blocking().expect("senders alive").check())
                .collect();
            seeds.extend(r.join().unwrap());
            t.join().unwrap();
            f.join().unwrap();
            p.join().unwrap();
            let mut want: Vec<u64> = (0..N).map(seed).collect();
            want.sort_unstable();
            seeds.sort_unstable();
            assert_eq!(seeds, want, "capacity {cap:?}: values lost or repeated");
            assert_eq!(load(&live), 0, "capacity {cap:?}: a value was not dropped");
        }
    });
}

#[test]
fn large_values_given_back_or_dropped_exactly_once() {
    with_timeout(|| {
        let live = counter();
        let (tx, rx) = chan::bounded::<Big>(1);

        // An unpolled send future dropped: its value goes with it.
        drop(tx.send(Big::new(1, &live)));
        assert_eq!(load(&live), 0);

        // A send into room completes at its first poll; a second one waits (full),
        // and dropped then, drops its value, which never reaches the channel.
        {
            let mut first = pin!(tx.send(Big::new(2, &live)));
            assert!(matches!(
                first.as_mut().poll(&mut noop_cx()),
                Poll::Ready(Ok(()))
            ));
            let mut second = pin!(tx.send(Big::new(3, &live)));
            assert!(second.as_mut().poll(&mut noop_cx()).is_pending());
            assert_eq!(load(&live), 2);
        }
        assert_eq!(load(&live), 1, "the waiting send's value was not dropped");
        assert_eq!(rx.try_recv().unwrap().check(), seed(2));
        assert!(
            rx.try_recv().is_err(),
            "a cancelled send delivered its value"
        );

        // try_send on a full channel and send_timeout that times out give it back.
        tx.try_send(Big::new(4, &live)).unwrap();
        match tx.try_send(Big::new(5, &live)) {
            Err(TrySendError::Full(v)) => assert_eq!(v.check(), seed(5)),
            other => panic!("expected Full, got ok = {}", other.is_ok()),
        }
        match tx.send_timeout(Big::new(6, &live), Duration::from_millis(5)) {
            Err(SendTimeoutError::Timeout(v)) => assert_eq!(v.check(), seed(6)),
            _ => panic!("expected a timeout"),
        }
        assert_eq!(load(&live), 1);

        // A waiting send whose channel closes gets its value back.
        {
            let mut waiting = pin!(tx.send(Big::new(7, &live)));
            assert!(waiting.as_mut().poll(&mut noop_cx()).is_pending());
            assert!(rx.close());
            match waiting.as_mut().poll(&mut noop_cx()) {
                Poll::Ready(Err(e)) => assert_eq!(e.into_inner().check(), seed(7)),
                _ => panic!("a send on a closed channel did not fail"),
            }
        }
        // The value left in the channel drains, then the channel reports closed.
        assert_eq!(rx.try_recv().unwrap().check(), seed(4));
        assert!(rx.try_recv().is_err());
        drop((tx, rx));
        assert_eq!(load(&live), 0, "a value leaked");

        // Values left in a dropped channel are dropped with it.
        let (tx, rx) = chan::bounded::<Big>(4);
        for i in 0..3 {
            tx.try_send(Big::new(10 + i, &live)).unwrap();
        }
        assert_eq!(rx.try_recv().unwrap().check(), seed(10));
        drop((tx, rx));
        assert_eq!(load(&live), 0, "values left in a dropped channel leaked");
    });
}

#[test]
fn a_rendezvous_hands_a_large_value_to_a_waiting_receiver_whole() {
    with_timeout(|| {
        let rt = workers(2);
        let live = counter();
        let (tx, rx) = chan::bounded::<Big>(0);
        for round in 0..20u64 {
            // The receiver waits first (a node the sender hands the value to), then
            // the sender waits first (a node the receiver takes the value from).
            let r = {
                let rx = rx.clone();
                rt.spawn(async move { rx.recv().await.unwrap().check() })
            };
            if round % 2 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
            tx.send_blocking(Big::new(round, &live)).unwrap();
            assert_eq!(r.join().unwrap(), seed(round));
            let s = {
                let (tx, live) = (tx.clone(), live.clone());
                rt.spawn(async move { tx.send(Big::new(100 + round, &live)).await.is_ok() })
            };
            if round % 2 == 1 {
                std::thread::sleep(Duration::from_micros(200));
            }
            assert_eq!(rx.recv_blocking().unwrap().check(), seed(100 + round));
            assert!(s.join().unwrap());
        }
        assert_eq!(load(&live), 0);
    });
}
