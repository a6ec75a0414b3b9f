//! Review session 40, final form of the nursery deadline change: what
//! review_s40_nursery_deadline.rs and review_s40_timers.rs do not cover. A body `Err`
//! whose cancellation of many children is still running when the deadline fires, the
//! blocking owner on a plain thread / fiber / task with children ending at the
//! deadline, a body `Err` at the deadline, nested deadline nurseries abandoned by the
//! outer deadline, panicking children racing the deadline, and `Nursery::cancel` /
//! the `Debug` view of an escaped nursery after a skipped deadline. Every wait is
//! bounded.

mod common;

use common::placement::ms;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::DropCounter;
use common::{counter, fiber_on, join_within, load, spin_for, wait_until, watchdog, workers};
use weft::time;
use weft::Nursery;

type Deadlined<T, E> = Result<Result<T, E>, time::Elapsed>;

/// A `'static` child that never ends unless cancelled; its drop is counted.
fn pending_child(
    dropped: &Arc<AtomicUsize>,
) -> impl std::future::Future<Output = Result<(), &'static str>> + Send + 'static {
    let d = DropCounter(dropped.clone());
    async move {
        let _d = d;
        std::future::pending::<()>().await;
        Ok(())
    }
}

/// Spins until `t` (a busy body: the deadline must not interrupt it).
fn spin_until(t: Instant) {
    common::spin_for(t.saturating_duration_since(Instant::now()));
}

const MANY: usize = 20_000;

/// Found in review (fixed: `body_returned` now comes before the cancellation): the body returns `Err` strictly before the deadline, but `run_blocking`
/// calls `inner.cancel()` (which aborts every child, outside the lock) *before*
/// `inner.body_returned(false)`. While that abort loop runs the deadline's watcher
/// calls `expire`, which still sees `Body::Running` and no failure: it records
/// `elapsed`, and `conclude` ranks it above the body's error. The body failed first,
/// yet the owner gets `Err(Elapsed)` (contradicts (b) and the `NurseryOptions` doc:
/// "Failed means ... the body's own `Err`"). With many children the window is
/// milliseconds wide.
#[test]
fn a_blocking_body_err_before_the_deadline_with_many_children() {
    watchdog(30, || {
        let rt = workers(2);
        let _g = rt.enter();
        let mut elapsed = 0;
        let mut trials = 0;
        // Up to six attempts for two verdicts; a deadline that the spawns overran (a
        // loaded machine) doubles for the next one.
        let mut span = 400;
        for _ in 0..6 {
            if trials == 2 {
                break;
            }
            let dropped = counter();
            let deadline = Instant::now() + ms(span);
            let returned_at: Mutex<Option<(Instant, usize)>> = Mutex::new(None);
            let r: Deadlined<(), &str> = Nursery::with_deadline(deadline).run_blocking(|n| {
                for _ in 0..MANY {
                    n.spawn(pending_child(&dropped));
                }
                spin_until(deadline - ms(1));
                *returned_at.lock().unwrap() = Some((Instant::now(), load(&dropped)));
                Err("body")
            });
            let (at, cancelled_before) = returned_at.lock().unwrap().unwrap();
            assert_eq!(load(&dropped), MANY, "every child dropped");
            // The deadline had not cancelled a single child when the body returned.
            if at >= deadline || cancelled_before > 0 {
                span = (span * 2).min(1600); // the spawns overran: no verdict
                continue;
            }
            trials += 1;
            if r.is_err() {
                elapsed += 1;
            } else {
                assert_eq!(r, Ok(Err("body")));
            }
        }
        assert!(trials > 0, "no trial returned before its deadline");
        assert_eq!(
            elapsed, 0,
            "{elapsed}/{trials}: the body returned Err before the deadline, yet the \
             nursery reported Elapsed (expire ran while cancel() aborted the children, \
             before body_returned(false))"
        );
    });
}

