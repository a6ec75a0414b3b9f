//! Nurseries (issue 18): the async and blocking forms in every context, first error and
//! first panic, cancel, deadlines, nesting, dropping the async form, and borrowed
//! children that must not outlive their frame.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::*;
use weft::{Builder, Nursery, Runtime};

const LONG: Duration = Duration::from_secs(60);

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// A child that parks for a long time; its `DropCounter` (made now, so that a child
/// cancelled before it starts counts too) counts its end.
fn park_task(
    ended: Arc<AtomicUsize>,
) -> impl std::future::Future<Output = Result<(), &'static str>> {
    let c = DropCounter(ended);
    async move {
        let _c = c;
        weft::time::sleep(LONG).await;
        Ok(())
    }
}

fn park_fiber(ended: Arc<AtomicUsize>) -> impl FnOnce() -> Result<(), &'static str> + Send {
    let c = DropCounter(ended);
    move || {
        let _c = c;
        weft::fiber::sleep(LONG);
        Ok(())
    }
}

// ---- the async form ----

#[test]
fn async_returns_the_body_value_after_every_child() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let done = counter();
        let d = done.clone();
        let r = rt.block_on(weft::nursery(move |n| async move {
            for i in 0..10u64 {
                let d1 = d.clone();
                n.spawn(async move {
                    weft::time::sleep(Duration::from_millis(i)).await;
                    d1.fetch_add(1, SeqCst);
                    Ok(())
                });
                let d2 = d.clone();
                n.spawn_fiber(move || {
                    weft::fiber::sleep(Duration::from_millis(i));
                    d2.fetch_add(1, SeqCst);
                    Ok(())
                });
            }
            Ok::<_, ()>("body")
        }));
        assert_eq!(r, Ok("body"));
        assert_eq!(done.load(SeqCst), 20, "returned before every child ended");
    });
}

#[test]
fn async_nursery_inside_a_spawned_task() {
    with_timeout(|| {
        let rt = Builder::new().worker_threads(1).build().unwrap();
        let h = rt.spawn(async {
            weft::nursery(|n| async move {
                let (tx, rx) = weft::chan::bounded::<u32>(0);
                n.spawn(async move {
                    for i in 0..100 {
                        tx.send(i).await.unwrap();
                    }
                    Ok(())
                });
                let mut sum = 0;
                while let Ok(v) = rx.recv().await {
                    sum += v;
                }
                Ok::<_, ()>(sum)
            })
            .await
        });
        assert_eq!(h.join().unwrap(), Ok(4950));
    });
}

#[test]
fn async_nursery_awaited_by_a_fiber() {
    with_timeout(|| {
        let rt = Builder::new().worker_threads(1).build().unwrap();
        let _enter = rt.enter();
        let h = weft::fiber::spawn(|| {
            let ok = weft::wait(weft::nursery(|n| async move {
                n.spawn(async { Ok(()) });
                n.spawn_fiber(|| {
                    weft::fiber::sleep(Duration::from_millis(1));
                    Ok(())
                });
                Ok::<_, String>(5)
            }));
            let failed = weft::wait(weft::nursery(|n| async move {
                n.spawn_fiber(|| Err("fiber child".to_string()));
                weft::time::sleep(LONG).await;
                Ok::<_, String>(6)
            }));
            (ok, failed)
        });
        assert_eq!(h.join().unwrap(), (Ok(5), Err("fiber child".to_string())));
    });
}

#[test]
fn async_first_error_cancels_siblings_and_the_body() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let ended = counter();
        let e = ended.clone();
        let body_dropped = counter();
        let b = body_dropped.clone();
        let r = rt.block_on(weft::nursery(move |n| async move {
            let _b = DropCounter(b);
            for _ in 0..3 {
                n.spawn(park_task(e.clone()));
                let e = e.clone();
                n.spawn_fiber(park_fiber(e));
            }
            n.spawn(async {
                weft::time::sleep(Duration::from_millis(5)).await;
                Err("first")
            });
            weft::time::sleep(LONG).await;
            Ok(())
        }));
        assert_eq!(r, Err("first"));
        assert_eq!(ended.load(SeqCst), 6, "siblings ended before the return");
        assert_eq!(body_dropped.load(SeqCst), 1, "the body was dropped");
    });
}

