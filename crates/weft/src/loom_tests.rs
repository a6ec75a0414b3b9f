//! loom models of the lock-free pieces and handshakes. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p weft --release --lib loom_` (see `.ci/run`).
//!
//! (Long: every loom model of the crate, in one file so that `.ci/run`'s `loom_` filter
//! finds them all.)

use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::SeqCst;
use std::task::{Context, Poll};

use loom::sync::atomic::AtomicUsize;
use loom::sync::Mutex;
use loom::thread;

use crate::base::loom_harness::model_bound2;
use crate::base::park::Parker;
use crate::base::Arc;
use crate::scheduler::inject::Inject;
use crate::scheduler::queue;
use crate::scheduler::worker::Core;
use crate::scheduler::Shared;
use crate::task::header::Header;
use crate::task::raw::{Notified, Schedule};
use crate::task::state::{Idle, Run, State};
use crate::task::{new_task, JoinHandle};

/// A pool of `n` workers without a runtime around it, and each worker's private ends.
fn new_pool(n: usize) -> (Arc<Shared>, Vec<crate::scheduler::WorkerParts>) {
    Shared::new(
        n,
        crate::Pool::Default,
        std::sync::Weak::<()>::new(),
        Arc::new(crate::driver::timer::Driver::new()),
    )
}

/// A scheduler that just records what it is asked to queue.
#[derive(Default)]
struct Recorder {
    queued: Mutex<Vec<Notified>>,
    released: AtomicUsize,
}

impl Schedule for Arc<Recorder> {
    fn schedule(&self, task: Notified) {
        self.queued.lock().unwrap().push(task);
    }
    fn yield_now(&self, task: Notified) {
        self.queued.lock().unwrap().push(task);
    }
    fn release(&self, _task: NonNull<Header>) -> bool {
        self.released.fetch_add(1, SeqCst);
        // Not linked in a list: the spawner drops the owned reference itself.
        false
    }
}

/// A future that is ready the second time it is polled, counting its drops.
struct TwoPolls {
    polled: bool,
    drops: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Future for TwoPolls {
    type Output = u32;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        if self.polled {
            Poll::Ready(7)
        } else {
            self.polled = true;
            // Hand a waker to "the outside world": the recorder's test wakes it.
            WAKER.with(|w| *w.borrow_mut() = Some(cx.waker().clone()));
            Poll::Pending
        }
    }
}