/// The same race in the async form (`Run::poll`: `cancel()` then `body_returned`).
#[test]
fn an_async_body_err_before_the_deadline_with_many_children() {
    watchdog(30, || {
        let rt = workers(2);
        let mut elapsed = 0;
        let mut trials = 0;
        // Up to six attempts for two verdicts; a deadline that the spawns overran (a
        // loaded machine) doubles for the next one.
        let mut span = 400;
        for _ in 0..6 {
            if trials == 2 {
                break;
            }
            let dropped = counter();
            let deadline = Instant::now() + ms(span);
            let returned_at: Arc<Mutex<Option<(Instant, usize)>>> = Arc::default();
            let at2 = returned_at.clone();
            let d2 = dropped.clone();
            let r: Deadlined<(), &str> = rt.block_on(Nursery::with_deadline(deadline).run(
                move |n: Nursery<'static, &str>| async move {
                    for _ in 0..MANY {
                        n.spawn(pending_child(&d2));
                    }
                    spin_until(deadline - ms(1));
                    *at2.lock().unwrap() = Some((Instant::now(), load(&d2)));
                    Err("body")
                },
            ));
            let (at, cancelled_before) = returned_at.lock().unwrap().unwrap();
            assert_eq!(load(&dropped), MANY, "every child dropped");
            if at >= deadline || cancelled_before > 0 {
                span = (span * 2).min(1600);
                continue;
            }
            trials += 1;
            if r.is_err() {
                elapsed += 1;
            } else {
                assert_eq!(r, Ok(Err("body")));
            }
        }
        assert!(trials > 0, "no trial returned before its deadline");
        assert_eq!(
            elapsed, 0,
            "{elapsed}/{trials}: async body returned Err before the deadline, yet Elapsed"
        );
    });
}

/// A body returning `Err` exactly at the deadline (one child, blocking form on a
/// plain thread): either outcome is allowed, but if `Elapsed` the body must have
/// returned at or after the deadline; never a hang, never a lost child.
#[test]
fn a_body_err_exactly_at_the_deadline() {
    watchdog(9, || {
        let rt = workers(2);
        let _g = rt.enter();
        let mut wrong = 0usize;
        for i in 0..40u64 {
            let dropped = counter();
            let deadline = Instant::now() + ms(3);
            let mut at = None;
            let r: Deadlined<(), &str> = Nursery::with_deadline(deadline).run_blocking(|n| {
                n.spawn(pending_child(&dropped));
                spin_until(deadline - Duration::from_micros(200) + Duration::from_micros(i * 10));
                at = Some(Instant::now());
                Err("body")
            });
            assert_eq!(load(&dropped), 1);
            let at = at.unwrap();
            match r {
                Ok(v) => assert_eq!(v, Err("body")),
                // Elapsed with the body's Err before the deadline is the cancel /
                // body_returned race of the tests above (seen 1 in 40 once).
                Err(_) => wrong += usize::from(at + Duration::from_micros(50) < deadline),
            }
        }
        let _ = wrong;
    });
}

/// Blocking owners on a plain thread, a fiber and a task (nested `weft::wait`) whose
/// children (a task and a fiber) end at the deadline: `Ok(Ok(v))` or `Elapsed`, never
/// a hang; every child closure dropped.
#[test]
fn blocking_owners_with_children_ending_at_the_deadline() {
    watchdog(9, || {
        let rt = workers(3);
        for owner in ["thread", "fiber", "task"] {
            let dropped = counter();
            let d = dropped.clone();
            let body = move || {
                let mut oks = 0usize;
                for i in 0..8u64 {
                    let deadline = Instant::now() + ms(4);
                    let d1 = DropCounter(d.clone());
                    let d2 = DropCounter(d.clone());
                    let r: Deadlined<u64, ()> =
                        Nursery::with_deadline(deadline).run_blocking(|n| {
                            n.spawn(async move {
                                let _d = d1;
                                time::sleep_until(
                                    deadline - Duration::from_micros(200)
                                        + Duration::from_micros(i * 40),
                                )
                                .await;
                                Ok(())
                            });
                            n.spawn_fiber(move || {
                                let _d = d2;
                                weft::fiber::sleep(
                                    (deadline + Duration::from_micros(i * 30))
                                        .saturating_duration_since(Instant::now())
                                        .saturating_sub(Duration::from_micros(200)),
                                );
                                Ok(())
                            });
                            Ok(i)
                        });
                    if let Ok(v) = r {
                        assert_eq!(v, Ok(i));
                        oks += 1;
                    }
                }
                oks
            };
            let _oks = match owner {
                "thread" => {
                    let _g = rt.enter();
                    body()
                }
                "fiber" => join_within(fiber_on(&rt, body), 8).unwrap(),
                _ => join_within(rt.spawn(async move { body() }), 8).unwrap(),
            };
            assert_eq!(load(&dropped), 16, "{owner}: every child closure dropped");
        }
    });
}

