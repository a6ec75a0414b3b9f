//! Session 38 review of `weft::chan`: bad input and extremes, from safe code only.
//! Absurd capacities, zero-sized values, timeouts and deadlines at both ends in every
//! context, selects that are empty, huge or self-referential, selected operations
//! dropped, iterators ended by `close`, the ordered channel under panics and drops, and
//! values whose `Drop` panics. Every wait is bounded (a hang fails the test); cases that
//! could abort the process run in a child process (this binary again).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{panic_message, watchdog};
use weft::chan::{
    self, RecvError, RecvTimeoutError, Select, SendTimeoutError, TryRecvError, TrySendError,
};

const CHILD: &str = "WEFT_REVIEW_S38_CHAN_CHILD";

fn rt(n: usize) -> weft::Runtime {
    weft::Builder::new()
        .worker_threads(n)
        .interactive_threads(0)
        .build()
        .unwrap()
}

/// Joins a weft task or fiber from a plain thread, failing with "hang" after `secs`.
fn join_in<T: Send + 'static>(h: weft::JoinHandle<T>, secs: u64) -> Result<T, weft::JoinError> {
    common::join_within(h, secs)
}

// ---------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "huge_ring_bytes" => child_huge_ring_bytes(),
        "ring_of_32k_values" => child_ring_of_32k_values(),
        "drop_unused_big_value_channels" => child_drop_unused_big_value_channels(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str, secs: u64) -> common::child::Output {
    common::child::run_case(CHILD, case, Duration::from_secs(secs))
}

// ---------------------------------------------------------------------------------
// Capacities
// ---------------------------------------------------------------------------------

/// A value type far too large for any address space in numbers a ring can hold:
/// 2^20 slots of 1 TiB, 2^60 bytes. Never constructed (the channel only sizes it).
type Tebibyte = [u8; 1 << 40];

fn child_huge_ring_bytes() {
    let r = catch_unwind(|| {
        let ends = chan::bounded::<Tebibyte>(1 << 20);
        let cap = ends.0.capacity();
        // Not dropped: dropping a channel of 1 TiB values needs 1 TiB frames (see
        // `dropping_an_unused_channel_of_big_values_fits_a_small_stack`); construction
        // is what is tested here.
        std::mem::forget(ends);
        cap
    });
    let msg = r.err().map(|p| panic_message(&*p).unwrap_or_default());
    println!("CHILD panicked={}", msg.is_some());
    println!(
        "CHILD message={}",
        msg.unwrap_or_default().replace('\n', " ")
    );
}

fn child_ring_of_32k_values() {
    // One past the ring limit: a list, nothing allocated per slot.
    let t = Instant::now();
    let (tx, rx) = chan::bounded::<[u8; 32 << 10]>((1 << 20) + 1);
    tx.send_blocking([7; 32 << 10]).unwrap();
    let ok = rx.recv_blocking().map(|v| v[100]) == Ok(7);
    println!(
        "CHILD list_ok={}",
        ok && t.elapsed() < Duration::from_secs(5)
    );
    let t = Instant::now();
    let r = catch_unwind(|| {
        let (tx, _rx) = chan::bounded::<[u8; 32 << 10]>(1 << 20);
        tx.capacity()
    });
    println!("CHILD panicked={}", r.is_err());
    println!("CHILD ms={}", t.elapsed().as_millis());
}

/// `bounded::<T>(cap)` with `cap <= 2^20` allocates its ring of `cap` values up front.
/// Where `cap * size_of::<T>()` is representable (below `isize::MAX`) but no memory
/// could ever hold it, the allocation failed and the process aborted (`memory
/// allocation of 1152921504606846976 bytes failed`, SIGABRT). The project asks for a
/// clear panic or error naming the problem, or a channel that does not allocate it
/// (as one slot more, `(1 << 20) + 1`, buffers in a list that allocates as values
/// arrive): either passes, an abort does not.
#[test]
fn bounded_ring_of_unallocatable_size_is_a_clear_panic_not_an_abort() {
    let out = run_child("huge_ring_bytes", 20);
    use std::os::unix::process::ExitStatusExt;
    assert!(
        out.status.signal().is_none(),
        "bounded::<[u8; 1 << 40]>(1 << 20) killed the process (signal {:?}) instead of \
         panicking with a clear message\n{}",
        out.status.signal(),
        out.context()
    );
    out.assert_finished();
    if out.report("panicked") == Some("true") {
        let m = out.report("message").unwrap_or_default().to_lowercase();
        assert!(
            ["capacity", "too large", "memory"]
                .iter()
                .any(|w| m.contains(w)),
            "an unclear panic: {m:?}"
        );
    }
}

/// Made and dropped without a value ever sent, on a thread with a 1 MiB stack.
fn child_drop_unused_big_value_channels() {
    type Big = [u8; 2 << 20];
    let t = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(|| {
            for cap in [Some(2), None, Some((1 << 20) + 1), Some(0)] {
                let (tx, rx) = match cap {
                    Some(c) => chan::bounded::<Big>(c),
                    None => chan::unbounded::<Big>(),
                };
                assert!(rx.is_empty() && tx.capacity() == cap);
                drop(tx);
                drop(rx);
                println!("CHILD dropped_{cap:?}=ok");
            }
        })
        .unwrap();
    t.join().unwrap();
}

/// A channel of 2 MiB values (`[u8; 2 << 20]`) that never held one, made and dropped on
/// a thread with a 1 MiB stack (a fiber's default stack is 2 MiB): nothing of the
/// value size needs to be on the stack, yet dropping the last `Sender` overflowed it
/// (`Chan::disconnect` -> `drop_leaking_on_panic::<T>`, whose frame holds a `T` for its
/// loop even when the buffer to drop is empty; `Chan::drop` -> `drain_locked` ->
/// `Buffer::pop_settled`'s `MaybeUninit<T>` likewise), and the process aborted
/// (`has overflowed its stack`), in debug and release builds.
#[test]
fn dropping_an_unused_channel_of_big_values_fits_a_small_stack() {
    let out = run_child("drop_unused_big_value_channels", 20);
    use std::os::unix::process::ExitStatusExt;
    assert!(
        out.status.signal().is_none(),
        "dropping an unused channel of 2 MiB values killed the process (signal {:?})\n{}",
        out.status.signal(),
        out.context()
    );
    out.assert_finished();
}

/// Just at the ring limit (2^20 slots) and one past it, with 32 KiB values: one past it
/// buffers in a list and allocates as values arrive; at the limit the ring's 32 GiB of
/// values were allocated up front, which aborted the process on a 24 GiB machine
/// (`memory allocation of 34359738368 bytes failed`). Both must build (or panic
/// clearly); neither may abort. (On a machine with memory for 32 GiB of address space
/// the allocation succeeds and this passes.)
#[test]
fn bounded_at_the_ring_limit_with_32k_values_does_not_abort() {
    let out = run_child("ring_of_32k_values", 20);
    use std::os::unix::process::ExitStatusExt;
    assert!(
        out.status.signal().is_none(),
        "bounded::<[u8; 32 << 10]>(1 << 20) killed the process (signal {:?}), where \
         bounded::<[u8; 32 << 10]>((1 << 20) + 1) builds at once\n{}",
        out.status.signal(),
        out.context()
    );
    out.assert_finished();
    assert_eq!(out.report("list_ok"), Some("true"), "{}", out.context());
}

// ---------------------------------------------------------------------------------
// Zero-sized values
// ---------------------------------------------------------------------------------