#[test]
fn async_only_the_first_error_is_returned() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let r = rt.block_on(weft::nursery(|n| async move {
            n.spawn(async { Err(1) });
            // Ends with an error after the first one cancelled the nursery, if it runs
            // at all: not a failure any more.
            n.spawn(async {
                weft::task::shield(weft::time::sleep(Duration::from_millis(20))).await;
                Err(2)
            });
            Ok(())
        }));
        assert_eq!(r, Err(1));
    });
}

#[test]
fn async_first_panic_is_resumed_after_every_child_ended() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let ended = counter();
        let e = ended.clone();
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(weft::nursery(move |n| async move {
                n.spawn(park_task(e.clone()));
                n.spawn_fiber(park_fiber(e));
                n.spawn_fiber(|| {
                    weft::fiber::sleep(Duration::from_millis(5));
                    panic!("child boom")
                });
                Ok(())
            }))
        }));
        let p = r.unwrap_err();
        assert_eq!(p.downcast_ref::<&str>(), Some(&"child boom"));
        assert_eq!(ended.load(SeqCst), 2);
    });
}

#[test]
fn async_body_panic_is_resumed_after_the_children_ended() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let ended = counter();
        let e = ended.clone();
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(weft::nursery(move |n: Nursery<'static, ()>| async move {
                n.spawn(async move {
                    park_task(e).await.unwrap();
                    Ok(())
                });
                weft::time::sleep(Duration::from_millis(2)).await;
                panic!("body boom");
                #[allow(unreachable_code)]
                Ok(())
            }))
        }));
        assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"body boom"));
        assert_eq!(ended.load(SeqCst), 1);
    });
}

#[test]
fn async_cancel_returns_the_body_value_and_later_spawns_never_run() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let ended = counter();
        let ran = Arc::new(AtomicBool::new(false));
        let (e, r2) = (ended.clone(), ran.clone());
        let r = rt.block_on(weft::nursery(move |n| async move {
            n.spawn(park_task(e.clone()));
            let e2 = e.clone();
            n.spawn_fiber(park_fiber(e2));
            weft::time::sleep(Duration::from_millis(2)).await;
            n.cancel();
            // Spawning into a cancelled nursery does not panic: the child never runs.
            let r3 = r2.clone();
            let c = DropCounter(e.clone());
            n.spawn(async move {
                let _c = c;
                r3.store(true, SeqCst);
                Ok(())
            });
            let c = DropCounter(e);
            n.spawn_fiber(move || {
                let _c = c;
                r2.store(true, SeqCst);
                Ok(())
            });
            Ok::<_, &str>(42)
        }));
        assert_eq!(r, Ok(42));
        assert_eq!(ended.load(SeqCst), 4);
        assert!(!ran.load(SeqCst), "a child spawned after cancel ran");
    });
}

#[test]
fn dropping_the_async_nursery_cancels_its_children() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let ended = counter();
        let e = ended.clone();
        let started = counter();
        let s = started.clone();
        let h = rt.spawn(async move {
            weft::nursery(move |n| async move {
                for _ in 0..4 {
                    let (e1, s1) = (e.clone(), s.clone());
                    n.spawn(async move {
                        s1.fetch_add(1, SeqCst);
                        park_task(e1).await
                    });
                    let (e2, s2) = (e.clone(), s.clone());
                    n.spawn_fiber(move || {
                        s2.fetch_add(1, SeqCst);
                        park_fiber(e2)()
                    });
                }
                Ok(())
            })
            .await
        });
        wait_until("every child started", || started.load(SeqCst) == 8);
        h.abort();
        assert!(h.join().unwrap_err().is_cancelled());
        wait_until("every child ended", || ended.load(SeqCst) == 8);

        // And with a timeout around it.
        let ended = counter();
        let e = ended.clone();
        let r = rt.block_on(weft::time::timeout(
            Duration::from_millis(10),
            weft::nursery(move |n| async move {
                n.spawn(park_task(e.clone()));
                n.spawn_fiber(park_fiber(e));
                Ok(())
            }),
        ));
        assert!(r.is_err());
        wait_until("every child ended", || ended.load(SeqCst) == 2);
    });
}

// ---- deadlines ----

