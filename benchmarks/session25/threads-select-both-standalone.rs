// select_both on unbounded channels, threads: 4 senders, 4 receivers, 4 channels.
use std::time::Instant;
const A: usize = 4;
fn weft_run(n: usize) -> f64 {
    use weft::chan::{unbounded, Select};
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| unbounded::<usize>()).unzip();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..A {
            let txs: Vec<_> = txs.iter().cloned().collect();
            s.spawn(move || {
                for i in 0..n / A {
                    let mut sel = Select::new();
                    for tx in &txs { sel.send(tx); }
                    let op = sel.select();
                    let k = op.index();
                    op.send(&txs[k], i).unwrap();
                }
            });
        }
        let mut got = 0;
        let hs: Vec<_> = (0..A).map(|_| {
            let rxs: Vec<_> = rxs.iter().cloned().collect();
            s.spawn(move || {
                let mut open: Vec<usize> = (0..A).collect();
                let mut c = 0;
                while !open.is_empty() {
                    let mut sel = Select::new();
                    for &i in &open { sel.recv(&rxs[i]); }
                    let op = sel.select();
                    let k = op.index();
                    match op.recv(&rxs[open[k]]) { Ok(_) => c += 1, Err(_) => { open.remove(k); } }
                }
                c
            })
        }).collect();
        drop(txs);
        for h in hs { got += h.join().unwrap(); }
        assert_eq!(got, n / A * A);
    });
    t0.elapsed().as_nanos() as f64 / n as f64
}
fn cb_run(n: usize) -> f64 {
    use crossbeam_channel::{unbounded, Select};
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| unbounded::<usize>()).unzip();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..A {
            let txs: Vec<_> = txs.iter().cloned().collect();
            s.spawn(move || {
                for i in 0..n / A {
                    let mut sel = Select::new();
                    for tx in &txs { sel.send(tx); }
                    let op = sel.select();
                    let k = op.index();
                    op.send(&txs[k], i).unwrap();
                }
            });
        }
        let mut got = 0;
        let hs: Vec<_> = (0..A).map(|_| {
            let rxs: Vec<_> = rxs.iter().cloned().collect();
            s.spawn(move || {
                let mut open: Vec<usize> = (0..A).collect();
                let mut c = 0;
                while !open.is_empty() {
                    let mut sel = Select::new();
                    for &i in &open { sel.recv(&rxs[i]); }
                    let op = sel.select();
                    let k = op.index();
                    match op.recv(&rxs[open[k]]) { Ok(_) => c += 1, Err(_) => { open.remove(k); } }
                }
                c
            })
        }).collect();
        drop(txs);
        for h in hs { got += h.join().unwrap(); }
        assert_eq!(got, n / A * A);
    });
    t0.elapsed().as_nanos() as f64 / n as f64
}
fn main() {
    let who = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(400_000);
    let r = if who == "weft" { weft_run(n) } else { cb_run(n) };
    println!("{who} {r:.1}");
}