/// A zero-sized value that counts its drops in a counter of its own test.
macro_rules! zst_counter {
    ($name:ident, $count:ident) => {
        static $count: AtomicUsize = AtomicUsize::new(0);
        #[derive(Debug, PartialEq)]
        struct $name;
        impl Drop for $name {
            fn drop(&mut self) {
                $count.fetch_add(1, SeqCst);
            }
        }
    };
}

/// `bounded(0)`, `bounded(1)`, a ring of 2^20 and a list past it, with a zero-sized
/// value that counts its drops: every value is received exactly once or dropped with
/// the channel, never both, never neither.
#[test]
fn zero_sized_values_in_every_bounded_flavour() {
    zst_counter!(Z, DROPS);
    watchdog(20, || {
        // Rendezvous: a thread sends, this one receives.
        let (tx, rx) = chan::bounded::<Z>(0);
        assert!(matches!(tx.try_send(Z), Err(TrySendError::Full(Z))));
        let t = std::thread::spawn(move || {
            for _ in 0..100 {
                tx.send_blocking(Z).unwrap();
            }
        });
        let mut got = 0;
        while let Ok(z) = rx.recv_timeout(Duration::from_secs(5)) {
            drop(z);
            got += 1;
        }
        t.join().unwrap();
        assert_eq!(got, 100);
        // One Full try_send value dropped by the caller, 100 received.
        assert_eq!(DROPS.load(SeqCst), 101);

        for cap in [1usize, 2, 1 << 20, (1 << 20) + 1, usize::MAX] {
            DROPS.store(0, SeqCst);
            let (tx, rx) = chan::bounded::<Z>(cap);
            let n = cap.min(3000);
            for _ in 0..n {
                tx.try_send(Z).unwrap();
            }
            assert_eq!(rx.len(), n, "cap {cap}");
            if cap == n {
                assert!(tx.is_full(), "cap {cap}");
                assert!(
                    matches!(tx.try_send(Z), Err(TrySendError::Full(Z))),
                    "cap {cap}"
                );
                assert_eq!(DROPS.load(SeqCst), 1, "cap {cap}");
                DROPS.store(0, SeqCst);
            }
            for _ in 0..n / 2 {
                assert!(rx.try_recv().is_ok(), "cap {cap}");
            }
            assert_eq!(DROPS.load(SeqCst), n / 2, "cap {cap}");
            drop((tx, rx));
            assert_eq!(
                DROPS.load(SeqCst),
                n,
                "cap {cap}: values left in the channel"
            );
        }
    });
}

/// An unbounded channel of two million zero-sized values (61,000 blocks): `len` counts
/// them, every one comes out, and a channel dropped half-full drops the rest.
#[test]
fn millions_of_zero_sized_values_unbounded() {
    zst_counter!(Z, DROPS);
    watchdog(20, || {
        const N: usize = 2_000_000;
        let (tx, rx) = chan::unbounded::<Z>();
        for _ in 0..N {
            tx.send_blocking(Z).unwrap();
        }
        assert_eq!(rx.len(), N);
        assert_eq!(tx.len(), N);
        for _ in 0..N / 2 {
            rx.try_recv().unwrap();
        }
        assert_eq!(rx.len(), N - N / 2);
        assert_eq!(DROPS.load(SeqCst), N / 2);
        drop(rx);
        // The receivers are gone: the rest were dropped then, once each.
        assert_eq!(DROPS.load(SeqCst), N);
        assert!(matches!(tx.try_send(Z), Err(TrySendError::Disconnected(Z))));
        drop(tx);
        assert_eq!(DROPS.load(SeqCst), N + 1);
    });
}

// ---------------------------------------------------------------------------------
// Timeouts and deadlines at both ends, in every context
// ---------------------------------------------------------------------------------

/// An instant as late as `Instant` holds on this platform, near enough: about 146
/// billion years from now (far past the 30 years the timers clamp to).
fn far_instant() -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_secs(1 << 62))
        .or_else(|| now.checked_add(Duration::from_secs(1 << 40)))
        .expect("some far instant")
}

/// As early an instant as this process can name (before the process started).
fn past_instant() -> Instant {
    let now = Instant::now();
    now.checked_sub(Duration::from_secs(3600))
        .or_else(|| now.checked_sub(Duration::from_millis(1)))
        .unwrap_or(now)
}

/// The timeouts of every receive and send, on an empty (full) channel: each one that
/// can time out does so, at about its time, returning the value of a send; the
/// huge ones and `Duration::MAX` still complete when a partner comes. Returns
/// descriptions of what went wrong, so every context reports the same way.
fn timeouts_in_this_context(cap: usize) -> Vec<String> {
    let mut bad = Vec::new();
    let (tx, rx) = chan::bounded::<u64>(cap);
    // Fill it (a rendezvous channel is always "full").
    for i in 0..cap as u64 {
        tx.try_send(i).unwrap();
    }
    let tiny = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(1),
    ];
    for d in tiny {
        let t = Instant::now();
        match tx.send_timeout(99, d) {
            Err(SendTimeoutError::Timeout(99)) => {}
            other => bad.push(format!("cap {cap}: send_timeout({d:?}) = {other:?}")),
        }
        if t.elapsed() > Duration::from_secs(2) {
            bad.push(format!(
                "cap {cap}: send_timeout({d:?}) took {:?}",
                t.elapsed()
            ));
        }
    }
    for dl in [past_instant(), Instant::now()] {
        match tx.send_deadline(98, dl) {
            Err(SendTimeoutError::Timeout(98)) => {}
            other => bad.push(format!("cap {cap}: send_deadline(past) = {other:?}")),
        }
    }
    // Drain (and check) the buffered values.
    for i in 0..cap as u64 {
        match rx.recv_timeout(Duration::ZERO) {
            Ok(v) if v == i => {}
            other => bad.push(format!(
                "cap {cap}: recv_timeout(0) of buffered {i}: {other:?}"
            )),
        }
    }
    for d in tiny {
        let t = Instant::now();
        match rx.recv_timeout(d) {
            Err(RecvTimeoutError::Timeout) => {}
            other => bad.push(format!("cap {cap}: recv_timeout({d:?}) = {other:?}")),
        }
        if t.elapsed() > Duration::from_secs(2) {
            bad.push(format!(
                "cap {cap}: recv_timeout({d:?}) took {:?}",
                t.elapsed()
            ));
        }
    }
    for dl in [past_instant(), Instant::now()] {
        match rx.recv_deadline(dl) {
            Err(RecvTimeoutError::Timeout) => {}
            other => bad.push(format!("cap {cap}: recv_deadline(past) = {other:?}")),
        }
    }
    // Huge timeouts and far deadlines complete when a partner comes (a plain thread
    // here, which sends after a moment and then receives).
    let far = far_instant();
    let (tx2, rx2) = (tx.clone(), rx.clone());
    let partner = std::thread::spawn(move || {
        let mut got = Vec::new();
        for v in 0..4u64 {
            std::thread::sleep(Duration::from_millis(5));
            tx2.send_timeout(v, Duration::from_secs(5)).unwrap();
        }
        for _ in 0..2 {
            std::thread::sleep(Duration::from_millis(5));
            got.push(rx2.recv_timeout(Duration::from_secs(5)).unwrap());
        }
        got
    });
    let r = [
        rx.recv_timeout(Duration::MAX),
        rx.recv_timeout(Duration::from_secs(u64::MAX / 4)),
        rx.recv_deadline(far),
        rx.recv_timeout(Duration::new(u64::MAX, 999_999_999)),
    ];
    if r != [Ok(0), Ok(1), Ok(2), Ok(3)] {
        bad.push(format!("cap {cap}: huge recv timeouts: {r:?}"));
    }
    // Fill again, then two huge sends wait for the partner's receives.
    for i in 0..cap as u64 {
        tx.try_send(100 + i).unwrap();
    }
    let s1 = tx.send_timeout(200, Duration::MAX);
    let s2 = tx.send_deadline(201, far);
    if s1.is_err() || s2.is_err() {
        bad.push(format!("cap {cap}: huge send timeouts: {s1:?} {s2:?}"));
    }
    let got = partner.join().unwrap();
    let mut expect: Vec<u64> = (0..cap as u64).map(|i| 100 + i).chain([200, 201]).collect();
    expect.truncate(2);
    if got != expect {
        bad.push(format!(
            "cap {cap}: the partner received {got:?}, expected {expect:?}"
        ));
    }
    // What is left is what was sent, in order.
    let rest: Vec<u64> = rx.try_iter().collect();
    let mut all = got.clone();
    all.extend(&rest);
    let sent: Vec<u64> = (0..cap as u64).map(|i| 100 + i).chain([200, 201]).collect();
    if all != sent {
        bad.push(format!("cap {cap}: values {all:?}, sent {sent:?}"));
    }
    bad
}

