//! Nurseries and rendezvous channels (spec 003): a child checks cancellation only
//! before it commits to a rendezvous, never inside one, so a value is never half-sent.
//! Children send on a `bounded(0)` channel to a receiver outside the nursery, the
//! nursery is cancelled at a random moment, and the values received must be exactly
//! the sends that returned `Ok`.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use weft::{Builder, Nursery};

const ROUNDS: u64 = 150;
const CHILDREN: u64 = 4;
const PER_CHILD: u64 = 10_000;

/// A small xorshift: the cancellation moments vary between rounds and runs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Tasks,
    Fibers,
}

fn spawn_sender(
    n: &Nursery<'_, ()>,
    kind: Kind,
    child: u64,
    tx: weft::chan::Sender<u64>,
    sent: Arc<Mutex<Vec<u64>>>,
) {
    match kind {
        Kind::Tasks => n.spawn(async move {
            for i in 0..PER_CHILD {
                let v = child << 32 | i;
                if tx.send(v).await.is_err() {
                    break;
                }
                // No await between the `Ok` and the record: the task is cancelled only
                // at a later await.
                sent.lock().unwrap().push(v);
            }
            Ok(())
        }),
        Kind::Fibers => n.spawn_fiber(move || {
            for i in 0..PER_CHILD {
                let v = child << 32 | i;
                if tx.send_blocking(v).is_err() {
                    break;
                }
                sent.lock().unwrap().push(v);
            }
            Ok(())
        }),
    }
}

/// Two receivers inside the nursery (a task and a fiber), cancelled with the senders:
/// a receive that a sender committed to returns its value, one still waiting is
/// withdrawn and gets nothing.
fn spawn_receivers(n: &Nursery<'_, ()>, rx: weft::chan::Receiver<u64>, got: Arc<Mutex<Vec<u64>>>) {
    let (rx2, got2) = (rx.clone(), got.clone());
    n.spawn(async move {
        while let Ok(v) = rx2.recv().await {
            got2.lock().unwrap().push(v);
        }
        Ok(())
    });
    n.spawn_fiber(move || {
        while let Ok(v) = rx.recv_blocking() {
            got.lock().unwrap().push(v);
        }
        Ok(())
    });
}

fn stress(kind: Kind) {
    with_timeout(move || {
        let rt = Builder::new().worker_threads(2).build().unwrap();
        let _enter = rt.enter();
        let seed = Instant::now().elapsed().as_nanos() as u64 | 1;
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let mut paired_total = 0;
        for round in 0..ROUNDS {
            let (tx, rx) = weft::chan::bounded::<u64>(0);
            // The receiver is outside the nursery: it is never cancelled, and drains the
            // channel until every sender (each child's, then the body's) is gone.
            let receiver = std::thread::spawn(move || {
                let mut got = Vec::new();
                while let Ok(v) = rx.recv_blocking() {
                    got.push(v);
                }
                got
            });
            let sent = Arc::new(Mutex::new(Vec::new()));
            let delay = Duration::from_micros(rng.next() % 1500);
            let r = weft::nursery_blocking(|n| {
                for c in 0..CHILDREN {
                    spawn_sender(n, kind, c, tx.clone(), sent.clone());
                }
                drop(tx);
                let start = Instant::now();
                while start.elapsed() < delay {
                    std::hint::spin_loop();
                }
                n.cancel();
                Ok::<_, ()>(())
            });
            assert_eq!(r, Ok(()));
            let got: BTreeSet<u64> = receiver.join().unwrap().into_iter().collect();
            let sent: BTreeSet<u64> = sent.lock().unwrap().iter().copied().collect();
            assert_eq!(
                got.len(),
                sent.len(),
                "{kind:?} round {round} (cancelled after {delay:?}): received {} values, \
                 {} sends returned Ok; received but not Ok: {:?}; Ok but not received: {:?}",
                got.len(),
                sent.len(),
                got.difference(&sent).take(5).collect::<Vec<_>>(),
                sent.difference(&got).take(5).collect::<Vec<_>>(),
            );
            assert_eq!(got, sent);
            paired_total += got.len();
        }
        // The rounds did exercise the channel (not all cancelled before any send).
        assert!(paired_total > 0);

        // The receivers are children too, cancelled with the senders.
        let mut paired_total = 0;
        for round in 0..ROUNDS {
            let (tx, rx) = weft::chan::bounded::<u64>(0);
            let sent = Arc::new(Mutex::new(Vec::new()));
            let got = Arc::new(Mutex::new(Vec::new()));
            let delay = Duration::from_micros(rng.next() % 1500);
            let r = weft::nursery_blocking(|n| {
                spawn_receivers(n, rx, got.clone());
                for c in 0..CHILDREN {
                    spawn_sender(n, kind, c, tx.clone(), sent.clone());
                }
                drop(tx);
                let start = Instant::now();
                while start.elapsed() < delay {
                    std::hint::spin_loop();
                }
                n.cancel();
                Ok::<_, ()>(())
            });
            assert_eq!(r, Ok(()));
            let got: BTreeSet<u64> = got.lock().unwrap().iter().copied().collect();
            let sent: BTreeSet<u64> = sent.lock().unwrap().iter().copied().collect();
            assert_eq!(
                got,
                sent,
                "{kind:?} senders, receivers inside, round {round} (cancelled after \
                 {delay:?}): received but not Ok: {:?}; Ok but not received: {:?}",
                got.difference(&sent).take(5).collect::<Vec<_>>(),
                sent.difference(&got).take(5).collect::<Vec<_>>(),
            );
            paired_total += got.len();
        }
        assert!(paired_total > 0);
    });
}

#[test]
fn task_children_values_received_are_exactly_the_sends_that_returned_ok() {
    stress(Kind::Tasks);
}

#[test]
fn fiber_children_values_received_are_exactly_the_sends_that_returned_ok() {
    stress(Kind::Fibers);
}
