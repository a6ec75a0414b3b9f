use std::time::Duration;
use weft::chan::{self, Select};

#[test]
fn threads_all_flavours() {
    for cap in [Some(0), Some(1), Some(7), None] {
        let (tx, rx) = match cap {
            Some(c) => chan::bounded::<u64>(c),
            None => chan::unbounded(),
        };
        let mut hs = vec![];
        for t in 0..4u64 {
            let tx = tx.clone();
            hs.push(std::thread::spawn(move || {
                for i in 0..2000 {
                    tx.send_blocking(t * 10000 + i).unwrap()
                }
            }));
        }
        drop(tx);
        let mut rs = vec![];
        for _ in 0..4 {
            let rx = rx.clone();
            rs.push(std::thread::spawn(move || rx.iter().collect::<Vec<_>>()));
        }
        drop(rx);
        for h in hs {
            h.join().unwrap();
        }
        let mut all: Vec<u64> = rs.into_iter().flat_map(|r| r.join().unwrap()).collect();
        all.sort();
        let mut want: Vec<u64> = (0..4u64)
            .flat_map(|t| (0..2000).map(move |i| t * 10000 + i))
            .collect();
        want.sort();
        assert_eq!(all, want, "cap {cap:?}");
    }
}

#[test]
fn mixed_contexts() {
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    for cap in [0usize, 1, 16] {
        let (tx, rx) = chan::bounded::<u32>(cap);
        let (tx2, rx2) = chan::bounded::<u32>(cap);
        let p = std::thread::spawn(move || {
            for i in 0..3000 {
                tx.send_blocking(i).unwrap()
            }
        });
        // Spawned from inside this runtime (a plain `fiber::spawn` here would use the
        // most recently started runtime, which may be another test's).
        #[allow(clippy::async_yields_async)] // the handle is joined below, not awaited
        let f = rt.block_on(async {
            weft::fiber::spawn(move || {
                for v in rx.iter() {
                    tx2.send_blocking(v + 1).unwrap();
                }
            })
        });
        let sum = rt.block_on(async move {
            let mut s = 0u64;
            while let Ok(v) = rx2.recv().await {
                s += v as u64;
            }
            s
        });
        p.join().unwrap();
        f.join().unwrap();
        assert_eq!(sum, (1..=3000u64).sum::<u64>());
    }
}

#[test]
fn select_basic() {
    let (tx1, rx1) = chan::bounded::<i32>(0);
    let (tx2, rx2) = chan::bounded::<i32>(0);
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        tx2.send_blocking(2).unwrap();
        drop(tx1);
    });
    let mut sel = Select::new();
    let _a = sel.recv(&rx1);
    let b = sel.recv(&rx2);
    let op = sel.select();
    assert_eq!(op.index(), b);
    assert_eq!(op.recv(&rx2), Ok(2));
    h.join().unwrap();
    weft::select! {
        recv(rx1) -> m => assert!(m.is_err()),
        recv(chan::after(Duration::from_secs(5))) -> _ => panic!("timeout"),
    }
}

#[test]
fn select_send_vs_select_recv_rendezvous() {
    let (tx, rx) = chan::bounded::<i32>(0);
    let h = std::thread::spawn(move || {
        for i in 0..1000 {
            weft::select! { send(tx, i) -> r => r.unwrap(), }
        }
    });
    for i in 0..1000 {
        weft::select! { recv(rx) -> m => assert_eq!(m, Ok(i)), }
    }
    h.join().unwrap();
}

#[test]
fn select_timeout_and_default() {
    let (_tx, rx) = chan::unbounded::<i32>();
    weft::select! { recv(rx) -> _ => panic!(), default(Duration::from_millis(5)) => {} }
    weft::select! { recv(rx) -> _ => panic!(), default => {} }
    let t = std::time::Instant::now();
    weft::select! { recv(rx) -> _ => panic!(), recv(chan::after(Duration::from_millis(20))) -> _ => {} }
    assert!(t.elapsed() >= Duration::from_millis(19));
}

#[test]
fn cancelled_recv_loses_nothing() {
    let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    let (tx, rx) = chan::bounded::<u32>(0);
    let p = std::thread::spawn(move || {
        for i in 0..2000 {
            tx.send_blocking(i).unwrap()
        }
    });
    let got = rt.block_on(async move {
        let mut got = vec![];
        loop {
            let r = weft::time::timeout(Duration::from_micros(50), rx.recv()).await;
            match r {
                Ok(Ok(v)) => got.push(v),
                Ok(Err(_)) => break,
                Err(_) => {}
            }
        }
        got
    });
    p.join().unwrap();
    assert_eq!(got, (0..2000).collect::<Vec<_>>());
}