#[test]
fn extreme_timeouts_on_a_plain_thread() {
    watchdog(20, || {
        for cap in [0, 1, 3] {
            let bad = timeouts_in_this_context(cap);
            assert!(bad.is_empty(), "{bad:#?}");
        }
    });
}

#[test]
fn extreme_timeouts_on_a_fiber() {
    watchdog(20, || {
        let rt = rt(2);
        for cap in [0, 1, 3] {
            let h = common::fiber_on(&rt, move || timeouts_in_this_context(cap));
            let bad = join_in(h, 15).unwrap();
            assert!(bad.is_empty(), "{bad:#?}");
        }
    });
}

/// The same from inside an async task (the blocking forms on a worker, which goes on
/// with other work while it waits).
#[test]
fn extreme_timeouts_in_an_async_task() {
    watchdog(20, || {
        let rt = rt(2);
        for cap in [0, 1, 3] {
            let h = rt.spawn(async move { timeouts_in_this_context(cap) });
            let bad = join_in(h, 15).unwrap();
            assert!(bad.is_empty(), "{bad:#?}");
        }
    });
}

/// Selects with timeouts of 0, 1 ns, `Duration::MAX` and deadlines in the past and
/// far future, on a plain thread, a fiber and a worker.
fn select_timeouts_in_this_context() -> Vec<String> {
    let mut bad = Vec::new();
    let (tx, rx) = chan::unbounded::<u32>();
    let (_tx0, rx0) = chan::bounded::<u32>(0);
    for d in [Duration::ZERO, Duration::from_nanos(1)] {
        let mut sel = Select::new();
        sel.recv(&rx);
        sel.recv(&rx0);
        if sel.select_timeout(d).is_ok() {
            bad.push(format!("select_timeout({d:?}) selected on empty channels"));
        }
        if sel.ready_timeout(d).is_ok() {
            bad.push(format!("ready_timeout({d:?}) was ready on empty channels"));
        }
    }
    for dl in [past_instant(), Instant::now()] {
        let mut sel = Select::new();
        sel.recv(&rx);
        if sel.select_deadline(dl).is_ok() || sel.ready_deadline(dl).is_ok() {
            bad.push("a past deadline selected on an empty channel".into());
        }
    }
    // A value there: a past deadline or zero timeout still takes it.
    tx.send_blocking(5).unwrap();
    let mut sel = Select::new();
    let i = sel.recv(&rx);
    match sel.select_deadline(past_instant()) {
        Ok(op) if op.index() == i => {
            if op.recv(&rx) != Ok(5) {
                bad.push("select_deadline(past) lost the value".into());
            }
        }
        Ok(op) => bad.push(format!("select_deadline(past) chose {}", op.index())),
        Err(e) => bad.push(format!("select_deadline(past) with a value ready: {e:?}")),
    }
    // Huge timeouts and a far deadline: completed by a thread's send.
    let far = far_instant();
    let tx2 = tx.clone();
    let partner = std::thread::spawn(move || {
        for v in 0..3 {
            std::thread::sleep(Duration::from_millis(5));
            tx2.send_blocking(v).unwrap();
        }
    });
    for (k, how) in ["MAX", "u64::MAX s", "far"].iter().enumerate() {
        let mut sel = Select::new();
        sel.recv(&rx);
        sel.recv(&rx0);
        let r = match k {
            0 => sel.select_timeout(Duration::MAX),
            1 => sel.select_timeout(Duration::from_secs(u64::MAX)),
            _ => sel.select_deadline(far),
        };
        match r {
            Ok(op) if op.index() == 0 => {
                if op.recv(&rx) != Ok(k as u32) {
                    bad.push(format!("select {how}: wrong value"));
                }
            }
            Ok(op) => bad.push(format!("select {how}: chose {}", op.index())),
            Err(e) => bad.push(format!("select {how}: {e:?}")),
        }
    }
    partner.join().unwrap();
    let tx2 = tx.clone();
    let partner = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        tx2.send_blocking(9).unwrap();
    });
    let mut sel = Select::new();
    sel.recv(&rx);
    if sel.ready_deadline(far) != Ok(0) {
        bad.push("ready_deadline(far) did not see the value".into());
    }
    partner.join().unwrap();
    if rx.try_recv() != Ok(9) {
        bad.push("ready_deadline took the value".into());
    }
    bad
}

#[test]
fn extreme_select_timeouts_in_every_context() {
    watchdog(20, || {
        let bad = select_timeouts_in_this_context();
        assert!(bad.is_empty(), "thread: {bad:#?}");
        let rt = rt(2);
        let h = common::fiber_on(&rt, select_timeouts_in_this_context);
        let bad = join_in(h, 10).unwrap();
        assert!(bad.is_empty(), "fiber: {bad:#?}");
        let h = rt.spawn(async { select_timeouts_in_this_context() });
        let bad = join_in(h, 10).unwrap();
        assert!(bad.is_empty(), "worker: {bad:#?}");
    });
}

/// Timer receivers at the extremes: `at` a far instant (past the 30 years that `after`
/// clamps to) never fires, yet every timed receive and select on it ends on time, in
/// every context; `at` a past instant fires at once, once; `tick` of 1 ns keeps up.
fn timer_extremes_in_this_context() -> Vec<String> {
    let mut bad = Vec::new();
    let far = chan::at(far_instant());
    let t = Instant::now();
    if far.recv_timeout(Duration::from_millis(5)) != Err(RecvTimeoutError::Timeout) {
        bad.push("at(far).recv_timeout fired".into());
    }
    if far.recv_deadline(past_instant()) != Err(RecvTimeoutError::Timeout) {
        bad.push("at(far).recv_deadline(past) fired".into());
    }
    let mut sel = Select::new();
    sel.recv(&far);
    if sel.select_timeout(Duration::from_millis(5)).is_ok() {
        bad.push("select on at(far) fired".into());
    }
    if t.elapsed() > Duration::from_secs(3) {
        bad.push(format!("timed waits on at(far) took {:?}", t.elapsed()));
    }
    let past = past_instant();
    let p = chan::at(past);
    if p.recv_timeout(Duration::ZERO) != Ok(past) {
        bad.push("at(past) did not deliver at once".into());
    }
    if p.recv_timeout(Duration::from_millis(2)) != Err(RecvTimeoutError::Timeout) {
        bad.push("at(past) delivered twice".into());
    }
    let tick = chan::tick(Duration::from_nanos(1));
    let mut last = None;
    for _ in 0..1000 {
        match tick.recv_timeout(Duration::from_secs(1)) {
            Ok(at) => {
                if last.is_some_and(|l| at <= l) {
                    bad.push("tick(1 ns) went backwards".into());
                    break;
                }
                last = Some(at);
            }
            Err(e) => {
                bad.push(format!("tick(1 ns): {e:?}"));
                break;
            }
        }
    }
    bad
}

