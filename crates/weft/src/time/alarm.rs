//! The process's alarm thread: wakes a waker at a deadline where no runtime's wheel
//! can, for a timer receive made outside any runtime (`chan::after` and friends) and
//! for a sleep whose runtime has shut down (nothing fires its wheel any more).

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

type Slot = Arc<Mutex<Option<Waker>>>;

/// One waiter's alarm: pending until its deadline, its latest waker woken then.
#[derive(Default)]
pub(crate) struct ThreadAlarm {
    /// The waker to wake, updated on every poll; the alarm thread forgets an entry
    /// whose slot nobody else holds any more.
    slot: Slot,
    armed: Option<Instant>,
}

impl ThreadAlarm {
    /// Pending until `deadline`, with `cx` woken then.
    pub(crate) fn poll(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= deadline {
            return Poll::Ready(());
        }
        if self.armed != Some(deadline) {
            // A fresh slot per entry: the entry filed for the old deadline is then held
            // by the list alone, so the alarm thread forgets it at its next pass (which
            // `arm` triggers) instead of keeping it, and the waker in it, until that
            // deadline (a sleep reset again and again piled up one entry per reset).
            // The waker goes in before the entry is filed: the alarm thread may fire
            // the entry at once.
            self.slot = Arc::new(Mutex::new(Some(cx.waker().clone())));
            self.armed = Some(deadline);
            arm(deadline, self.slot.clone());
        } else {
            // Cloned before the lock, the old one dropped after it: a waker's `clone` and
            // `drop` are its owner's code.
            let new = Some(cx.waker().clone());
            let old = std::mem::replace(
                &mut *self.slot.lock().unwrap_or_else(|e| e.into_inner()),
                new,
            );
            drop(old);
        }
        Poll::Pending
    }
}

impl Drop for ThreadAlarm {
    fn drop(&mut self) {
        // The entry stays on the list until the alarm thread's next pass; the waker
        // (and whatever task it keeps alive) goes now.
        let w = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(w);
    }
}

struct Alarms {
    entries: Mutex<Vec<(Instant, Slot)>>,
    changed: Condvar,
}

fn alarms() -> &'static Alarms {
    static ALARMS: OnceLock<&'static Alarms> = OnceLock::new();
    ALARMS.get_or_init(|| {
        let a: &'static Alarms = Box::leak(Box::new(Alarms {
            entries: Mutex::new(Vec::new()),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("weft-alarms".into())
            .spawn(move || run(a))
            .expect("weft: cannot start the alarm thread");
        a
    })
}

fn arm(deadline: Instant, slot: Slot) {
    let a = alarms();
    a.entries
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((deadline, slot));
    a.changed.notify_one();
}

fn run(a: &'static Alarms) {
    let mut entries = a.entries.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        // Entries whose waiter is gone (only this list holds the slot) go too, dropped
        // after the lock: a waker left in such a slot is dropped with it, and a waker's
        // `drop` is its owner's code (it may arm a timer here).
        let mut gone = Vec::new();
        entries.retain(|(d, slot)| {
            if Arc::strong_count(slot) == 1 {
                gone.push(slot.clone());
                false
            } else if *d <= now {
                due.push(slot.clone());
                false
            } else {
                true
            }
        });
        let next = entries.iter().map(|(d, _)| *d).min();
        drop(entries);
        drop(gone);
        for slot in due {
            let w = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(w) = w {
                // Guarded: a panic here would end the process's only alarm thread, and
                // every later off-runtime timer and outliving sleep would hang.
                crate::driver::wake_guarded(w);
            }
        }
        entries = a.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries = match next {
            None if entries.is_empty() => {
                a.changed.wait(entries).unwrap_or_else(|e| e.into_inner())
            }
            None => entries,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                a.changed
                    .wait_timeout(entries, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
        };
    }
}
