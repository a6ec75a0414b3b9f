//! loom models of a source's readiness word (issue 17): an event racing a reader that
//! snapshots, reads, finds `WouldBlock`, clears and waits (in the slot form of
//! `poll_read`/`poll_accept` and in the listed form of `readable()` and the blocking
//! reads), two directions waiting on one source, and the runtime's shutdown racing
//! waiters as they register. Run by `.ci/run` with the crate's other models (the
//! `loom_` filter; `loom_io` for these alone).
//!
//! The socket is a flag ("the receive queue has data") next to its [`ScheduledIo`]:
//! an event sets the flag, then sets the readiness word as the driver's dispatch does;
//! a read takes the flag or says `WouldBlock`. Readers are polled with the harness of
//! `chan`'s models, whose waker signals a loom `Notify` the thread parks on between
//! polls: a reader left `Pending` with the ready bit set and no waker stored (or a
//! waker stored that no event takes) parks for ever, and loom reports a deadlock.

use std::future::poll_fn;
use std::io;
use std::sync::atomic::Ordering::SeqCst;
use std::task::{Context, Poll};

use loom::sync::atomic::AtomicBool;
use loom::thread;

use super::readiness::{Direction, ScheduledIo, READABLE, WRITABLE};
use crate::base::loom_harness::block_on;
use crate::base::Arc;

/// A source: its kernel-side queues (data to read, room to write) and its readiness.
struct Socket {
    data: AtomicBool,
    room: AtomicBool,
    io: ScheduledIo,
}

impl Socket {
    /// A socket whose word still says readable and writable from earlier events,
    /// although the queues are drained and full (what a read and a write that
    /// emptied them leave behind).
    fn stale() -> Arc<Socket> {
        let s = Socket {
            data: AtomicBool::new(false),
            room: AtomicBool::new(false),
            io: ScheduledIo::new(),
        };
        wake_all(&s.io, READABLE | WRITABLE);
        Arc::new(s)
    }

    /// The kernel's side of an event: the queue changes, then the driver reads the
    /// event and dispatches it.
    fn event(&self, dir: Direction) {
        let (flag, bit) = self.side(dir);
        // A read-modify-write, not a store: loom 0.7 may let a plain store that no
        // happens-before orders after the reader's swap be overwritten by it (its own
        // thread then loads the older value), which no real memory does.
        flag.swap(true, SeqCst);
        wake_all(&self.io, bit);
    }

    fn side(&self, dir: Direction) -> (&AtomicBool, u64) {
        match dir {
            Direction::Read => (&self.data, READABLE),
            Direction::Write => (&self.room, WRITABLE),
        }
    }

    /// The system call: takes what the queue has, or `WouldBlock`.
    fn syscall(&self, dir: Direction) -> io::Result<()> {
        if self.side(dir).0.swap(false, SeqCst) {
            Ok(())
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }

    /// `Evented::poll_io`: the direction's waker slot.
    fn poll_io(&self, cx: &mut Context<'_>, dir: Direction) -> Poll<io::Result<()>> {
        loop {
            let ev = match self.io.poll_ready(cx, dir) {
                Poll::Ready(Ok(ev)) => ev,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            match self.syscall(dir) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.io.clear_readiness(ev),
                r => return Poll::Ready(r),
            }
        }
    }

    /// `Evented::blocking_io` with `Evented::ready`: snapshot, try if the word says
    /// ready, clear on `WouldBlock`, then wait as one of the listed waiters.
    fn blocking_io(&self, dir: Direction) -> io::Result<()> {
        loop {
            let ev = self.io.snapshot(dir)?;
            if ev.ready != 0 {
                match self.syscall(dir) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.io.clear_readiness(ev),
                    r => return r,
                }
            }
            let mut id = 0;
            let r = block_on(poll_fn(|cx| self.io.poll_ready_listed(cx, dir, &mut id)));
            // `Ready`'s drop.
            self.io.forget(&mut id);
            r?;
        }
    }
}

fn wake_all(io: &ScheduledIo, ready: u64) {
    let mut wake = Vec::new();
    io.set_readiness(ready, &mut wake);
    for w in wake {
        w.wake();
    }
}

/// An event races a reader (the slot form) that may find the word still readable from
/// before, read `WouldBlock`, clear and wait: the tick keeps an event that came during
/// the read from being cleared, and the waker stored under the lock is found by an
/// event that came after. The reader always gets the data; nothing is left behind.
#[test]
fn loom_io_readiness_event_vs_clear() {
    loom::model(|| {
        let s = Socket::stale();
        let s2 = s.clone();
        let t = thread::spawn(move || s2.event(Direction::Read));
        let r = block_on(poll_fn(|cx| s.poll_io(cx, Direction::Read)));
        assert!(r.is_ok(), "{r:?}");
        t.join().unwrap();
        assert!(!s.data.load(SeqCst), "the data was read once");
    });
}