#[test]
fn timer_extremes_in_every_context() {
    watchdog(20, || {
        let bad = timer_extremes_in_this_context();
        assert!(bad.is_empty(), "thread: {bad:#?}");
        let rt = rt(2);
        let h = common::fiber_on(&rt, timer_extremes_in_this_context);
        let bad = join_in(h, 10).unwrap();
        assert!(bad.is_empty(), "fiber: {bad:#?}");
        let h = rt.spawn(async { timer_extremes_in_this_context() });
        let bad = join_in(h, 10).unwrap();
        assert!(bad.is_empty(), "worker: {bad:#?}");
        // Async: a select_async on at(far) and a channel, and a recv().await on
        // at(far) under a runtime timeout.
        let r = rt.block_on(async {
            let far = chan::at(far_instant());
            let (tx, rx) = chan::unbounded::<u8>();
            weft::spawn(async move {
                weft::time::sleep(Duration::from_millis(5)).await;
                tx.send(1).await.unwrap();
            });
            let mut sel = Select::new();
            sel.recv(&far);
            let i = sel.recv(&rx);
            let op = sel.select_async().await;
            let first = (op.index() == i, op.recv(&rx));
            let second = weft::time::timeout(Duration::from_millis(5), far.recv())
                .await
                .is_err();
            (first, second)
        });
        assert_eq!(r, ((true, Ok(1)), true));
    });
}

// ---------------------------------------------------------------------------------
// Select: empty, huge, the same channel many times, both ends of one channel
// ---------------------------------------------------------------------------------

/// A select with no operation (or with every operation removed): the waiting forms
/// panic with a clear message (they would wait for ever), the others report nothing
/// ready, and the timed forms wait out their (short) time.
#[test]
fn select_with_no_operations() {
    watchdog(20, || {
        let (_tx, rx) = chan::unbounded::<u8>();
        for removed in [false, true] {
            let mk = || {
                let mut sel = Select::new();
                if removed {
                    let i = sel.recv(&rx);
                    sel.remove(i);
                }
                sel
            };
            let msg = |r: std::thread::Result<_>| {
                r.err()
                    .and_then(|p| panic_message(&*p))
                    .unwrap_or_else(|| "no panic".into())
            };
            let m = msg(catch_unwind(AssertUnwindSafe(|| drop(mk().select()))));
            assert!(m.contains("no operations"), "select(): {m}");
            let m = msg(catch_unwind(AssertUnwindSafe(|| {
                let _ = mk().ready();
            })));
            assert!(m.contains("no operations"), "ready(): {m}");
            let m = msg(catch_unwind(AssertUnwindSafe(|| {
                let mut s = mk();
                drop(s.select_async());
            })));
            assert!(m.contains("no operations"), "select_async(): {m}");
            // Duration::MAX is "no deadline": the untimed form's panic, not a hang.
            let m = msg(catch_unwind(AssertUnwindSafe(|| {
                drop(mk().select_timeout(Duration::MAX))
            })));
            assert!(m.contains("no operations"), "select_timeout(MAX): {m}");
            assert!(mk().try_select().is_err());
            assert!(mk().try_ready().is_err());
            let t = Instant::now();
            assert!(mk().select_timeout(Duration::from_millis(20)).is_err());
            assert!(mk().ready_timeout(Duration::from_millis(20)).is_err());
            assert!(mk().select_deadline(past_instant()).is_err());
            assert!(
                t.elapsed() >= Duration::from_millis(40),
                "{:?}",
                t.elapsed()
            );
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        }
        // `remove` of an index that is not there, or twice: a clear panic.
        let mut sel = Select::new();
        let i = sel.recv(&rx);
        sel.remove(i);
        let r = catch_unwind(AssertUnwindSafe(|| sel.remove(i)));
        assert!(panic_message(&*r.unwrap_err())
            .unwrap()
            .contains("no operation"));
        let r = catch_unwind(AssertUnwindSafe(|| sel.remove(usize::MAX)));
        assert!(panic_message(&*r.unwrap_err())
            .unwrap()
            .contains("no operation"));
        // The macro with no arms but a default.
        let got = weft::select! { default => 7 };
        assert_eq!(got, 7);
        let got = weft::select! { default(Duration::from_millis(1)) => 8 };
        assert_eq!(got, 8);
    });
}

/// The same receiver added 1,000 times (past the quick pass's 32), one value: exactly
/// one operation takes it, once; the next select finds nothing. The same with 1,000
/// channels, one of which gets a value from another thread while the select waits.
#[test]
fn select_of_a_thousand_operations() {
    watchdog(20, || {
        let (tx, rx) = chan::unbounded::<u64>();
        let mut sel = Select::new();
        for _ in 0..1000 {
            sel.recv(&rx);
        }
        tx.send_blocking(42).unwrap();
        let op = sel.select_timeout(Duration::from_secs(5)).expect("ready");
        assert!(op.index() < 1000);
        assert_eq!(op.recv(&rx), Ok(42));
        assert!(sel.try_select().is_err());
        assert!(sel.select_timeout(Duration::from_millis(5)).is_err());
        // Waiting, woken by a thread.
        let tx2 = tx.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx2.send_blocking(43).unwrap();
        });
        let op = sel.select_timeout(Duration::from_secs(5)).expect("woken");
        assert_eq!(op.recv(&rx), Ok(43));
        t.join().unwrap();
        assert!(rx.is_empty());

        let chans: Vec<_> = (0..1000).map(|_| chan::bounded::<u64>(1)).collect();
        let mut sel = Select::new();
        for (_, r) in &chans {
            sel.recv(r);
        }
        let tx777 = chans[777].0.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx777.send_blocking(777).unwrap();
        });
        let op = sel.select_timeout(Duration::from_secs(5)).expect("woken");
        assert_eq!(op.index(), 777);
        assert_eq!(op.recv(&chans[777].1), Ok(777));
        t.join().unwrap();
        // Async, 1,000 sends on full channels and one receive that becomes ready.
        for (tx, _) in &chans {
            tx.try_send(0).unwrap();
        }
        let rt = rt(2);
        let (vtx, vrx) = chan::bounded::<u64>(0);
        let r = rt.block_on(async {
            let mut sel = Select::new();
            for (tx, _) in &chans {
                sel.send(tx);
            }
            let v = sel.recv(&vrx);
            weft::spawn(async move { vtx.send(5).await.unwrap() });
            let op = weft::time::timeout(Duration::from_secs(5), sel.select_async())
                .await
                .expect("select_async of 1,001 operations");
            (op.index() == v, op.recv(&vrx))
        });
        assert_eq!(r, (true, Ok(5)));
        for (_, rx) in &chans {
            assert_eq!(rx.try_recv(), Ok(0));
            assert!(
                rx.try_recv().is_err(),
                "a selected send that was not performed sent"
            );
        }
    });
}

