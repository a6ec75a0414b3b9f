use std::time::{Duration, Instant};
use weft::chan::{bounded, unbounded, Receiver, Select, Sender};

const A: usize = 4;

fn mk(cap: Option<usize>) -> (Sender<usize>, Receiver<usize>) {
    match cap { Some(c) => bounded(c), None => unbounded() }
}

fn select_recv(rxs: &[Receiver<usize>], open: &mut Vec<usize>) -> usize {
    let mut sel = Select::new();
    for &i in open.iter() { sel.recv(&rxs[i]); }
    let op = sel.select();
    let k = op.index();
    match op.recv(&rxs[open[k]]) { Ok(_) => 1, Err(_) => { open.remove(k); 0 } }
}

async fn select_recv_async(rxs: &[Receiver<usize>], open: &mut Vec<usize>) -> usize {
    let mut sel = Select::new();
    for &i in open.iter() { sel.recv(&rxs[i]); }
    let op = sel.select_async().await;
    let k = op.index();
    match op.recv(&rxs[open[k]]) { Ok(_) => 1, Err(_) => { open.remove(k); 0 } }
}

fn select_send(txs: &[Sender<usize>], open: &mut Vec<usize>, m: usize) -> usize {
    let mut sel = Select::new();
    for &i in open.iter() { sel.send(&txs[i]); }
    let op = sel.select();
    let k = op.index();
    match op.send(&txs[open[k]], m) { Ok(_) => 1, Err(_) => { open.remove(k); 0 } }
}

fn cb_select_recv(rxs: &[crossbeam_channel::Receiver<usize>], open: &mut Vec<usize>) -> usize {
    let mut sel = crossbeam_channel::Select::new();
    for &i in open.iter() { sel.recv(&rxs[i]); }
    let op = sel.select();
    let k = op.index();
    match op.recv(&rxs[open[k]]) { Ok(_) => 1, Err(_) => { open.remove(k); 0 } }
}

fn threads_sel(cap: Option<usize>, n: usize) -> Duration {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| mk(cap)).unzip();
    let t = Instant::now();
    std::thread::scope(|s| {
        for tx in txs { s.spawn(move || for i in 0..n / A { tx.send_blocking(i).unwrap(); }); }
        s.spawn(|| { let mut open: Vec<usize> = (0..A).collect(); let mut got = 0; while !open.is_empty() { got += select_recv(&rxs, &mut open); } assert_eq!(got, n); });
    });
    t.elapsed()
}

fn cb_threads_sel(cap: Option<usize>, n: usize) -> Duration {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| match cap { Some(c) => crossbeam_channel::bounded(c), None => crossbeam_channel::unbounded() }).unzip();
    let t = Instant::now();
    std::thread::scope(|s| {
        for tx in txs { s.spawn(move || for i in 0..n / A { tx.send(i).unwrap(); }); }
        s.spawn(|| { let mut open: Vec<usize> = (0..A).collect(); let mut got = 0; while !open.is_empty() { got += cb_select_recv(&rxs, &mut open); } assert_eq!(got, n); });
    });
    t.elapsed()
}

fn threads_both(cap: Option<usize>, n: usize) -> Duration {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| mk(cap)).unzip();
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..A {
            let txs: Vec<_> = txs.clone();
            s.spawn(move || { let mut open: Vec<usize> = (0..A).collect(); for i in 0..n / A { select_send(&txs, &mut open, i); } });
        }
        drop(txs);
        for _ in 0..A {
            let rxs: Vec<_> = rxs.clone();
            s.spawn(move || { let mut open: Vec<usize> = (0..A).collect(); while !open.is_empty() { select_recv(&rxs, &mut open); } });
        }
    });
    t.elapsed()
}

fn cb_select_send(txs: &[crossbeam_channel::Sender<usize>], open: &mut Vec<usize>, m: usize) -> usize {
    let mut sel = crossbeam_channel::Select::new();
    for &i in open.iter() { sel.send(&txs[i]); }
    let op = sel.select();
    let k = op.index();
    match op.send(&txs[open[k]], m) { Ok(_) => 1, Err(_) => { open.remove(k); 0 } }
}

