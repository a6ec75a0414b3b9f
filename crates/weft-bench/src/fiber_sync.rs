//! Future-based synchronisation for the weft side of the `fiber` suite, used
//! from fibers through [`weft::wait`] (which suspends the calling fiber, not
//! its worker thread, while the future is pending). weft has no fiber
//! channel yet; these are the small ones the benchmark needs.
//!
//! * [`slot`]: a one-slot channel. `send` waits until the slot is empty, then
//!   fills it; `recv` waits until it is full, then empties it.
//! * [`Gate`]: every `wait` stays pending until [`Gate::open`].

use std::future::poll_fn;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::Mutex;
use std::task::{Poll, Waker};

use crate::harness::lock;

/// Creates a one-slot channel: `send` waits until the slot is empty, then fills it;
/// `recv` waits until it is full, then empties it. The channel itself is
/// [`weft_bench_sync::slot`] (lock-free, model-checked with loom there); these halves
/// wait on it with `weft::wait`.
pub fn slot<T: Send>() -> (SlotSender<T>, SlotReceiver<T>) {
    let (tx, rx) = weft_bench_sync::slot::slot();
    (SlotSender(tx), SlotReceiver(rx))
}

/// The sending half of a [`slot`].
pub struct SlotSender<T>(weft_bench_sync::slot::Sender<T>);

/// The receiving half of a [`slot`].
pub struct SlotReceiver<T>(weft_bench_sync::slot::Receiver<T>);

impl<T: Send> SlotSender<T> {
    /// Waits until the slot is empty, then puts `value` in it and wakes a waiting
    /// receiver.
    pub fn send(&self, value: T) {
        let mut value = Some(value);
        weft::wait(poll_fn(|cx| self.0.poll_send(cx, &mut value)));
    }
}

impl<T: Send> SlotReceiver<T> {
    /// Waits until the slot is full, then takes the value out and wakes a waiting
    /// sender.
    pub fn recv(&self) -> T {
        weft::wait(poll_fn(|cx| self.0.poll_recv(cx)))
    }
}

/// A gate that keeps every waiter pending until it is opened.
pub struct Gate {
    state: Mutex<GateState>,
    /// Waiters that have registered (so are pending, or about to suspend).
    waiting: AtomicUsize,
}

struct GateState {
    open: bool,
    wakers: Vec<Waker>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Gate {
            state: Mutex::new(GateState {
                open: false,
                wakers: Vec::new(),
            }),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Waits until the gate is open.
    pub fn wait(&self) {
        // Our place in `wakers`, once registered; a later poll with another waker
        // replaces ours (only the latest poll's waker may be the one to wake).
        let mut slot: Option<usize> = None;
        weft::wait(poll_fn(|cx| {
            let mut s = lock(&self.state);
            if s.open {
                return Poll::Ready(());
            }
            match slot {
                Some(i) if s.wakers[i].will_wake(cx.waker()) => {}
                Some(i) => s.wakers[i] = cx.waker().clone(),
                None => {
                    slot = Some(s.wakers.len());
                    s.wakers.push(cx.waker().clone());
                    self.waiting.fetch_add(1, AcqRel);
                }
            }
            Poll::Pending
        }));
    }

    /// How many waiters have registered so far.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Acquire)
    }

    /// Opens the gate and wakes every waiter.
    pub fn open(&self) {
        let wakers = {
            let mut s = lock(&self.state);
            s.open = true;
            std::mem::take(&mut s.wakers)
        };
        for w in wakers {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    /// Plain threads: every wait parks the thread, so each hand-over races a
    /// real sleep on the other core.
    #[test]
    fn slot_between_threads_keeps_order() {
        const N: u64 = 20_000;
        let (tx, rx) = slot::<u64>();
        let producer = thread::spawn(move || (0..N).for_each(|i| tx.send(i)));
        for i in 0..N {
            assert_eq!(rx.recv(), i);
        }
        producer.join().unwrap();
    }

    /// The receiver moves to another thread every few values, so its waker
    /// changes while the sender may be handing over to the old one.
    #[test]
    fn slot_receiver_changing_waker_misses_nothing() {
        const N: u64 = 4_000;
        let (tx, mut rx) = slot::<u64>();
        let producer = thread::spawn(move || (0..N).for_each(|i| tx.send(i)));
        let mut next = 0;
        while next < N {
            let end = (next + 7).min(N);
            rx = thread::spawn(move || {
                (next..end).for_each(|i| assert_eq!(rx.recv(), i));
                rx
            })
            .join()
            .unwrap();
            next = end;
        }
        producer.join().unwrap();
    }

    /// Likewise for the sender, whose waker is used when the slot is full.
    #[test]
    fn slot_sender_changing_waker_misses_nothing() {
        const N: u64 = 4_000;
        let (mut tx, rx) = slot::<u64>();
        let consumer = thread::spawn(move || (0..N).map(|_| rx.recv()).collect::<Vec<_>>());
        let mut next = 0;
        while next < N {
            let end = (next + 7).min(N);
            tx = thread::spawn(move || {
                (next..end).for_each(|i| tx.send(i));
                tx
            })
            .join()
            .unwrap();
            next = end;
        }
        assert_eq!(consumer.join().unwrap(), (0..N).collect::<Vec<_>>());
    }

    /// Fibers on two workers, as in `ping_pong_2w`, with a round trip checked.
    #[test]
    fn slot_ping_pong_between_fibers_on_two_workers() {
        const N: u64 = 20_000;
        let rt = weft::Builder::new().worker_threads(2).build().unwrap();
        let (ab_tx, ab_rx) = slot::<u64>();
        let (ba_tx, ba_rx) = slot::<u64>();
        // Spawned inside `block_on`, so the fibers go to this test's runtime.
        rt.block_on(async move {
            let pong =
                weft::fiber::spawn(move || (0..N).for_each(|_| ba_tx.send(ab_rx.recv() + 1)));
            let ping = weft::fiber::spawn(move || {
                for i in 0..N {
                    ab_tx.send(i);
                    assert_eq!(ba_rx.recv(), i + 1);
                }
            });
            ping.join().unwrap();
            pong.join().unwrap();
        });
    }
}
