//! `#[weft::test]` and `#[weft::main]`.

mod common;

use common::with_timeout;
use futures_channel::oneshot;
use weft::Handle;

#[weft::test]
async fn test_attribute_runs_the_body_on_a_runtime() {
    assert!(Handle::try_current().is_ok());
    let v = weft::spawn(async { 20 }).await.unwrap();
    assert_eq!(v + 1, 21);
}

#[weft::test(worker_threads = 1)]
async fn test_attribute_with_one_worker() {
    assert_eq!(Handle::current().stats().num_workers, 1);
}

#[weft::test(worker_threads = 3)]
async fn test_attribute_with_three_workers() {
    let stats = Handle::current().stats();
    assert_eq!(stats.num_workers, 3);
    assert_eq!(stats.workers.len(), 3);
}

#[weft::test]
async fn test_attribute_with_a_result() -> Result<(), std::num::ParseIntError> {
    let n: u32 = "41".parse()?;
    assert_eq!(weft::spawn(async move { n + 1 }).await.unwrap(), 42);
    Ok(())
}

#[weft::test]
#[should_panic(expected = "boom from an async test")]
async fn test_attribute_keeps_should_panic() {
    panic!("boom from an async test");
}

#[weft::test]
async fn test_attribute_awaits_a_foreign_thread() {
    let (tx, rx) = oneshot::channel();
    std::thread::spawn(move || tx.send(5u8).unwrap());
    assert_eq!(rx.await.unwrap(), 5);
}

/// `#[weft::main]` keeps the name, visibility, attributes and return type.
#[weft::main]
#[inline(never)]
pub(crate) async fn main_style() -> u64 {
    let hs: Vec<_> = (1..=10u64).map(|i| weft::spawn(async move { i })).collect();
    let mut sum = 0;
    for h in hs {
        sum += h.await.unwrap();
    }
    sum
}

#[weft::main(worker_threads = 2)]
async fn main_with_two_workers() -> usize {
    Handle::current().stats().num_workers
}

#[weft::main(worker_threads = 1)]
async fn main_with_early_return() -> Result<u8, String> {
    let v = weft::spawn(async { 3u8 })
        .await
        .map_err(|e| e.to_string())?;
    if v == 3 {
        return Ok(v * 2);
    }
    Err("unreachable".into())
}

#[test]
fn main_attribute() {
    assert_eq!(with_timeout(main_style), 55);
    assert_eq!(with_timeout(main_with_two_workers), 2);
    assert_eq!(with_timeout(main_with_early_return), Ok(6));
    // Each call builds and drops its own runtime.
    assert!(Handle::try_current().is_err());
}
