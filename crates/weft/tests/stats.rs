//! Runtime statistics.

mod common;

use common::*;

#[test]
fn stats_count_spawned_and_polled_tasks() {
    with_timeout(|| {
        const K: u64 = 1000;
        let rt = workers(2);
        let before = rt.stats();
        assert_eq!(before.num_workers, 2);
        assert_eq!(before.workers.len(), 2);

        let handles: Vec<_> = (0..K).map(|i| rt.spawn(async move { i })).collect();
        let sum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, K * (K - 1) / 2);

        let after = rt.stats();
        assert!(
            after.total_spawned >= K,
            "total_spawned = {}",
            after.total_spawned
        );
        assert!(
            after.total_polled >= K,
            "total_polled = {}",
            after.total_polled
        );
        assert!(after.total_spawned >= before.total_spawned + K);
        assert_eq!(after.num_workers, 2);
        assert_eq!(after.workers.len(), 2);
        let per_worker: u64 = after.workers.iter().map(|w| w.tasks_polled).sum();
        assert!(
            per_worker <= after.total_polled,
            "workers polled {per_worker} > total {}",
            after.total_polled
        );

        // Spawned from inside a task, seen through the Handle.
        let inner = rt
            .spawn(async {
                let hs: Vec<_> = (0..K).map(|_| weft::spawn(async {})).collect();
                for h in hs {
                    h.await.unwrap();
                }
                weft::Handle::current().stats()
            })
            .join()
            .unwrap();
        assert!(inner.total_spawned > after.total_spawned + K);
        assert!(inner.total_polled >= after.total_polled + K);

        let table = rt.stats().to_string();
        assert!(
            table.lines().count() >= 2,
            "Stats Display is not a table: {table:?}"
        );
    })
}
