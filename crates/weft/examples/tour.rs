//! A short tour of weft: spawn many tasks, join them, abort one, survive a panic,
//! shield a critical section, use timers, the interactive and blocking pools, fork-join,
//! fibers, channels between a thread, a fiber and a task, a TCP echo server of fibers
//! talking to a client of async tasks, and print the scheduler's statistics.
//!
//! Run with `cargo run --release --example tour`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let rt = weft::Runtime::new()?;
    println!("weft tour: {} worker threads\n", rt.stats().num_workers);

    // 1. Many small tasks, spawned from inside a task and awaited.
    let start = Instant::now();
    let sum = rt.block_on(async {
        let handles: Vec<_> = (0..100_000u64)
            .map(|i| weft::spawn(async move { i * 2 }))
            .collect();
        let mut sum = 0;
        for h in handles {
            sum += h.await.expect("task failed");
        }
        sum
    });
    println!(
        "spawned and awaited 100,000 tasks in {:?} (sum of outputs {sum})",
        start.elapsed()
    );

    // 2. A tree of tasks: each level spawns its children and joins them.
    fn tree(depth: u32) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + Send>> {
        Box::pin(async move {
            if depth == 0 {
                return 1;
            }
            let left = weft::spawn(tree(depth - 1));
            let right = weft::spawn(tree(depth - 1));
            left.await.unwrap() + right.await.unwrap()
        })
    }
    let start = Instant::now();
    let leaves = rt.block_on(tree(14));
    println!(
        "a binary tree of tasks 14 levels deep has {leaves} leaves ({:?})",
        start.elapsed()
    );

    // 3. A blocking join from a plain thread, and from inside a task (the worker helps
    //    run other tasks while it waits instead of blocking).
    let h = rt.spawn(async { "joined from a plain thread" });
    println!(
        "{}",
        std::thread::spawn(move || h.join().unwrap())
            .join()
            .unwrap()
    );
    let v = rt
        .spawn(async { weft::spawn(async { 21 }).join().unwrap() * 2 })
        .join()
        .unwrap();
    println!("joined from inside a task: {v}");

    // 4. Abort: a task waiting forever is cancelled, and its future is dropped.
    struct Noisy;
    impl Drop for Noisy {
        fn drop(&mut self) {
            println!("  (the aborted task's future was dropped)");
        }
    }
    let guard = Noisy;
    let stuck = rt.spawn(async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    });
    stuck.abort();
    let err = stuck.join().unwrap_err();
    println!("abort: {err} (is_cancelled = {})", err.is_cancelled());

    // 5. A panicking task: the panic comes back through its handle; the worker lives on.
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // keep the demo's output tidy
    let err = rt
        .spawn(async { panic!("something went wrong") })
        .join()
        .unwrap_err();
    std::panic::set_hook(previous_hook);
    println!("panic: {err}");
    println!(
        "the runtime still works afterwards: {}",
        rt.spawn(async { "yes" }).join().unwrap()
    );

    // 6. A shield: the critical section finishes even though the task is aborted in the
    //    middle of it; the abort takes effect at the task's next await.
    let committed = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let c = committed.clone();
    let h = rt.spawn(async move {
        weft::task::shield(async move {
            started_tx.send(()).unwrap();
            while !weft::task::is_cancelled() {
                weft::task::yield_now().await;
            }
            c.store(true, Ordering::SeqCst);
        })
        .await;
        weft::task::yield_now().await;
        unreachable!("the abort takes effect here");
    });
    started_rx.recv().unwrap();
    h.abort();
    let err = h.join().unwrap_err();
    println!(
        "shield: critical section committed = {}, then the task ended: {err}",
        committed.load(Ordering::SeqCst)
    );

    // 7. Wakes from other threads: a task woken 10,000 times from 4 threads.
    let counter = Arc::new(AtomicUsize::new(0));
    let c = counter.clone();
    let start = Instant::now();
    rt.block_on(async move {
        let (tx, rx) = futures_channel_like::channel();
        let producers: Vec<_> = (0..4)
            .map(|_| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for _ in 0..2_500 {
                        tx.send();
                    }
                })
            })
            .collect();
        weft::spawn(async move {
            while c.load(Ordering::Relaxed) < 10_000 {
                rx.recv().await;
                c.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await
        .unwrap();
        for p in producers {
            p.join().unwrap();
        }
    });
    println!(
        "a task received 10,000 messages sent from 4 threads in {:?}",
        start.elapsed()
    );

    // 8. Timers: a timeout that fires, and an interval.
    rt.block_on(async {
        let slow = weft::time::sleep(Duration::from_secs(10));
        let start = Instant::now();
        let r = weft::time::timeout(Duration::from_millis(25), slow).await;
        println!(
            "timeout: a 10 s sleep under a 25 ms timeout gave {:?} after {:?}",
            r.map_err(|e| e.to_string()),
            start.elapsed()
        );
        let mut every = weft::time::interval(Duration::from_millis(10));
        let start = Instant::now();
        let mut ticks = Vec::new();
        for _ in 0..4 {
            every.tick().await;
            ticks.push(start.elapsed().as_millis());
        }
        println!("interval: 4 ticks of 10 ms at {ticks:?} ms");
    });

    // 9. The interactive pool stays responsive while the default pool is saturated.
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..rt.stats().num_workers * 2)
        .map(|_| {
            let stop = stop.clone();
            rt.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::black_box((0..10_000u64).sum::<u64>());
                    weft::task::yield_now().await;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let mut latencies = Vec::new();
    for _ in 0..200 {
        let sent = Instant::now();
        let first_poll = rt
            .spawn_on(weft::Pool::Interactive, async move { sent.elapsed() })
            .join()
            .unwrap();
        latencies.push(first_poll);
        std::thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    latencies.sort();
    println!(
        "interactive pool under a saturated default pool: spawn-to-first-poll median {:?}, p99 {:?}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() * 99 / 100]
    );

    // 10. Blocking work goes to the elastic blocking pool, off the workers.
    let h = rt.spawn_blocking(|| {
        std::thread::sleep(Duration::from_millis(5));
        std::thread::current().name().unwrap_or("?").to_string()
    });
    println!("spawn_blocking ran on thread {:?}", h.join().unwrap());

    // 11. Fork-join on the same workers: a parallel sum and a join of two recursive
    //     halves, beside their sequential versions.
    use weft::prelude::*;
    let data: Vec<u64> = (0..20_000_000).collect();
    let start = Instant::now();
    let seq: u64 = data.iter().map(|x| x % 7).sum();
    let seq_time = start.elapsed();
    let (par, par_time) = rt.block_on(async {
        let start = Instant::now();
        let s: u64 = data.par_iter().map(|x| x % 7).sum();
        Ok::<_, std::io::Error>((s, start.elapsed()))
    })?;
    assert_eq!(seq, par);
    println!(
        "par_iter().map().sum() over 20M numbers: {par_time:?} (sequential {seq_time:?}), same result {par}"
    );
    fn fib_seq(n: u64) -> u64 {
        if n < 2 {
            n
        } else {
            fib_seq(n - 1) + fib_seq(n - 2)
        }
    }
    fn fib_par(n: u64) -> u64 {
        if n < 20 {
            return fib_seq(n);
        }
        let (a, b) = weft::join(|| fib_par(n - 1), || fib_par(n - 2));
        a + b
    }
    let start = Instant::now();
    let a = fib_seq(34);
    let seq_time = start.elapsed();
    let start = Instant::now();
    let b = rt.spawn(async { fib_par(34) }).join().unwrap();
    println!(
        "fib(34) by join of two recursive halves: {:?} (sequential {seq_time:?}), same result {}",
        start.elapsed(),
        a == b
    );

    // 12. Fibers: plain blocking-style code that suspends the fiber, not the thread.
    //     A few thousand fibers sleep, pass a value around a ring (each waits on the
    //     previous one), and the first waits on an async task, all on the same workers.
    let start = Instant::now();
    const RING: usize = 2_000;
    let answer = rt.spawn(async {
        weft::time::sleep(Duration::from_millis(5)).await;
        42u64
    });
    let answer = Arc::new(std::sync::Mutex::new(Some(answer)));
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..RING).map(|_| oneshot::channel()).unzip();
    let mut receivers: Vec<_> = receivers.into_iter().map(Some).collect();
    let fibers: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, tx)| {
            let rx = if i == 0 {
                None
            } else {
                receivers[i - 1].take()
            };
            let answer = answer.clone();
            weft::fiber::Builder::new()
                .name(format!("ring-{i}"))
                .spawn(move || {
                    weft::fiber::sleep(Duration::from_millis(1 + (i % 10) as u64));
                    let got = match rx {
                        Some(rx) => weft::wait(rx),
                        None => {
                            let task = answer.lock().unwrap().take().unwrap();
                            weft::wait(task).unwrap()
                        }
                    };
                    tx.send(got + 1);
                    got
                })
        })
        .collect();
    let last = receivers[RING - 1].take().unwrap();
    let total: u64 = fibers.into_iter().map(|f| f.join().unwrap()).sum();
    let end = weft::wait(last);
    println!(
        "{RING} fibers slept, passed a value around a ring and waited on an async task in \
         {:?}: {end} came out of the ring ({total} summed over the fibers)",
        start.elapsed(),
    );

    // 13. Channels: one channel serves every context. A pipeline whose first stage is a
    //     plain thread, whose second is a fiber and whose last is an async task, joined
    //     by weft channels; a `select!` watches the pipeline's output and a timeout.
    let start = Instant::now();
    const ITEMS: u64 = 10_000;
    let (numbers_tx, numbers_rx) = weft::chan::bounded::<u64>(64);
    let (squares_tx, squares_rx) = weft::chan::bounded::<u64>(0);
    let (sums_tx, sums_rx) = weft::chan::unbounded::<u64>();
    let producer = std::thread::spawn(move || {
        for i in 0..ITEMS {
            numbers_tx.send_blocking(i).unwrap();
        }
        // Dropping the sender closes the channel: the fiber's loop ends.
    });
    let squarer = weft::fiber::spawn(move || {
        for n in numbers_rx.iter() {
            squares_tx.send_blocking(n * n).unwrap();
        }
    });
    let summer = rt.spawn(async move {
        let mut sum = 0u64;
        let mut count = 0u64;
        while let Ok(sq) = squares_rx.recv().await {
            sum += sq;
            count += 1;
            if count.is_multiple_of(2_500) {
                sums_tx.send(sum).await.unwrap();
            }
        }
        sum
    });
    let timeout = weft::chan::after(Duration::from_secs(10));
    let mut partials = Vec::new();
    loop {
        weft::select! {
            recv(sums_rx) -> partial => match partial {
                Ok(p) => partials.push(p),
                Err(_) => break,
            },
            recv(timeout) -> _ => {
                println!("the pipeline timed out");
                break;
            }
        }
    }
    producer.join().unwrap();
    squarer.join().unwrap();
    let sum = summer.join().unwrap();
    assert_eq!(sum, (0..ITEMS).map(|i| i * i).sum::<u64>());
    println!(
        "a thread -> fiber -> task pipeline squared and summed {ITEMS} numbers in {:?}: \
         sum {sum}, {} partial sums seen by select!",
        start.elapsed(),
        partials.len(),
    );

    // 14. Networking: an echo server on a loopback port served by fibers in plain
    //     blocking style (one fiber per connection, `std::io::Read`/`Write`), and a
    //     client of async tasks that talks to it through `weft::io`'s extension traits.
    let listener = rt.block_on(weft::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    const CONNECTIONS: usize = 8;
    const ROUND_TRIPS: usize = 2_000;
    let server = weft::fiber::spawn(move || {
        use std::io::{Read, Write};
        let mut conns = Vec::new();
        for _ in 0..CONNECTIONS {
            let (mut stream, _) = listener.accept_blocking().expect("accept");
            conns.push(weft::fiber::spawn(move || {
                let mut buf = [0u8; 64];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => stream.write_all(&buf[..n]).expect("echo"),
                    }
                }
            }));
        }
        for c in conns {
            c.join().unwrap();
        }
    });
    let start = Instant::now();
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            rt.spawn(async move {
                use weft::io::{AsyncReadExt, AsyncWriteExt};
                let mut stream = weft::net::TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                let msg = [i as u8; 64];
                let mut back = [0u8; 64];
                for _ in 0..ROUND_TRIPS {
                    stream.write_all(&msg).await?;
                    stream.read_exact(&mut back).await?;
                    assert_eq!(back, msg);
                }
                Ok::<_, std::io::Error>(())
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap()?;
    }
    let elapsed = start.elapsed();
    server.join().unwrap();
    println!(
        "TCP echo: {CONNECTIONS} async-task clients against a fiber server made {} round \
         trips of 64 bytes in {elapsed:?} ({:.0} round trips/s)",
        CONNECTIONS * ROUND_TRIPS,
        (CONNECTIONS * ROUND_TRIPS) as f64 / elapsed.as_secs_f64(),
    );

    // 15. Nurseries: children that borrow from this frame; the first one to fail
    //     cancels the others (a parked fiber unwinds), and its error is the result
    //     once every child has ended. A deadline cancels what is left.
    let mut words = ["fiber", "task", "nursery"].map(String::from);
    let r = weft::nursery_blocking(|n| {
        for w in words.iter_mut() {
            n.spawn_fiber(move || {
                w.make_ascii_uppercase();
                Ok(())
            });
        }
        n.spawn(async {
            weft::time::sleep(Duration::from_millis(5)).await;
            Err("a child failed")
        });
        n.spawn_fiber(|| {
            weft::fiber::sleep(Duration::from_secs(60)); // cancelled by the failure
            Ok(())
        });
        Ok(())
    });
    let late = weft::Nursery::with_timeout(Duration::from_millis(10)).run_blocking(|n| {
        n.spawn(std::future::pending::<Result<(), ()>>());
        Ok(())
    });
    println!(
        "nursery: children wrote {words:?}; result {r:?}; with a 10 ms timeout: {}",
        late.map_or_else(|e| e.to_string(), |_| "in time".into()),
    );

    println!("\n{}", rt.stats());
    Ok(())
}

