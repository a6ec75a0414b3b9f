//! The public API, name for name and signature for signature, as issues 15 (channels
//! and select), 16 (`weft::sync`) and 17 (network I/O, `weft::io`, `weft::signal`,
//! the `hyper` feature) spell it out. Most of it only has to compile: each item is
//! named by the path a user writes, and concrete signatures are pinned by coercing
//! the method to a function pointer; `async` methods and `impl Trait` arguments, which
//! cannot be coerced, go through a wrapper whose return type states the future's
//! output (and `Send`, as a user spawning it needs). A few cheap runtime checks
//! follow where they cost nothing (no waiting, no sockets).
//!
//! Not repeated here, because other tests state them already:
//! - the ends' `Send + Sync + Clone + UnwindSafe + RefUnwindSafe`, `Stream + Unpin`,
//!   `IntoIterator`, the futures' `Send + Sync`, `Select: Clone + Send + Sync`, the
//!   error types' `Debug + Display + Error + Clone + PartialEq`, their `into_inner` and
//!   `Display`: `chan_semantics.rs` (`traits_of_the_ends`, `errors`,
//!   `errors_give_values_back_and_describe_themselves`);
//! - every socket's `Send + Sync + AsRawFd + AsFd`, the streams' `Unpin + Read + Write`
//!   (and `&Stream`'s `Read + Write`), `futures_io` on the streams:
//!   `net_udp_unix.rs` (`socket_types_are_send_sync_fd_and_streams_unpin`).
//!
//! What an issue names and the crate does not have (or has with another signature) is
//! written as the issue spells it in a `#[cfg(any())]` block marked `// MISSING:`.

#![allow(dead_code, clippy::type_complexity)]

use std::error::Error;
use std::fmt::{Debug, Display};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::ops::Deref;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn is_send<T: ?Sized + Send>() {}
fn is_sync<T: ?Sized + Sync>() {}
fn is_send_sync<T: ?Sized + Send + Sync>() {}
fn is_clone<T: Clone>() {}
fn is_unpin<T: ?Sized + Unpin>() {}
fn is_error<E: Debug + Display + Error>() {}
fn is_error_send_sync<E: Debug + Display + Error + Send + Sync + 'static>() {}

fn rt() -> weft::Runtime {
    weft::Builder::new().worker_threads(1).build().unwrap()
}

// =====================================================================================
// Issue 15: `weft::chan`
// =====================================================================================

mod chan_api {
    use super::*;
    use weft::chan::{
        self, OrderedReceiver, OrderedSender, ReadyTimeoutError, Receiver, RecvError,
        RecvTimeoutError, Select, SelectTimeoutError, SelectedOperation, SendError,
        SendTimeoutError, Sender, TryReadyError, TryRecvError, TrySelectError, TrySendError,
    };
    use weft::JoinError;

    /// `bounded::<T>(cap)`, `unbounded::<T>()`, and the timer channels.
    pub fn constructors<T>() {
        let _: fn(usize) -> (Sender<T>, Receiver<T>) = chan::bounded::<T>;
        let _: fn() -> (Sender<T>, Receiver<T>) = chan::unbounded::<T>;
        let _: fn(Duration) -> Receiver<Instant> = chan::after;
        let _: fn(Instant) -> Receiver<Instant> = chan::at;
        let _: fn(Duration) -> Receiver<Instant> = chan::tick;
        let _: fn() -> Receiver<T> = chan::never::<T>;
    }

    pub fn sender_methods<T>() {
        let _: fn(&Sender<T>, T) -> Result<(), SendError<T>> = Sender::send_blocking;
        let _: fn(&Sender<T>, T) -> Result<(), TrySendError<T>> = Sender::try_send;
        let _: fn(&Sender<T>, T, Duration) -> Result<(), SendTimeoutError<T>> =
            Sender::send_timeout;
        let _: fn(&Sender<T>) -> bool = Sender::close;
        let _: fn(&Sender<T>) -> bool = Sender::is_closed;
        let _: fn(&Sender<T>) -> usize = Sender::len;
        let _: fn(&Sender<T>) -> bool = Sender::is_empty;
        let _: fn(&Sender<T>) -> bool = Sender::is_full;
        let _: fn(&Sender<T>) -> Option<usize> = Sender::capacity;
        let _: fn(&Sender<T>, &Sender<T>) -> bool = Sender::same_channel;
    }