/// The same race for a listed waiter (`readable()`, `accept()`, the blocking reads of
/// fibers and threads): it always gets the data and its list entry is gone after.
#[test]
fn loom_io_readiness_event_vs_clear_listed() {
    loom::model(|| {
        let s = Socket::stale();
        let s2 = s.clone();
        let t = thread::spawn(move || s2.event(Direction::Read));
        let r = s.blocking_io(Direction::Read);
        assert!(r.is_ok(), "{r:?}");
        t.join().unwrap();
        assert!(!s.data.load(SeqCst));
        assert_eq!(s.io.census().2, 0, "a listed waiter stayed behind");
    });
}

/// A reader in the slot form and a writer in the listed form wait on one source while
/// a write event and then a read event arrive: neither event's clear or wake is lost
/// to the other direction.
#[test]
fn loom_io_readiness_two_directions() {
    loom::model(|| {
        let s = Socket::stale();
        let r = s.clone();
        let reader = thread::spawn(move || block_on(poll_fn(|cx| r.poll_io(cx, Direction::Read))));
        let w = s.clone();
        let writer = thread::spawn(move || w.blocking_io(Direction::Write));
        s.event(Direction::Write);
        s.event(Direction::Read);
        assert!(reader.join().unwrap().is_ok());
        assert!(writer.join().unwrap().is_ok());
        assert!(!s.data.load(SeqCst) && !s.room.load(SeqCst));
        assert_eq!(s.io.census().2, 0);
    });
}

/// The runtime shuts down while a slot reader and a listed writer register (the
/// source never becomes ready): each gets the shutdown error, none waits for ever, and
/// a later wait fails at once.
#[test]
fn loom_io_shutdown_vs_registering_waiter() {
    loom::model(|| {
        let s = Socket::stale();
        let r = s.clone();
        let reader = thread::spawn(move || block_on(poll_fn(|cx| r.poll_io(cx, Direction::Read))));
        let w = s.clone();
        let writer = thread::spawn(move || w.blocking_io(Direction::Write));
        s.io.shutdown();
        let r = reader.join().unwrap();
        let w = writer.join().unwrap();
        assert!(r.is_err() && w.is_err(), "{r:?} {w:?}");
        assert!(s.io.snapshot(Direction::Read).is_err());
        assert!(s.blocking_io(Direction::Read).is_err());
        assert_eq!(s.io.census().2, 0);
    });
}

/// An event and the shutdown race one waiter: it ends with the data or the error,
/// never waits for ever.
#[test]
fn loom_io_shutdown_vs_event() {
    loom::model(|| {
        let s = Socket::stale();
        let e = s.clone();
        let t = thread::spawn(move || e.event(Direction::Read));
        let r = s.clone();
        let reader = thread::spawn(move || r.blocking_io(Direction::Read));
        s.io.shutdown();
        t.join().unwrap();
        let r = reader.join().unwrap();
        if r.is_ok() {
            assert!(!s.data.load(SeqCst), "read, but the data is still there");
        }
    });
}

/// Two parking workers offer to hold the timer driver at once: at most one holds it at
/// a time, one of them always gets it, and the hold word (what sysmon compares between
/// two looks) is odd exactly while it is held and moves at every take and release.
#[test]
fn loom_driver_hold_word() {
    loom::model(|| {
        let driver = Arc::new(super::timer::Driver::new());
        let holding = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let offer = |driver: Arc<super::timer::Driver>,
                     holding: Arc<loom::sync::atomic::AtomicUsize>| {
            thread::spawn(move || {
                let parker = Arc::new(crate::base::park::Parker::new());
                if !driver.try_acquire(&parker) {
                    return false;
                }
                assert_eq!(holding.fetch_add(1, SeqCst), 0, "two holders");
                assert_eq!(driver.hold_word() & 1, 1, "held, the word is odd");
                holding.fetch_sub(1, SeqCst);
                driver.release();
                true
            })
        };
        let a = offer(driver.clone(), holding.clone());
        let b = offer(driver.clone(), holding.clone());
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert!(a || b, "a free driver refused both");
        let takes = usize::from(a) + usize::from(b);
        assert_eq!(
            driver.hold_word(),
            2 * takes,
            "a take and a release each move it"
        );
    });
}
