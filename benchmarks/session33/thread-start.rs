// What one rescue's thread costs: a named std thread started, running an empty body,
// and gone (joined here, to count it whole; the rescue's is detached).
use std::time::Instant;
fn main() {
    for run in 0..5 {
        let n = 2000;
        let t = Instant::now();
        for _ in 0..n {
            std::thread::Builder::new().name("weft-drivers".into()).spawn(|| {}).unwrap().join().unwrap();
        }
        println!("run {run}: {:.1} us per thread start and end", t.elapsed().as_nanos() as f64 / n as f64 / 1000.0);
    }
}