#[test]
fn deadlines_in_both_forms() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let ended = counter();
        let e = ended.clone();
        // Async, timeout passes: Err(Elapsed), the children cancelled, the body dropped.
        let start = Instant::now();
        let r = rt.block_on(Nursery::with_timeout(Duration::from_millis(30)).run(
            move |n| async move {
                n.spawn(park_task(e.clone()));
                n.spawn_fiber(park_fiber(e));
                weft::time::sleep(LONG).await;
                Ok::<(), &str>(())
            },
        ));
        assert!(r.is_err());
        let _: weft::time::Elapsed = r.unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert_eq!(ended.load(SeqCst), 2);

        // Async, in time.
        let r = rt.block_on(
            Nursery::with_deadline(Instant::now() + LONG).run(|n| async move {
                n.spawn(async { Ok(()) });
                Ok::<_, ()>(1)
            }),
        );
        assert_eq!(r, Ok(Ok(1)));

        // Async, a child's error before the deadline.
        let r = rt.block_on(Nursery::with_timeout(LONG).run(|n| async move {
            n.spawn(async { Err("early") });
            n.spawn(std::future::pending());
            Ok(())
        }));
        assert_eq!(r, Ok(Err("early")));

        // Blocking, from a plain thread with the runtime entered.
        let _enter = rt.enter();
        let ended = counter();
        let mut touched = [0u8; 4];
        let r =
            Nursery::with_deadline(Instant::now() + Duration::from_millis(30)).run_blocking(|n| {
                for t in touched.iter_mut() {
                    let e = ended.clone();
                    n.spawn_fiber(move || {
                        *t = 1;
                        park_fiber(e)()
                    });
                }
                Ok::<_, &str>(())
            });
        assert!(r.is_err());
        assert_eq!(touched, [1; 4]);
        assert_eq!(ended.load(SeqCst), 4);

        let r = Nursery::with_timeout(LONG).run_blocking(|n| {
            n.spawn(async { Ok(()) });
            Ok::<_, ()>(2)
        });
        assert_eq!(r, Ok(Ok(2)));
        let r = Nursery::with_timeout(LONG).run_blocking(|n| {
            n.spawn_fiber(|| Err(9));
            Ok::<(), _>(())
        });
        assert_eq!(r, Ok(Err(9)));
    });
}

// ---- nesting ----

#[test]
fn nested_nurseries_cancel_inward_only() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        // An inner failure is the inner nursery's result; the outer child handles it, and
        // its sibling in the outer nursery is not cancelled.
        let sibling_done = Arc::new(AtomicBool::new(false));
        let s = sibling_done.clone();
        let r = rt.block_on(weft::nursery(move |n| async move {
            n.spawn(async {
                let inner = weft::nursery(|m| async move {
                    m.spawn(async { Err("inner") });
                    Ok::<_, &str>(())
                })
                .await;
                assert_eq!(inner, Err("inner"));
                Ok(())
            });
            n.spawn_fiber(|| {
                let inner = weft::nursery_blocking(|m| {
                    m.spawn_fiber(|| Err("inner fiber"));
                    Ok::<_, &str>(())
                });
                assert_eq!(inner, Err("inner fiber"));
                Ok(())
            });
            n.spawn(async move {
                weft::time::sleep(Duration::from_millis(20)).await;
                s.store(true, SeqCst);
                Ok(())
            });
            Ok::<_, &str>(())
        }));
        assert_eq!(r, Ok(()));
        assert!(
            sibling_done.load(SeqCst),
            "an inner failure cancelled outward"
        );

        // Cancelling the outer nursery cancels the inner ones' children.
        let ended = counter();
        let started = counter();
        let (e, s, st) = (ended.clone(), started.clone(), started.clone());
        let r = rt.block_on(weft::nursery(move |n| async move {
            let started = st;
            let (e1, s1) = (e.clone(), s.clone());
            n.spawn(async move {
                weft::nursery(move |m| async move {
                    s1.fetch_add(1, SeqCst);
                    m.spawn(park_task(e1));
                    Ok(())
                })
                .await
            });
            let (e3, s3) = (e.clone(), s.clone());
            n.spawn_fiber(move || {
                // An async nursery awaited by a fiber, unwound with it.
                weft::wait(weft::nursery(move |m| async move {
                    m.spawn(park_task(e3));
                    s3.fetch_add(1, SeqCst);
                    std::future::pending::<()>().await;
                    Ok(())
                }))
            });
            n.spawn_fiber(move || {
                weft::nursery_blocking(|m| {
                    let e = e.clone();
                    m.spawn_fiber(park_fiber(e));
                    s.fetch_add(1, SeqCst);
                    Ok(())
                })
            });
            let deadline = Instant::now() + TIMEOUT;
            while started.load(SeqCst) < 3 {
                assert!(
                    Instant::now() < deadline,
                    "hang: the inner nurseries never started"
                );
                weft::time::sleep(Duration::from_millis(1)).await;
            }
            n.cancel();
            Ok::<_, &str>(())
        }));
        assert_eq!(r, Ok(()));
        // Every inner nursery's children ended before the outer one returned: the
        // blocking one waited for its child before its fiber ended; an async one,
        // dropped with its task (or unwound with its fiber), keeps that child's place
        // in the outer nursery until its own child has ended.
        assert_eq!(
            ended.load(SeqCst),
            3,
            "the inner children were not cancelled"
        );
    });
}