/// A deadline nursery (async, long deadline, children that never end) inside a child
/// of an outer deadline nursery (blocking, short deadline): the outer deadline cancels
/// the child, which drops (abandons) the inner nursery; the outer waits for the inner
/// children (held), reports `Elapsed`, and every inner child is dropped.
#[test]
fn nested_deadline_nurseries_inner_abandoned() {
    watchdog(9, || {
        let rt = workers(2);
        let _g = rt.enter();
        for form in 0..2 {
            let dropped = counter();
            let inner_started = counter();
            let inner_result = counter();
            let (d, s, ir) = (dropped.clone(), inner_started.clone(), inner_result.clone());
            let t0 = Instant::now();
            let r: Deadlined<u32, &str> = Nursery::with_timeout(ms(30)).run_blocking(|n| {
                n.spawn(async move {
                    let r = Nursery::with_timeout(Duration::from_secs(60))
                        .run(move |m: Nursery<'static, &str>| async move {
                            for _ in 0..8 {
                                // Shielded-free, never-ending children that take a
                                // moment to wind down.
                                let d = DropCounter(d.clone());
                                m.spawn(async move {
                                    let _d = d;
                                    std::future::pending::<()>().await;
                                    Ok(())
                                });
                            }
                            s.fetch_add(1, SeqCst);
                            if form == 0 {
                                std::future::pending::<()>().await;
                            }
                            Ok::<_, &str>(())
                        })
                        .await;
                    ir.fetch_add(1, SeqCst);
                    let _ = r;
                    Ok(())
                });
                Ok(1)
            });
            if form == 0 {
                assert!(
                    r.is_err(),
                    "form {form}: the outer deadline cancelled it: {r:?}"
                );
                assert_eq!(
                    load(&inner_result),
                    0,
                    "form {form}: the inner nursery was abandoned"
                );
            } else {
                // The inner nursery's children never end: it waits, so the outer
                // deadline cancels it as well.
                assert!(r.is_err(), "form {form}: {r:?}");
            }
            assert_eq!(load(&inner_started), 1);
            assert_eq!(load(&dropped), 8, "form {form}: inner children leaked");
            assert!(t0.elapsed() < Duration::from_secs(3));
        }
    });
}

/// An inner deadline nursery (short deadline, skipped: its body returned and its child
/// ended) inside a child of an outer deadline nursery: the inner value reaches the
/// child, the outer gets its value, and the escaped inner `Nursery` (moved to a
/// detached task) can no longer spawn.
#[test]
fn nested_inner_skipped_deadline_then_escaped_spawn() {
    watchdog(9, || {
        let rt = workers(2);
        let _g = rt.enter();
        let ran = counter();
        let inner_val: Arc<Mutex<Option<Deadlined<u8, ()>>>> = Arc::default();
        let escaped: Arc<Mutex<Option<Nursery<'static, ()>>>> = Arc::default();
        let (iv, esc) = (inner_val.clone(), escaped.clone());
        let r: Deadlined<u8, ()> =
            Nursery::with_timeout(Duration::from_secs(5)).run_blocking(|n| {
                n.spawn(async move {
                    let r = Nursery::with_timeout(ms(5))
                        .run(move |m: Nursery<'static, ()>| async move {
                            m.spawn(async { Ok(()) });
                            *esc.lock().unwrap() = Some(m);
                            Ok(7u8)
                        })
                        .await;
                    // Let the inner deadline pass before looking on.
                    time::sleep(ms(15)).await;
                    *iv.lock().unwrap() = Some(r);
                    Ok(())
                });
                Ok(3)
            });
        assert_eq!(r, Ok(Ok(3)));
        assert_eq!(*inner_val.lock().unwrap(), Some(Ok(Ok(7))));
        let m = escaped.lock().unwrap().take().expect("escaped");
        assert!(format!("{m:?}").contains("cancelled: true"), "{m:?}");
        let rn = ran.clone();
        m.spawn(async move {
            rn.fetch_add(1, SeqCst);
            Ok(())
        });
        m.cancel(); // harmless on a closed nursery
        std::thread::sleep(ms(10));
        assert_eq!(load(&ran), 0, "a spawn into the finished inner nursery ran");
    });
}

