//! What a nursery's owner and its children share: the children still alive (with
//! the handles that cancel them), whether the nursery was cancelled, the first
//! failure, and the owner's waker.

use std::any::Any;
use std::collections::HashMap;
use std::task::{Context, Poll, Waker};

use crate::base::{Arc, Mutex};
use crate::task::AbortHandle;
use crate::Handle;

/// Why a child (or an async body) failed.
pub(crate) enum Failure<E> {
    Err(E),
    Panic(Box<dyn Any + Send>),
}

pub(crate) struct Inner<E> {
    state: Mutex<State<E>>,
    /// The runtime children run on (`None`: no runtime was found; spawning panics).
    pub(crate) handle: Option<Handle>,
}

/// One child alive.
struct Child {
    /// Arrives just after the spawn; taken by a cancellation.
    abort: Option<AbortHandle>,
    /// Nurseries that the child's future dropped unfinished (an async nursery cancelled
    /// with its task), whose children are still ending: the child counts as alive until
    /// they have (see [`Hold`]).
    holds: usize,
    /// The child's own future or closure is gone (`child_ended`).
    ended: bool,
}

/// A child alive in some nursery, as an async nursery that its future drops unfinished
/// sees it: that nursery's children, cancelled, may still be ending, and they are the
/// child's descendants, so the enclosing nursery must wait for them too. `hold` keeps
/// the child counted alive until the matching `release`. Type-erased (`dyn`): the two
/// nurseries' error types differ.
pub(crate) trait Hold: Send + Sync {
    fn hold(&self);
    fn release(&self);
}

/// The [`Hold`] of child `id` of `inner`.
pub(crate) struct ChildRef<E> {
    pub(crate) inner: Arc<Inner<E>>,
    pub(crate) id: u64,
}

impl<E: Send> Hold for ChildRef<E> {
    fn hold(&self) {
        let mut st = self.inner.state.lock();
        if let Some(c) = st.children.get_mut(&self.id) {
            c.holds += 1;
        }
    }

    fn release(&self) {
        let mut st = self.inner.state.lock();
        if let Some(c) = st.children.get_mut(&self.id) {
            c.holds -= 1;
        }
        let done = st.remove_if_done(self.id);
        drop(st);
        done.run();
    }
}

struct State<E> {
    /// The children alive, by id.
    children: HashMap<u64, Child>,
    /// Set when the owner went away unfinished (`abandon`): released when the last
    /// child has ended.
    adopter: Option<Arc<dyn Hold>>,
    next_id: u64,
    /// Set by `cancel`, by the first failure and by the deadline: children alive are
    /// cancelled, and new ones are cancelled at once.
    cancelled: bool,
    failure: Option<Failure<E>>,
    /// The deadline cancelled the nursery (before any failure).
    elapsed: bool,
    /// The body returned: an `Err` ended the nursery (it failed first), and a value
    /// with no child alive means its work is done; either way a deadline that passes
    /// before the owner looks again does not make it `Elapsed`.
    body: Body,
    /// The deadline, if any (`set_deadline`): a body that returns after it finds the
    /// nursery elapsed even if the watcher has not fired yet.
    deadline: Option<std::time::Instant>,
    /// The owner has taken the result: nothing is recorded any more.
    finished: bool,
    owner: Option<Waker>,
}

/// How far the body has gone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Body {
    Running,
    Value,
    Error,
}

/// What [`Inner::finish`] hands the owner.
pub(crate) struct Finish<E> {
    pub(crate) failure: Option<Failure<E>>,
    pub(crate) elapsed: bool,
}

impl<E> Inner<E> {
    pub(crate) fn new(handle: Option<Handle>) -> Inner<E> {
        Inner {
            state: Mutex::new(State {
                children: HashMap::new(),
                adopter: None,
                next_id: 0,
                cancelled: false,
                failure: None,
                elapsed: false,
                body: Body::Running,
                deadline: None,
                finished: false,
                owner: None,
            }),
            handle,
        }
    }

    /// Counts a child about to be spawned; `None` when the nursery is cancelled (the
    /// child is then cancelled at once: never started).
    pub(crate) fn begin_child(&self) -> Option<u64> {
        let mut st = self.state.lock();
        if st.cancelled {
            return None;
        }
        let id = st.next_id;
        st.next_id += 1;
        st.children.insert(
            id,
            Child {
                abort: None,
                holds: 0,
                ended: false,
            },
        );
        Some(id)
    }