    /// `send(v) -> impl Future<Output = Result<(), SendError<T>>>`, `Send + Sync`.
    pub fn send<T: Send>(
        tx: &Sender<T>,
        v: T,
    ) -> impl Future<Output = Result<(), SendError<T>>> + Send + Sync + '_ {
        tx.send(v)
    }

    pub fn receiver_methods<T>() {
        let _: fn(&Receiver<T>) -> Result<T, RecvError> = Receiver::recv_blocking;
        let _: fn(&Receiver<T>) -> Result<T, TryRecvError> = Receiver::try_recv;
        let _: fn(&Receiver<T>, Duration) -> Result<T, RecvTimeoutError> = Receiver::recv_timeout;
        let _: fn(&Receiver<T>) -> bool = Receiver::close;
        let _: fn(&Receiver<T>) -> bool = Receiver::is_closed;
        let _: fn(&Receiver<T>) -> usize = Receiver::len;
        let _: fn(&Receiver<T>) -> bool = Receiver::is_empty;
        let _: fn(&Receiver<T>) -> bool = Receiver::is_full;
        let _: fn(&Receiver<T>) -> Option<usize> = Receiver::capacity;
        let _: fn(&Receiver<T>, &Receiver<T>) -> bool = Receiver::same_channel;
        let _: fn(&Receiver<T>) -> chan::Iter<'_, T> = Receiver::iter;
        let _: fn(&Receiver<T>) -> chan::TryIter<'_, T> = Receiver::try_iter;
    }

    /// `recv() -> impl Future<Output = Result<T, RecvError>>`, `Send + Sync`.
    pub fn recv<T: Send>(
        rx: &Receiver<T>,
    ) -> impl Future<Output = Result<T, RecvError>> + Send + Sync + '_ {
        rx.recv()
    }

    /// `iter()`, `try_iter()`, `IntoIterator` for `Receiver` and `&Receiver`, each
    /// yielding `T`; `futures_core::Stream<Item = T>`.
    pub fn iterators<T>(rx: &Receiver<T>) -> impl Iterator<Item = T> + '_ {
        rx.iter().chain(rx.try_iter()).chain(rx)
    }

    pub fn into_iter<T>(rx: Receiver<T>) -> impl Iterator<Item = T> {
        rx.into_iter()
    }

    pub fn stream<T>(rx: Receiver<T>) -> impl futures_core::Stream<Item = T> + Unpin {
        rx
    }

    /// Both ends `UnwindSafe + RefUnwindSafe` (for any `T`; `chan_semantics` checks
    /// them for `T: Send`).
    pub fn unwind_safe_for_any_t<T>() {
        fn uw<X: UnwindSafe + RefUnwindSafe>() {}
        uw::<Sender<T>>();
        uw::<Receiver<T>>();
    }

    /// The errors' shapes as crossbeam's: `SendError<T>(pub T)` and the variants,
    /// matched exhaustively.
    pub fn error_shapes<T>(
        a: SendError<T>,
        b: TrySendError<T>,
        c: SendTimeoutError<T>,
        d: RecvError,
        e: TryRecvError,
        f: RecvTimeoutError,
    ) -> [Option<T>; 3] {
        let SendError(a) = a;
        let b = match b {
            TrySendError::Full(v) | TrySendError::Disconnected(v) => v,
        };
        let c = match c {
            SendTimeoutError::Timeout(v) | SendTimeoutError::Disconnected(v) => v,
        };
        let RecvError = d;
        match e {
            TryRecvError::Empty | TryRecvError::Disconnected => {}
        }
        match f {
            RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected => {}
        }
        [Some(a), Some(b), Some(c)]
    }

    /// `Debug + Display + Error` for every `T` (even one that is neither `Debug` nor
    /// `Send`), `into_inner()` on the ones that hold a value.
    pub fn errors_for_any_t<T>() {
        is_error::<SendError<T>>();
        is_error::<TrySendError<T>>();
        is_error::<SendTimeoutError<T>>();
        is_error::<RecvError>();
        is_error::<TryRecvError>();
        is_error::<RecvTimeoutError>();
        is_error::<TrySelectError>();
        is_error::<SelectTimeoutError>();
        is_error::<TryReadyError>();
        is_error::<ReadyTimeoutError>();
        let _: fn(SendError<T>) -> T = SendError::into_inner;
        let _: fn(TrySendError<T>) -> T = TrySendError::into_inner;
        let _: fn(SendTimeoutError<T>) -> T = SendTimeoutError::into_inner;
    }

    /// `Select` as the issue lists it (crossbeam's).
    pub fn select_methods<'a, T: Send>(rx: &'a Receiver<T>, tx: &'a Sender<T>) {
        let _: fn() -> Select<'a> = Select::new;
        let mut sel = Select::new();
        let _: usize = sel.recv(rx);
        let _: usize = sel.send(tx);
        let _: fn(&mut Select<'a>, &'a Receiver<T>) -> usize = Select::recv;
        let _: fn(&mut Select<'a>, &'a Sender<T>) -> usize = Select::send;
        let _: fn(&mut Select<'a>) -> SelectedOperation<'a> = Select::select;
        let _: fn(&mut Select<'a>) -> Result<SelectedOperation<'a>, TrySelectError> =
            Select::try_select;
        let _: fn(&mut Select<'a>, Duration) -> Result<SelectedOperation<'a>, SelectTimeoutError> =
            Select::select_timeout;
        let _: fn(&mut Select<'a>, Instant) -> Result<SelectedOperation<'a>, SelectTimeoutError> =
            Select::select_deadline;
        let _: fn(&mut Select<'a>) -> usize = Select::ready;
        let _: fn(&mut Select<'a>) -> Result<usize, TryReadyError> = Select::try_ready;
        let _: fn(&mut Select<'a>, Duration) -> Result<usize, ReadyTimeoutError> =
            Select::ready_timeout;
        let _: fn(&mut Select<'a>, Instant) -> Result<usize, ReadyTimeoutError> =
            Select::ready_deadline;
        let _: fn(&SelectedOperation<'a>) -> usize = SelectedOperation::index;
        let _: fn(SelectedOperation<'a>, &Receiver<T>) -> Result<T, RecvError> =
            SelectedOperation::recv;
        let _: fn(SelectedOperation<'a>, &Sender<T>, T) -> Result<(), SendError<T>> =
            SelectedOperation::send;
    }

    /// `select_async() -> impl Future<Output = SelectedOperation<'_>>`, `Send`.
    pub fn select_async<'s, 'a>(
        sel: &'s mut Select<'a>,
    ) -> impl Future<Output = SelectedOperation<'a>> + Send + 's {
        sel.select_async()
    }

    /// `ordered::<T>(cap) -> (OrderedSender<T>, OrderedReceiver<T>)`, both ends `Send`,
    /// `OrderedSender: Clone`, `recv_blocking` yielding
    /// `Result<Result<T, JoinError>, RecvError>`.
    pub fn ordered_api<T: Send + 'static>() {
        let _: fn(usize) -> (OrderedSender<T>, OrderedReceiver<T>) = chan::ordered::<T>;
        is_send::<OrderedSender<T>>();
        is_send::<OrderedReceiver<T>>();
        is_clone::<OrderedSender<T>>();
        let _: fn(&OrderedReceiver<T>) -> Result<Result<T, JoinError>, RecvError> =
            OrderedReceiver::recv_blocking;
    }

    /// `OrderedSender::spawn(&self, future) -> Result<(), SendError<Result<T,
    /// JoinError>>>`.
    pub fn ordered_spawn<T, F>(
        tx: &OrderedSender<T>,
        f: F,
    ) -> Result<(), SendError<Result<T, JoinError>>>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        tx.spawn(f)
    }

    /// `spawn_fiber(&self, closure)`, same result.
    pub fn ordered_spawn_fiber<T, F>(
        tx: &OrderedSender<T>,
        f: F,
    ) -> Result<(), SendError<Result<T, JoinError>>>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        tx.spawn_fiber(f)
    }

    /// `spawn_async(&self, future)`, the async form.
    pub fn ordered_spawn_async<T, F>(
        tx: &OrderedSender<T>,
        f: F,
    ) -> impl Future<Output = Result<(), SendError<Result<T, JoinError>>>> + Send + '_
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        tx.spawn_async(f)
    }

    /// `OrderedReceiver::recv()`, a `Send` future.
    pub fn ordered_recv<T: Send + 'static>(
        rx: &OrderedReceiver<T>,
    ) -> impl Future<Output = Result<Result<T, JoinError>, RecvError>> + Send + '_ {
        rx.recv()
    }

    #[test]
    fn chan_api_runtime_checks() {
        // No runtime: on bounded(0) with no partner, `try_send` is `Full` and `try_recv`
        // `Empty`, storing nothing.
        let (tx, rx) = chan::bounded::<u8>(0);
        assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(tx.capacity(), Some(0));
        // `close()` is true only for the call that closed it; `is_closed()` on both.
        assert!(rx.close());
        assert!(!tx.close());
        assert!(tx.is_closed() && rx.is_closed());
        assert_eq!(tx.try_send(2), Err(TrySendError::Disconnected(2)));
        assert_eq!(chan::unbounded::<u8>().0.capacity(), None);

        // A `Select` is used again after a failed `try_select` and a timed-out
        // `select_timeout`.
        let (tx, rx) = chan::bounded::<u8>(1);
        let mut sel = Select::new();
        let i = sel.recv(&rx);
        assert!(sel.try_select().is_err());
        assert!(sel.select_timeout(Duration::from_millis(1)).is_err());
        assert!(sel.try_ready().is_err());
        tx.send_blocking(5).unwrap();
        assert_eq!(sel.ready_timeout(Duration::from_secs(5)), Ok(i));
        let oper = sel.select_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(oper.index(), i);
        assert_eq!(oper.recv(&rx), Ok(5));
        // `never` stays empty; `after` delivers an `Instant`.
        assert_eq!(chan::never::<u8>().try_recv(), Err(TryRecvError::Empty));
        let t: Instant = chan::after(Duration::ZERO)
            .recv_timeout(Duration::from_secs(5))
            .unwrap();
        assert!(t <= Instant::now());
    }

    /// `weft::select!` with every arm form issue 15 lists (`recv(rx) -> msg => ..`,
    /// `send(tx, v) -> res => ..`, `default => ..`, `default(timeout) => ..`), trailing
    /// commas after the arms and inside the operands, bodies as blocks (no comma) and
    /// as expressions, and operands that deref to a weft `Sender`/`Receiver`; and
    /// `weft::select_biased!`. Every select here has a ready operation or a default, so
    /// none waits (but for one 1 ms timeout).
    #[test]
    fn select_macro_forms() {
        let (tx, rx) = chan::unbounded::<u8>();
        tx.send_blocking(1).unwrap();
        // One recv arm, expression body, trailing comma.
        weft::select! {
            recv(rx) -> msg => assert_eq!(msg, Ok(1)),
        }
        // Expression body, no trailing comma.
        tx.send_blocking(2).unwrap();
        weft::select! {
            recv(rx) -> msg => assert_eq!(msg, Ok(2))
        }
        // send arm, then `default`; block bodies without commas.
        let sent = weft::select! {
            send(tx, 3) -> res => { res.unwrap(); true }
            default => { false }
        };
        assert!(sent);
        // `default(timeout)` with a ready recv and a send to a full channel; trailing
        // commas inside the operands.
        let (full_tx, full_rx) = chan::bounded::<u8>(1);
        full_tx.send_blocking(0).unwrap();
        let got = weft::select! {
            recv(rx,) -> msg => msg.unwrap(),
            send(full_tx, 9,) -> _res => panic!("sent to a full channel"),
            default(Duration::from_secs(5),) => panic!("timed out"),
        };
        assert_eq!(got, 3);
        assert_eq!(full_rx.try_recv(), Ok(0));
        // `default` taken when nothing is ready; `default(timeout)` taken after it.
        let r = weft::select! {
            recv(rx) -> _msg => 0,
            default => 1,
        };
        assert_eq!(r, 1);
        let r = weft::select! {
            recv(rx) -> _msg => 0,
            default(Duration::from_millis(1)) => 2,
        };
        assert_eq!(r, 2);
        // Operands that deref to a weft `Receiver`/`Sender`: `Arc`, `Box`, `&&`.
        let arc_rx = Arc::new(rx.clone());
        let boxed_tx = Box::new(tx.clone());
        let ref_ref_rx = &&rx;
        weft::select! {
            send(boxed_tx, 4) -> res => res.unwrap(),
        }
        weft::select! {
            recv(arc_rx) -> msg => assert_eq!(msg, Ok(4)),
        }
        tx.send_blocking(5).unwrap();
        weft::select! {
            recv(ref_ref_rx) -> msg => assert_eq!(msg, Ok(5)),
        }
        // `select_biased!`: the first ready arm in source order wins.
        tx.send_blocking(6).unwrap();
        let (tx2, rx2) = chan::unbounded::<u8>();
        tx2.send_blocking(7).unwrap();
        for _ in 0..20 {
            let won = weft::select_biased! {
                recv(rx2) -> msg => { tx2.send_blocking(msg.unwrap()).unwrap(); 2 }
                recv(rx) -> msg => { tx.send_blocking(msg.unwrap()).unwrap(); 1 }
            };
            assert_eq!(won, 2);
        }
        let r = weft::select_biased! {
            recv(rx) -> msg => msg.unwrap(),
            default => 0,
        };
        assert_eq!(r, 6);
        // Timer channels work in `select!` like any receiver.
        let start = Instant::now();
        weft::select! {
            recv(chan::never::<u8>()) -> _msg => panic!("never delivered"),
            recv(chan::after(Duration::ZERO)) -> t => assert!(t.unwrap() >= start),
            default(Duration::from_secs(5)) => panic!("timed out"),
        }
    }
}

// MISSING: issue 15 says "`weft::chan::Select` as crossbeam's: `new()`, `recv(&Receiver<T>)
// -> usize`, `send(&Sender<T>) -> usize`, ... `SelectedOperation::{index(), recv(self,
// &Receiver<T>) -> Result<T, RecvError>, send(self, &Sender<T>, T) -> Result<(),
// SendError<T>>}`": crossbeam's take any `T`; weft's `Select::recv`, `Select::send`,
// `SelectedOperation::recv` and `SelectedOperation::send` require `T: Send`, so a
// channel of a non-`Send` type (usable with `send_blocking`/`recv_blocking`, as
// crossbeam's is) cannot be selected on, by `Select` or by `select!`.
#[cfg(any())]
mod chan_select_any_t {
    use weft::chan::{Receiver, RecvError, Select, SelectedOperation, SendError, Sender};
    pub fn select_methods_any_t<'a, T>(rx: &'a Receiver<T>, tx: &'a Sender<T>) {
        let mut sel = Select::new();
        let _: usize = sel.recv(rx);
        let _: usize = sel.send(tx);
        let _: fn(SelectedOperation<'a>, &Receiver<T>) -> Result<T, RecvError> =
            SelectedOperation::recv;
        let _: fn(SelectedOperation<'a>, &Sender<T>, T) -> Result<(), SendError<T>> =
            SelectedOperation::send;
    }
    pub fn select_macro_non_send(rx: &Receiver<std::rc::Rc<u8>>) {
        weft::select! {
            recv(rx) -> _msg => {},
            default => {},
        }
    }
}

// MISSING (only if the wording means `Clone` too): issue 15 says "Both ends are `Clone +
// Send + Sync` (multi-producer, multi-consumer) when `T: Send`, and so are the futures
// `send` and `recv` return". `SendFuture` and `RecvFuture` are `Send + Sync` (checked
// above) but not `Clone`.
#[cfg(any())]
mod chan_futures_clone {
    use weft::chan::{RecvFuture, SendFuture};
    pub fn futures_clone<T: Send + Clone>() {
        super::is_clone::<SendFuture<'static, T>>();
        super::is_clone::<RecvFuture<'static, T>>();
    }
}

// =====================================================================================
// Issue 16: `weft::sync`
// =====================================================================================

mod sync_api {
    use super::*;
    use weft::sync::{
        broadcast, oneshot, watch, AcquireError, Barrier, BarrierWaitResult, Mutex, MutexGuard,
        Notified, Notify, OwnedMutexGuard, OwnedRwLockReadGuard, OwnedRwLockWriteGuard,
        OwnedSemaphorePermit, RwLock, RwLockReadGuard, RwLockWriteGuard, Semaphore,
        SemaphorePermit, TryAcquireError, TryLockError, WaitGroup,
    };

    // ---- Mutex ----

    pub fn mutex_methods<T>() {
        let _: fn(T) -> Mutex<T> = Mutex::new;
        let _: fn(&Mutex<T>) -> MutexGuard<'_, T> = Mutex::lock_blocking;
        let _: fn(&Mutex<T>) -> Result<MutexGuard<'_, T>, TryLockError> = Mutex::try_lock;
        let _: fn(&mut Mutex<T>) -> &mut T = Mutex::get_mut;
        let _: fn(Mutex<T>) -> T = Mutex::into_inner;
    }

    /// `lock().await -> MutexGuard<'_, T>` (a `Send` future when `T: Send`, as tokio's).
    pub fn mutex_lock<T: ?Sized + Send>(
        m: &Mutex<T>,
    ) -> impl Future<Output = MutexGuard<'_, T>> + Send + '_ {
        m.lock()
    }

    /// `lock_owned(self: Arc<Self>) -> OwnedMutexGuard<T>`.
    pub fn mutex_lock_owned<T: ?Sized + Send + 'static>(
        m: Arc<Mutex<T>>,
    ) -> impl Future<Output = OwnedMutexGuard<T>> + Send {
        m.lock_owned()
    }

    /// The guards deref to `T`.
    pub fn guards_deref<T>(a: MutexGuard<'_, T>, mut b: OwnedMutexGuard<T>) {
        let _: &T = &a;
        let _: &mut T = &mut b;
    }

    // ---- RwLock ----

    pub fn rwlock_methods<T>() {
        let _: fn(T) -> RwLock<T> = RwLock::new;
        let _: fn(&RwLock<T>) -> RwLockReadGuard<'_, T> = RwLock::read_blocking;
        let _: fn(&RwLock<T>) -> RwLockWriteGuard<'_, T> = RwLock::write_blocking;
        let _: fn(&RwLock<T>) -> Result<RwLockReadGuard<'_, T>, TryLockError> = RwLock::try_read;
        let _: fn(&RwLock<T>) -> Result<RwLockWriteGuard<'_, T>, TryLockError> = RwLock::try_write;
        let _: fn(&mut RwLock<T>) -> &mut T = RwLock::get_mut;
        let _: fn(RwLock<T>) -> T = RwLock::into_inner;
    }

    pub fn rwlock_read<T: Send + Sync>(
        l: &RwLock<T>,
    ) -> impl Future<Output = RwLockReadGuard<'_, T>> + Send + '_ {
        l.read()
    }

    pub fn rwlock_write<T: Send + Sync>(
        l: &RwLock<T>,
    ) -> impl Future<Output = RwLockWriteGuard<'_, T>> + Send + '_ {
        l.write()
    }

    pub fn rwlock_read_owned<T: Send + Sync + 'static>(
        l: Arc<RwLock<T>>,
    ) -> impl Future<Output = OwnedRwLockReadGuard<T>> + Send {
        l.read_owned()
    }

    pub fn rwlock_write_owned<T: Send + Sync + 'static>(
        l: Arc<RwLock<T>>,
    ) -> impl Future<Output = OwnedRwLockWriteGuard<T>> + Send {
        l.write_owned()
    }

    // ---- Semaphore ----

    pub fn semaphore_methods() {
        let _: fn(usize) -> Semaphore = Semaphore::new;
        let _: fn(&Semaphore) -> Result<SemaphorePermit<'_>, TryAcquireError> =
            Semaphore::try_acquire;
        let _: fn(&Semaphore, u32) -> Result<SemaphorePermit<'_>, TryAcquireError> =
            Semaphore::try_acquire_many;
        let _: fn(&Semaphore) -> Result<SemaphorePermit<'_>, AcquireError> =
            Semaphore::acquire_blocking;
        let _: fn(&Semaphore, u32) -> Result<SemaphorePermit<'_>, AcquireError> =
            Semaphore::acquire_many_blocking;
        let _: fn(&Semaphore, usize) = Semaphore::add_permits;
        let _: fn(&Semaphore) -> usize = Semaphore::available_permits;
        let _: fn(&Semaphore) = Semaphore::close;
        let _: fn(SemaphorePermit<'static>) = SemaphorePermit::forget;
        let _: fn(OwnedSemaphorePermit) = OwnedSemaphorePermit::forget;
        is_error_send_sync::<AcquireError>();
        is_error_send_sync::<TryAcquireError>();
    }

    pub fn try_acquire_error_variants(e: TryAcquireError) -> u8 {
        match e {
            TryAcquireError::Closed => 0,
            TryAcquireError::NoPermits => 1,
        }
    }

    pub fn acquire(
        s: &Semaphore,
    ) -> impl Future<Output = Result<SemaphorePermit<'_>, AcquireError>> + Send + '_ {
        s.acquire()
    }

    pub fn acquire_many(
        s: &Semaphore,
        n: u32,
    ) -> impl Future<Output = Result<SemaphorePermit<'_>, AcquireError>> + Send + '_ {
        s.acquire_many(n)
    }

    pub fn acquire_owned(
        s: Arc<Semaphore>,
    ) -> impl Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send {
        s.acquire_owned()
    }

    pub fn acquire_many_owned(
        s: Arc<Semaphore>,
        n: u32,
    ) -> impl Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send {
        s.acquire_many_owned(n)
    }

    // ---- Notify ----

    pub fn notify_methods() {
        let _: fn() -> Notify = Notify::new;
        let _: fn(&Notify) -> Notified<'_> = Notify::notified;
        let _: fn(&Notify) = Notify::notify_one;
        let _: fn(&Notify) = Notify::notify_waiters;
        let _: fn(&Notify) = Notify::notified_blocking;
    }

    pub fn notified(n: &Notify) -> impl Future<Output = ()> + Send + '_ {
        n.notified()
    }

    // ---- oneshot ----

    pub fn oneshot_methods<T>() {
        let _: fn() -> (oneshot::Sender<T>, oneshot::Receiver<T>) = oneshot::channel::<T>;
        let _: fn(oneshot::Sender<T>, T) -> Result<(), T> = oneshot::Sender::send;
        let _: fn(&oneshot::Sender<T>) -> bool = oneshot::Sender::is_closed;
        let _: fn(oneshot::Receiver<T>) -> Result<T, oneshot::error::RecvError> =
            oneshot::Receiver::recv_blocking;
        let _: fn(&mut oneshot::Receiver<T>) -> Result<T, oneshot::error::TryRecvError> =
            oneshot::Receiver::try_recv;
        is_error_send_sync::<oneshot::error::RecvError>();
        is_error_send_sync::<oneshot::error::TryRecvError>();
    }

    pub fn oneshot_closed<T: Send>(
        s: &mut oneshot::Sender<T>,
    ) -> impl Future<Output = ()> + Send + '_ {
        s.closed()
    }

    /// `Receiver` is a future of `Result<T, oneshot::error::RecvError>` (and `Unpin`, as
    /// tokio's, so `&mut rx` can be awaited).
    pub fn oneshot_receiver_future<T: Send>(
        r: oneshot::Receiver<T>,
    ) -> impl Future<Output = Result<T, oneshot::error::RecvError>> + Send + Unpin {
        r
    }

    pub fn oneshot_try_recv_error_variants(e: oneshot::error::TryRecvError) -> u8 {
        match e {
            oneshot::error::TryRecvError::Empty => 0,
            oneshot::error::TryRecvError::Closed => 1,
        }
    }

    // ---- watch ----

    pub fn watch_methods<T>() {
        let _: fn(T) -> (watch::Sender<T>, watch::Receiver<T>) = watch::channel::<T>;
        let _: fn(&watch::Sender<T>, T) -> Result<(), watch::error::SendError<T>> =
            watch::Sender::send;
        let _: fn(&watch::Sender<T>) -> watch::Receiver<T> = watch::Sender::subscribe;
        let _: fn(&watch::Sender<T>) -> watch::Ref<'_, T> = watch::Sender::borrow;
        let _: fn(&watch::Receiver<T>) -> watch::Ref<'_, T> = watch::Receiver::borrow;
        let _: fn(&mut watch::Receiver<T>) -> watch::Ref<'_, T> =
            watch::Receiver::borrow_and_update;
        let _: fn(&mut watch::Receiver<T>) -> Result<(), watch::error::RecvError> =
            watch::Receiver::changed_blocking;
        let _: fn(&watch::Receiver<T>) -> Result<bool, watch::error::RecvError> =
            watch::Receiver::has_changed;
        is_clone::<watch::Receiver<T>>();
        is_error_send_sync::<watch::error::RecvError>();
        is_error::<watch::error::SendError<T>>();
    }

    pub fn watch_send_modify<T>(s: &watch::Sender<T>) {
        s.send_modify(|v: &mut T| {
            let _ = v;
        });
    }

    pub fn watch_changed<T: Send + Sync>(
        r: &mut watch::Receiver<T>,
    ) -> impl Future<Output = Result<(), watch::error::RecvError>> + Send + '_ {
        r.changed()
    }

    pub fn watch_ref_derefs<T>(r: watch::Ref<'_, T>) -> impl Deref<Target = T> + '_ {
        r
    }

    // ---- broadcast ----

    pub fn broadcast_methods<T: Clone>() {
        let _: fn(usize) -> (broadcast::Sender<T>, broadcast::Receiver<T>) =
            broadcast::channel::<T>;
        is_clone::<broadcast::Sender<T>>();
        let _: fn(&broadcast::Sender<T>, T) -> Result<usize, broadcast::error::SendError<T>> =
            broadcast::Sender::send;
        let _: fn(&broadcast::Sender<T>) -> broadcast::Receiver<T> = broadcast::Sender::subscribe;
        let _: fn(&mut broadcast::Receiver<T>) -> Result<T, broadcast::error::RecvError> =
            broadcast::Receiver::recv_blocking;
        let _: fn(&mut broadcast::Receiver<T>) -> Result<T, broadcast::error::TryRecvError> =
            broadcast::Receiver::try_recv;
        is_error::<broadcast::error::SendError<T>>();
        is_error_send_sync::<broadcast::error::RecvError>();
        is_error_send_sync::<broadcast::error::TryRecvError>();
    }

    /// `Receiver::recv().await` (a `Send` future where tokio's is: `T: Send`; see
    /// `sync_broadcast_send` below).
    pub fn broadcast_recv<T: Clone + Send + Sync>(
        r: &mut broadcast::Receiver<T>,
    ) -> impl Future<Output = Result<T, broadcast::error::RecvError>> + Send + '_ {
        r.recv()
    }

    pub fn broadcast_recv_error_variants(e: broadcast::error::RecvError) -> u64 {
        match e {
            broadcast::error::RecvError::Closed => 0,
            broadcast::error::RecvError::Lagged(n) => n,
        }
    }

    // ---- Barrier, WaitGroup ----

    pub fn barrier_and_wait_group_methods() {
        let _: fn(usize) -> Barrier = Barrier::new;
        let _: fn(&Barrier) -> BarrierWaitResult = Barrier::wait_blocking;
        let _: fn(&BarrierWaitResult) -> bool = BarrierWaitResult::is_leader;
        let _: fn() -> WaitGroup = WaitGroup::new;
        is_clone::<WaitGroup>();
        is_send_sync::<WaitGroup>();
        let _: fn(&WaitGroup, usize) = WaitGroup::add;
        let _: fn(&WaitGroup) = WaitGroup::done;
        let _: fn(&WaitGroup) = WaitGroup::wait_blocking;
    }

    pub fn barrier_wait(b: &Barrier) -> impl Future<Output = BarrierWaitResult> + Send + '_ {
        b.wait()
    }

    pub fn wait_group_wait(w: &WaitGroup) -> impl Future<Output = ()> + Send + '_ {
        w.wait()
    }

    // ---- Send/Sync where tokio's is (tokio 1.x's impls, bound for bound) ----

    pub fn tokio_parity_t_send<T: ?Sized + Send + 'static>() {
        is_send_sync::<Mutex<T>>();
        is_send::<MutexGuard<'static, T>>();
        is_send::<OwnedMutexGuard<T>>();
        is_send::<RwLock<T>>();
    }

    pub fn tokio_parity_t_send_sync<T: ?Sized + Send + Sync + 'static>() {
        is_sync::<MutexGuard<'static, T>>();
        is_sync::<OwnedMutexGuard<T>>();
        is_sync::<RwLock<T>>();
        is_send_sync::<RwLockReadGuard<'static, T>>();
        is_send_sync::<RwLockWriteGuard<'static, T>>();
        is_send_sync::<OwnedRwLockReadGuard<T>>();
        is_send_sync::<OwnedRwLockWriteGuard<T>>();
    }

    pub fn tokio_parity_channels<T: Send + 'static>() {
        is_send_sync::<oneshot::Sender<T>>();
        is_send_sync::<oneshot::Receiver<T>>();
    }

    pub fn tokio_parity_channels_sync<T: Send + Sync + 'static>() {
        is_send_sync::<watch::Sender<T>>();
        is_send_sync::<watch::Receiver<T>>();
        is_sync::<watch::Ref<'static, T>>();
        is_send_sync::<broadcast::Sender<T>>();
        is_send_sync::<broadcast::Receiver<T>>();
    }

    pub fn tokio_parity_plain() {
        is_send_sync::<Semaphore>();
        is_send_sync::<SemaphorePermit<'static>>();
        is_send_sync::<OwnedSemaphorePermit>();
        is_send_sync::<Notify>();
        is_send_sync::<Notified<'static>>();
        is_send_sync::<Barrier>();
        is_send_sync::<BarrierWaitResult>();
        is_send_sync::<WaitGroup>();
        is_error_send_sync::<TryLockError>();
    }

    #[test]
    fn sync_api_runtime_checks() {
        // `Barrier::new(0)` acts as `new(1)`: its one waiter leads, at once.
        assert!(Barrier::new(0).wait_blocking().is_leader());
        assert!(Barrier::new(1).wait_blocking().is_leader());
        // A `WaitGroup` at zero does not wait; it is reusable once back at zero.
        let wg = WaitGroup::new();
        wg.wait_blocking();
        wg.add(2);
        wg.done();
        wg.clone().done();
        wg.wait_blocking();
        // `close()`: every acquire fails.
        let sem = Semaphore::new(1);
        sem.close();
        assert!(sem.acquire_blocking().is_err());
        assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
        let sem = Semaphore::new(1);
        let p = sem.try_acquire().unwrap();
        assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
        p.forget();
        assert_eq!(sem.available_permits(), 0);
        sem.add_permits(2);
        assert_eq!(sem.acquire_many_blocking(2).unwrap().num_permits(), 2);
        // `broadcast::channel(0)` panics with a message that names the capacity.
        let err = std::panic::catch_unwind(|| broadcast::channel::<u8>(0)).unwrap_err();
        let msg = err
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| err.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        assert!(msg.contains("capacity"), "{msg:?}");
        // oneshot: `try_recv` says `Empty`, then `Closed` once the sender is gone.
        let (tx, mut rx) = oneshot::channel::<u8>();
        assert_eq!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        drop(tx);
        assert_eq!(rx.try_recv(), Err(oneshot::error::TryRecvError::Closed));
        // watch: `send` with no receiver left gives the value back.
        let (tx, rx) = watch::channel(1u8);
        drop(rx);
        assert_eq!(tx.send(2).unwrap_err().0, 2);
        // The errors describe themselves.
        let m = Mutex::new(());
        let _g = m.try_lock().unwrap();
        let shown = [
            m.try_lock().unwrap_err().to_string(),
            sem_closed_error().to_string(),
            TryAcquireError::Closed.to_string(),
            TryAcquireError::NoPermits.to_string(),
            oneshot::error::TryRecvError::Empty.to_string(),
            oneshot::error::TryRecvError::Closed.to_string(),
            oneshot_recv_error().to_string(),
            broadcast::error::RecvError::Closed.to_string(),
            broadcast::error::RecvError::Lagged(3).to_string(),
            broadcast::error::SendError(1u8).to_string(),
            watch::error::SendError(1u8).to_string(),
        ];
        for s in &shown {
            assert!(!s.is_empty());
        }
    }

    /// "Every future above works with any executor and waker (polled by hand with a
    /// no-op waker too)": with no runtime, each future whose event already happened is
    /// ready on its first poll by hand.
    #[test]
    fn sync_futures_poll_by_hand() {
        fn ready<F: Future>(f: F) -> F::Output {
            let mut f = std::pin::pin!(f);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            match f.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(v) => v,
                std::task::Poll::Pending => panic!("pending on the first poll"),
            }
        }
        let m = Arc::new(Mutex::new(1));
        *ready(m.lock()) += 1;
        assert_eq!(*ready(m.clone().lock_owned()), 2);
        let l = Arc::new(RwLock::new(1));
        assert_eq!(*ready(l.read()), 1);
        *ready(l.write()) += 1;
        assert_eq!(*ready(l.clone().read_owned()), 2);
        *ready(l.clone().write_owned()) += 1;
        let sem = Arc::new(Semaphore::new(3));
        assert_eq!(ready(sem.acquire()).unwrap().num_permits(), 1);
        assert_eq!(ready(sem.acquire_many(2)).unwrap().num_permits(), 2);
        assert_eq!(ready(sem.clone().acquire_owned()).unwrap().num_permits(), 1);
        assert_eq!(
            ready(sem.clone().acquire_many_owned(3))
                .unwrap()
                .num_permits(),
            3
        );
        let n = Notify::new();
        n.notify_one();
        ready(n.notified());
        let (tx, rx) = oneshot::channel();
        tx.send(5u8).unwrap();
        assert_eq!(ready(rx), Ok(5));
        let (mut tx, rx) = oneshot::channel::<u8>();
        drop(rx);
        ready(tx.closed());
        let (tx, mut rx) = watch::channel(0u8);
        tx.send(1).unwrap();
        ready(rx.changed()).unwrap();
        assert_eq!(*rx.borrow_and_update(), 1);
        let (tx, mut rx) = broadcast::channel(2);
        tx.send(7u8).unwrap();
        assert_eq!(ready(rx.recv()), Ok(7));
        assert!(ready(Barrier::new(1).wait()).is_leader());
        ready(WaitGroup::new().wait());
    }

    fn sem_closed_error() -> AcquireError {
        let sem = Semaphore::new(0);
        sem.close();
        sem.acquire_blocking().unwrap_err()
    }

    fn oneshot_recv_error() -> oneshot::error::RecvError {
        let (tx, rx) = oneshot::channel::<u8>();
        drop(tx);
        rx.recv_blocking().unwrap_err()
    }
}