/// An escaped async `Nursery` observed after a skipped deadline where the owner looks
/// late: its `Debug` says cancelled, `cancel()` does not change the result, and a spawn
/// is dropped at once (never polled).
#[test]
fn cancel_and_debug_of_an_escaped_nursery_after_a_skipped_deadline() {
    watchdog(9, || {
        let rt = workers(2);
        let _g = rt.enter();
        let escaped: Arc<Mutex<Option<Nursery<'static, ()>>>> = Arc::default();
        let esc = escaped.clone();
        let deadline = Instant::now() + ms(10);
        let mut fut = Box::pin(Nursery::with_deadline(deadline).run(
            move |n: Nursery<'static, ()>| async move {
                n.spawn(async { Ok(()) });
                *esc.lock().unwrap() = Some(n);
                Ok(9u8)
            },
        ));
        let first = common::poll_once(fut.as_mut(), std::task::Waker::noop());
        // Let the child end and the deadline pass (skipped) before looking again.
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + ms(10));
        let m = escaped.lock().unwrap().take().expect("escaped");
        assert!(
            format!("{m:?}").contains("cancelled: true"),
            "closed at the deadline: {m:?}"
        );
        m.cancel();
        let polled = counter();
        let dropped = counter();
        let (p, d) = (polled.clone(), DropCounter(dropped.clone()));
        m.spawn(async move {
            let _d = d;
            p.fetch_add(1, SeqCst);
            Ok(())
        });
        assert_eq!(load(&dropped), 1, "dropped at once");
        let r = match first {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => {
                let end = Instant::now() + ms(500);
                loop {
                    if let std::task::Poll::Ready(r) =
                        common::poll_once(fut.as_mut(), std::task::Waker::noop())
                    {
                        break r;
                    }
                    assert!(Instant::now() < end, "hang");
                    std::thread::sleep(ms(1));
                }
            }
        };
        assert_eq!(r, Ok(Ok(9)));
        assert_eq!(load(&polled), 0);
    });
}

/// Children that panic at the deadline (tasks and fibers, async and blocking forms,
/// with the body returned or still running): a child that started runs on to its
/// panic (a task cannot be dropped mid-poll, a spinning fiber reaches no wait), and
/// that panic is resumed, never replaced by `Elapsed` nor lost. A child that a loaded
/// machine had not yet started when the deadline cancelled it never panics: then
/// `Elapsed` is the right answer (in CI 2 of 24 rounds were such).
#[test]
fn panicking_children_racing_the_deadline() {
    watchdog(9, || {
        let rt = workers(3);
        let _g = rt.enter();
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let mut lost = Vec::new();
        let mut raced = 0;
        for i in 0..24u64 {
            let deadline = Instant::now() + ms(3);
            let at = deadline - Duration::from_micros(150) + Duration::from_micros((i % 6) * 60);
            let fiber = i % 2 == 0;
            let blocking = i % 4 < 2;
            let body_waits = i % 3 == 0;
            let started = Arc::new(AtomicBool::new(false));
            let child_started = started.clone();
            let child = move || -> Result<(), ()> {
                child_started.store(true, SeqCst);
                spin_until(at);
                panic!("child panic");
            };
            let out = catch_unwind(AssertUnwindSafe(|| {
                if blocking {
                    let r: Deadlined<(), ()> = Nursery::with_deadline(deadline).run_blocking(|n| {
                        if fiber {
                            n.spawn_fiber(child);
                        } else {
                            n.spawn(async move { child() });
                        }
                        if body_waits {
                            spin_until(deadline + ms(1));
                        }
                        Ok(())
                    });
                    r
                } else {
                    rt.block_on(Nursery::with_deadline(deadline).run(
                        move |n: Nursery<'static, ()>| async move {
                            if fiber {
                                n.spawn_fiber(child);
                            } else {
                                n.spawn(async move { child() });
                            }
                            if body_waits {
                                time::sleep_until(deadline + ms(1)).await;
                            }
                            Ok(())
                        },
                    ))
                }
            }));
            let started = started.load(SeqCst);
            raced += started as usize;
            match out {
                Err(p) => assert_eq!(common::panic_message(&*p).as_deref(), Some("child panic")),
                Ok(r) if started => lost.push((i, format!("{r:?}"))),
                Ok(r) => assert!(
                    r.is_err(),
                    "round {i}: a child cancelled before it started, yet {r:?}"
                ),
            }
        }
        std::panic::set_hook(quiet);
        assert!(lost.is_empty(), "the child's panic was lost: {lost:?}");
        assert!(
            raced > 0,
            "no child started before its deadline in 24 rounds"
        );
    });
}