// ---- the blocking form ----

/// A blocking nursery whose children (tasks and fibers) write into the caller's stack
/// array after a delay; returns the array.
fn borrowing_nursery() -> [u64; 8] {
    let mut slots = [0u64; 8];
    let r = weft::nursery_blocking(|n| {
        for (i, s) in slots.iter_mut().enumerate() {
            if i % 2 == 0 {
                n.spawn(async move {
                    weft::time::sleep(Duration::from_millis(3)).await;
                    *s = i as u64 + 1;
                    Ok(())
                });
            } else {
                n.spawn_fiber(move || {
                    weft::fiber::sleep(Duration::from_millis(3));
                    *s = i as u64 + 1;
                    Ok(())
                });
            }
        }
        Ok::<_, ()>(())
    });
    assert_eq!(r, Ok(()));
    slots
}

const FILLED: [u64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

#[test]
fn blocking_from_every_context_with_borrowed_children() {
    with_timeout(|| {
        let rt = Builder::new().worker_threads(2).build().unwrap();
        // A plain thread with the runtime entered.
        {
            let _enter = rt.enter();
            assert_eq!(borrowing_nursery(), FILLED);
        }
        // A fiber.
        let h = rt.handle().clone();
        let _enter = h.enter();
        assert_eq!(
            weft::fiber::spawn(borrowing_nursery).join().unwrap(),
            FILLED
        );
        // A worker (inside an async task).
        assert_eq!(
            rt.spawn(async { borrowing_nursery() }).join().unwrap(),
            FILLED
        );
        // A one-worker runtime: the worker runs the children while it waits.
        let one = Builder::new().worker_threads(1).build().unwrap();
        assert_eq!(
            one.spawn(async { borrowing_nursery() }).join().unwrap(),
            FILLED
        );
        let _one = one.enter();
        assert_eq!(
            weft::fiber::spawn(borrowing_nursery).join().unwrap(),
            FILLED
        );
    });
}

#[test]
fn blocking_first_error_cancels_the_others() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let _enter = rt.enter();
        let ended = counter();
        let body_went_on = Arc::new(AtomicBool::new(false));
        let r = weft::nursery_blocking(|n| {
            for _ in 0..3 {
                n.spawn(park_task(ended.clone()));
                let e = ended.clone();
                n.spawn_fiber(park_fiber(e));
            }
            n.spawn_fiber(|| {
                weft::fiber::sleep(Duration::from_millis(2));
                Err("fiber failed")
            });
            std::thread::sleep(Duration::from_millis(20));
            body_went_on.store(true, SeqCst);
            Ok(())
        });
        assert_eq!(r, Err("fiber failed"));
        assert_eq!(ended.load(SeqCst), 6);
        assert!(
            body_went_on.load(SeqCst),
            "the blocking body runs to its end"
        );

        // The body's own error cancels the children.
        let ended = counter();
        let r: Result<(), &str> = weft::nursery_blocking(|n| {
            n.spawn(park_task(ended.clone()));
            Err("body failed")
        });
        assert_eq!(r, Err("body failed"));
        assert_eq!(ended.load(SeqCst), 1);
    });
}