// Issue 16: "Every type is `Send`/`Sync` where tokio's is." tokio has `unsafe impl<T>
// Send for RwLockReadGuard<'_, T> where T: ?Sized + Sync` (found missing in session 27).
mod sync_read_guard_send {
    pub fn read_guard_send_for_t_sync<T: ?Sized + Sync + 'static>() {
        super::is_send::<weft::sync::RwLockReadGuard<'static, T>>();
    }
}

// Issue 16: "Every type is `Send`/`Sync` where tokio's is." tokio's `broadcast::Sender<T>`
// and `Receiver<T>` (and the `recv()` future) are `Send + Sync` for `T: Send` (an
// `Arc<T>` for a value of several receivers broke it in session 27, before review).
mod sync_broadcast_send {
    use std::future::Future;
    use weft::sync::broadcast;
    pub fn broadcast_send_sync_for_t_send<T: Send + 'static>() {
        super::is_send_sync::<broadcast::Sender<T>>();
        super::is_send_sync::<broadcast::Receiver<T>>();
    }
    pub fn broadcast_recv_send_for_t_send<T: Clone + Send>(
        r: &mut broadcast::Receiver<T>,
    ) -> impl Future<Output = Result<T, broadcast::error::RecvError>> + Send + '_ {
        r.recv()
    }
}

