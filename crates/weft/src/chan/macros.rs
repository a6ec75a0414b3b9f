//! `select!` and `select_biased!`, in crossbeam-channel's syntax, on top of `Select`.
//!
//! The arms are parsed into a list; then each operation's operand is evaluated once
//! and bound in a nested block (a `match`, so temporaries live long enough), and the
//! selected index picks the arm. The bodies expand in the caller's own scope (no
//! closure), so `break`, `continue`, `return` and `?` work in them.

/// Waits on several channel operations and runs the arm of the one that completes,
/// in crossbeam-channel's syntax: `recv(rx) -> msg => body`, `send(tx, value) -> res
/// => body`, `default => body`, `default(timeout) => body`. It blocks by
/// [`wait`](crate::wait)'s rule (a fiber suspends, a thread blocks); in async code use
/// [`Select::select_async`](crate::chan::Select::select_async). When several
/// operations are ready, one is chosen at random.
///
/// ```
/// use std::time::Duration;
/// let (tx, rx) = weft::chan::unbounded();
/// tx.send_blocking(1).unwrap();
/// let timeout = weft::chan::after(Duration::from_secs(1));
/// weft::select! {
///     recv(rx) -> msg => assert_eq!(msg, Ok(1)),
///     recv(timeout) -> _ => panic!("timed out"),
/// }
/// ```
#[macro_export]
macro_rules! select {
    ($($arms:tt)*) => {
        $crate::__weft_select!(@parse (new) () () $($arms)*)
    };
}

