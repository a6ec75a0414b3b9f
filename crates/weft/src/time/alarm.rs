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
            // The old entry's waker goes here, on the waiter's thread: left in the slot,
            // it would be dropped by the alarm thread, where a waker whose drop panics
            // ended that thread (found in review).
            let old = self.take_waker();
            drop(old);
            self.file(deadline, cx.waker().clone());
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

    /// A fresh slot per entry: the entry filed for the old deadline is then held by the
    /// list alone, so the alarm thread forgets it at its next pass (which `arm`
    /// triggers) instead of keeping it until that deadline (a sleep reset again and
    /// again piled up one entry per reset). The waker goes in before the entry is
    /// filed: the alarm thread may fire the entry at once.
    fn file(&mut self, deadline: Instant, waker: Waker) {
        self.slot = Arc::new(Mutex::new(Some(waker)));
        self.armed = Some(deadline);
        arm(deadline, self.slot.clone());
    }

    fn take_waker(&self) -> Option<Waker> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Moves a pending alarm to `deadline` with the waker it has (a sleep reset by a
    /// thread other than its waiter's). One that fired already woke its waiter, whose
    /// next poll files the new deadline.
    pub(crate) fn reschedule(&mut self, deadline: Instant) {
        if self.armed.is_none_or(|d| d == deadline) {
            return;
        }
        if let Some(w) = self.take_waker() {
            self.file(deadline, w);
        }
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
        drop(entries);
        for slot in gone {
            // Normally empty (a waiter takes its waker with it), but guarded all the
            // same: a panic here would end the process's only alarm thread.
            crate::task::waker::ignore_panic(move || drop(slot));
        }
        for slot in due {
            let w = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(w) = w {
                // Guarded: a panic here would end the process's only alarm thread, and
                // every later off-runtime timer and outliving sleep would hang.
                crate::driver::wake_guarded(w);
            }
        }
        entries = a.entries.lock().unwrap_or_else(|e| e.into_inner());
        // The earliest deadline as the list stands now, under the lock the wait lets
        // go of: an alarm armed while the list was unlocked (above) notified nobody,
        // and a deadline taken before would sleep through it (found as a rare hang:
        // three short sleeps beside one an hour away slept for the hour).
        let next = entries.iter().map(|(d, _)| *d).min();
        entries = match next {
            None => a.changed.wait(entries).unwrap_or_else(|e| e.into_inner()),
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::ThreadAlarm;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::Arc;
    use std::task::{Context, Wake, Waker};
    use std::time::{Duration, Instant};

    /// Records its wake and unparks the waiting thread.
    struct Flag(AtomicBool, std::thread::Thread);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, SeqCst);
            self.1.unpark();
        }
    }

    /// Alarms armed while the alarm thread wakes others (its list unlocked meanwhile)
    /// fire at their deadlines. The thread slept until the earliest deadline it had
    /// seen before it let go of the list, here one an hour away, and the notification
    /// of an alarm armed in between came while nobody waited (found as a rare hang of
    /// `review_s19_timers::runtimes_dropped_in_a_loop`: three sleeps of a dropped
    /// runtime beside a far one).
    #[test]
    fn alarms_armed_while_others_fire_are_not_slept_through() {
        let mut far = ThreadAlarm::default();
        let mut cx = Context::from_waker(Waker::noop());
        assert!(far
            .poll(Instant::now() + Duration::from_secs(3600), &mut cx)
            .is_pending());
        let threads: Vec<_> = (0..4u64)
            .map(|k| {
                std::thread::spawn(move || {
                    for i in 0..300u64 {
                        let flag = Arc::new(Flag(AtomicBool::new(false), std::thread::current()));
                        let waker = Waker::from(flag.clone());
                        let mut cx = Context::from_waker(&waker);
                        let mut alarm = ThreadAlarm::default();
                        let deadline =
                            Instant::now() + Duration::from_micros(100 + (k * 37 + i * 53) % 400);
                        if alarm.poll(deadline, &mut cx).is_ready() {
                            continue;
                        }
                        let start = Instant::now();
                        while !flag.0.load(SeqCst) {
                            assert!(
                                start.elapsed() < Duration::from_secs(5),
                                "an alarm {:?} away was not woken within 5 s (thread {k}, round {i})",
                                deadline.saturating_duration_since(start)
                            );
                            std::thread::park_timeout(Duration::from_millis(100));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(far);
    }
}
