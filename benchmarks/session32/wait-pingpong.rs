// Task-to-task ping-pong through blocking waits on a one-worker runtime: every message
// sets a waiting task's stack aside and resumes it (the WaitSignal path), so the
// signal's clear runs once per wake.
use std::time::Instant;
fn main() {
    let n: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(200_000);
    let rt = weft::Builder::new().worker_threads(1).interactive_threads(0).build().unwrap();
    let (atx, arx) = weft::chan::bounded::<usize>(1);
    let (btx, brx) = weft::chan::bounded::<usize>(1);
    let start = Instant::now();
    let a = rt.spawn(async move {
        for i in 0..n {
            weft::wait(atx.send(i)).unwrap();
            let _ = weft::wait(brx.recv()).unwrap();
        }
    });
    let b = rt.spawn(async move {
        for _ in 0..n {
            let v = weft::wait(arx.recv()).unwrap();
            weft::wait(btx.send(v)).unwrap();
        }
    });
    a.join().unwrap();
    b.join().unwrap();
    let el = start.elapsed();
    println!("{:.1} ns per round trip", el.as_nanos() as f64 / n as f64);
}