fn cb_threads_both(cap: Option<usize>, n: usize) -> Duration {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| match cap { Some(c) => crossbeam_channel::bounded(c), None => crossbeam_channel::unbounded() }).unzip();
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..A {
            let txs: Vec<_> = txs.clone();
            s.spawn(move || { let mut open: Vec<usize> = (0..A).collect(); for i in 0..n / A { cb_select_send(&txs, &mut open, i); } });
        }
        drop(txs);
        for _ in 0..A {
            let rxs: Vec<_> = rxs.clone();
            s.spawn(move || { let mut open: Vec<usize> = (0..A).collect(); while !open.is_empty() { cb_select_recv(&rxs, &mut open); } });
        }
    });
    t.elapsed()
}

fn fib_spsc(cap: Option<usize>, n: usize) -> Duration {
    let (tx, rx) = mk(cap);
    let t = Instant::now();
    let a = weft::fiber::spawn(move || { for i in 0..n { tx.send_blocking(i).unwrap(); } });
    let b = weft::fiber::spawn(move || { for _ in 0..n { rx.recv_blocking().unwrap(); } });
    a.join().unwrap(); b.join().unwrap();
    t.elapsed()
}

fn fib_mpsc(cap: Option<usize>, n: usize) -> Duration {
    let (tx, rx) = mk(cap);
    let t = Instant::now();
    let mut hs = Vec::new();
    for _ in 0..A { let tx = tx.clone(); hs.push(weft::fiber::spawn(move || { for i in 0..n / A { tx.send_blocking(i).unwrap(); } })); }
    drop(tx);
    let b = weft::fiber::spawn(move || { for _ in 0..n { rx.recv_blocking().unwrap(); } });
    for h in hs { h.join().unwrap(); } b.join().unwrap();
    t.elapsed()
}

fn fib_mpmc(cap: Option<usize>, n: usize) -> Duration {
    let (tx, rx) = mk(cap);
    let t = Instant::now();
    let mut hs = Vec::new();
    for _ in 0..A { let tx = tx.clone(); hs.push(weft::fiber::spawn(move || { for i in 0..n / A { tx.send_blocking(i).unwrap(); } })); }
    drop(tx);
    for _ in 0..A { let rx = rx.clone(); hs.push(weft::fiber::spawn(move || { for _ in 0..n / A { rx.recv_blocking().unwrap(); } })); }
    for h in hs { h.join().unwrap(); }
    t.elapsed()
}

fn fib_yield(n: usize) -> Duration {
    let t = Instant::now();
    let a = weft::fiber::spawn(move || { for _ in 0..n { weft::fiber::yield_now(); } });
    a.join().unwrap();
    t.elapsed()
}

fn th_mpsc(cap: Option<usize>, n: usize, senders: usize) -> Duration {
    let (tx, rx) = mk(cap);
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..senders { let tx = tx.clone(); s.spawn(move || for i in 0..n / senders { tx.send_blocking(i).unwrap(); }); }
        drop(tx);
        s.spawn(move || { for _ in 0..n { rx.recv_blocking().unwrap(); } });
    });
    t.elapsed()
}

fn cb_mpsc(cap: Option<usize>, n: usize, senders: usize) -> Duration {
    let (tx, rx) = match cap { Some(c) => crossbeam_channel::bounded(c), None => crossbeam_channel::unbounded() };
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..senders { let tx = tx.clone(); s.spawn(move || for i in 0..n / senders { tx.send(i).unwrap(); }); }
        drop(tx);
        s.spawn(move || { for _ in 0..n { rx.recv().unwrap(); } });
    });
    t.elapsed()
}

fn th_seq(cap: Option<usize>, n: usize) -> Duration {
    let (tx, rx) = mk(cap);
    let t = Instant::now();
    for i in 0..n { tx.send_blocking(i).unwrap(); }
    for _ in 0..n { rx.recv_blocking().unwrap(); }
    t.elapsed()
}