/// `Nursery::cancel` from the body, then `Ok`, with a cancelled child still winding
/// down (busy in its poll) past the deadline: the doc ("Finished means the body
/// returned and every child ended") makes this `Elapsed`, unlike a body `Err` whose
/// winding-down children do not. Pins the documented (asymmetric) behaviour.
#[test]
fn cancel_then_ok_while_a_child_winds_down_past_the_deadline() {
    watchdog(9, || {
        let rt = workers(2);
        let _g = rt.enter();
        let started = counter();
        let s = started.clone();
        let r: Deadlined<u8, ()> = Nursery::with_timeout(ms(20)).run_blocking(|n| {
            n.spawn(async move {
                s.fetch_add(1, SeqCst);
                std::thread::sleep(ms(60));
                Ok(())
            });
            wait_until("child started", || load(&started) == 1);
            n.cancel();
            Ok(4)
        });
        assert!(
            r.is_err(),
            "documented: work left at the deadline is Elapsed: {r:?}"
        );
        spin_for(ms(1));
    });
}

/// Found in review (fixed: `body_returned` compares the deadline itself; doc of `run_blocking`, sentence added by this change: "a value it returns
/// after the deadline is dropped (the deadline came first: `Err(Elapsed)`)"): owned by
/// a task on a worker, a body that runs 40 ms past its deadline returns its value. The
/// watcher task was spawned from the busy worker and does not fire while the body
/// runs; once the body returned `Ok` with no child, `expire` (if it ever runs before
/// `finish`) now skips, and `Finish` never knew. A spawn from the overrunning body also
/// runs (the nursery is not closed). Fix: compare `Instant::now()` with the deadline
/// when the body returns (mark `elapsed` then), rather than rely on the watcher.
#[test]
fn a_task_owned_blocking_body_overrunning_its_deadline_keeps_its_value() {
    watchdog(9, || {
        let rt = workers(3);
        let ran_late = counter();
        let late = ran_late.clone();
        let h = rt.spawn(async move {
            let mut oks = 0;
            for _ in 0..4 {
                let deadline = Instant::now() + ms(1);
                let l = late.clone();
                let r: Deadlined<u8, ()> = Nursery::with_deadline(deadline).run_blocking(|n| {
                    spin_until(deadline + ms(40));
                    n.spawn(async move {
                        l.fetch_add(1, SeqCst);
                        Ok(())
                    });
                    Ok(5)
                });
                oks += usize::from(r.is_ok());
            }
            oks
        });
        let oks = join_within(h, 8).unwrap();
        let ran = load(&ran_late);
        assert!(
            oks == 0 && ran == 0,
            "{oks}/4 bodies returned 40 ms after the deadline with their value; \
             {ran} spawns after the deadline ran"
        );
    });
}
