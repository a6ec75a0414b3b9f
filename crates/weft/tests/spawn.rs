//! Spawning: many tasks, nested spawning, spawning from plain threads.

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use common::*;
use futures_channel::oneshot;
use weft::{AbortHandle, JoinError, JoinHandle, Runtime};

const N: u64 = 100_000;

#[test]
fn hundred_thousand_tasks_from_outside() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let handles: Vec<_> = (0..N).map(|i| rt.spawn(async move { i * 3 })).collect();
        let sum = rt.block_on(async move {
            let mut sum = 0;
            for h in handles {
                sum += h.await.unwrap();
            }
            sum
        });
        assert_eq!(sum, 3 * N * (N - 1) / 2);
        let stats = rt.stats();
        assert!(
            stats.total_spawned >= N,
            "total_spawned = {}",
            stats.total_spawned
        );
        assert!(
            stats.total_polled >= N,
            "total_polled = {}",
            stats.total_polled
        );
    })
}

#[test]
fn hundred_thousand_tasks_from_inside_a_task() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let sum = rt
            .spawn(async {
                let handles: Vec<_> = (0..N).map(|i| weft::spawn(async move { i + 1 })).collect();
                let mut sum = 0;
                for h in handles {
                    sum += h.await.unwrap();
                }
                sum
            })
            .join()
            .unwrap();
        assert_eq!(sum, N * (N + 1) / 2);
    })
}

/// A task that counts itself, spawns `fanout` children (which do the same
/// down to `depth` 0) and returns the size of its subtree.
fn node(
    depth: u32,
    fanout: u64,
    count: Arc<AtomicUsize>,
) -> Pin<Box<dyn Future<Output = u64> + Send>> {
    Box::pin(async move {
        count.fetch_add(1, Ordering::Relaxed);
        if depth == 0 {
            return 1;
        }
        let children: Vec<_> = (0..fanout)
            .map(|_| weft::spawn(node(depth - 1, fanout, count.clone())))
            .collect();
        let mut total = 1;
        for child in children {
            total += child.await.unwrap();
        }
        total
    })
}

fn check_tree(rt: Runtime) {
    // 1 + 8 + 64 + 512 + 4096 nodes.
    let count = counter();
    let c = count.clone();
    let total = rt.block_on(async move { weft::spawn(node(4, 8, c)).await.unwrap() });
    assert_eq!(total, 4681);
    assert_eq!(load(&count), 4681);
}

#[test]
fn nested_spawn_tree() {
    with_timeout(|| check_tree(Runtime::new().unwrap()))
}

#[test]
fn nested_spawn_tree_one_worker() {
    with_timeout(|| check_tree(workers(1)))
}

#[test]
fn detached_grandchildren_all_run() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let count = counter();
        let (tx, rx) = mpsc::channel::<u32>();
        let c = count.clone();
        drop(rt.spawn(async move {
            c.fetch_add(1, Ordering::SeqCst);
            for i in 0..10 {
                let (c, tx) = (c.clone(), tx.clone());
                // Children and grandchildren are detached: their handles are dropped.
                drop(weft::spawn(async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    for j in 0..10 {
                        let (c, tx) = (c.clone(), tx.clone());
                        drop(weft::spawn(async move {
                            c.fetch_add(1, Ordering::SeqCst);
                            tx.send(i * 10 + j).unwrap();
                        }));
                    }
                }));
            }
        }));
        let mut leaves = HashSet::new();
        for _ in 0..100 {
            leaves.insert(
                rx.recv_timeout(TIMEOUT)
                    .expect("hang: a detached grandchild never ran"),
            );
        }
        assert_eq!(leaves.len(), 100);
        assert_eq!(load(&count), 111);
    })
}

#[test]
fn spawn_and_join_from_plain_threads() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let handle = rt.handle().clone();
                std::thread::spawn(move || {
                    let hs: Vec<_> = (0..1000u64)
                        .map(|i| handle.spawn(async move { t * 1000 + i }))
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
                })
            })
            .collect();
        let sum: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(sum, (0..4000).sum::<u64>());
    })
}

#[test]
fn task_ids_are_distinct() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let handles: Vec<_> = (0..1000).map(|_| rt.spawn(async {})).collect();
        let ids: HashSet<weft::task::Id> = handles.iter().map(|h| h.id()).collect();
        assert_eq!(ids.len(), 1000);
        for h in &handles {
            assert_eq!(h.abort_handle().id(), h.id());
            assert!(!format!("{}", h.id()).is_empty());
        }
        for h in handles {
            h.join().unwrap();
        }
    })
}

#[test]
fn is_finished_tracks_completion() {
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let (tx, rx) = oneshot::channel::<u8>();
        let h = rt.spawn(async move { rx.await.unwrap() });
        std::thread::sleep(std::time::Duration::from_millis(10));
        assert!(
            !h.is_finished(),
            "a task waiting on a channel reports finished"
        );
        tx.send(5).unwrap();
        wait_until("the task is finished", || h.is_finished());
        assert_eq!(h.join().unwrap(), 5);
    })
}

#[test]
fn handle_types_have_the_promised_traits() {
    fn join_handle<T: Future<Output = Result<u8, JoinError>> + Send + Unpin + 'static>(_: &T) {}
    fn abort_handle<T: Clone + Send + 'static>(_: &T) {}
    fn error<T: std::error::Error + Send + 'static>() {}
    fn handle<T: Clone + Send + 'static>(_: &T) {}
    with_timeout(|| {
        let rt = Runtime::new().unwrap();
        let h: JoinHandle<u8> = rt.spawn(async { 1 });
        join_handle(&h);
        let a: AbortHandle = h.abort_handle();
        abort_handle(&a);
        handle(rt.handle());
        error::<JoinError>();
        assert_eq!(h.join().unwrap(), 1);
    })
}