/// A send and a receive on the same channel in one select. A select must not pair with
/// itself: on an empty rendezvous channel with nobody else, nothing is ready; on an
/// empty `bounded(1)` only the send is; on a full one only the receive.
#[test]
fn select_with_both_ends_of_one_channel() {
    watchdog(20, || {
        let (tx, rx) = chan::bounded::<u64>(0);
        for round in 0..20 {
            let mut sel = Select::new();
            sel.send(&tx);
            sel.recv(&rx);
            assert!(
                sel.try_select().is_err(),
                "round {round}: try_select paired with itself"
            );
            assert!(sel.try_ready().is_err(), "round {round}: try_ready");
            match sel.select_timeout(Duration::from_millis(2)) {
                Err(_) => {}
                Ok(op) => panic!(
                    "round {round}: the select paired with itself ({})",
                    op.index()
                ),
            }
        }
        // With a partner, each side pairs with it (a thread receives then sends).
        let (tx2, rx2) = (tx.clone(), rx.clone());
        let t = std::thread::spawn(move || {
            let a = rx2.recv_timeout(Duration::from_secs(5));
            tx2.send_timeout(11, Duration::from_secs(5)).unwrap();
            a
        });
        let mut seen = Vec::new();
        for _ in 0..2 {
            let mut sel = Select::new();
            let s = sel.send(&tx);
            let r = sel.recv(&rx);
            let op = sel
                .select_timeout(Duration::from_secs(5))
                .expect("a partner");
            if op.index() == s {
                op.send(&tx, 10).unwrap();
                seen.push("sent");
            } else {
                assert_eq!(op.index(), r);
                assert_eq!(op.recv(&rx), Ok(11));
                seen.push("received");
            }
        }
        assert_eq!(t.join().unwrap(), Ok(10));
        assert_eq!(seen, ["sent", "received"]);

        // Two selects, each with both ends, on two threads: they pair with each other.
        let (tx, rx) = chan::bounded::<u64>(0);
        let run = |tx: chan::Sender<u64>, rx: chan::Receiver<u64>, v: u64| {
            std::thread::spawn(move || {
                let mut sel = Select::new();
                let s = sel.send(&tx);
                sel.recv(&rx);
                let op = sel.select_timeout(Duration::from_secs(5)).expect("paired");
                if op.index() == s {
                    op.send(&tx, v).map(|()| None).map_err(|_| "send")
                } else {
                    op.recv(&rx).map(Some).map_err(|_| "recv")
                }
            })
        };
        let a = run(tx.clone(), rx.clone(), 1);
        let b = run(tx.clone(), rx.clone(), 2);
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert!(
            matches!((a, b), (Ok(None), Ok(Some(1))) | (Ok(Some(2)), Ok(None))),
            "{a:?} {b:?}"
        );

        // bounded(1): empty, only the send is ready; full, only the receive.
        let (tx, rx) = chan::bounded::<u64>(1);
        for _ in 0..20 {
            let mut sel = Select::new();
            let s = sel.send(&tx);
            let r = sel.recv(&rx);
            let op = sel.select_timeout(Duration::from_secs(1)).unwrap();
            assert_eq!(op.index(), s);
            op.send(&tx, 3).unwrap();
            let mut sel = Select::new();
            sel.send(&tx);
            sel.recv(&rx);
            let op = sel.select_timeout(Duration::from_secs(1)).unwrap();
            assert_eq!(op.index(), r);
            assert_eq!(op.recv(&rx), Ok(3));
        }
    });
}

// ---------------------------------------------------------------------------------
// Selected operations not completed
// ---------------------------------------------------------------------------------

/// Counts live values: made with an id, dropped once.
#[derive(Debug)]
struct Live {
    id: u64,
    live: Arc<AtomicUsize>,
}

impl Live {
    fn new(id: u64, live: &Arc<AtomicUsize>) -> Live {
        live.fetch_add(1, SeqCst);
        Live {
            id,
            live: live.clone(),
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let before = self.live.fetch_sub(1, SeqCst);
        assert!(before > 0, "value {} dropped twice", self.id);
    }
}

/// A `SelectedOperation` dropped unperformed gives back what it held (documented): a
/// receive's value goes back to the channel, ahead of the rest; a send's held slot or
/// held receiver is let go, and nothing is sent. Checked for values taken by the quick
/// pass, by a full round (a value handed to the waiting node), for a send that saw
/// room, and for a rendezvous send that held a waiting receiver, with drop counts.
#[test]
fn selected_operations_dropped_unperformed_give_everything_back() {
    watchdog(20, || {
        let live = Arc::new(AtomicUsize::new(0));
        for cap in [None, Some(1), Some(4), Some((1 << 20) + 1)] {
            let (tx, rx) = match cap {
                None => chan::unbounded::<Live>(),
                Some(c) => chan::bounded::<Live>(c),
            };
            // Quick pass: values there.
            tx.send_blocking(Live::new(1, &live)).unwrap();
            let mut sel = Select::new();
            sel.recv(&rx);
            drop(sel.select());
            assert_eq!(rx.len(), 1, "cap {cap:?}");
            assert_eq!(rx.try_recv().map(|v| v.id).ok(), Some(1), "cap {cap:?}");
            // Full round: the value comes while the select waits.
            for k in 0..5u64 {
                let tx2 = tx.clone();
                let l2 = live.clone();
                let t = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(2 * k));
                    tx2.send_blocking(Live::new(10 + k, &l2)).unwrap();
                });
                let mut sel = Select::new();
                sel.recv(&rx);
                let op = sel.select_timeout(Duration::from_secs(5)).expect("a value");
                t.join().unwrap();
                drop(op);
                assert_eq!(
                    rx.try_recv().map(|v| v.id).ok(),
                    Some(10 + k),
                    "cap {cap:?}: the value of a dropped selected receive"
                );
            }
            // A send that saw room, dropped: nothing sent, the room still there.
            let mut sel = Select::new();
            sel.send(&tx);
            drop(sel.select());
            assert!(rx.is_empty(), "cap {cap:?}");
            if let Some(c) = cap.filter(|&c| c < 8) {
                for i in 0..c as u64 {
                    tx.try_send(Live::new(100 + i, &live)).unwrap();
                }
                assert!(tx.is_full());
                for i in 0..c as u64 {
                    assert_eq!(rx.try_recv().map(|v| v.id).ok(), Some(100 + i));
                }
            }
            drop((tx, rx));
            assert_eq!(live.load(SeqCst), 0, "cap {cap:?}: values leaked");
        }

