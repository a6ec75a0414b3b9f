//! Review of c420328: loom models of the ring's copying push and pop against each
//! other. `try_push_from` copies the value straight out of the sender's `Option` into
//! the slot and writes `None` over the `Option` without dropping; `try_pop_into`
//! copies it straight into the receiver's `MaybeUninit`. With capacity 1 every value
//! after the first reuses the slot the previous pop copied out of, so loom checks the
//! stamps order each copy against the other (its `UnsafeCell` tracking) on every lap.
//! Heap values (a `Box`): each must come out whole and once, the source left empty.

use std::mem::MaybeUninit;

use loom::thread;

use super::flavors::ring::{Pop, Ring};
use crate::base::Arc;

/// One sender pushes three boxed values through a ring of one slot (three laps of
/// that slot) while the receiver pops them into one reused `MaybeUninit`.
#[test]
fn loom_review_copies_push_from_pop_into_laps() {
    loom::model(|| {
        let ring = Arc::new(Ring::<Box<u32>>::new(1));
        let r = ring.clone();
        let sender = thread::spawn(move || {
            for v in 0..3 {
                let mut src = Some(Box::new(v));
                while !r.try_push_from(&mut src) {
                    assert_eq!(src.as_deref(), Some(&v), "a failed push keeps the value");
                    thread::yield_now();
                }
                assert!(src.is_none(), "a push leaves its source empty");
            }
        });
        let mut out = MaybeUninit::uninit();
        let mut got = Vec::new();
        while got.len() < 3 {
            match ring.try_pop_into(&mut out) {
                // SAFETY: `Value` says the pop moved a value into `out`; read once.
                Pop::Value(()) => got.push(*unsafe { out.assume_init_read() }),
                Pop::Empty | Pop::Busy => thread::yield_now(),
            }
        }
        sender.join().unwrap();
        assert_eq!(got, [0, 1, 2]);
        assert!(matches!(ring.try_pop_into(&mut out), Pop::Empty));
    });
}

/// Two senders race for the one slot with `try_push_from` while the receiver pops.
/// Every thread makes a bounded number of attempts (threads spinning on one stopped
/// mid-operation would ping-pong for ever under loom, as in the ring's own models),
/// then the main thread drains what is left: a refused push leaves its value in its
/// `Option`, an accepted one leaves `None`, and every accepted value arrives once.
#[test]
fn loom_review_copies_two_pushers_one_slot() {
    loom::model(|| {
        let ring = Arc::new(Ring::<Box<u32>>::new(1));
        let senders: Vec<_> = (0..2u32)
            .map(|v| {
                let r = ring.clone();
                thread::spawn(move || {
                    let mut src = Some(Box::new(v));
                    for _ in 0..2 {
                        if r.try_push_from(&mut src) {
                            assert!(src.is_none(), "a push leaves its source empty");
                            return true;
                        }
                        assert_eq!(src.as_deref(), Some(&v), "a refused push keeps it");
                        thread::yield_now();
                    }
                    false
                })
            })
            .collect();
        let mut out = MaybeUninit::uninit();
        let mut got = Vec::new();
        for _ in 0..3 {
            // SAFETY: `Value` says the pop moved a value into `out`; read once.
            if let Pop::Value(()) = ring.try_pop_into(&mut out) {
                got.push(*unsafe { out.assume_init_read() });
            }
            thread::yield_now();
        }
        let accepted: Vec<bool> = senders.into_iter().map(|s| s.join().unwrap()).collect();
        loop {
            match ring.try_pop_into(&mut out) {
                // SAFETY: as above.
                Pop::Value(()) => got.push(*unsafe { out.assume_init_read() }),
                Pop::Empty => break,
                Pop::Busy => panic!("Busy with no push in flight"),
            }
        }
        got.sort_unstable();
        let expected: Vec<u32> = (0..2)
            .zip(&accepted)
            .filter_map(|(v, &ok)| ok.then_some(v))
            .collect();
        assert_eq!(got, expected, "accepted values, each exactly once");
        assert!(accepted.contains(&true), "both pushes refused");
    });
}