#[test]
fn blocking_panics_are_resumed_after_every_child_ended() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let _enter = rt.enter();
        // A child's panic.
        let ended = counter();
        let r = catch_unwind(AssertUnwindSafe(|| {
            weft::nursery_blocking(|n| {
                n.spawn(park_task(ended.clone()));
                n.spawn(async {
                    weft::time::sleep(Duration::from_millis(2)).await;
                    panic!("task boom")
                });
                Ok::<_, &str>(())
            })
        }));
        assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"task boom"));
        assert_eq!(ended.load(SeqCst), 1);

        // The body's panic: children that borrow the frame (one shielded, so it goes on
        // writing after the panic) have all ended when it is resumed.
        // The body panics once both have started (a fixed pause let a loaded machine
        // cancel them unstarted, which the test then took for a child outliving it).
        let ended = counter();
        let started = counter();
        let mut late = [0u8; 2];
        let r = catch_unwind(AssertUnwindSafe(|| {
            weft::nursery_blocking(|n| {
                let [a, b] = &mut late;
                let s = started.clone();
                n.spawn(async move {
                    s.fetch_add(1, SeqCst);
                    weft::task::shield(weft::time::sleep(Duration::from_millis(20))).await;
                    *a = 1;
                    Ok(())
                });
                let (e, s) = (ended.clone(), started.clone());
                n.spawn_fiber(move || {
                    *b = 1;
                    s.fetch_add(1, SeqCst);
                    park_fiber(e)()
                });
                wait_until("both children started", || started.load(SeqCst) == 2);
                panic!("body boom");
                #[allow(unreachable_code)]
                Ok::<_, &str>(())
            })
        }));
        assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"body boom"));
        assert_eq!(late, [1, 1], "a child outlived the nursery");
        assert_eq!(ended.load(SeqCst), 1);
    });
}

#[test]
fn blocking_cancel_and_spawning_after_it() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let _enter = rt.enter();
        let ended = counter();
        let mut ran = false;
        let r = weft::nursery_blocking(|n| {
            n.spawn(park_task(ended.clone()));
            let e = ended.clone();
            n.spawn_fiber(park_fiber(e));
            n.cancel();
            n.spawn_fiber(|| {
                ran = true;
                Ok(())
            });
            n.cancel(); // twice is fine
            Ok::<_, &str>("value")
        });
        assert_eq!(r, Ok("value"));
        assert_eq!(ended.load(SeqCst), 2);
        assert!(!ran);
    });
}

/// Lives on the owner fiber's stack; its drop (when the owner unwinds) records how
/// many children had ended by then.
struct OwnerFrame<'a> {
    ended: &'a AtomicUsize,
    seen: mpsc::Sender<usize>,
}

impl Drop for OwnerFrame<'_> {
    fn drop(&mut self) {
        let _ = self.seen.send(self.ended.load(SeqCst));
    }
}