fn cb_seq(cap: Option<usize>, n: usize) -> Duration {
    let (tx, rx) = match cap { Some(c) => crossbeam_channel::bounded(c), None => crossbeam_channel::unbounded() };
    let t = Instant::now();
    for i in 0..n { tx.send(i).unwrap(); }
    for _ in 0..n { rx.recv().unwrap(); }
    t.elapsed()
}

fn tasks_seq(rt: &weft::Runtime, cap: Option<usize>, n: usize) -> Duration {
    let (tx, rx) = mk(cap);
    let h = rt.spawn(async move { let t = Instant::now(); for i in 0..n { tx.send(i).await.unwrap(); } for _ in 0..n { rx.recv().await.unwrap(); } t.elapsed() });
    rt.block_on(h).unwrap()
}

fn mtx1(n: usize) -> Duration {
    let m = weft::sync::Mutex::new(0usize);
    let t = Instant::now();
    for _ in 0..n { *m.lock_blocking() += 1; }
    assert_eq!(*m.lock_blocking(), n);
    t.elapsed()
}

fn fmtx(n: usize, k: usize) -> Duration {
    let m = std::sync::Arc::new(weft::sync::Mutex::new(0usize));
    let t = Instant::now();
    let hs: Vec<_> = (0..k).map(|_| { let m = m.clone(); weft::fiber::spawn(move || for _ in 0..n / k { *m.lock_blocking() += 1; }) }).collect();
    for h in hs { h.join().unwrap(); }
    t.elapsed()
}

fn tasks_sel(rt: &weft::Runtime, cap: Option<usize>, n: usize) -> Duration {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| mk(cap)).unzip();
    let t = Instant::now();
    let mut hs = Vec::new();
    for tx in txs { hs.push(rt.spawn(async move { for i in 0..n / A { tx.send(i).await.unwrap(); } 0 })); }
    hs.push(rt.spawn(async move { let mut open: Vec<usize> = (0..A).collect(); let mut got = 0; while !open.is_empty() { got += select_recv_async(&rxs, &mut open).await; } got }));
    let got: usize = rt.block_on(async move { let mut g = 0; for h in hs { g += h.await.unwrap(); } g });
    assert_eq!(got, n);
    t.elapsed()
}

fn tasks_sel_pre(rt: &weft::Runtime, n: usize) -> Duration {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| mk(None)).unzip();
    for tx in txs { for i in 0..n / A { tx.send_blocking(i).unwrap(); } }
    let h = rt.spawn(async move { let t = Instant::now(); let mut open: Vec<usize> = (0..A).collect(); let mut got = 0; while !open.is_empty() { got += select_recv_async(&rxs, &mut open).await; } assert_eq!(got, n); t.elapsed() });
    rt.block_on(h).unwrap()
}

fn threads_sel_pre(n: usize) -> Duration {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| mk(None)).unzip();
    for tx in txs { for i in 0..n / A { tx.send_blocking(i).unwrap(); } }
    let t = Instant::now(); let mut open: Vec<usize> = (0..A).collect(); let mut got = 0; while !open.is_empty() { got += select_recv(&rxs, &mut open); } assert_eq!(got, n); t.elapsed()
}

fn cb_sel_pre(n: usize) -> Duration {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..A).map(|_| crossbeam_channel::unbounded()).unzip();
    for tx in txs { for i in 0..n / A { tx.send(i).unwrap(); } }
    let t = Instant::now(); let mut open: Vec<usize> = (0..A).collect(); let mut got = 0; while !open.is_empty() { got += cb_select_recv(&rxs, &mut open); } assert_eq!(got, n); t.elapsed()
}

/// n/5000 iterations: a fresh channel, 5,000 try_sends, 5,000 try_recvs (ns per message).
fn bigring(cap: Option<usize>, n: usize) -> Duration {
    let t = Instant::now();
    for _ in 0..n / 5000 {
        let (tx, rx) = mk(cap);
        for i in 0..5000 { tx.try_send(i).unwrap(); }
        let mut s = 0;
        for _ in 0..5000 { s += rx.try_recv().unwrap(); }
        assert_eq!(s, 5000 * 4999 / 2);
    }
    t.elapsed()
}

