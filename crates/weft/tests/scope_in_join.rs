//! Scope spawns made inside the first half of a join land on the worker's deque above
//! the join's promoted second half; taking that half back must run them, not drop them.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::with_timeout;
use weft::par::prelude::*;

#[test]
fn scope_spawns_inside_shared_joins_all_run() {
    with_timeout(|| {
        let rt = weft::Builder::new().worker_threads(4).build().unwrap();
        for _ in 0..20 {
            let ran = AtomicUsize::new(0);
            rt.block_on(async {
                weft::scope(|s| {
                    (0..20_000u32).into_par_iter().for_each(|_| {
                        s.spawn(|_| {
                            ran.fetch_add(1, Ordering::Relaxed);
                        });
                    });
                });
            });
            assert_eq!(ran.load(Ordering::Relaxed), 20_000);
        }
    });
}