// =====================================================================================
// Issue 17: `weft::net`, `weft::io`, `weft::signal`
// =====================================================================================

mod net_api {
    use super::*;
    use std::os::unix::net::SocketAddr as UnixAddr;
    use weft::net::{
        OwnedReadHalf, OwnedWriteHalf, ReadHalf, TcpListener, TcpStream, UdpSocket, UnixDatagram,
        UnixListener, UnixStream, WriteHalf,
    };

    // ---- TcpListener ----

    /// `bind(addr).await`, addresses as `std::net::ToSocketAddrs` (a `&str`, a
    /// `SocketAddr`, a `(host, port)` pair).
    pub fn tcp_bind_str(a: &str) -> impl Future<Output = io::Result<TcpListener>> + Send + '_ {
        TcpListener::bind(a)
    }

    pub fn tcp_bind_addr(a: SocketAddr) -> impl Future<Output = io::Result<TcpListener>> + Send {
        TcpListener::bind(a)
    }

    pub fn tcp_bind_pair(
        h: &str,
        p: u16,
    ) -> impl Future<Output = io::Result<TcpListener>> + Send + '_ {
        TcpListener::bind((h, p))
    }

    /// `accept(&self).await -> io::Result<(TcpStream, SocketAddr)>`.
    pub fn tcp_accept(
        l: &TcpListener,
    ) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send + '_ {
        l.accept()
    }

    pub fn tcp_listener_methods() {
        let _: fn(&TcpListener) -> io::Result<(TcpStream, SocketAddr)> =
            TcpListener::accept_blocking;
        let _: fn(&TcpListener) -> io::Result<SocketAddr> = TcpListener::local_addr;
        let _: fn(&TcpListener, u32) -> io::Result<()> = TcpListener::set_ttl;
        let _: fn(&TcpListener) -> io::Result<u32> = TcpListener::ttl;
        let _: fn(std::net::TcpListener) -> io::Result<TcpListener> = TcpListener::from_std;
        let _: fn(TcpListener) -> io::Result<std::net::TcpListener> = TcpListener::into_std;
    }

    // ---- TcpStream ----

    pub fn tcp_connect(a: SocketAddr) -> impl Future<Output = io::Result<TcpStream>> + Send {
        TcpStream::connect(a)
    }

    pub fn tcp_connect_str(a: &str) -> impl Future<Output = io::Result<TcpStream>> + Send + '_ {
        TcpStream::connect(a)
    }

    /// `connect_blocking(addr) -> io::Result<TcpStream>`.
    pub fn tcp_connect_blocking(a: SocketAddr, b: &str) -> io::Result<(TcpStream, TcpStream)> {
        Ok((
            TcpStream::connect_blocking(a)?,
            TcpStream::connect_blocking(b)?,
        ))
    }

    pub fn tcp_stream_methods() {
        let _: fn(&TcpStream) -> io::Result<SocketAddr> = TcpStream::peer_addr;
        let _: fn(&TcpStream) -> io::Result<SocketAddr> = TcpStream::local_addr;
        let _: fn(&TcpStream, bool) -> io::Result<()> = TcpStream::set_nodelay;
        let _: fn(&TcpStream) -> io::Result<bool> = TcpStream::nodelay;
        let _: fn(&TcpStream, std::net::Shutdown) -> io::Result<()> = TcpStream::shutdown;
        let _: fn(&mut TcpStream) -> (ReadHalf<'_>, WriteHalf<'_>) = TcpStream::split;
        let _: fn(TcpStream) -> (OwnedReadHalf, OwnedWriteHalf) = TcpStream::into_split;
        let _: fn(&TcpStream, &mut [u8]) -> io::Result<usize> = TcpStream::try_read;
        let _: fn(&TcpStream, &[u8]) -> io::Result<usize> = TcpStream::try_write;
        let _: fn(&TcpStream, Option<Duration>) -> io::Result<()> = TcpStream::set_read_timeout;
        let _: fn(&TcpStream, Option<Duration>) -> io::Result<()> = TcpStream::set_write_timeout;
        let _: fn(std::net::TcpStream) -> io::Result<TcpStream> = TcpStream::from_std;
        let _: fn(TcpStream) -> io::Result<std::net::TcpStream> = TcpStream::into_std;
    }

    pub fn tcp_readable(s: &TcpStream) -> impl Future<Output = io::Result<()>> + Send + '_ {
        s.readable()
    }

    pub fn tcp_writable(s: &TcpStream) -> impl Future<Output = io::Result<()>> + Send + '_ {
        s.writable()
    }

    /// `peek(&self, &mut [u8]).await`.
    pub fn tcp_peek<'a>(
        s: &'a TcpStream,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        s.peek(buf)
    }

    /// The halves implement the async traits (read halves `AsyncRead`, write halves
    /// `AsyncWrite`), for TCP and Unix streams.
    pub fn halves_are_async() {
        fn r<T: futures_io::AsyncRead + Unpin>() {}
        fn w<T: futures_io::AsyncWrite + Unpin>() {}
        r::<ReadHalf<'static>>();
        w::<WriteHalf<'static>>();
        r::<OwnedReadHalf>();
        w::<OwnedWriteHalf>();
        r::<ReadHalf<'static, UnixStream>>();
        w::<WriteHalf<'static, UnixStream>>();
        r::<OwnedReadHalf<UnixStream>>();
        w::<OwnedWriteHalf<UnixStream>>();
        // And the `weft::io` re-exports name the same traits.
        fn rw<T: weft::io::AsyncRead + weft::io::AsyncWrite>() {}
        rw::<TcpStream>();
        rw::<UnixStream>();
    }

    // ---- UdpSocket ----

    pub fn udp_bind(a: SocketAddr) -> impl Future<Output = io::Result<UdpSocket>> + Send {
        UdpSocket::bind(a)
    }

    pub fn udp_bind_str(a: &str) -> impl Future<Output = io::Result<UdpSocket>> + Send + '_ {
        UdpSocket::bind(a)
    }

    pub fn udp_connect(
        s: &UdpSocket,
        a: SocketAddr,
    ) -> impl Future<Output = io::Result<()>> + Send + '_ {
        s.connect(a)
    }

    pub fn udp_send<'a>(
        s: &'a UdpSocket,
        b: &'a [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        s.send(b)
    }

    pub fn udp_recv<'a>(
        s: &'a UdpSocket,
        b: &'a mut [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        s.recv(b)
    }

    pub fn udp_send_to<'a>(
        s: &'a UdpSocket,
        b: &'a [u8],
        to: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        s.send_to(b, to)
    }

    pub fn udp_recv_from<'a>(
        s: &'a UdpSocket,
        b: &'a mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send + 'a {
        s.recv_from(b)
    }

    pub fn udp_peek_from<'a>(
        s: &'a UdpSocket,
        b: &'a mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send + 'a {
        s.peek_from(b)
    }

    pub fn udp_send_to_blocking(s: &UdpSocket, b: &[u8], to: SocketAddr) -> io::Result<usize> {
        s.send_to_blocking(b, to)
    }

    pub fn udp_methods() {
        let _: fn(&UdpSocket) -> io::Result<SocketAddr> = UdpSocket::local_addr;
        let _: fn(&UdpSocket, &mut [u8]) -> io::Result<(usize, SocketAddr)> =
            UdpSocket::recv_from_blocking;
        let _: fn(&UdpSocket, &[u8]) -> io::Result<usize> = UdpSocket::send_blocking;
        let _: fn(&UdpSocket, &mut [u8]) -> io::Result<usize> = UdpSocket::recv_blocking;
        let _: fn(std::net::UdpSocket) -> io::Result<UdpSocket> = UdpSocket::from_std;
        let _: fn(UdpSocket) -> io::Result<std::net::UdpSocket> = UdpSocket::into_std;
    }

    // ---- Unix sockets ----

    /// `UnixListener::bind(path)` (sync, as tokio), `UnixDatagram::bind(path)` (sync),
    /// `UnixStream::connect_blocking(path)`: paths as `AsRef<Path>`.
    pub fn unix_sync(p: &Path, s: &str) -> io::Result<(UnixListener, UnixDatagram, UnixStream)> {
        Ok((
            UnixListener::bind(p)?,
            UnixDatagram::bind(s)?,
            UnixStream::connect_blocking(std::path::PathBuf::from(s))?,
        ))
    }

    pub fn unix_accept(
        l: &UnixListener,
    ) -> impl Future<Output = io::Result<(UnixStream, UnixAddr)>> + Send + '_ {
        l.accept()
    }

    pub fn unix_connect(p: &Path) -> impl Future<Output = io::Result<UnixStream>> + Send + '_ {
        UnixStream::connect(p)
    }

    pub fn unix_datagram_send_to<'a>(
        s: &'a UnixDatagram,
        b: &'a [u8],
        to: &'a Path,
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        s.send_to(b, to)
    }

    pub fn unix_datagram_recv_from<'a>(
        s: &'a UnixDatagram,
        b: &'a mut [u8],
    ) -> impl Future<Output = io::Result<(usize, UnixAddr)>> + Send + 'a {
        s.recv_from(b)
    }

    pub fn unix_datagram_send_to_blocking(
        s: &UnixDatagram,
        b: &[u8],
        to: &Path,
    ) -> io::Result<usize> {
        s.send_to_blocking(b, to)
    }

    pub fn unix_methods() {
        let _: fn(&UnixListener) -> io::Result<(UnixStream, UnixAddr)> =
            UnixListener::accept_blocking;
        let _: fn(&UnixDatagram, &mut [u8]) -> io::Result<(usize, UnixAddr)> =
            UnixDatagram::recv_from_blocking;
    }

    // ---- lookup_host ----

    /// `weft::net::lookup_host(host).await -> io::Result<impl Iterator<Item =
    /// SocketAddr>>`, with an owned name and a `'static` one.
    pub fn lookup_host_owned(
        host: String,
    ) -> impl Future<Output = io::Result<impl Iterator<Item = SocketAddr>>> + Send {
        weft::net::lookup_host(host)
    }

    pub fn lookup_host_static(
        host: &'static str,
    ) -> impl Future<Output = io::Result<impl Iterator<Item = SocketAddr>>> + Send {
        weft::net::lookup_host((host, 80))
    }

    // ---- weft::io ----

    /// tokio's method names from `weft::io::{AsyncReadExt, AsyncWriteExt}` for any
    /// `futures_io` type, with tokio's output types (`read_exact -> io::Result<usize>`).
    pub async fn io_ext<R, W>(r: &mut R, w: &mut W) -> io::Result<()>
    where
        R: futures_io::AsyncRead + Unpin,
        W: futures_io::AsyncWrite + Unpin,
    {
        use weft::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = [0u8; 4];
        let _: usize = r.read(&mut buf).await?;
        let _: usize = r.read_exact(&mut buf).await?;
        let mut v = Vec::new();
        let _: usize = r.read_to_end(&mut v).await?;
        let mut s = String::new();
        let _: usize = r.read_to_string(&mut s).await?;
        let _: usize = w.write(b"x").await?;
        let (): () = w.write_all(b"x").await?;
        let (): () = w.flush().await?;
        let (): () = w.shutdown().await?;
        Ok(())
    }

    /// A tokio user's code with `tokio::io` renamed to `weft::io`, on a weft stream,
    /// spawned (so the futures are `Send`).
    pub fn io_ext_on_a_stream(mut s: TcpStream) -> weft::JoinHandle<io::Result<Vec<u8>>> {
        use weft::io::{AsyncReadExt, AsyncWriteExt};
        weft::spawn(async move {
            s.write_all(b"ping").await?;
            let mut buf = [0u8; 4];
            let n = s.read_exact(&mut buf).await?;
            // Not `s.shutdown().await`: see the MISSING block after this module.
            AsyncWriteExt::shutdown(&mut s).await?;
            Ok(buf[..n].to_vec())
        })
    }

    // ---- weft::signal ----

    pub fn signal_api() -> impl Future<Output = io::Result<()>> + Send {
        let _: fn() -> io::Result<()> = weft::signal::ctrl_c_blocking;
        weft::signal::ctrl_c()
    }

    #[test]
    fn io_ext_runtime_checks() {
        use weft::io::{AsyncReadExt, AsyncWriteExt};
        rt().block_on(async {
            let mut src: &[u8] = b"hello world";
            let mut word = [0u8; 5];
            assert_eq!(src.read_exact(&mut word).await.unwrap(), 5);
            assert_eq!(&word, b"hello");
            let mut rest = String::new();
            assert_eq!(src.read_to_string(&mut rest).await.unwrap(), 6);
            assert_eq!(rest, " world");
            let mut short: &[u8] = b"ab";
            let e = short.read_exact(&mut word).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
            let mut out = Vec::new();
            out.write_all(b"hi").await.unwrap();
            assert_eq!(out.write(b"!").await.unwrap(), 1);
            out.flush().await.unwrap();
            out.shutdown().await.unwrap();
            assert_eq!(out, b"hi!");
        });
    }
}