#[test]
fn an_owner_fiber_aborted_in_its_wait_cancels_and_outlives_its_children() {
    with_timeout(|| {
        // The owner is aborted while it waits for its children (`in_body: false`), or
        // while its body waits on something else (the unwind then passes through the
        // nursery, which cancels and waits before it lets it go on).
        for (workers, in_body) in [(1, false), (2, false), (1, true), (2, true)] {
            let rt = Builder::new().worker_threads(workers).build().unwrap();
            let _enter = rt.enter();
            let (seen_tx, seen_rx) = mpsc::channel();
            let (waiting_tx, waiting_rx) = mpsc::channel();
            // Every child starts before the abort: one cancelled unstarted never bumps
            // `ended` (under load 5 ms was not always enough, seen in a soak).
            let started = Arc::new(AtomicUsize::new(0));
            let s = started.clone();
            let owner = weft::fiber::spawn(move || {
                // Children borrow these, from the owner's stack.
                let ended = AtomicUsize::new(0);
                let mut written = [0u64; 3];
                let _frame = OwnerFrame {
                    ended: &ended,
                    seen: seen_tx,
                };
                let _ = weft::nursery_blocking(|n| {
                    let [a, b, c] = &mut written;
                    let ended = &ended;
                    let (s1, s2, s3) = (s.clone(), s.clone(), s);
                    // Parked children: cancelled by the owner's abort.
                    n.spawn_fiber(move || {
                        struct Bump<'a>(&'a AtomicUsize);
                        impl Drop for Bump<'_> {
                            fn drop(&mut self) {
                                self.0.fetch_add(1, SeqCst);
                            }
                        }
                        let _b = Bump(ended);
                        s1.fetch_add(1, SeqCst);
                        *a = 1;
                        weft::fiber::sleep(LONG);
                        Ok::<_, ()>(())
                    });
                    // Shielded children: go on after the abort, touching the frame late.
                    n.spawn(async move {
                        s2.fetch_add(1, SeqCst);
                        weft::task::shield(weft::time::sleep(Duration::from_millis(30))).await;
                        *b = 2;
                        ended.fetch_add(1, SeqCst);
                        Ok(())
                    });
                    n.spawn_fiber(move || {
                        s3.fetch_add(1, SeqCst);
                        weft::wait(weft::task::shield(weft::time::sleep(
                            Duration::from_millis(30),
                        )));
                        *c = 3;
                        ended.fetch_add(1, SeqCst);
                        Ok(())
                    });
                    waiting_tx.send(()).unwrap();
                    if in_body {
                        weft::fiber::sleep(LONG);
                    }
                    Ok(())
                });
                unreachable!("the owner was aborted: it unwinds in its wait");
            });
            waiting_rx.recv().unwrap();
            common::wait_until("every child started", || started.load(SeqCst) == 3);
            std::thread::sleep(Duration::from_millis(5));
            owner.abort();
            let r = owner.join();
            assert!(r.unwrap_err().is_cancelled());
            let seen = seen_rx
                .recv_timeout(TIMEOUT)
                .expect("the owner frame was dropped");
            assert_eq!(seen, 3, "the owner unwound before its children ended ({workers} workers, in body: {in_body})");
        }
    });
}

const CHILD: &str = "WEFT_NURSERY_CHILD";

/// Not a real test unless run as a child: a plain thread that entered no runtime uses
/// the most recently started one still alive (process-wide, hence the child process).
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    assert_eq!(case, "no_runtime_entered");
    let rt = Runtime::new().unwrap();
    let before = rt.stats().total_spawned;
    std::thread::spawn(|| {
        assert!(weft::Handle::try_current().is_err());
        assert_eq!(borrowing_nursery(), FILLED);
        let r = Nursery::with_timeout(Duration::from_millis(10)).run_blocking(|n| {
            n.spawn(std::future::pending::<Result<(), ()>>());
            Ok(())
        });
        assert!(r.is_err());
    })
    .join()
    .unwrap();
    assert!(
        rt.stats().total_spawned > before,
        "the children ran elsewhere"
    );
    println!("CHILD done=ok");
}

#[test]
fn blocking_on_a_plain_thread_without_a_runtime_uses_the_latest() {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, "no_runtime_entered")],
        common::child::LIMIT,
    );
    out.assert_finished();
}

/// A runtime dropped while an owner fiber waits in `nursery_blocking` (in its body,
/// or for its children), with children that borrow its frame parked on it: the drop
/// neither hangs nor lets a child see a dead frame (shutdown ignores shields; the
/// waiting owner's stack is pinned, so it is leaked rather than unwound).
#[test]
fn dropping_the_runtime_while_an_owner_fiber_waits() {
    with_timeout(|| {
        for (workers, in_body) in [(1, false), (2, false), (1, true), (2, true)] {
            let rt = Builder::new().worker_threads(workers).build().unwrap();
            let enter = rt.enter();
            let (tx, rx) = mpsc::channel();
            let _owner = weft::fiber::spawn(move || {
                let frame = [7u8; 16];
                let _ = weft::nursery_blocking(|n| {
                    let f = &frame;
                    n.spawn_fiber(move || {
                        weft::fiber::sleep(LONG);
                        assert_eq!(f[0], 7);
                        Ok::<_, ()>(())
                    });
                    n.spawn(async move {
                        weft::time::sleep(LONG).await;
                        assert_eq!(f[1], 7);
                        Ok(())
                    });
                    tx.send(()).unwrap();
                    if in_body {
                        weft::fiber::sleep(LONG);
                    }
                    Ok(())
                });
            });
            rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(10));
            drop(enter);
            drop(rt);
        }
    });
}
