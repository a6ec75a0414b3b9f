use std::time::Instant;
const N: usize = 400_000;
fn weft_sel(bounded: bool) -> u64 {
    let chans: Vec<_> = (0..4).map(|_| if bounded { weft::chan::bounded::<usize>(N) } else { weft::chan::unbounded::<usize>() }).collect();
    for (i, (tx, _)) in chans.iter().enumerate() { for j in 0..N / 4 { tx.send_blocking(i * N + j).unwrap(); } }
    let mut sum = 0u64;
    for _ in 0..N {
        let mut sel = weft::chan::Select::new();
        for (_, rx) in &chans { sel.recv(rx); }
        let op = sel.select();
        let i = op.index();
        sum += op.recv(&chans[i].1).unwrap() as u64;
    }
    sum
}
fn cb_sel(bounded: bool) -> u64 {
    let chans: Vec<_> = (0..4).map(|_| if bounded { crossbeam_channel::bounded::<usize>(N) } else { crossbeam_channel::unbounded::<usize>() }).collect();
    for (i, (tx, _)) in chans.iter().enumerate() { for j in 0..N / 4 { tx.send(i * N + j).unwrap(); } }
    let mut sum = 0u64;
    for _ in 0..N {
        let mut sel = crossbeam_channel::Select::new();
        for (_, rx) in &chans { sel.recv(rx); }
        let op = sel.select();
        let i = op.index();
        sum += op.recv(&chans[i].1).unwrap() as u64;
    }
    sum
}
fn weft_seq(bounded: bool) -> u64 {
    let (tx, rx) = if bounded { weft::chan::bounded::<usize>(N) } else { weft::chan::unbounded::<usize>() };
    let t = Instant::now();
    for j in 0..N { tx.send_blocking(j).unwrap(); }
    let a = t.elapsed();
    let mut s = 0u64;
    for _ in 0..N { s += rx.recv_blocking().unwrap() as u64; }
    let b = t.elapsed();
    drop((tx, rx));
    let c = t.elapsed();
    eprintln!("weft seq send {:.1} recv {:.1} drop {:.2} ns/msg", a.as_nanos() as f64 / N as f64, (b - a).as_nanos() as f64 / N as f64, (c - b).as_nanos() as f64 / N as f64);
    s
}
fn cb_seq(bounded: bool) -> u64 {
    let (tx, rx) = if bounded { crossbeam_channel::bounded::<usize>(N) } else { crossbeam_channel::unbounded::<usize>() };
    let t = Instant::now();
    for j in 0..N { tx.send(j).unwrap(); }
    let a = t.elapsed();
    let mut s = 0u64;
    for _ in 0..N { s += rx.recv().unwrap() as u64; }
    let b = t.elapsed();
    drop((tx, rx));
    let c = t.elapsed();
    eprintln!("cb   seq send {:.1} recv {:.1} drop {:.2} ns/msg", a.as_nanos() as f64 / N as f64, (b - a).as_nanos() as f64 / N as f64, (c - b).as_nanos() as f64 / N as f64);
    s
}
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bounded = args.get(2).map(|s| s == "b").unwrap_or(false);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    for _ in 0..reps {
        let t = Instant::now();
        let s = match args[1].as_str() {
            "weft" => weft_sel(bounded),
            "cb" => cb_sel(bounded),
            "weftseq" => weft_seq(bounded),
            "cbseq" => cb_seq(bounded),
            _ => panic!(),
        };
        eprintln!("{} {} {:.1} ns/msg (sum {})", args[1], if bounded { "bounded" } else { "unbounded" }, t.elapsed().as_nanos() as f64 / N as f64, s);
    }
}