// MISSING: issue 17 says "`weft::io::{AsyncReadExt, AsyncWriteExt}` give tokio's method
// names (`read`, ..., `flush`, `shutdown`) for any `futures_io` type, so a tokio user
// renames `tokio::io::AsyncWriteExt` to `weft::io::AsyncWriteExt`", and also that
// `TcpStream` has "`shutdown(&self, std::net::Shutdown) -> io::Result<()>` (std's
// form)". The inherent method wins method resolution, so tokio code's
// `stream.shutdown().await` on a weft `TcpStream` or `UnixStream` does not compile after
// the rename (E0061: takes 1 argument); it needs `AsyncWriteExt::shutdown(&mut s)`. The
// halves (no inherent `shutdown`) are fine. The two requirements conflict here.
#[cfg(any())]
mod net_async_shutdown_by_tokio_name {
    use std::io;
    use weft::io::AsyncWriteExt;
    pub async fn tokio_style_shutdown(
        mut tcp: weft::net::TcpStream,
        mut unix: weft::net::UnixStream,
    ) -> io::Result<()> {
        tcp.shutdown().await?;
        unix.shutdown().await?;
        Ok(())
    }
}

// MISSING (tokio parity): issue 17 says "`weft::net` (tokio's names and signatures where
// this list is silent)" and "`weft::net::lookup_host(host).await`". tokio's
// `lookup_host` takes any `impl ToSocketAddrs`, a borrowed `&str` or `(&str, u16)`
// included; weft's requires `T: std::net::ToSocketAddrs + Send + 'static`, so a name
// borrowed from a local `String` does not compile.
#[cfg(any())]
mod net_lookup_host_borrowed {
    use std::future::Future;
    use std::io;
    use std::net::SocketAddr;
    pub fn lookup_host_borrowed(
        host: &str,
    ) -> impl Future<Output = io::Result<impl Iterator<Item = SocketAddr>>> + '_ {
        weft::net::lookup_host(host)
    }
}