fn bigring_tok(n: usize) -> Duration {
    let t = Instant::now();
    for _ in 0..n / 5000 {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1_000_000);
        for i in 0..5000 { tx.try_send(i).unwrap(); }
        let mut s = 0;
        for _ in 0..5000 { s += rx.try_recv().unwrap(); }
        assert_eq!(s, 5000usize * 4999 / 2);
    }
    t.elapsed()
}

fn bigu_tok(n: usize) -> Duration {
    let t = Instant::now();
    for _ in 0..n / 5000 {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..5000 { tx.send(i).unwrap(); }
        let mut s = 0;
        for _ in 0..5000 { s += rx.try_recv().unwrap(); }
        assert_eq!(s, 5000usize * 4999 / 2);
    }
    t.elapsed()
}

#[derive(Clone)]
struct Large([[usize; 64]; 64]);
fn large_mk(i: usize) -> Large { let mut l = Large([[0; 64]; 64]); l.0[63][63] = i; l }

fn large_task(rt: &weft::Runtime, n: usize) -> Duration {
    let t = Instant::now();
    for i in 0..n {
        let (tx, rx) = weft::chan::bounded::<Large>(1000);
        rt.block_on(async { assert!(tx.send(large_mk(i)).await.is_ok()) });
        let v = rt.block_on(async { rx.recv().await.ok() }).unwrap();
        assert_eq!(std::hint::black_box(&v).0[63][63], i);
    }
    t.elapsed()
}

fn large_try(n: usize) -> Duration {
    let t = Instant::now();
    for i in 0..n {
        let (tx, rx) = weft::chan::bounded::<Large>(1000);
        assert!(tx.try_send(large_mk(i)).is_ok());
        let v = rx.try_recv().unwrap();
        assert_eq!(std::hint::black_box(&v).0[63][63], i);
    }
    t.elapsed()
}

fn large_blocking(n: usize) -> Duration {
    let t = Instant::now();
    for i in 0..n {
        let (tx, rx) = weft::chan::bounded::<Large>(1000);
        assert!(tx.send_blocking(large_mk(i)).is_ok());
        let v = rx.recv_blocking().unwrap();
        assert_eq!(std::hint::black_box(&v).0[63][63], i);
    }
    t.elapsed()
}

fn large_u(n: usize) -> Duration {
    let t = Instant::now();
    let (tx, rx) = weft::chan::unbounded::<Large>();
    for i in 0..n {
        assert!(tx.try_send(large_mk(i)).is_ok());
        let v = rx.try_recv().unwrap();
        assert_eq!(std::hint::black_box(&v).0[63][63], i);
    }
    t.elapsed()
}

fn tasks_spsc(rt: &weft::Runtime, cap: Option<usize>, n: usize) -> Duration {
    let (tx, rx) = mk(cap);
    let t = Instant::now();
    let a = rt.spawn(async move { for i in 0..n { tx.send(i).await.unwrap(); } });
    let b = rt.spawn(async move { let mut s = 0; for _ in 0..n { s += rx.recv().await.unwrap(); } s });
    rt.block_on(a).unwrap();
    let s = rt.block_on(b).unwrap();
    assert_eq!(s, n * (n - 1) / 2);
    t.elapsed()
}

#[derive(Clone)]
struct Medium([usize; 64]);

fn medium(rt: &weft::Runtime, n: usize) -> Duration {
    let t = Instant::now();
    for i in 0..n {
        let (tx, rx) = weft::chan::bounded::<Medium>(1000);
        let mut m = Medium([0; 64]); m.0[63] = i;
        rt.block_on(async { assert!(tx.send(m).await.is_ok()) });
        let v = rt.block_on(async { rx.recv().await.ok() }).unwrap();
        assert_eq!(std::hint::black_box(&v).0[63], i);
    }
    t.elapsed()
}

