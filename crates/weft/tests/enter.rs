//! `Runtime::enter` / `Handle::enter`: what a plain thread makes while a guard lives
//! belongs to that runtime, not to the most recently started one.

mod common;

use common::named_runtime as named;

#[test]
fn an_entered_runtime_wins_over_the_latest_one() {
    let first = weft::Builder::new().worker_threads(1).build().unwrap();
    let second = weft::Builder::new().worker_threads(1).build().unwrap();
    let on = |rt: &weft::Runtime| {
        rt.spawn(async { weft::Handle::current().stats().num_workers })
            .join()
            .unwrap()
    };
    assert_eq!(on(&first), 1);
    {
        let _g = first.enter();
        // A socket made here registers with `first`: dropping `second` leaves it alone.
        let l = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        assert_eq!(first.stats().io_sources, 1);
        assert_eq!(second.stats().io_sources, 0);
        drop(l);
        {
            let _inner = second.enter();
            let l = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
            assert_eq!(second.stats().io_sources, 1);
            drop(l);
        }
        // The inner guard ended: `first` is current again.
        let _l = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        assert_eq!(first.stats().io_sources, 1);
    }
    assert!(weft::Handle::try_current().is_err());
    drop(second);
    drop(first);
}

/// The name prefix of the runtime a plain `weft::spawn` from here goes to.
async fn spawns_go_to() -> String {
    weft::spawn(async { std::thread::current().name().unwrap_or("").to_string() })
        .await
        .unwrap()
}

fn join_within<T: Send + 'static>(h: weft::JoinHandle<T>, secs: u64) -> T {
    common::spawn::join_within(h, secs).unwrap()
}

/// Two tasks on one worker of `a` each `block_on` another runtime and wait there, their
/// stacks set aside in turn, while a third task of `a` spawns: each `block_on`'s own
/// polls spawn onto the runtime it entered, the third task onto `a`, and the first wait
/// ending (its entry no longer the innermost) leaves the other's runtime alone.
#[test]
fn interleaved_block_ons_on_one_worker_keep_their_own_runtimes() {
    let a = named("enter-a", 1);
    let b = std::sync::Arc::new(named("enter-b", 1));
    let c = std::sync::Arc::new(named("enter-c", 1));
    for _ in 0..20 {
        let (go_b, wait_b) = weft::chan::bounded::<()>(1);
        let (go_c, wait_c) = weft::chan::bounded::<()>(1);
        let (in_b, b_in) = weft::chan::bounded::<()>(1);
        let (in_c, c_in) = weft::chan::bounded::<()>(1);
        let tb = a.spawn({
            let b = b.clone();
            async move {
                b.block_on(async move {
                    let before = spawns_go_to().await;
                    in_b.send(()).await.unwrap();
                    wait_b.recv().await.unwrap();
                    (before, spawns_go_to().await)
                })
            }
        });
        weft::wait(b_in.recv()).unwrap();
        let tc = a.spawn({
            let c = c.clone();
            async move {
                c.block_on(async move {
                    in_c.send(()).await.unwrap();
                    wait_c.recv().await.unwrap();
                    spawns_go_to().await
                })
            }
        });
        weft::wait(c_in.recv()).unwrap();
        // Both waits are set aside on a's only worker now.
        let plain = a.spawn(spawns_go_to());
        assert!(join_within(plain, 30).starts_with("enter-a"));
        go_b.send_blocking(()).unwrap();
        let (before, after) = join_within(tb, 30);
        assert!(before.starts_with("enter-b"), "{before}");
        assert!(after.starts_with("enter-b"), "{after}");
        let plain = a.spawn(spawns_go_to());
        assert!(join_within(plain, 30).starts_with("enter-a"));
        go_c.send_blocking(()).unwrap();
        let got = join_within(tc, 30);
        assert!(got.starts_with("enter-c"), "{got}");
        let plain = a.spawn(spawns_go_to());
        assert!(join_within(plain, 30).starts_with("enter-a"));
    }
}

/// An enter guard inside a task or a fiber on a worker: the task's spawns go to the
/// entered runtime while the guard lives, to the worker's own once it drops; a fiber
/// that suspends with a guard keeps it across the wait, and what the worker runs
/// meanwhile does not see it.
#[test]
fn a_guard_on_a_worker_counts_for_its_own_task_or_fiber() {
    let a = named("guard-a", 1);
    let b = std::sync::Arc::new(named("guard-b", 1));
    for _ in 0..20 {
        let t = a.spawn({
            let b = b.clone();
            async move {
                let name = || {
                    weft::Handle::current()
                        .spawn(async { std::thread::current().name().unwrap_or("").to_string() })
                };
                let g = b.enter();
                let inside =
                    weft::spawn(async { std::thread::current().name().unwrap_or("").to_string() });
                let via_current = name();
                drop(g);
                let after = name();
                (
                    inside.await.unwrap(),
                    via_current.await.unwrap(),
                    after.await.unwrap(),
                )
            }
        });
        let (inside, via_current, after) = join_within(t, 30);
        assert!(inside.starts_with("guard-b"), "{inside}");
        assert!(via_current.starts_with("guard-b"), "{via_current}");
        assert!(after.starts_with("guard-a"), "{after}");

        let (go, wait) = weft::chan::bounded::<()>(1);
        let (ready_tx, ready) = weft::chan::bounded::<()>(1);
        let f = {
            let b = b.clone();
            let _g = a.enter();
            weft::fiber::spawn(move || {
                let _g = b.enter();
                ready_tx.send_blocking(()).unwrap();
                wait.recv_blocking().unwrap();
                weft::wait(spawns_go_to())
            })
        };
        weft::wait(ready.recv()).unwrap();
        // The fiber is suspended on a's only worker with its guard alive.
        let plain = a.spawn(spawns_go_to());
        assert!(join_within(plain, 30).starts_with("guard-a"));
        go.send_blocking(()).unwrap();
        let got = join_within(f, 30);
        assert!(got.starts_with("guard-b"), "{got}");
    }
}