// =====================================================================================
// Issue 17: the `hyper` feature
// =====================================================================================

#[cfg(feature = "hyper")]
mod hyper_api {
    use super::*;
    use weft::hyper::{WeftExecutor, WeftIo, WeftTimer};
    use weft::net::{TcpStream, UnixStream};

    /// `WeftIo::new(stream)` wraps any weft stream (TCP or Unix) as `hyper::rt::Read +
    /// Write` (and `Send + Unpin`).
    pub fn weft_io() {
        fn hyper_io<T: hyper::rt::Read + hyper::rt::Write + Send + Unpin>() {}
        hyper_io::<WeftIo<TcpStream>>();
        hyper_io::<WeftIo<UnixStream>>();
        let _: fn(TcpStream) -> WeftIo<TcpStream> = WeftIo::new;
        let _: fn(UnixStream) -> WeftIo<UnixStream> = WeftIo::new;
    }

    /// `WeftExecutor::new()` (`Clone + Default`) implements `hyper::rt::Executor`.
    pub fn weft_executor() {
        fn exec<E, F>()
        where
            E: hyper::rt::Executor<F> + Clone + Default,
        {
        }
        exec::<WeftExecutor, std::future::Ready<()>>();
        exec::<WeftExecutor, std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>();
        let _: fn() -> WeftExecutor = WeftExecutor::new;
    }