        // Rendezvous: a receiver waits on a thread; a select's send is selected (it
        // holds that receiver) and dropped. The receiver is let go, not lost: the next
        // send reaches it.
        let (tx, rx) = chan::bounded::<Live>(0);
        for round in 0..10u64 {
            let rx2 = rx.clone();
            let t =
                std::thread::spawn(move || rx2.recv_timeout(Duration::from_secs(5)).map(|v| v.id));
            let mut sel = Select::new();
            sel.send(&tx);
            let op = sel
                .select_timeout(Duration::from_secs(5))
                .expect("a receiver");
            drop(op);
            tx.send_timeout(Live::new(round, &live), Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("round {round}: the held receiver was lost: {e:?}"));
            assert_eq!(t.join().unwrap(), Ok(round));
        }
        // And a rendezvous receive selected against a waiting sender, dropped: the
        // sender's value is not lost.
        for round in 0..10u64 {
            let tx2 = tx.clone();
            let l2 = live.clone();
            let t = std::thread::spawn(move || {
                tx2.send_timeout(Live::new(round, &l2), Duration::from_secs(5))
                    .map_err(|e| e.into_inner().id)
            });
            std::thread::sleep(Duration::from_millis(1));
            let mut sel = Select::new();
            sel.recv(&rx);
            let op = sel
                .select_timeout(Duration::from_secs(5))
                .expect("a sender");
            drop(op);
            // The value came back to the channel or to its sender (which then failed
            // with it); it must be in exactly one place.
            let back = rx.recv_timeout(Duration::from_millis(200)).map(|v| v.id);
            let sent = t.join().unwrap();
            match (back, sent) {
                (Ok(id), Ok(())) => assert_eq!(id, round),
                (Err(_), Err(id)) => assert_eq!(id, round),
                other => panic!("round {round}: value lost or duplicated: {other:?}"),
            }
        }
        drop((tx, rx));
        assert_eq!(live.load(SeqCst), 0, "values leaked");

        // Timers: a selected `after` (added twice) or `tick` dropped unperformed fires
        // again for the next receive; performed, a one-shot timer is spent.
        let once = chan::after(Duration::ZERO);
        let tick = chan::tick(Duration::from_secs(3600));
        let mut sel = Select::new();
        sel.recv(&once);
        sel.recv(&once);
        let op = sel.select_timeout(Duration::from_secs(5)).expect("due");
        assert!(op.index() < 2);
        drop(op);
        assert!(
            once.try_recv().is_ok(),
            "a dropped selected timer lost its firing"
        );
        assert!(
            once.recv_timeout(Duration::from_millis(2)).is_err(),
            "fired twice"
        );
        let mut sel = Select::new();
        sel.recv(&once);
        sel.recv(&tick);
        assert!(sel.select_timeout(Duration::from_millis(2)).is_err());
        let due = chan::after(Duration::ZERO);
        let mut sel = Select::new();
        let i = sel.recv(&due);
        let op = sel.select_timeout(Duration::from_secs(5)).expect("due");
        assert_eq!(op.index(), i);
        assert!(op.recv(&due.clone()).is_ok());
        assert!(
            due.try_recv().is_err(),
            "a performed one-shot timer fired again"
        );
    });
}

/// Completing a selected operation with the wrong end panics clearly, and the value it
/// held is not lost.
#[test]
fn selected_operation_completed_with_the_wrong_end() {
    watchdog(20, || {
        let (tx, rx) = chan::unbounded::<u32>();
        let (otx, orx) = chan::unbounded::<u32>();
        tx.send_blocking(1).unwrap();
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.select();
        let r = catch_unwind(AssertUnwindSafe(|| op.recv(&orx)));
        let m = panic_message(&*r.unwrap_err()).unwrap();
        assert!(m.contains("wasn't selected"), "{m}");
        assert_eq!(rx.try_recv(), Ok(1), "the value was lost with the panic");
        // A receive selected, completed as a send, and the other way round.
        tx.send_blocking(2).unwrap();
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.select();
        let r = catch_unwind(AssertUnwindSafe(|| op.send(&tx, 3)));
        assert!(panic_message(&*r.unwrap_err())
            .unwrap()
            .contains("wasn't selected"));
        assert_eq!(rx.try_recv(), Ok(2));
        assert!(rx.try_recv().is_err(), "3 was sent by a wrong send");
        let mut sel = Select::new();
        sel.send(&tx);
        let op = sel.select();
        let r = catch_unwind(AssertUnwindSafe(|| op.send(&otx, 4)));
        assert!(panic_message(&*r.unwrap_err())
            .unwrap()
            .contains("wasn't selected"));
        assert!(orx.try_recv().is_err() && rx.try_recv().is_err());
    });
}

// ---------------------------------------------------------------------------------
// Iterators ended by close
// ---------------------------------------------------------------------------------

/// `iter`, `try_iter` and `into_iter` (and the `Stream`) end once the channel is closed
/// and drained, while senders are still alive: on a thread, a fiber and a task.
#[test]
fn iterators_end_at_close_with_senders_alive() {
    watchdog(20, || {
        let rt = rt(2);
        for cap in [Some(0), Some(1), Some(64), None] {
            let mk = || match cap {
                Some(c) => chan::bounded::<u32>(c),
                None => chan::unbounded::<u32>(),
            };
            // iter on a thread, closed by the receiving side's clone after 50 values.
            let (tx, rx) = mk();
            let rx2 = rx.clone();
            let reader = std::thread::spawn(move || rx2.iter().collect::<Vec<_>>());
            for i in 0..50 {
                tx.send_timeout(i, Duration::from_secs(5)).unwrap();
            }
            // Wait until the reader took all (a rendezvous channel hands them over).
            let t = Instant::now();
            while !rx.is_empty() && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(rx.close());
            let got = reader.join().unwrap();
            assert_eq!(got, (0..50).collect::<Vec<_>>(), "cap {cap:?}");
            assert!(tx.send_blocking(1).is_err());
            // into_iter on a fiber, closed by the sender with values buffered.
            let (tx, rx) = mk();
            let f = common::fiber_on(&rt, move || rx.into_iter().count());
            for i in 0..20 {
                tx.send_timeout(i, Duration::from_secs(5)).unwrap();
            }
            tx.close();
            assert_eq!(join_in(f, 5).unwrap(), 20, "cap {cap:?}");
            // try_iter after close yields what is buffered, then ends.
            if cap != Some(0) {
                let (tx, rx) = mk();
                for i in 0..cap.unwrap_or(5).min(5) as u32 {
                    tx.try_send(i).unwrap();
                }
                tx.close();
                let n = rx.try_iter().count();
                assert_eq!(n, cap.unwrap_or(5).min(5), "cap {cap:?}");
                assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
                assert_eq!(rx.recv_blocking(), Err(RecvError));
            }
            // The Stream in a task.
            let (tx, mut rx) = mk();
            let h = rt.spawn(async move {
                use futures_core::Stream;
                let mut n = 0;
                while let Some(_v) =
                    std::future::poll_fn(|cx| std::pin::Pin::new(&mut rx).poll_next(cx)).await
                {
                    n += 1;
                }
                n
            });
            for i in 0..10 {
                tx.send_timeout(i, Duration::from_secs(5)).unwrap();
            }
            tx.close();
            assert_eq!(join_in(h, 5).unwrap(), 10, "cap {cap:?}");
        }
    });
}

// ---------------------------------------------------------------------------------
// Values whose Drop panics
// ---------------------------------------------------------------------------------

/// Panics in `drop` when `bomb` is set; counts every drop.
struct Bomb {
    bomb: bool,
    drops: Arc<AtomicUsize>,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.bomb {
            panic!("bomb dropped");
        }
    }
}