/// A one-shot channel written as a future, so that fibers can `weft::wait` on it.
mod oneshot {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    type Slot<T> = Arc<Mutex<(Option<T>, Option<Waker>)>>;

    pub struct Sender<T>(Slot<T>);
    pub struct Receiver<T>(Slot<T>);

    pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
        let slot = Arc::new(Mutex::new((None, None)));
        (Sender(slot.clone()), Receiver(slot))
    }

    impl<T> Sender<T> {
        pub fn send(self, v: T) {
            let waker = {
                let mut s = self.0.lock().unwrap();
                s.0 = Some(v);
                s.1.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        }
    }

    impl<T> Future for Receiver<T> {
        type Output = T;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
            let mut s = self.0.lock().unwrap();
            match s.0.take() {
                Some(v) => Poll::Ready(v),
                None => {
                    s.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        }
    }
}

/// A tiny counting channel, enough for the demo (weft's own channels come later).
mod futures_channel_like {
    use std::future::poll_fn;
    use std::sync::{Arc, Mutex};
    use std::task::{Poll, Waker};

    #[derive(Default)]
    struct Inner {
        count: usize,
        waker: Option<Waker>,
    }

    #[derive(Clone)]
    pub struct Sender(Arc<Mutex<Inner>>);
    pub struct Receiver(Arc<Mutex<Inner>>);

    pub fn channel() -> (Sender, Receiver) {
        let inner = Arc::new(Mutex::new(Inner::default()));
        (Sender(inner.clone()), Receiver(inner))
    }

    impl Sender {
        pub fn send(&self) {
            let waker = {
                let mut g = self.0.lock().unwrap();
                g.count += 1;
                g.waker.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        }
    }

    impl Receiver {
        pub async fn recv(&self) {
            poll_fn(|cx| {
                let mut g = self.0.lock().unwrap();
                if g.count > 0 {
                    g.count -= 1;
                    Poll::Ready(())
                } else {
                    g.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            })
            .await
        }
    }
}
