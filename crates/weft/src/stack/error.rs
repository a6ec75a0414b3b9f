//! Why a fiber could not be spawned.

use std::fmt;
use std::io;

use super::{MAPS_PER_STACK, MAX_STACK_SIZE, MIN_STACK_SIZE};

/// The error returned when a fiber cannot be spawned.
///
/// [`kind`](SpawnError::kind) says what went wrong; the `Display` text says what to do
/// about it. Where the operating system refused something, its error is the
/// [`source`](std::error::Error::source).
///
/// ```no_run
/// use weft::fiber::SpawnErrorKind;
///
/// // No stack is that large: the request is refused before anything is mapped.
/// let result = weft::fiber::Builder::new()
///     .stack_size(usize::MAX)
///     .try_spawn(|| ());
/// match result {
///     Ok(_) => unreachable!("no fiber stack can be that large"),
///     Err(e) if e.kind() == SpawnErrorKind::StackSize => eprintln!("bad size: {e}"),
///     Err(e) => eprintln!("cannot spawn the fiber: {e}"),
/// }
/// ```
#[derive(Debug)]
pub struct SpawnError(Repr);

/// What kind of failure a [`SpawnError`] is.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnErrorKind {
    /// No weft runtime is running on this thread or in the process.
    NoRuntime,
    /// The runtime is shutting down and accepts no new fibers.
    Shutdown,
    /// The requested stack size is larger than weft allows.
    StackSize,
    /// The kernel's limit on memory maps per process (`vm.max_map_count`) is reached.
    MapLimit,
    /// The system is out of memory or address space for another stack.
    OutOfMemory,
}

#[derive(Debug)]
enum Repr {
    NoRuntime,
    Shutdown,
    StackSize { requested: usize },
    MapLimit { limit: usize },
    OutOfMemory { bytes: usize, source: io::Error },
}

impl SpawnError {
    /// What went wrong.
    pub fn kind(&self) -> SpawnErrorKind {
        match self.0 {
            Repr::NoRuntime => SpawnErrorKind::NoRuntime,
            Repr::Shutdown => SpawnErrorKind::Shutdown,
            Repr::StackSize { .. } => SpawnErrorKind::StackSize,
            Repr::MapLimit { .. } => SpawnErrorKind::MapLimit,
            Repr::OutOfMemory { .. } => SpawnErrorKind::OutOfMemory,
        }
    }

    pub(crate) fn no_runtime() -> SpawnError {
        SpawnError(Repr::NoRuntime)
    }

    pub(crate) fn shutdown() -> SpawnError {
        SpawnError(Repr::Shutdown)
    }

    /// A stack of `requested` bytes was asked for, above `MAX_STACK_SIZE`.
    pub(crate) fn stack_size(requested: usize) -> SpawnError {
        SpawnError(Repr::StackSize { requested })
    }

    /// Mapping a stack failed because the process has as many memory maps as the
    /// kernel allows (`limit`, from `vm.max_map_count`).
    pub(crate) fn map_limit(limit: usize) -> SpawnError {
        SpawnError(Repr::MapLimit { limit })
    }

    /// Mapping a stack of `bytes` (guard page included) failed with `source`.
    pub(crate) fn out_of_memory(bytes: usize, source: io::Error) -> SpawnError {
        SpawnError(Repr::OutOfMemory { bytes, source })
    }
}

/// A rough count for prose: `n` rounded down to whole thousands once it has them.
fn about(n: usize) -> usize {
    if n >= 1000 {
        n / 1000 * 1000
    } else {
        n
    }
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::NoRuntime => f.write_str(
                "weft: cannot spawn a fiber: no weft runtime is running on this thread or in \
                 the process (build one with weft::Runtime::new())",
            ),
            Repr::Shutdown => f.write_str(
                "weft: cannot spawn a fiber: the weft runtime is shutting down and accepts no \
                 new fibers",
            ),
            Repr::StackSize { requested } => write!(
                f,
                "weft: cannot spawn a fiber with a stack of {requested} bytes: the allowed \
                 range is {MIN_STACK_SIZE} bytes (64 KiB) to {MAX_STACK_SIZE} bytes (1 GiB); \
                 smaller sizes are rounded up to the minimum"
            ),
            Repr::MapLimit { limit } => {
                // Suggest at least 4 times the current limit, as a round power of two
                // (65530 gives the customary 262144).
                let raise_to = limit.saturating_mul(4).next_power_of_two().max(262_144);
                write!(
                    f,
                    "weft: cannot map another fiber stack: the kernel's map count limit \
                     (vm.max_map_count = {limit}) is reached; \
                     each fiber stack takes {MAPS_PER_STACK} maps, so about {} fibers fit. \
                     Raise it with `sysctl -w vm.max_map_count={raise_to}` (or have fewer \
                     live fibers)",
                    about(limit / MAPS_PER_STACK),
                )
            }
            Repr::OutOfMemory { bytes, .. } => write!(
                f,
                "weft: cannot map a fiber stack of {bytes} bytes: the system is out of memory \
                 or address space; give fibers smaller stacks (weft::fiber::Builder::stack_size \
                 or the WEFT_STACK_SIZE environment variable) or have fewer live fibers"
            ),
        }
    }
}

impl std::error::Error for SpawnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            Repr::OutOfMemory { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn map_limit_message_names_the_limit_and_the_fix() {
        let e = SpawnError::map_limit(65530);
        assert_eq!(e.kind(), SpawnErrorKind::MapLimit);
        let msg = e.to_string();
        for part in [
            "vm.max_map_count = 65530",
            "each fiber stack takes 2 maps, so about 32000 fibers fit",
            "`sysctl -w vm.max_map_count=262144`",
            "fewer live fibers",
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg:?}");
        }
        assert!(e.source().is_none());
        // A limit that is already high gets a higher suggestion, never a lower one.
        let high = SpawnError::map_limit(1 << 20).to_string();
        assert!(high.contains("vm.max_map_count=4194304"), "{high}");
    }

    #[test]
    fn stack_size_message_gives_the_request_and_the_range() {
        let e = SpawnError::stack_size(usize::MAX);
        assert_eq!(e.kind(), SpawnErrorKind::StackSize);
        let msg = e.to_string();
        assert!(msg.contains(&usize::MAX.to_string()), "{msg}");
        assert!(
            msg.contains("65536 bytes (64 KiB) to 1073741824 bytes (1 GiB)"),
            "{msg}"
        );
    }

    #[test]
    fn other_kinds_and_sources() {
        let e = SpawnError::no_runtime();
        assert_eq!(e.kind(), SpawnErrorKind::NoRuntime);
        assert!(e.to_string().contains("weft::Runtime::new()"));
        assert_eq!(SpawnError::shutdown().kind(), SpawnErrorKind::Shutdown);
        assert!(SpawnError::shutdown().to_string().contains("shutting down"));

        let e = SpawnError::out_of_memory(4096, io::Error::from_raw_os_error(libc::ENOMEM));
        assert_eq!(e.kind(), SpawnErrorKind::OutOfMemory);
        assert!(e.to_string().contains("4096 bytes"));
        assert!(e.to_string().contains("WEFT_STACK_SIZE"));
        let source = e.source().expect("the OS error is the source");
        let source = source.downcast_ref::<io::Error>().unwrap();
        assert_eq!(source.raw_os_error(), Some(libc::ENOMEM));
    }

    #[test]
    fn spawn_error_is_send_sync_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<SpawnError>();
    }
}