    /// The spawned child's abort handle: kept while the child lives, used at once if
    /// the nursery was cancelled meanwhile.
    pub(crate) fn set_abort(&self, id: u64, abort: AbortHandle) {
        let mut st = self.state.lock();
        let cancelled = st.cancelled;
        match st.children.get_mut(&id) {
            Some(c) if !cancelled => c.abort = Some(abort),
            Some(_) => {
                drop(st);
                abort.abort();
            }
            // It ended already.
            None => drop(st),
        }
    }

    /// A child ended (completed, failed, or was dropped by its cancellation). Its
    /// future (or closure) is gone by now: nothing it borrowed is used any more.
    pub(crate) fn child_ended(&self, id: u64, failure: Option<Failure<E>>) {
        let mut st = self.state.lock();
        let abort = st.children.get_mut(&id).and_then(|c| {
            c.ended = true;
            c.abort.take()
        });
        let (kept, aborts, unused) = match failure {
            Some(f) => st.record(f),
            None => (false, Vec::new(), None),
        };
        let mut done = st.remove_if_done(id);
        if kept && done.owner.is_none() {
            // A failure: the async owner drops its body now.
            done.owner = st.owner.take();
        }
        drop(st);
        drop(abort);
        cancel_all(aborts);
        // A failure the nursery does not keep (it has one already) is dropped here,
        // before the owner is woken (it may borrow what the owner's frame holds), and
        // under a catch: its `Drop` (an error's, or a panic payload's) that panicked
        // skipped the wake below, and the owner, whose waker was taken already, waited
        // for ever (found in review, `tests/review_s42_locks.rs`). The hook printed it.
        crate::task::waker::ignore_panic(move || drop(unused));
        done.run();
    }

    /// The async owner goes away unfinished (its future dropped): the children are
    /// cancelled, and if some are still alive, `adopter` (the child of an enclosing
    /// nursery whose future dropped this one) stays alive until they have ended.
    pub(crate) fn abandon(&self, adopter: Option<Arc<dyn Hold>>) {
        if let Some(a) = &adopter {
            a.hold();
        }
        let mut st = self.state.lock();
        let aborts = st.cancel();
        let unused = if st.children.is_empty() {
            adopter
        } else {
            st.adopter = adopter;
            None
        };
        drop(st);
        cancel_all(aborts);
        if let Some(a) = unused {
            a.release();
        }
    }

    /// `Nursery::cancel`, and the owner's own cancellation.
    pub(crate) fn cancel(&self) {
        let mut st = self.state.lock();
        let aborts = st.cancel();
        drop(st);
        cancel_all(aborts);
    }

    /// The deadline the watcher task will `expire` at.
    pub(crate) fn set_deadline(&self, deadline: std::time::Instant) {
        self.state.lock().deadline = Some(deadline);
    }