    /// `WeftTimer::new()` (`Clone + Send + Sync`) implements `hyper::rt::Timer`.
    pub fn weft_timer() {
        fn timer<T: hyper::rt::Timer + Clone + Send + Sync + 'static>() {}
        timer::<WeftTimer>();
        let _: fn() -> WeftTimer = WeftTimer::new;
    }

    /// The three plug into hyper's http1 server as a hyper user writes it.
    pub async fn serve(stream: TcpStream) -> Result<(), hyper::Error> {
        let service = hyper::service::service_fn(|_req| async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Empty::<
                hyper::body::Bytes,
            >::new()))
        });
        hyper::server::conn::http1::Builder::new()
            .timer(WeftTimer::new())
            .keep_alive(true)
            .serve_connection(WeftIo::new(stream), service)
            .await
    }

    pub fn serve_is_spawnable(stream: TcpStream) -> weft::JoinHandle<Result<(), hyper::Error>> {
        weft::spawn(serve(stream))
    }

    #[test]
    fn hyper_types_construct() {
        let _: WeftExecutor = Default::default();
        let _: WeftTimer = WeftTimer::new();
        let io = WeftIo::new(Vec::<u8>::new());
        assert!(io.into_inner().is_empty());
    }
}

/// The items above are called, so that none of them is only checked as dead code.
#[test]
fn api_items_are_reachable() {
    chan_api::constructors::<u8>();
    chan_api::sender_methods::<u8>();
    chan_api::receiver_methods::<u8>();
    chan_api::unwind_safe_for_any_t::<std::rc::Rc<u8>>();
    chan_api::errors_for_any_t::<std::rc::Rc<u8>>();
    chan_api::ordered_api::<u8>();
    sync_api::mutex_methods::<u8>();
    sync_api::rwlock_methods::<u8>();
    sync_api::semaphore_methods();
    sync_api::notify_methods();
    sync_api::oneshot_methods::<u8>();
    sync_api::watch_methods::<u8>();
    sync_api::broadcast_methods::<u8>();
    sync_api::barrier_and_wait_group_methods();
    sync_api::tokio_parity_t_send::<str>();
    sync_api::tokio_parity_t_send_sync::<str>();
    sync_api::tokio_parity_channels::<std::cell::Cell<u8>>();
    sync_api::tokio_parity_channels_sync::<u8>();
    sync_api::tokio_parity_plain();
    net_api::tcp_listener_methods();
    net_api::tcp_stream_methods();
    net_api::halves_are_async();
    net_api::udp_methods();
    net_api::unix_methods();
    #[cfg(feature = "hyper")]
    {
        hyper_api::weft_io();
        hyper_api::weft_executor();
        hyper_api::weft_timer();
    }
    let (tx, rx) = weft::chan::unbounded::<u8>();
    let mut sel = weft::chan::Select::new();
    chan_api::select_methods(&rx, &tx);
    sel.recv(&rx);
    drop(chan_api::select_async(&mut sel));
    assert_eq!(
        chan_api::error_shapes::<u8>(
            weft::chan::SendError(1),
            weft::chan::TrySendError::Full(2),
            weft::chan::SendTimeoutError::Timeout(3),
            weft::chan::RecvError,
            weft::chan::TryRecvError::Empty,
            weft::chan::RecvTimeoutError::Timeout,
        ),
        [Some(1), Some(2), Some(3)]
    );
}