impl Drop for TwoPolls {
    fn drop(&mut self) {
        self.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

loom::thread_local! {
    static WAKER: std::cell::RefCell<Option<std::task::Waker>> = std::cell::RefCell::new(None);
}

fn spawn_on(
    rec: &Arc<Recorder>,
    drops: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> (Notified, JoinHandle<u32>, NonNull<Header>) {
    let (task, handle) = new_task(
        TwoPolls {
            polled: false,
            drops: drops.clone(),
        },
        rec.clone(),
    );
    let ptr = NonNull::from(task.header());
    (task, handle, ptr)
}

/// A wake racing with the end of a poll: the task is queued again exactly once.
#[test]
fn loom_state_wake_vs_idle() {
    loom::model(|| {
        let state = Arc::new(State::new());
        assert_eq!(state.transition_to_running(), Run::Poll);
        let s2 = state.clone();
        let waker = thread::spawn(move || s2.transition_to_scheduled());
        let idle = state.transition_to_idle();
        let waker_enqueued = waker.join().unwrap();
        let rescheduled = idle == Idle::Reschedule;
        assert!(
            waker_enqueued ^ rescheduled,
            "exactly one side must enqueue (waker {waker_enqueued}, reschedule {rescheduled})"
        );
        assert!(state.load().is_scheduled());
    });
}

/// Two concurrent wakers of an idle task: exactly one enqueues.
#[test]
fn loom_state_two_wakers() {
    loom::model(|| {
        let state = Arc::new(State::new());
        state.transition_to_running();
        state.transition_to_idle();
        let s2 = state.clone();
        let t = thread::spawn(move || s2.transition_to_scheduled());
        let a = state.transition_to_scheduled();
        let b = t.join().unwrap();
        assert!(a ^ b);
    });
}

/// A full task: polled on one thread while a waker fires on another and the join
/// handle is dropped on a third. The future is dropped once, the task freed once (loom
/// checks the allocation through its leak tracking of the scheduler `Arc`).
#[test]
fn loom_task_wake_poll_drop_handle() {
    loom::model(|| {
        let rec = Arc::new(Recorder::default());
        let drops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (task, handle, ptr) = spawn_on(&rec, &drops);
        task.run(); // first poll: stores a waker, returns Pending
        let waker = WAKER.with(|w| w.borrow_mut().take()).unwrap();
        let w = thread::spawn(move || waker.wake());
        let h = thread::spawn(move || drop(handle));
        w.join().unwrap();
        h.join().unwrap();
        // Run whatever got queued until the task completes.
        loop {
            let next = rec.queued.lock().unwrap().pop();
            match next {
                Some(t) => t.run(),
                None => break,
            }
        }
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(rec.released.load(SeqCst), 1);
        // The spawner's owned-list reference (never linked here).
        // SAFETY: that reference is still ours.
        unsafe { crate::task::raw::drop_reference(ptr) };
    });
}

/// Abort racing a wake and the poll: the task ends cancelled or completed, never both,
/// and its future is dropped exactly once.
#[test]
fn loom_task_abort_vs_wake() {
    loom::model(|| {
        let rec = Arc::new(Recorder::default());
        let drops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (task, handle, ptr) = spawn_on(&rec, &drops);
        task.run();
        let waker = WAKER.with(|w| w.borrow_mut().take()).unwrap();
        let abort = handle.abort_handle();
        let a = thread::spawn(move || abort.abort());
        waker.wake();
        a.join().unwrap();
        loop {
            let next = rec.queued.lock().unwrap().pop();
            match next {
                Some(t) => t.run(),
                None => break,
            }
        }
        assert!(handle.is_finished());
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 1);
        drop(handle);
        // SAFETY: the spawner's owned-list reference is still ours.
        unsafe { crate::task::raw::drop_reference(ptr) };
    });
}

/// The join waker handed over against completion: a handle awaited on one thread
/// (it registers its waker and parks) while the task completes on another, and the
/// spawner's last reference goes on that other thread meanwhile. The handle is woken
/// (a lost wake parks its thread for ever: loom reports a deadlock), and whichever
/// side frees the cell takes the waker out of its slot ordered after the handle's
/// write (loom checks the slot's accesses).
#[test]
fn loom_task_join_waker_vs_complete() {
    loom::model(|| {
        let rec = Arc::new(Recorder::default());
        let (task, handle) = new_task(async { 7u32 }, rec.clone());
        let ptr = NonNull::from(task.header());
        let joiner = thread::spawn(move || crate::base::loom_harness::block_on(handle));
        task.run();
        // SAFETY: the spawner's owned-list reference (never linked here) is ours.
        unsafe { crate::task::raw::drop_reference(ptr) };
        assert_eq!(joiner.join().unwrap().unwrap(), 7);
    });
}

/// A rendezvous commit (`waitlist::Node::commit`: a receiver takes a parked send's
/// value) racing the send's task being aborted and polled: the receiver commits only
/// if the harness will poll the task (so its send returns `Ok`), and it does not
/// commit once the harness decided to cancel. After a commit, the owner's unshield
/// makes the cancellation take effect at the task's next wait.
#[test]
fn loom_rendezvous_commit_vs_cancel() {
    loom::model(|| {
        let state = Arc::new(State::new());
        assert_eq!(state.transition_to_running(), Run::Poll);
        // The send is parked: its node is on the list, the task IDLE.
        assert_eq!(state.transition_to_idle(), Idle::Idle);
        let s2 = state.clone();
        let receiver = thread::spawn(move || s2.add_shield_unless_cancelled());
        // `abort()` on an IDLE task schedules it; a worker then polls it.
        assert_eq!(
            state.transition_to_cancelled(),
            crate::task::state::Abort::Schedule
        );
        let verdict = state.transition_to_running();
        let committed = receiver.join().unwrap();
        match committed {
            Some(true) => {
                assert_eq!(verdict, Run::Poll, "committed, yet the send was cancelled");
                // The send completes `Ok` and lowers the shield: the task is notified,
                // so the end of this poll queues it again, and that poll cancels it.
                assert!(!state.remove_shield());
                assert_eq!(state.transition_to_idle(), Idle::Reschedule);
                assert_eq!(state.transition_to_running(), Run::Cancel);
            }
            None => assert_eq!(verdict, Run::Cancel, "refused, yet the task goes on"),
            Some(false) => unreachable!("no shield was deep"),
        }
    });
}

fn dummy_task(rec: &Arc<Recorder>) -> Notified {
    let (task, handle) = new_task(async {}, rec.clone());
    drop(handle);
    // Give the owned-list reference back so dropping the `Notified` frees the task.
    // SAFETY: the spawner owns that reference.
    unsafe { crate::task::raw::drop_reference(NonNull::from(task.header())) };
    task
}

/// Owner pushes (overflowing into the injection queue) and pops while a thief steals:
/// every task comes out exactly once.
#[test]
fn loom_local_queue_push_pop_steal() {
    loom::model(|| {
        let rec = Arc::new(Recorder::default());
        let inject = Arc::new(Inject::new());
        let (local, steal) = queue::local();
        let (thief_local, _thief_steal) = queue::local();
        let th = thread::spawn(move || {
            let mut n = 0;
            if let Some((t, count)) = steal.steal_into(&thief_local) {
                drop(t);
                n += count;
                while let Some(t) = thief_local.pop() {
                    drop(t);
                }
            }
            n
        });
        let total = queue::CAPACITY + 1;
        for _ in 0..total {
            local.push_back(dummy_task(&rec), &inject);
        }
        let mut seen = 0;
        while let Some(t) = local.pop() {
            drop(t);
            seen += 1;
        }
        while let Some(t) = inject.pop() {
            drop(t);
            seen += 1;
        }
        seen += th.join().unwrap();
        assert_eq!(seen, total);
    });
}

/// Two thieves and the owner's pops on one queue.
#[test]
fn loom_local_queue_two_thieves() {
    loom::model(|| {
        let rec = Arc::new(Recorder::default());
        let inject = Inject::new();
        let (local, steal) = queue::local();
        for _ in 0..3 {
            local.push_back(dummy_task(&rec), &inject);
        }
        let thieves: Vec<_> = (0..2)
            .map(|_| {
                let steal = steal.clone();
                thread::spawn(move || {
                    let (dst, _) = queue::local();
                    let mut n = 0;
                    if let Some((t, count)) = steal.steal_into(&dst) {
                        drop(t);
                        n += count;
                        while let Some(t) = dst.pop() {
                            drop(t);
                        }
                    }
                    n
                })
            })
            .collect();
        let mut seen = 0;
        if let Some(t) = local.pop() {
            drop(t);
            seen += 1;
        }
        for th in thieves {
            seen += th.join().unwrap();
        }
        while let Some(t) = local.pop() {
            drop(t);
            seen += 1;
        }
        assert_eq!(seen, 3);
    });
}

/// Concurrent pushes and a batch pop on the injection queue; closing returns the rest.
#[test]
fn loom_inject_push_pop() {
    loom::model(|| {
        let rec = Arc::new(Recorder::default());
        let inject = Arc::new(Inject::new());
        let i2 = inject.clone();
        let r2 = rec.clone();
        let p = thread::spawn(move || {
            i2.push(dummy_task(&r2)).ok().unwrap();
            i2.push(dummy_task(&r2)).ok().unwrap();
        });
        let mut got = inject.pop_batch(2, drop);
        p.join().unwrap();
        got += inject.close().len();
        assert_eq!(got, 2);
        assert!(inject.is_empty());
        assert!(
            inject.push(dummy_task(&rec)).is_err(),
            "closed queue refuses"
        );
    });
}

/// `park` after `tries` looks for a token (`take_token`, as a worker's spin before it
/// sleeps does) against a concurrent unpark: the token is taken by a look or by the
/// park, never lost (a lost one shows as a loom deadlock).
fn model_park_vs_unpark(tries: usize) {
    loom::model(move || {
        let p = Arc::new(Parker::new());
        let p2 = p.clone();
        let t = thread::spawn(move || p2.unpark());
        if !(0..tries).any(|_| p.take_token()) {
            p.park();
        }
        t.join().unwrap();
    });
}

/// unpark racing park: park always returns.
#[test]
fn loom_parker() {
    model_park_vs_unpark(0);
}

/// A worker's spin before it sleeps, then its park, against a concurrent unpark.
#[test]
fn loom_parker_spin_then_park() {
    model_park_vs_unpark(2);
}

/// The sleep handshake against a concurrent insert from outside the pool: the real
/// worker's park transition either sees the task or is woken for it. A lost wakeup
/// shows as a loom deadlock.
#[test]
fn loom_park_vs_remote_insert() {
    loom::model(|| {
        let (shared, mut locals) = new_pool(1);
        let rec = Arc::new(Recorder::default());
        let core = Core::new(0, shared.clone(), locals.pop().unwrap());
        let s2 = shared.clone();
        let task = dummy_task(&rec);
        let producer = thread::spawn(move || s2.schedule_remote(task));
        // The worker ran out of work and goes to sleep.
        let mut found = core.next_task_for_test();
        if found.is_none() {
            core.park_for_test();
            found = core.next_task_for_test();
        }
        producer.join().unwrap();
        if found.is_none() {
            // The park saw the queue empty and the producer's wake came after it; the
            // task must still be there for the worker's next search.
            found = core.next_task_for_test();
        }
        assert!(found.is_some(), "task stranded");
        drop(found);
        core.finish_for_test();
    });
}

/// A fiber handed, before it started, to a worker that is going to sleep
/// (`Shared::push_handed`, from `FiberFuture::hand_off` on another worker): the park
/// transition either sees it in the worker's `handed` queue or is woken for it. A lost
/// wakeup shows as a loom deadlock; a fiber left in the queue fails the assert.
#[test]
fn loom_park_vs_handed_fiber() {
    loom::model(|| {
        let (shared, mut locals) = new_pool(1);
        let rec = Arc::new(Recorder::default());
        let core = Core::new(0, shared.clone(), locals.pop().unwrap());
        let task = dummy_task(&rec);
        task.header()
            .home
            .store(crate::task::header::HANDED, SeqCst);
        let s2 = shared.clone();
        let producer = thread::spawn(move || s2.schedule_remote(task));
        let mut found = core.next_task_for_test();
        while found.is_none() {
            // Returns at once if the park's re-check sees the fiber; otherwise only the
            // producer's wake ends it.
            core.park_for_test();
            found = core.next_task_for_test();
        }
        producer.join().unwrap();
        assert!(shared.inject.is_empty(), "the fiber went elsewhere");
        assert!(shared.remotes[0].handed.is_empty());
        drop(found);
        core.finish_for_test();
    });
}

/// Two workers of one pool sleep while one insert arrives: someone finds it. Each
/// worker searches and parks until the task has been taken; the finder then wakes the
/// other so the model can end. A lost wakeup leaves both asleep: a loom deadlock.
#[test]
fn loom_two_workers_one_insert() {
    model_bound2(|| {
        let (shared, mut locals) = new_pool(2);
        let rec = Arc::new(Recorder::default());
        let l1 = locals.pop().unwrap();
        let l0 = locals.pop().unwrap();
        let got = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = [(0, l0), (1, l1)]
            .into_iter()
            .map(|(i, local)| {
                let shared = shared.clone();
                let got = got.clone();
                thread::spawn(move || {
                    let core = Core::new(i, shared.clone(), local);
                    while got.load(SeqCst) == 0 {
                        if let Some(t) = core.next_task_for_test() {
                            drop(t);
                            got.fetch_add(1, SeqCst);
                            shared.remotes[1 - i].parker.unpark();
                            break;
                        }
                        core.park_until_for_test(&|| got.load(SeqCst) != 0);
                    }
                    core.finish_for_test();
                })
            })
            .collect();
        shared.schedule_remote(dummy_task(&rec));
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(got.load(SeqCst), 1);
        assert!(shared.inject.is_empty());
    });
}

/// A worker with a stale unpark token races a producer that claims it: the searching
/// count must never go below zero (the SPIN model's `CHECK_SEARCHING_WRAP`; before the
/// claimed worker counted itself, this wrapped to `usize::MAX` for a moment).
#[test]
fn loom_claim_with_stale_token_keeps_searching_count_sane() {
    loom::model(|| {
        let (shared, mut locals) = new_pool(1);
        let rec = Arc::new(Recorder::default());
        let core = Core::new(0, shared.clone(), locals.pop().unwrap());
        // A stale token: the next park returns at once.
        shared.remotes[0].parker.unpark();
        let s2 = shared.clone();
        let task = dummy_task(&rec);
        let producer = thread::spawn(move || s2.schedule_remote(task));
        let mut found = core.next_task_for_test();
        while found.is_none() {
            assert!(shared.idle.num_searching() <= 1, "searching count wrapped");
            core.park_for_test();
            found = core.next_task_for_test();
        }
        assert!(shared.idle.num_searching() <= 1, "searching count wrapped");
        producer.join().unwrap();
        drop(found);
        core.finish_for_test();
        assert_eq!(shared.idle.num_searching(), 0);
    });
}

/// Spec 004's race on the real code: a pool of two workers, one of which is going to
/// sleep, while a worker of another pool inserts into this pool and a worker of this
/// pool queues a task locally. Both tasks are run; a stranded task (both workers
/// asleep with work queued) is a loom deadlock.
#[test]
fn loom_cross_pool_and_own_pool_inserts_vs_sleep() {
    model_bound2(|| {
        let (pool_a, mut locals) = new_pool(2);
        let rec = Arc::new(Recorder::default());
        let l1 = locals.pop().unwrap();
        let l0 = locals.pop().unwrap();
        let got = Arc::new(AtomicUsize::new(0));
        let own_task = dummy_task(&rec);
        let workers: Vec<_> = [(0, l0, None), (1, l1, Some(own_task))]
            .into_iter()
            .map(|(i, local, spawn)| {
                let shared = pool_a.clone();
                let got = got.clone();
                thread::spawn(move || {
                    let core = Core::new(i, shared.clone(), local);
                    if let Some(t) = spawn {
                        core.push_for_test(t);
                    }
                    while got.load(SeqCst) < 2 {
                        if let Some(t) = core.next_task_for_test() {
                            drop(t);
                            if got.fetch_add(1, SeqCst) == 1 {
                                shared.remotes[1 - i].parker.unpark();
                            }
                            continue;
                        }
                        core.park_until_for_test(&|| got.load(SeqCst) >= 2);
                    }
                    core.finish_for_test();
                })
            })
            .collect();
        // A worker of another pool inserting into pool A.
        pool_a.schedule_remote(dummy_task(&rec));
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(got.load(SeqCst), 2);
    });
}

/// A pool of one base worker and one temporary slot (keep-alive zero: the temporary
/// worker tries to retire at its first park), the temporary worker already started.
fn new_pool_with_temp() -> (
    Arc<Shared>,
    crate::scheduler::WorkerParts,
    crate::scheduler::WorkerParts,
) {
    let slots = crate::scheduler::Slots {
        extra: 1,
        keep_alive: std::time::Duration::ZERO,
        doorbell: Arc::new(crate::scheduler::idle::Doorbell::disabled()),
        lifo_rescue: false,
    };
    let (shared, mut locals) = Shared::with_slots(
        1,
        slots,
        crate::Pool::Default,
        std::sync::Weak::<()>::new(),
        Arc::new(crate::driver::timer::Driver::new()),
    );
    let (i, temp) = shared.take_slot().unwrap();
    assert_eq!(i, 1);
    (shared, locals.pop().unwrap(), temp)
}

/// The retire-vs-wake race of `scheduler::idle` ("Slots that come and go") on the real
/// code: the base worker is asleep (its parked bit set; no thread needed, a claim only
/// leaves its parker a token) holding the timer driver, the temporary worker parks and tries to retire, and a
/// producer inserts one task, which may claim either worker. Afterwards the task must
/// have been run by the temporary worker, or be queued with the base worker claimed
/// (woken) for it, and the searching count must match the claims. The bug this
/// catches: a temporary worker that goes on as if unclaimed although the producer
/// claimed it (checked by injecting it: the count is left one too high).
#[test]
fn loom_retire_vs_remote_insert() {
    loom::model(|| {
        let (shared, _base, temp) = new_pool_with_temp();
        let rec = Arc::new(Recorder::default());
        shared.idle.publish_parked(0);
        // It sleeps holding the timer driver, so producers claim it last: the insert
        // prefers the temporary worker, which is the race under test.
        assert!(shared.time.try_acquire(&shared.remotes[0].parker));
        shared.idle.set_driver_holder(Some(0));
        let s2 = shared.clone();
        let worker = thread::spawn(move || {
            let core = Core::new(1, s2.clone(), temp);
            core.enter_loop_for_test();
            // Each park returns at once (keep-alive zero), so this ends within a few
            // rounds: the worker finds the task or retires.
            for _ in 0..3 {
                if let Some(t) = core.next_task_for_test() {
                    drop(t);
                    core.finish_for_test();
                    return (true, false);
                }
                core.park_for_test();
                if core.retiring_for_test() {
                    core.retire_for_test();
                    return (false, true);
                }
            }
            core.finish_for_test();
            (false, false)
        });
        shared.schedule_remote(dummy_task(&rec));
        let (ran, retired) = worker.join().unwrap();
        // A claim counts the claimed worker as a searcher until it stops searching: the
        // (fake) base worker never does, the temporary one must have. A temporary worker
        // that ignored a claim would leave the count at one too many, and every later
        // insert would skip its wake for a searcher that does not exist.
        assert_eq!(
            shared.idle.num_searching(),
            usize::from(!shared.idle.is_parked(0)),
            "searching count out of step"
        );
        if ran {
            assert!(shared.inject.is_empty());
        } else {
            assert!(
                retired,
                "the temporary worker neither ran the task nor retired"
            );
            assert!(
                !shared.idle.is_parked(0),
                "retired while the task waited and the base worker slept"
            );
            assert!(
                !shared.idle.is_parked(1),
                "a retired slot stays out of the set"
            );
            assert_eq!(shared.inject.len(), 1);
            drop(shared.inject.pop());
        }
    });
}

/// A producer hands a fiber that only prefers temporary slot 1 (migration) to its
/// inbox while the slot's worker retires and the slot is started again, whose new
/// worker's own (pinned) fiber is then woken into the same inbox. The producer that
/// saw the slot inactive moves the inbox to the injection queue (`rescue_inbox`); it
/// must never move the new worker's pinned fiber there, where any worker could resume
/// it on the wrong thread (found in review: the rescue popped whatever the inbox held
/// by then).
#[test]
fn loom_inbox_rescue_vs_slot_restart() {
    loom::model(|| {
        let (shared, _base, temp) = new_pool_with_temp();
        let rec = Arc::new(Recorder::default());
        let soft = dummy_task(&rec);
        soft.header()
            .home
            .store(1 | crate::task::header::SOFT_HOME, SeqCst);
        let pinned = dummy_task(&rec);
        pinned.header().home.store(1, SeqCst);
        let s2 = shared.clone();
        let producer = thread::spawn(move || s2.schedule_remote(soft));
        // The slot's worker retires (as `try_retire` and `retire` leave it) and its
        // thread gives the slot back; sysmon starts it again, and the new worker's
        // fiber, tied to it, is woken from elsewhere.
        shared.remotes[1].active.store(false, SeqCst);
        shared.rescue_inbox(1);
        shared.return_slot(1, temp);
        let (i, _parts) = shared.take_slot().unwrap();
        assert_eq!(i, 1);
        shared.schedule_remote(pinned);
        producer.join().unwrap();
        let mut in_inbox = 0;
        while let Some(t) = shared.remotes[1].inbox.pop() {
            in_inbox += 1;
            drop(t);
        }
        while let Some(t) = shared.inject.pop() {
            assert!(
                !t.header().is_pinned(),
                "a fiber pinned to a running worker was moved to the injection queue"
            );
            drop(t);
        }
        assert!(in_inbox >= 1, "the pinned fiber left its worker's inbox");
    });
}

mod forkjoin_models {
    use super::*;
    use crate::scheduler::deque::{self, Steal};
    use crate::scheduler::latch::OnceLatch;

    fn item(i: usize) -> *mut u8 {
        i as *mut u8
    }

    /// Owner pushes past the initial capacity (growth) and pops while a thief steals:
    /// every item comes out exactly once.
    #[test]
    fn loom_deque_push_pop_steal_with_growth() {
        loom::model(|| {
            let (w, s) = deque::new::<u8>();
            let thief = thread::spawn(move || {
                let mut got = Vec::new();
                for _ in 0..2 {
                    if let Steal::Success(p) = s.steal() {
                        got.push(p as usize);
                    }
                }
                got
            });
            for i in 1..=3 {
                w.push(item(i));
            }
            let mut got = Vec::new();
            while let Some(p) = w.pop() {
                got.push(p as usize);
            }
            got.extend(thief.join().unwrap());
            got.sort();
            assert_eq!(got, vec![1, 2, 3]);
        });
    }

    /// The last item, raced for by the owner's pop and a thief: exactly one wins.
    #[test]
    fn loom_deque_last_item_race() {
        loom::model(|| {
            let (w, s) = deque::new::<u8>();
            w.push(item(7));
            let thief = thread::spawn(move || matches!(s.steal(), Steal::Success(_)));
            let owner = w.pop().is_some();
            let stolen = thief.join().unwrap();
            assert!(owner ^ stolen, "owner {owner}, thief {stolen}");
        });
    }

    /// Leapfrogging: a worker waits for the thief of its job (worker 1), which then
    /// offers a piece of that job and waits for the piece. The waiter must take it:
    /// either its steal after registering sees the piece, or the thief's offer sees the
    /// registration and wakes it from the latch. A lost wake leaves both asleep (a loom
    /// deadlock); then the thief finishes and sets the waiter's latch.
    #[test]
    fn loom_leapfrog_offer_vs_waiter_sleep() {
        use crate::scheduler::job::FnContext;
        use crate::scheduler::job::StackJob;
        loom::model(|| {
            let (shared, mut locals) = new_pool(2);
            let l1 = locals.pop().unwrap();
            let l0 = locals.pop().unwrap();
            let waiter_parker = shared.remotes[0].parker.clone();
            // The waiter's stolen job: its latch and the thief's index.
            let stolen = Arc::new(StackJob::new(|_: FnContext| (), &waiter_parker));
            stolen.thief.store(1, SeqCst);
            let (s1, st) = (shared.clone(), stolen.clone());
            let thief = thread::spawn(move || {
                let core = Core::new(1, s1.clone(), l1);
                let parker = s1.remotes[1].parker.clone();
                let piece = StackJob::new(|_: FnContext| 7u32, &parker);
                // SAFETY: `piece` lives on this frame until its latch is observed set.
                core.offer_job(unsafe { piece.as_job_ref() });
                // Only the waiter may run it: the thief sleeps until it is done.
                piece.latch.wait(&parker, || false);
                assert_eq!(piece.take_result(), 7);
                // The stolen job is done: set the waiter's latch.
                // SAFETY: the Arc keeps the latch alive; the waiter has not returned.
                unsafe { OnceLatch::set(&st.latch) };
                core.finish_for_test();
            });
            let core = Core::new(0, shared.clone(), l0);
            core.wait_for_thief(&stolen.latch, &stolen.thief);
            thief.join().unwrap();
            assert_eq!(shared.remotes[1].leapfroggers.load(SeqCst), 0);
            core.finish_for_test();
        });
    }

    /// Setting the latch races the waiter going through SLEEPY and SLEEPING: the waiter
    /// always returns (a lost wake is a loom deadlock), and the setter's parker
    /// reference keeps the parker alive.
    #[test]
    fn loom_latch_set_vs_sleep() {
        loom::model(|| {
            let parker = Arc::new(Parker::new());
            let latch = Arc::new(OnceLatch::new(&parker));
            let l2 = latch.clone();
            let setter = thread::spawn(move || {
                // SAFETY: the latch is alive (held by this Arc) and its waiter has not
                // returned before the set.
                unsafe { OnceLatch::set(&*l2) };
            });
            latch.wait(&parker, || false);
            assert!(latch.probe());
            setter.join().unwrap();
        });
    }

    /// The waiter helps right after announcing SLEEPY while the setter sets: however the
    /// two interleave, the waiter returns only after it has synchronized with the set,
    /// so it reads the result the setter wrote before (loom reports a racy read).
    #[test]
    fn loom_latch_result_visible_after_help_while_sleepy() {
        loom::model(|| {
            let parker = Arc::new(Parker::new());
            let latch = Arc::new(OnceLatch::new(&parker));
            let result = Arc::new(loom::cell::UnsafeCell::new(0u32));
            let (l2, r2) = (latch.clone(), result.clone());
            let setter = thread::spawn(move || {
                // SAFETY: the waiter reads the cell only after the latch is set.
                r2.with_mut(|p| unsafe { *p = 7 });
                // SAFETY: the latch is alive (held by this Arc) and its waiter has not
                // returned before the set.
                unsafe { OnceLatch::set(&*l2) };
            });
            // Helps (does "work") only on its third call: with loom's one spin, the one
            // made right after announcing SLEEPY when the setter has not run yet.
            let mut calls = 0;
            latch.wait(&parker, || {
                calls += 1;
                calls == 3
            });
            // SAFETY: the latch is set, and the setter wrote before setting it.
            assert_eq!(result.with(|p| unsafe { *p }), 7);
            setter.join().unwrap();
        });
    }
}

/// Fibers: the real fiber future (a corosensei stack switch inside a loom thread) on
/// the real task harness. The fiber's stack is modelled by a loom cell that the fiber
/// touches at every resume, so a second thread resuming the same stack while the first
/// still runs on it is reported by loom.
mod fiber {
    use super::*;
    use crate::fiber::future::FiberFuture;
    use crate::stack;

    use loom::sync::atomic::AtomicBool;

    /// A wait object: `open` sets the flag, then wakes the registered waiter (spec 003's
    /// "set flag, then unpark").
    #[derive(Default)]
    struct Gate {
        open: AtomicBool,
        waiter: Mutex<Option<std::task::Waker>>,
    }

    impl Gate {
        fn open(&self) {
            self.open.store(true, SeqCst);
            if let Some(w) = self.waiter.lock().unwrap().take() {
                w.wake();
            }
        }

        fn wait(&self) -> impl Future<Output = ()> + '_ {
            std::future::poll_fn(move |cx| {
                if self.open.load(SeqCst) {
                    return Poll::Ready(());
                }
                *self.waiter.lock().unwrap() = Some(cx.waker().clone());
                if self.open.load(SeqCst) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
        }
    }

    struct StackToken(loom::cell::UnsafeCell<u32>);
    // SAFETY: accesses are checked by loom; that is the point of the token.
    unsafe impl Sync for StackToken {}
    // SAFETY: as above.
    unsafe impl Send for StackToken {}

    impl StackToken {
        fn touch(&self) {
            // SAFETY: loom reports any access that is not ordered with the previous one.
            self.0.with_mut(|p| unsafe { *p += 1 });
        }
    }

    fn fiber_task<T: Send + 'static>(
        rec: &Arc<Recorder>,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> (Notified, JoinHandle<T>) {
        fiber_task_on(rec, stack::acquire(64 * 1024).expect("stack"), f)
    }

    /// [`fiber_task`] on a stack the caller acquired.
    fn fiber_task_on<T: Send + 'static>(
        rec: &Arc<Recorder>,
        stack: stack::Stack,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> (Notified, JoinHandle<T>) {
        let (task, handle) = new_task(FiberFuture::new(f, stack, None, false), rec.clone());
        // The owned-list reference: not linked in a list here.
        // SAFETY: the spawner owns that reference.
        unsafe { crate::task::raw::drop_reference(NonNull::from(task.header())) };
        (task, handle)
    }

    /// A fiber that touches its stack token, waits for `gate`, touches the token again
    /// and returns 7.
    #[allow(clippy::type_complexity)]
    fn gated_fiber(rec: &Arc<Recorder>) -> (Notified, JoinHandle<u32>, Arc<Gate>, Arc<StackToken>) {
        let gate = Arc::new(Gate::default());
        let token = Arc::new(StackToken(loom::cell::UnsafeCell::new(0)));
        let (g, t) = (gate.clone(), token.clone());
        let (task, handle) = fiber_task(rec, move || {
            t.touch();
            crate::wait(g.wait());
            t.touch();
            7
        });
        (task, handle, gate, token)
    }

    /// Runs queued tasks until none is left, checking that a task is never queued twice
    /// at once (no double schedule).
    fn drain(rec: &Arc<Recorder>) {
        loop {
            let next = {
                let mut q = rec.queued.lock().unwrap();
                assert!(q.len() <= 1, "a fiber was queued twice");
                q.pop()
            };
            match next {
                Some(t) => t.run(),
                None => break,
            }
        }
    }

    /// A fiber parks in `wait` while another thread opens its gate and wakes it. loom
    /// places the wake in every phase of the parking transition: before the fiber
    /// polls, after it registered its waker but before it switched off its stack, after
    /// the switch but before the harness committed RUNNING -> IDLE, and after the
    /// commit. In every case the fiber finishes, exactly once, resumed by one thread at
    /// a time.
    #[test]
    fn loom_fiber_park_vs_wake() {
        loom::model(|| {
            let rec = Arc::new(Recorder::default());
            let (task, handle, gate, token) = gated_fiber(&rec);
            let opener = {
                let gate = gate.clone();
                thread::spawn(move || gate.open())
            };
            task.run();
            opener.join().unwrap();
            drain(&rec);
            assert!(
                handle.is_finished(),
                "lost wakeup: the fiber never finished"
            );
            token.touch();
            assert_eq!(crate::wait(handle).unwrap(), 7);
        });
    }

    /// A fiber that parked is resumed on another thread (migration of an unpinned
    /// fiber): the second resume happens after the first suspension, never alongside.
    #[test]
    fn loom_fiber_resumed_by_the_waking_thread() {
        loom::model(|| {
            let rec = Arc::new(Recorder::default());
            let (task, handle, gate, token) = gated_fiber(&rec);
            let other = {
                let (gate, rec) = (gate.clone(), rec.clone());
                thread::spawn(move || {
                    gate.open();
                    // This thread runs the fiber if the wake queued it already.
                    let next = rec.queued.lock().unwrap().pop();
                    if let Some(t) = next {
                        t.run();
                    }
                })
            };
            task.run();
            other.join().unwrap();
            drain(&rec);
            assert!(handle.is_finished());
            token.touch();
        });
    }

    /// Fiber-to-fiber join: one fiber waits on another's `JoinHandle` while the other
    /// finishes on a second thread.
    #[test]
    fn loom_fiber_joins_fiber() {
        loom::model(|| {
            let rec = Arc::new(Recorder::default());
            let (child, child_handle) = fiber_task(&rec, || 5u32);
            let (parent, parent_handle) =
                fiber_task(&rec, move || crate::wait(child_handle).unwrap() + 1);
            let runner = thread::spawn(move || child.run());
            parent.run();
            runner.join().unwrap();
            drain(&rec);
            assert!(
                parent_handle.is_finished(),
                "the joining fiber was not woken"
            );
            assert_eq!(crate::wait(parent_handle).unwrap(), 6);
        });
    }

    /// A finished fiber's stack goes back to the pool while another thread takes stacks
    /// for new fibers: a stack is handed out only after its fiber left it. The stack is
    /// modelled by the token: the first fiber touches it last thing, and the second
    /// fiber touches it if (and only if) it was given the first fiber's stack, so a
    /// stack handed out before its fiber is done with it is a race that loom reports.
    #[test]
    fn loom_stack_return_vs_reuse() {
        // Executions in which the second fiber got the first one's stack: some must,
        // or the model checks nothing.
        static REUSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        loom::model(|| {
            let rec = Arc::new(Recorder::default());
            let token = Arc::new(StackToken(loom::cell::UnsafeCell::new(0)));
            let first = stack::acquire(64 * 1024).expect("stack");
            // The stack's identity: the start of its guard page.
            let first_low = first.guard_range().0;
            let t = token.clone();
            let (task, handle) = fiber_task_on(&rec, first, move || t.touch());
            let spawner = {
                let (rec, token) = (rec.clone(), token.clone());
                thread::spawn(move || {
                    let stack = stack::acquire(64 * 1024).expect("stack");
                    let reused = stack.guard_range().0 == first_low;
                    let (task, handle) = fiber_task_on(&rec, stack, move || {
                        if reused {
                            token.touch();
                        }
                        1
                    });
                    task.run();
                    assert!(handle.is_finished());
                    drop(handle);
                    if reused {
                        REUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            };
            task.run();
            spawner.join().unwrap();
            assert!(handle.is_finished());
            token.touch();
        });
        assert!(
            REUSED.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "no execution handed the first fiber's stack to the second"
        );
    }
}

/// The wake handshake of waits set aside on a worker (`scheduler::stacks`): a wake from
/// another thread against the dispatcher setting the stack aside and looking for ready
/// ones, parking in between as a loop stack does until `any`. A lost wake deadlocks.
fn model_set_aside_vs_wakes(waits: usize) {
    use crate::scheduler::stacks::{Look, Stacks};
    use std::task::Waker;

    loom::model(move || {
        let stacks: Stacks<usize> = Stacks::new();
        let parker = Arc::new(Parker::new());
        let signals: Vec<_> = (0..waits).map(|_| stacks.signal(&parker)).collect();
        let wakers: Vec<Waker> = signals.iter().map(|s| Waker::from(s.clone())).collect();
        let t = thread::spawn(move || {
            for w in wakers {
                w.wake();
            }
        });
        for (i, s) in signals.iter().enumerate() {
            stacks.set_aside(i, s.clone());
        }
        let mut resumed = Vec::new();
        while resumed.len() < waits {
            if let Look::Resume(i) = stacks.look(None) {
                resumed.push(i);
                continue;
            }
            if !stacks.ready().any() {
                parker.park();
            }
        }
        resumed.sort_unstable();
        assert_eq!(resumed, (0..waits).collect::<Vec<_>>());
        t.join().unwrap();
    });
}

#[test]
fn loom_wait_signal_wake_vs_set_aside() {
    model_set_aside_vs_wakes(1);
}

#[test]
fn loom_wait_signal_two_ready_stacks_resumed_one_at_a_time() {
    model_set_aside_vs_wakes(2);
}

/// A dispatcher that waits for a wait of its own (one on the worker thread's stack,
/// `Core::dispatch`) while a set-aside wait is ready, both woken from another thread
/// (in either order): whatever the interleaving, the own wait returns and the set-aside
/// one is resumed. A stack the dispatcher resumes, and the worker's loop once the own
/// wait has returned, run until `any` and hand the thread back. Found as a rare hang:
/// the own wait's wake landed between the dispatcher's first look at it and its clear
/// of `any`, the dispatcher resumed the ready stack, and that stack ran on (parked)
/// with `any` cleared while the thread's own wait was woken.
fn model_own_wait_vs_set_aside(own_first: bool) {
    use crate::scheduler::stacks::{Look, Stacks};
    use std::task::Waker;

    loom::model(move || {
        let stacks: Stacks<usize> = Stacks::new();
        let parker = Arc::new(Parker::new());
        let mine = stacks.signal(&parker);
        let other = stacks.signal(&parker);
        stacks.set_aside(0, other.clone());
        let mut wakers = vec![Waker::from(other.clone()), Waker::from(mine.clone())];
        if own_first {
            wakers.reverse();
        }
        let t = thread::spawn(move || {
            for w in wakers {
                w.wake();
            }
        });
        let mut resumed = false;
        // The dispatcher, on the thread's stack: a stack it resumes (or a spare) runs
        // until `any` and hands the thread back.
        loop {
            match stacks.look(Some(&mine)) {
                Look::Mine => break,
                Look::Resume(_) => resumed = true,
                Look::Nothing => {}
            }
            while !stacks.ready().any() {
                parker.park();
            }
        }
        // The worker's loop: runs until `any`, then dispatches for the set-aside waits.
        while !resumed {
            while !stacks.ready().any() {
                parker.park();
            }
            if let Look::Resume(_) = stacks.look(None) {
                resumed = true;
            }
        }
        t.join().unwrap();
    });
}

#[test]
fn loom_wait_signal_own_wait_vs_set_aside() {
    model_own_wait_vs_set_aside(false);
}

#[test]
fn loom_wait_signal_own_wait_woken_first_vs_set_aside() {
    model_own_wait_vs_set_aside(true);
}

/// The clear before each poll of a blocked wait (`WaitSignal::reset`) against a wake
/// from another thread that publishes a value first: whatever the interleaving, the
/// wait either sees the value or is left woken (found as a rare hang: a clear that
/// was a plain store could land after a wake whose value the poll had not seen, and
/// the wait was set aside un-woken for ever). `woken_before` is the state the last
/// poll left (a future that woke itself).
fn model_reset_vs_wake(woken_before: bool) {
    use crate::scheduler::stacks::{Look, Stacks};
    use loom::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering::{Acquire, Release};
    use std::task::{Wake, Waker};

    loom::model(move || {
        let stacks: Stacks<usize> = Stacks::new();
        let parker = Arc::new(Parker::new());
        let signal = stacks.signal(&parker);
        if woken_before {
            signal.wake_by_ref();
        }
        let value = Arc::new(AtomicBool::new(false));
        let waker = Waker::from(signal.clone());
        let v2 = value.clone();
        let t = thread::spawn(move || {
            v2.store(true, Release);
            waker.wake();
        });
        // The loop of `fiber::wait::on_worker`, the poll a look at `value`.
        loop {
            signal.reset();
            if value.load(Acquire) {
                break;
            }
            if signal.is_woken() {
                continue;
            }
            stacks.set_aside(0, signal.clone());
            loop {
                if let Look::Resume(_) = stacks.look(None) {
                    break;
                }
                if !stacks.ready().any() {
                    parker.park();
                }
            }
        }
        t.join().unwrap();
    });
}

#[test]
fn loom_wait_signal_reset_vs_wake() {
    model_reset_vs_wake(false);
}

#[test]
fn loom_wait_signal_reset_after_a_self_wake_vs_wake() {
    model_reset_vs_wake(true);
}

/// A waker that records that it was woken (loom-tracked).
struct FlagWaker(loom::sync::atomic::AtomicBool);

impl std::task::Wake for FlagWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, SeqCst);
    }
}

/// A source's readiness word against a read that clears it (`driver/readiness.rs`):
/// the "kernel" makes data available and then the driver's event sets `READABLE` and
/// wakes; the reader polls its readiness future, makes the "system call" when the word
/// says ready, and clears what it saw on `WouldBlock`. The word starts with `initial`
/// set by an earlier event with no data left behind it (stale). Whatever the
/// interleaving, the reader gets the data or is left waiting with its waker woken (and
/// a poll then finds the word ready): an event during the call moved the tick on, so
/// the clear leaves it.
fn model_readiness_event_vs_clear(initial: u64) {
    use crate::driver::readiness::{Direction, ScheduledIo};
    loom::model(move || {
        let sched = Arc::new(ScheduledIo::new());
        // The kernel's side, outside the model (loom runs one thread at a time, so a
        // std atomic is always current; loom's own mishandles a swap racing a store,
        // tokio-rs/loom#254).
        let data = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut stale = Vec::new();
        sched.set_readiness(initial, &mut stale);
        let (s2, d2) = (sched.clone(), data.clone());
        let event = thread::spawn(move || {
            d2.store(true, SeqCst);
            let mut wake = Vec::new();
            s2.set_readiness(crate::driver::readiness::READABLE, &mut wake);
            for w in wake {
                w.wake();
            }
        });
        let flag = std::sync::Arc::new(FlagWaker(loom::sync::atomic::AtomicBool::new(false)));
        let waker = std::task::Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut id = 0;
        let mut got = false;
        for _ in 0..3 {
            match sched.poll_ready_listed(&mut cx, Direction::Read, &mut id) {
                Poll::Ready(Ok(ev)) => {
                    if data.swap(false, SeqCst) {
                        got = true;
                        break;
                    }
                    // `WouldBlock`.
                    sched.clear_readiness(ev);
                }
                Poll::Ready(Err(_)) => unreachable!("no shutdown in this model"),
                Poll::Pending => break,
            }
        }
        event.join().unwrap();
        if !got {
            assert!(
                flag.0.load(SeqCst),
                "the reader waits with the data there and its waker not woken"
            );
            let noop = std::task::Waker::noop();
            let r =
                sched.poll_ready_listed(&mut Context::from_waker(noop), Direction::Read, &mut id);
            assert!(
                matches!(r, Poll::Ready(Ok(_))),
                "woken, but the word is not ready"
            );
            assert!(data.load(SeqCst));
        }
        sched.forget(&mut id);
    });
}

/// The model the I/O driver's module doc names: a stale `READABLE`.
#[test]
fn loom_io_readiness_event_vs_clear() {
    model_readiness_event_vs_clear(crate::driver::readiness::READABLE);
}

/// The same with a stale `ERROR` bit, which the clear after `WouldBlock` now takes
/// too (found in review: kept, it made a reader spin).
#[test]
fn loom_io_readiness_stale_error_vs_clear() {
    use crate::driver::readiness::{ERROR, READABLE};
    model_readiness_event_vs_clear(READABLE | ERROR);
}

/// No stale bits: the reader registers its waker first or sees the event's bits.
#[test]
fn loom_io_readiness_event_vs_first_poll() {
    model_readiness_event_vs_clear(0);
}

/// Review of 0e9d8fb (`claim_parked` returns at once when no bit is set): a worker
/// queues a task on its OWN local queue and then stays busy (never looks at that
/// queue again in the model), while the pool's only other worker runs out of work and
/// goes to sleep. The producer's claim may find no bit (the sleeper has not published
/// yet) or a searcher (the sleeper searching): either way the sleeper's own hand-off
/// and its fenced re-check of its peers' queues must see the task. A task stranded in
/// the busy worker's queue while the other sleeps shows as a loom deadlock (the busy
/// worker waits, parked, for the task to be run elsewhere).
#[test]
fn loom_park_vs_own_queue_push_with_no_parked_bit() {
    loom::model(|| {
        let (shared, mut locals) = new_pool(2);
        let rec = Arc::new(Recorder::default());
        let l1 = locals.pop().unwrap();
        let l0 = locals.pop().unwrap();
        let got = Arc::new(AtomicUsize::new(0));
        let task = dummy_task(&rec);
        let s1 = shared.clone();
        let got1 = got.clone();
        let producer = thread::spawn(move || {
            let core = Core::new(1, s1.clone(), l1);
            core.push_for_test(task);
            // Busy elsewhere: wait (asleep in loom's eyes) until worker 0 ran it.
            while got1.load(SeqCst) == 0 {
                thread::park();
            }
            core.finish_for_test();
        });
        let core = Core::new(0, shared.clone(), l0);
        loop {
            if let Some(t) = core.next_task_for_test() {
                drop(t);
                got.fetch_add(1, SeqCst);
                producer.thread().unpark();
                break;
            }
            core.park_until_for_test(&|| got.load(SeqCst) != 0);
        }
        producer.join().unwrap();
        core.finish_for_test();
        assert_eq!(got.load(SeqCst), 1);
    });
}