    /// The body returned `Ok` (`ok`) or `Err` (see [`expire`](Self::expire)); called
    /// before the body's `Err` cancels the children (a cancellation of many children
    /// takes a while, and a deadline that fired meanwhile took the `Err` for late:
    /// found in review). A body that returns after the deadline is late whether or
    /// not the watcher has fired yet (it may not have: its timer is late, or it was
    /// spawned on the very worker a blocking body keeps busy; found in review).
    pub(crate) fn body_returned(&self, ok: bool) {
        let deadline = self.state.lock().deadline;
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            self.expire();
        }
        self.state.lock().body = if ok { Body::Value } else { Body::Error };
    }

    /// The deadline passed: unless the nursery already failed or finished, it is
    /// cancelled and will report that the deadline elapsed. Failed includes the body's
    /// own `Err` (it ended the nursery; children still winding down from that do not
    /// make it `Elapsed`). Finished means its work is done, whether or not its owner
    /// has looked yet: an owner polled late (a busy worker, a slow executor) or woken
    /// by its last child as the deadline fires gets the body's value, not `Elapsed`
    /// (found in review). The nursery is closed all the same: a child spawned after
    /// the deadline through a `Nursery` that escaped the async body is cancelled at
    /// once (found in review of that change: it ran unbounded, and the owner waited
    /// for it for ever).
    pub(crate) fn expire(&self) {
        let mut st = self.state.lock();
        if st.finished || st.failure.is_some() || st.body == Body::Error {
            return;
        }
        if st.body == Body::Value && st.children.is_empty() {
            st.cancelled = true;
            return;
        }
        st.elapsed = true;
        let aborts = st.cancel();
        let owner = st.owner.take();
        drop(st);
        cancel_all(aborts);
        if let Some(w) = owner {
            w.wake();
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.state.lock().cancelled
    }

    /// Whether the async body must be dropped: the nursery failed or its deadline
    /// passed (a plain `cancel` leaves the body running).
    pub(crate) fn is_stopped(&self) -> bool {
        let st = self.state.lock();
        st.failure.is_some() || st.elapsed
    }

    /// Keeps `cx`'s waker to be woken when the last child ends, a failure is
    /// recorded or the deadline passes.
    pub(crate) fn register(&self, cx: &Context<'_>) {
        // Before the guard: dropped after it (see `Prepared`).
        let mut waker = crate::task::waker::Prepared::new(cx.waker());
        let mut st = self.state.lock();
        let old = waker.store(&mut st.owner);
        drop(st);
        drop(old);
    }

    /// Ready once no child is alive (the waker is kept otherwise). Ready is final (the
    /// owner is done waiting): the nursery is then cancelled under the same lock, so
    /// a child spawned later through a `Nursery` that escaped its body (the async
    /// form's is `'static`) is cancelled at once, never run unsupervised.
    pub(crate) fn poll_done(&self, cx: &Context<'_>) -> Poll<()> {
        // Before the guard: dropped after it (see `Prepared`).
        let mut waker = crate::task::waker::Prepared::new(cx.waker());
        let mut st = self.state.lock();
        if st.children.is_empty() {
            st.cancelled = true;
            return Poll::Ready(());
        }
        let old = waker.store(&mut st.owner);
        drop(st);
        drop(old);
        Poll::Pending
    }

    /// The owner takes the outcome once every child ended; nothing is recorded after.
    pub(crate) fn finish(&self) -> Finish<E> {
        let mut st = self.state.lock();
        st.finished = true;
        let owner = st.owner.take();
        let out = Finish {
            failure: st.failure.take(),
            elapsed: st.elapsed,
        };
        drop(st);
        drop(owner);
        out
    }
}

/// What follows the end of a child, outside the lock.
struct Done {
    owner: Option<Waker>,
    adopter: Option<Arc<dyn Hold>>,
}

impl Done {
    fn run(self) {
        if let Some(w) = self.owner {
            w.wake();
        }
        if let Some(a) = self.adopter {
            a.release();
        }
    }
}

impl<E> State<E> {
    fn cancel(&mut self) -> Vec<AbortHandle> {
        self.cancelled = true;
        self.children
            .values_mut()
            .filter_map(|c| c.abort.take())
            .collect()
    }

    /// Forgets child `id` once it ended and holds nothing; when that was the last
    /// child, the owner is woken and an adopter released.
    fn remove_if_done(&mut self, id: u64) -> Done {
        let mut done = Done {
            owner: None,
            adopter: None,
        };
        if self
            .children
            .get(&id)
            .is_some_and(|c| c.ended && c.holds == 0)
        {
            self.children.remove(&id);
            if self.children.is_empty() {
                done.owner = self.owner.take();
                done.adopter = self.adopter.take();
            }
        }
        done
    }

    /// Keeps `f` if it is the first failure, cancelling the nursery. Once the nursery
    /// is cancelled (by `cancel`, the deadline, the body's `Err` or an earlier
    /// failure) an `Err` no longer counts: children wound down by a cancellation may
    /// see their partners vanish, and cancelled children are not failures. A panic
    /// still counts if it is the first failure. Returns whether it was kept, the
    /// handles to abort, and the failure if it was not kept (all to be used outside
    /// the lock).
    fn record(&mut self, f: Failure<E>) -> (bool, Vec<AbortHandle>, Option<Failure<E>>) {
        let keep = !self.finished
            && self.failure.is_none()
            && (!self.cancelled || matches!(f, Failure::Panic(_)));
        if !keep {
            return (false, Vec::new(), Some(f));
        }
        self.failure = Some(f);
        (true, self.cancel(), None)
    }
}

fn cancel_all(aborts: Vec<AbortHandle>) {
    for a in aborts {
        a.abort();
    }
}