/// As [`select!`](crate::select!), but when several operations are ready the first one
/// in source order wins.
///
/// ```
/// let (tx, rx) = weft::chan::unbounded();
/// tx.send_blocking(1).unwrap();
/// weft::select_biased! {
///     recv(rx) -> msg => assert_eq!(msg, Ok(1)),
///     default => panic!("the first arm was ready"),
/// }
/// ```
#[macro_export]
macro_rules! select_biased {
    ($($arms:tt)*) => {
        $crate::__weft_select!(@parse (new_biased) () () $($arms)*)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __weft_select {
    // ---- parsing: (ops) (default) ----
    (@parse $ctor:tt ($($ops:tt)*) ($($def:tt)*)) => {
        $crate::__weft_select!(@start $ctor ($($ops)*) ($($def)*))
    };
    (@parse $ctor:tt ($($ops:tt)*) $def:tt recv($r:expr $(,)?) -> $res:pat => $body:block, $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor ($($ops)* (recv ($r) ($res) ($body))) $def $($rest)*)
    };
    (@parse $ctor:tt ($($ops:tt)*) $def:tt recv($r:expr $(,)?) -> $res:pat => $body:block $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor ($($ops)* (recv ($r) ($res) ($body))) $def $($rest)*)
    };
    (@parse $ctor:tt ($($ops:tt)*) $def:tt recv($r:expr $(,)?) -> $res:pat => $body:expr, $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor ($($ops)* (recv ($r) ($res) ($body))) $def $($rest)*)
    };
    (@parse $ctor:tt ($($ops:tt)*) $def:tt recv($r:expr $(,)?) -> $res:pat => $body:expr) => {
        $crate::__weft_select!(@parse $ctor ($($ops)* (recv ($r) ($res) ($body))) $def)
    };
    (@parse $ctor:tt ($($ops:tt)*) $def:tt send($s:expr, $v:expr $(,)?) -> $res:pat => $body:block, $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor ($($ops)* (send ($s) ($v) ($res) ($body))) $def $($rest)*)
    };
    (@parse $ctor:tt ($($ops:tt)*) $def:tt send($s:expr, $v:expr $(,)?) -> $res:pat => $body:block $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor ($($ops)* (send ($s) ($v) ($res) ($body))) $def $($rest)*)
    };
    (@parse $ctor:tt ($($ops:tt)*) $def:tt send($s:expr, $v:expr $(,)?) -> $res:pat => $body:expr, $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor ($($ops)* (send ($s) ($v) ($res) ($body))) $def $($rest)*)
    };
    (@parse $ctor:tt ($($ops:tt)*) $def:tt send($s:expr, $v:expr $(,)?) -> $res:pat => $body:expr) => {
        $crate::__weft_select!(@parse $ctor ($($ops)* (send ($s) ($v) ($res) ($body))) $def)
    };
    (@parse $ctor:tt $ops:tt () default() => $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor $ops () default => $($rest)*)
    };
    (@parse $ctor:tt $ops:tt () default => $body:block, $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor $ops ((now) ($body)) $($rest)*)
    };
    (@parse $ctor:tt $ops:tt () default => $body:block $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor $ops ((now) ($body)) $($rest)*)
    };
    (@parse $ctor:tt $ops:tt () default => $body:expr, $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor $ops ((now) ($body)) $($rest)*)
    };
    (@parse $ctor:tt $ops:tt () default => $body:expr) => {
        $crate::__weft_select!(@parse $ctor $ops ((now) ($body)))
    };
    (@parse $ctor:tt $ops:tt () default($t:expr $(,)?) => $body:block, $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor $ops ((after $t) ($body)) $($rest)*)
    };
    (@parse $ctor:tt $ops:tt () default($t:expr $(,)?) => $body:block $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor $ops ((after $t) ($body)) $($rest)*)
    };
    (@parse $ctor:tt $ops:tt () default($t:expr $(,)?) => $body:expr, $($rest:tt)*) => {
        $crate::__weft_select!(@parse $ctor $ops ((after $t) ($body)) $($rest)*)
    };
    (@parse $ctor:tt $ops:tt () default($t:expr $(,)?) => $body:expr) => {
        $crate::__weft_select!(@parse $ctor $ops ((after $t) ($body)))
    };
    (@parse $ctor:tt $ops:tt ($($def:tt)+) default $($rest:tt)*) => {
        ::core::compile_error!("a select has at most one `default` arm")
    };
    (@parse $ctor:tt $ops:tt $def:tt $($rest:tt)+) => {
        ::core::compile_error!(
            "expected `recv(receiver) -> pattern => body`, `send(sender, value) -> pattern => body`, `default => body` or `default(timeout) => body`"
        )
    };

    // ---- binding each operand once ----
    (@start ($ctor:ident) ($($ops:tt)*) $def:tt) => {{
        let mut __weft_sel = $crate::chan::Select::$ctor();
        $crate::__weft_select!(@bind __weft_sel () $def $($ops)*)
    }};
    (@bind $sel:ident ($($done:tt)*) $def:tt (recv ($r:expr) ($res:pat) ($body:expr)) $($rest:tt)*) => {
        match &$r {
            __weft_h => {
                let __weft_h: &$crate::chan::Receiver<_> = __weft_h;
                let __weft_i = $sel.recv(__weft_h);
                $crate::__weft_select!(@bind $sel ($($done)* (recv __weft_h __weft_i ($res) ($body))) $def $($rest)*)
            }
        }
    };
    (@bind $sel:ident ($($done:tt)*) $def:tt (send ($s:expr) ($v:expr) ($res:pat) ($body:expr)) $($rest:tt)*) => {
        match &$s {
            __weft_h => {
                let __weft_h: &$crate::chan::Sender<_> = __weft_h;
                let __weft_i = $sel.send(__weft_h);
                $crate::__weft_select!(@bind $sel ($($done)* (send __weft_h __weft_i ($v) ($res) ($body))) $def $($rest)*)
            }
        }
    };

    // ---- running and dispatching ----
    (@bind $sel:ident ($($done:tt)*) ()) => {{
        let __weft_oper = $sel.select();
        let __weft_idx = __weft_oper.index();
        $crate::__weft_select!(@dispatch __weft_oper __weft_idx $($done)*)
    }};
    (@bind $sel:ident ($($done:tt)*) ((now) ($body:expr))) => {
        match $sel.try_select() {
            ::core::result::Result::Ok(__weft_oper) => {
                let __weft_idx = __weft_oper.index();
                $crate::__weft_select!(@dispatch __weft_oper __weft_idx $($done)*)
            }
            ::core::result::Result::Err(_) => {
                $body
            }
        }
    };
    (@bind $sel:ident ($($done:tt)*) ((after $t:expr) ($body:expr))) => {
        match $sel.select_timeout($t) {
            ::core::result::Result::Ok(__weft_oper) => {
                let __weft_idx = __weft_oper.index();
                $crate::__weft_select!(@dispatch __weft_oper __weft_idx $($done)*)
            }
            ::core::result::Result::Err(_) => {
                $body
            }
        }
    };
    (@dispatch $oper:ident $idx:ident (recv $h:ident $i:ident ($res:pat) ($body:expr)) $($rest:tt)*) => {
        if $idx == $i {
            #[allow(unused_variables)]
            let $res = $oper.recv($h);
            $body
        } else {
            $crate::__weft_select!(@dispatch $oper $idx $($rest)*)
        }
    };
    (@dispatch $oper:ident $idx:ident (send $h:ident $i:ident ($v:expr) ($res:pat) ($body:expr)) $($rest:tt)*) => {
        if $idx == $i {
            #[allow(unused_variables)]
            let $res = $oper.send($h, $v);
            $body
        } else {
            $crate::__weft_select!(@dispatch $oper $idx $($rest)*)
        }
    };
    (@dispatch $oper:ident $idx:ident) => {
        ::core::unreachable!("a select returned an operation it does not have")
    };
}
