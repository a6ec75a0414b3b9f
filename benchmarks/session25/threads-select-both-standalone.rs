// threads_unbounded_select_both's shape as a standalone program (session 25): 4 unbounded
// channels, 4 threads each sending n/4 values by a select over sends on all 4, and 4
// threads each receiving by a select over receives on the channels still open. Built as a
// binary crate with `weft` and `crossbeam-channel` as dependencies; `sb weft|cb [n]`
// prints ns per message. Both channel crates share one body: their `Select` APIs match.
use std::time::Instant;

const A: usize = 4;

macro_rules! select_both {
    ($chan:path, $n:expr) => {{
        use $chan as chan;
        let n: usize = $n;
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| chan::unbounded::<usize>()).unzip();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..A {
                let txs: Vec<_> = txs.to_vec();
                s.spawn(move || {
                    for i in 0..n / A {
                        let mut sel = chan::Select::new();
                        for tx in &txs {
                            sel.send(tx);
                        }
                        let op = sel.select();
                        let k = op.index();
                        op.send(&txs[k], i).unwrap();
                    }
                });
            }
            let receivers: Vec<_> = (0..A)
                .map(|_| {
                    let rxs: Vec<_> = rxs.to_vec();
                    s.spawn(move || {
                        let mut open: Vec<usize> = (0..A).collect();
                        let mut got = 0;
                        while !open.is_empty() {
                            let mut sel = chan::Select::new();
                            for &i in &open {
                                sel.recv(&rxs[i]);
                            }
                            let op = sel.select();
                            let k = op.index();
                            match op.recv(&rxs[open[k]]) {
                                Ok(_) => got += 1,
                                Err(_) => {
                                    open.remove(k);
                                }
                            }
                        }
                        got
                    })
                })
                .collect();
            drop(txs);
            let got: usize = receivers.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(got, n / A * A);
        });
        t0.elapsed().as_nanos() as f64 / n as f64
    }};
}

fn main() {
    let who = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(400_000);
    let r = if who == "weft" {
        select_both!(weft::chan, n)
    } else {
        select_both!(crossbeam_channel, n)
    };
    println!("{who} {r:.1}");
}
