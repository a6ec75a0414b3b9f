//! Fiber-local storage: `fiber_local!` and [`LocalKey`].

use std::any::Any;
use std::cell::RefCell;
use std::fmt;

/// The values of one fiber's locals, keyed by the address of their `static` key.
#[derive(Default)]
pub(crate) struct Locals {
    values: RefCell<Vec<(usize, Box<dyn Any>)>>,
    /// The keys whose values the fiber's end dropped: accessed again (from a
    /// destructor), they are an error, not a new value (see [`Locals::drop_all`]).
    destroyed: RefCell<Vec<usize>>,
}

impl Locals {
    /// Takes every value out (they are dropped by the caller, outside the borrow, so a
    /// destructor may touch fiber-locals again).
    pub(crate) fn take(&self) -> Vec<(usize, Box<dyn Any>)> {
        std::mem::take(&mut *self.values.borrow_mut())
    }

    /// Drops every value, then every value those destructors made, until none is left
    /// (std does the same for thread-locals): a destructor that touches a fiber-local
    /// for the first time makes a value, which otherwise went on to be dropped with the
    /// fiber's context, off the fiber (found in review: it saw no fiber current, and a
    /// fiber-local it used in turn panicked). Each round is taken out before it is
    /// dropped, so the destructors may use fiber-locals again; a key dropped once is
    /// not made again (`try_with` fails for it, as std's does for a destroyed
    /// thread-local), so the rounds end: a destructor that touched its own key made a
    /// new value every round, for ever (found in the review of the fix).
    pub(crate) fn drop_all(&self) {
        loop {
            let values = self.take();
            if values.is_empty() {
                return;
            }
            self.destroyed
                .borrow_mut()
                .extend(values.iter().map(|(k, _)| *k));
            drop(values);
        }
    }

    fn is_destroyed(&self, key: usize) -> bool {
        self.destroyed.borrow().contains(&key)
    }

    fn find(&self, key: usize) -> Option<*const dyn Any> {
        self.values
            .borrow()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| &**v as *const dyn Any)
    }
}

/// Declares fiber-local statics: each fiber sees its own value, created on first use
/// in that fiber and dropped when the fiber finishes.
///
/// Use them instead of `thread_local!` in code that runs on fibers: a fiber's
/// thread-locals are its worker's, shared with every other fiber on that worker.
///
/// ```
/// use std::cell::Cell;
///
/// weft::fiber_local! {
///     static REQUESTS: Cell<u32> = Cell::new(0);
/// }
///
/// let _rt = weft::Runtime::new().unwrap();
/// let a = weft::fiber::spawn(|| {
///     REQUESTS.with(|r| r.set(r.get() + 1));
///     REQUESTS.with(|r| r.get())
/// });
/// let b = weft::fiber::spawn(|| REQUESTS.with(|r| r.get()));
/// assert_eq!(a.join().unwrap(), 1);
/// assert_eq!(b.join().unwrap(), 0);
/// ```
#[macro_export]
macro_rules! fiber_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $vis static $name: $crate::fiber::LocalKey<$t> = $crate::fiber::LocalKey::new({
            fn __weft_init() -> $t {
                $init
            }
            __weft_init
        });
        $crate::fiber_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $crate::fiber_local!($(#[$attr])* $vis static $name: $t = $init;);
    };
}

/// A fiber-local value, declared with [`fiber_local!`](crate::fiber_local).
pub struct LocalKey<T: 'static> {
    init: fn() -> T,
}

/// The error of [`LocalKey::try_with`] outside a fiber, or in a destructor run at the
/// fiber's end once this key's value was dropped (as std's `AccessError` for a
/// destroyed thread-local: the value is not made again).
///
/// ```
/// weft::fiber_local!(static X: u8 = 1);
/// let err = X.try_with(|x| *x).unwrap_err();
/// assert!(err.to_string().contains("fiber"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessError(Access);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    NoFiber,
    Destroyed,
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Access::NoFiber => "fiber-local value accessed outside a weft fiber",
            Access::Destroyed => "fiber-local value accessed after the fiber's end dropped it",
        })
    }
}

impl std::error::Error for AccessError {}

impl<T: 'static> LocalKey<T> {
    #[doc(hidden)]
    pub const fn new(init: fn() -> T) -> Self {
        LocalKey { init }
    }

    /// Runs `f` with this fiber's value, creating it on first use.
    ///
    /// An initialiser that itself uses this key (recursion it must end by itself)
    /// creates a value in that inner call; that value is the fiber's from then on, and
    /// the one the outer initialiser returns is dropped.
    ///
    /// # Panics
    /// Outside a fiber, and in a destructor run at the fiber's end once this key's value
    /// was dropped (use [`try_with`](Self::try_with) to test).
    ///
    /// ```
    /// weft::fiber_local!(static NAME: String = String::from("anonymous"));
    /// let _rt = weft::Runtime::new().unwrap();
    /// let h = weft::fiber::spawn(|| NAME.with(|n| n.len()));
    /// assert_eq!(h.join().unwrap(), 9);
    /// ```
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        match self.try_with(f) {
            Ok(r) => r,
            Err(e) => panic!("weft: {e}"),
        }
    }

    /// Like [`with`](Self::with), but an error outside a fiber.
    ///
    /// ```
    /// weft::fiber_local!(static N: u32 = 7);
    /// assert!(N.try_with(|n| *n).is_err());
    /// let _rt = weft::Runtime::new().unwrap();
    /// assert_eq!(weft::fiber::spawn(|| N.try_with(|n| *n)).join().unwrap(), Ok(7));
    /// ```
    pub fn try_with<R>(&'static self, f: impl FnOnce(&T) -> R) -> Result<R, AccessError> {
        let ctx = super::future::current_ctx();
        if ctx.is_null() {
            return Err(AccessError(Access::NoFiber));
        }
        // SAFETY: a non-null current fiber is the live context of the running fiber, and
        // it outlives this call (the fiber cannot finish while it runs this code).
        let locals = &unsafe { &*ctx }.locals;
        let key = self as *const Self as usize;
        let ptr = match locals.find(key) {
            Some(p) => p,
            None if locals.is_destroyed(key) => return Err(AccessError(Access::Destroyed)),
            None => {
                // Initialised outside the borrow: `init` may use other fiber-locals.
                let value: Box<dyn Any> = Box::new((self.init)());
                // An `init` that used this very key made a value already (found in
                // review: two entries, the caller's value and a later call's differed).
                // That one stays: it may be borrowed further up this stack. This one
                // is dropped, outside the borrow (its drop may use fiber-locals).
                if let Some(p) = locals.find(key) {
                    drop(value);
                    p
                } else {
                    let ptr = &*value as *const dyn Any;
                    locals.values.borrow_mut().push((key, value));
                    ptr
                }
            }
        };
        // SAFETY: values are boxed, so they stay put while the vector grows, and they
        // are only removed when the fiber finishes, which cannot happen during `f`.
        let value = unsafe { &*ptr };
        Ok(f(value.downcast_ref::<T>().expect("fiber-local key type")))
    }
}

impl<T: 'static> fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LocalKey { .. }")
    }
}