/// A value whose `drop` panics, buffered with others when the last receiver goes: the
/// panic reaches the dropper (not an abort), no value is dropped twice, and the channel
/// is disconnected for its senders afterwards. When the channel is only closed, nothing
/// is dropped (the values stay for the receivers).
#[test]
fn values_whose_drop_panics_in_a_dropped_channel() {
    watchdog(20, || {
        for cap in [Some(8), None, Some((1 << 20) + 1)] {
            let drops = Arc::new(AtomicUsize::new(0));
            let mk = |bomb| Bomb {
                bomb,
                drops: drops.clone(),
            };
            let (tx, rx) = match cap {
                Some(c) => chan::bounded::<Bomb>(c),
                None => chan::unbounded::<Bomb>(),
            };
            for i in 0..5 {
                tx.try_send(mk(i == 1)).ok().unwrap();
            }
            // close drops nothing.
            assert!(rx.close());
            assert_eq!(drops.load(SeqCst), 0);
            let r = catch_unwind(AssertUnwindSafe(|| drop(rx)));
            assert_eq!(
                panic_message(&*r.unwrap_err()).as_deref(),
                Some("bomb dropped"),
                "cap {cap:?}"
            );
            let n = drops.load(SeqCst);
            assert!((2..=5).contains(&n), "cap {cap:?}: {n} drops");
            assert!(tx.is_closed());
            match tx.try_send(mk(false)) {
                Err(TrySendError::Disconnected(v)) => drop(v),
                _ => panic!("cap {cap:?}: a send after the receivers went"),
            }
            drop(tx);
            let after = drops.load(SeqCst);
            assert!(after <= 6, "cap {cap:?}: {after} drops of 6 values");
        }
    });
}

// ---------------------------------------------------------------------------------
// The ordered channel
// ---------------------------------------------------------------------------------

/// Work that panics keeps its place: its slot yields a panicked `JoinError`, the rest
/// come in send order; async tasks and fibers mixed; capacities 0, 1 and `usize::MAX`.
#[test]
fn ordered_with_panicking_work_and_extreme_capacities() {
    watchdog(20, || {
        let rt = rt(2);
        for cap in [0usize, 1, usize::MAX] {
            let (tx, rx) = chan::ordered::<u32>(cap);
            let h = rt.handle().clone();
            let producer = std::thread::spawn(move || {
                let _g = h.enter();
                for i in 0..12u32 {
                    let r = if i % 2 == 0 {
                        tx.spawn(async move {
                            weft::time::sleep(Duration::from_millis(u64::from(12 - i))).await;
                            if i % 3 == 0 {
                                panic!("work {i} failed");
                            }
                            i
                        })
                    } else {
                        tx.spawn_fiber(move || {
                            weft::fiber::sleep(Duration::from_millis(u64::from(12 - i)));
                            if i % 3 == 0 {
                                panic!("work {i} failed");
                            }
                            i
                        })
                    };
                    r.unwrap();
                }
            });
            let mut got = Vec::new();
            loop {
                let r = rt.block_on(weft::time::timeout(Duration::from_secs(5), rx.recv()));
                match r.expect("hang: ordered recv") {
                    Ok(Ok(v)) => got.push(Some(v)),
                    Ok(Err(e)) => {
                        assert!(e.is_panic(), "cap {cap}: {e:?}");
                        got.push(None)
                    }
                    Err(RecvError) => break,
                }
            }
            producer.join().unwrap();
            let expect: Vec<_> = (0..12u32).map(|i| (i % 3 != 0).then_some(i)).collect();
            assert_eq!(got, expect, "cap {cap}");
        }
    });
}

/// Dropping the receiver cancels the queued work (spec: "dropping the receiver
/// closes the channel and aborts what is queued"): futures and parked fibers are
/// dropped or unwound, what they own is dropped once, and the outputs of work that
/// had finished are dropped once.
#[test]
fn ordered_receiver_drop_cancels_queued_tasks_and_fibers() {
    watchdog(20, || {
        let rt = rt(2);
        let live = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::ordered::<Live>(usize::MAX);
        rt.block_on(async {
            for i in 0..6u64 {
                // Two that finish at once (their outputs wait in the task), four that
                // would take seconds.
                let quick = i < 2;
                let (l, f) = (live.clone(), finished.clone());
                let owned = Live::new(1000 + i, &live);
                if i % 2 == 0 {
                    tx.spawn(async move {
                        let _owned = owned;
                        if !quick {
                            weft::time::sleep(Duration::from_secs(10)).await;
                        }
                        f.fetch_add(1, SeqCst);
                        Live::new(i, &l)
                    })
                    .unwrap();
                } else {
                    tx.spawn_fiber(move || {
                        let _owned = owned;
                        if !quick {
                            weft::fiber::sleep(Duration::from_secs(10));
                        }
                        f.fetch_add(1, SeqCst);
                        Live::new(i, &l)
                    })
                    .unwrap();
                }
            }
        });
        let t = Instant::now();
        while finished.load(SeqCst) < 2 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        drop(rx);
        let t = Instant::now();
        while live.load(SeqCst) > 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            live.load(SeqCst),
            0,
            "values owned by cancelled work, or outputs, leaked"
        );
        assert_eq!(
            finished.load(SeqCst),
            2,
            "queued work ran on after the receiver went"
        );
        // Later spawns hand their joined result back.
        let l = live.clone();
        let r = rt.block_on(async { tx.spawn(async move { Live::new(77, &l) }) });
        let back = r.unwrap_err().into_inner().unwrap();
        assert_eq!(back.id, 77);
        drop(back);
        assert_eq!(live.load(SeqCst), 0);
    });
}

/// Work that owns the last sender and spawns more work before dropping it: every
/// result arrives, then `RecvError` (no hang with the senders dropped from inside the
/// work). (Unbounded: with a small capacity, work that waits for room in its own queue
/// while the receiver joins it deadlocks, as any consumer that produces into a full
/// queue it drains.)
#[test]
fn ordered_senders_dropped_from_inside_the_work() {
    watchdog(20, || {
        let rt = rt(2);
        let (tx, rx) = chan::ordered::<u32>(usize::MAX);
        let h = rt.spawn(async move {
            for i in 0..3u32 {
                let tx2 = tx.clone();
                tx.spawn_async(async move {
                    // Each piece of work spawns one more, from inside, then drops its
                    // sender.
                    weft::time::sleep(Duration::from_millis(2)).await;
                    let _ = tx2.spawn_async(async move { 100 + i }).await;
                    drop(tx2);
                    i
                })
                .await
                .unwrap();
            }
        });
        let mut got = Vec::new();
        loop {
            let r = rt.block_on(weft::time::timeout(Duration::from_secs(5), rx.recv()));
            match r.expect("hang: ordered recv with the senders dropped by the work") {
                Ok(v) => got.push(v.unwrap()),
                Err(RecvError) => break,
            }
        }
        join_in(h, 5).unwrap();
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 100, 101, 102]);
    });
}

/// A finished piece of work whose output's `Drop` panics, queued ahead of long work,
/// when the receiver is dropped: the panic reaches the dropper, and the rest of the
/// queue must still be cancelled ("dropping the receiver ... aborts what is queued").
#[test]
fn ordered_receiver_drop_with_a_panicking_output_still_cancels_the_rest() {
    watchdog(20, || {
        let rt = rt(2);
        let drops = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::ordered::<Bomb>(8);
        let d = drops.clone();
        let first_done = Arc::new(AtomicUsize::new(0));
        let fd = first_done.clone();
        rt.block_on(async {
            tx.spawn(async move {
                fd.store(1, SeqCst);
                Bomb {
                    bomb: true,
                    drops: d,
                }
            })
            .unwrap();
            for _ in 0..3 {
                let (d, f) = (drops.clone(), finished.clone());
                tx.spawn(async move {
                    weft::time::sleep(Duration::from_millis(300)).await;
                    f.fetch_add(1, SeqCst);
                    Bomb {
                        bomb: false,
                        drops: d,
                    }
                })
                .unwrap();
            }
        });
        // Let the first finish (its output waits in its task).
        let t = Instant::now();
        while first_done.load(SeqCst) == 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        let r = catch_unwind(AssertUnwindSafe(|| drop(rx)));
        assert!(r.is_err(), "the output's panic reaches the dropper");
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(
            finished.load(SeqCst),
            0,
            "work queued behind the panicking output was not cancelled: it ran to the \
             end after the receiver was dropped"
        );
        drop(tx);
    });
}