fn medium_tok(n: usize) -> Duration {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let t = Instant::now();
    for i in 0..n {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Medium>(1000);
        let mut m = Medium([0; 64]); m.0[63] = i;
        rt.block_on(async { assert!(tx.send(m).await.is_ok()) });
        let v = rt.block_on(async { rx.recv().await }).unwrap();
        assert_eq!(std::hint::black_box(&v).0[63], i);
    }
    t.elapsed()
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_default();
    let n: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(400_000);
    let rounds: usize = std::env::var("ROUNDS").ok().map(|s| s.parse().unwrap()).unwrap_or(7);
    let rt = weft::Builder::new().worker_threads(std::env::var("W").map(|s| s.parse().unwrap()).unwrap_or(2)).build().unwrap();
    let mut v = Vec::new();
    for _ in 0..rounds {
        let d = match case.as_str() {
            "thsel_u" => threads_sel(None, n),
            "thsel_b" => threads_sel(Some(n), n),
            "cbsel_u" => cb_threads_sel(None, n),
            "cbsel_b" => cb_threads_sel(Some(n), n),
            "thboth_u" => threads_both(None, n),
            "thboth_b" => threads_both(Some(n), n),
            "tsel_u" => tasks_sel(&rt, None, n),
            "tsel_b" => tasks_sel(&rt, Some(n), n),
            "cbboth_u" => cb_threads_both(None, n),
            "cbboth_b" => cb_threads_both(Some(n), n),
            "f0spsc" => fib_spsc(Some(0), n),
            "f1spsc" => fib_spsc(Some(1), n),
            "f0mpsc" => fib_mpsc(Some(0), n),
            "f1mpsc" => fib_mpsc(Some(1), n),
            "fuspsc" => fib_spsc(None, n),
            "fmpmc_u" => fib_mpmc(None, n),
            "fmpmc_b" => fib_mpmc(Some(n), n),
            "fy" => fib_yield(n),
            "thmpsc_b" => th_mpsc(Some(n), n, 4),
            "cbmpsc_b" => cb_mpsc(Some(n), n, 4),
            "thmpsc_u" => th_mpsc(None, n, 4),
            "cbmpsc_u" => cb_mpsc(None, n, 4),
            "thspsc_b" => th_mpsc(Some(n), n, 1),
            "cbspsc_b" => cb_mpsc(Some(n), n, 1),
            "thseq_b" => th_seq(Some(n), n),
            "cbseq_b" => cb_seq(Some(n), n),
            "thseq_u" => th_seq(None, n),
            "cbseq_u" => cb_seq(None, n),
            "tseq_u" => tasks_seq(&rt, None, n),
            "tseq_b" => tasks_seq(&rt, Some(n), n),
            "mtx1" => mtx1(n),
            "fmtx16" => fmtx(n, 16),
            "tsel_pre" => tasks_sel_pre(&rt, n),
            "thsel_pre" => threads_sel_pre(n),
            "cbsel_pre" => cb_sel_pre(n),
            "tsel_1" => tasks_sel(&rt, Some(1), n),
            "bigring" => bigring(Some(1_000_000), n),
            "bigring_u" => bigring(None, n),
            "bigring_tok" => bigring_tok(n),
            "bigu_tok" => bigu_tok(n),
            "large_task" => large_task(&rt, n),
            "medium" => medium(&rt, n),
            "medium_tok" => medium_tok(n),
            "t0spsc" => tasks_spsc(&rt, Some(0), n),
            "t1spsc" => tasks_spsc(&rt, Some(1), n),
            "large_try" => large_try(n),
            "large_blocking" => large_blocking(n),
            "large_u" => large_u(n),
            _ => panic!("case?"),
        };
        v.push(d.as_nanos() as f64 / n as f64);
    }
    if std::env::var("ALL").is_ok() { println!("{v:?}"); }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());

    println!("{case} median {:.1} ns/msg (min {:.1})", v[v.len() / 2], v[0]);
}