/// `OrderedSender::spawn_async` starts the work when it is called, before its future
/// is polled; if that future is dropped while it waits for room (a `select`, a
/// timeout, a cancelled task), the work is neither queued nor cancelled: it runs on,
/// detached, and its result is dropped unseen. The project asks for "a clear error or
/// documented behaviour, never ... silent loss": the work should be aborted (as the
/// receiver's drop aborts queued work) or its loss documented.
#[test]
fn ordered_spawn_async_dropped_while_waiting_for_room_does_not_run_work_unseen() {
    watchdog(20, || {
        let rt = rt(2);
        let finished = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::ordered::<u32>(1);
        rt.block_on(async {
            // The queue is full: one handle of long work.
            tx.spawn(async {
                weft::time::sleep(Duration::from_millis(500)).await;
                0
            })
            .unwrap();
            let f = finished.clone();
            let spawn = tx.spawn_async(async move {
                weft::time::sleep(Duration::from_millis(30)).await;
                f.fetch_add(1, SeqCst);
                1
            });
            // Gives up waiting for room after 5 ms: the future is dropped.
            let r = weft::time::timeout(Duration::from_millis(5), spawn).await;
            assert!(r.is_err(), "the queue was full: the spawn had to wait");
        });
        std::thread::sleep(Duration::from_millis(300));
        let ran = finished.load(SeqCst);
        // What the receiver sees: only the first piece of work.
        let first = rt.block_on(weft::time::timeout(Duration::from_secs(5), rx.recv()));
        assert_eq!(first.unwrap().unwrap().unwrap(), 0);
        drop(tx);
        let end = rt.block_on(weft::time::timeout(Duration::from_secs(5), rx.recv()));
        assert!(end.unwrap().is_err());
        assert_eq!(
            ran, 0,
            "the work of a dropped spawn_async ran to completion, detached, and its \
             result was dropped unseen"
        );
    });
}

// ---------------------------------------------------------------------------------
// Async forms under extreme timeouts; clones
// ---------------------------------------------------------------------------------

/// `send(v).await` and `recv().await` under `weft::time::timeout` of 0, 1 ns,
/// `Duration::MAX` and `timeout_at` a far instant: a timed-out send's value is dropped
/// once and never delivered, a timed-out receive loses nothing, and the huge ones
/// complete when a partner comes.
#[test]
fn async_send_and_recv_under_extreme_timeouts() {
    watchdog(20, || {
        let rt = rt(2);
        let live = Arc::new(AtomicUsize::new(0));
        for cap in [0usize, 1] {
            let (tx, rx) = chan::bounded::<Live>(cap);
            let l = live.clone();
            let (tx2, rx2) = (tx.clone(), rx.clone());
            let out = rt.block_on(async move {
                let mut out = Vec::new();
                if cap == 1 {
                    tx2.send(Live::new(0, &l)).await.unwrap();
                }
                for d in [Duration::ZERO, Duration::from_nanos(1)] {
                    let r = weft::time::timeout(d, tx2.send(Live::new(50, &l))).await;
                    out.push(format!("send {d:?}: {}", r.is_err()));
                }
                if cap == 1 {
                    let v = rx2.recv().await.unwrap();
                    out.push(format!("buffered {}", v.id));
                }
                for d in [Duration::ZERO, Duration::from_nanos(1)] {
                    let r = weft::time::timeout(d, rx2.recv()).await;
                    out.push(format!("recv {d:?}: {}", r.is_err()));
                }
                // Huge: a task sends later.
                let tx3 = tx2.clone();
                let l3 = l.clone();
                weft::spawn(async move {
                    for i in 1..=2 {
                        weft::time::sleep(Duration::from_millis(3)).await;
                        tx3.send(Live::new(i, &l3)).await.unwrap();
                    }
                });
                let a = weft::time::timeout(Duration::MAX, rx2.recv()).await;
                let b = weft::time::timeout_at(far_instant(), rx2.recv()).await;
                out.push(format!(
                    "huge {:?} {:?}",
                    a.map(|r| r.map(|v| v.id)),
                    b.map(|r| r.map(|v| v.id))
                ));
                out
            });
            let expect_send = ["send 0ns: true", "send 1ns: true"];
            assert_eq!(&out[..2], expect_send, "cap {cap}: {out:?}");
            assert!(
                out.iter().any(|s| s == "huge Ok(Ok(1)) Ok(Ok(2))"),
                "cap {cap}: {out:?}"
            );
            assert!(
                out.contains(&"recv 0ns: true".to_string()),
                "cap {cap}: {out:?}"
            );
            // Nothing of the timed-out sends arrived, and nothing leaked.
            assert!(
                rx.try_recv().is_err(),
                "cap {cap}: a timed-out send delivered"
            );
            drop((tx, rx));
            assert_eq!(live.load(SeqCst), 0, "cap {cap}: values leaked");
        }
    });
}

/// Many clones of each end, dropped in an interleaved order: the channel disconnects
/// exactly when the last of a side goes, not before, and values flow throughout.
#[test]
fn many_clones_of_each_end() {
    watchdog(20, || {
        const N: usize = 100_000;
        let (tx, rx) = chan::bounded::<usize>(4);
        let mut txs: Vec<_> = (0..N).map(|_| tx.clone()).collect();
        let mut rxs: Vec<_> = (0..N).map(|_| rx.clone()).collect();
        drop((tx, rx));
        let mut k = 0;
        while txs.len() > 1 || rxs.len() > 1 {
            // Drop some of each from the middle.
            for _ in 0..997.min(txs.len() - 1) {
                let i = (k * 7919) % txs.len();
                txs.swap_remove(i);
                k += 1;
            }
            for _ in 0..991.min(rxs.len() - 1) {
                let i = (k * 104_729) % rxs.len();
                rxs.swap_remove(i);
                k += 1;
            }
            assert!(!txs[0].is_closed() && !rxs[0].is_closed());
            txs[k % txs.len()].try_send(k).unwrap();
            assert_eq!(rxs[(k / 3) % rxs.len()].try_recv(), Ok(k));
        }
        let tx = txs.pop().unwrap();
        let rx = rxs.pop().unwrap();
        tx.send_blocking(1).unwrap();
        drop(rx);
        assert!(tx.is_closed());
        assert!(tx.send_blocking(2).is_err());
        // Timer and never receivers clone freely and stay independent of the count.
        let t = chan::after(Duration::ZERO);
        let ts: Vec<_> = (0..1000).map(|_| t.clone()).collect();
        assert!(ts[500].recv_timeout(Duration::from_secs(1)).is_ok());
        assert!(
            t.try_recv().is_err(),
            "a one-shot timer delivered twice through clones"
        );
        let n = chan::never::<u8>();
        let ns: Vec<_> = (0..1000).map(|_| n.clone()).collect();
        assert!(ns.iter().all(|x| x.same_channel(&n) && !x.is_closed()));
    });
}
