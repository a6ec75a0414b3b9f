//! TEMPORARY stand-in.
/// Why a fiber could not be spawned.
#[derive(Debug)]
pub struct SpawnError {
    kind: SpawnErrorKind,
}
/// Kinds.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnErrorKind {
    /// a
    NoRuntime,
    /// b
    Shutdown,
    /// c
    StackSize,
    /// d
    MapLimit,
    /// e
    OutOfMemory,
}
impl SpawnError {
    /// kind
    pub fn kind(&self) -> SpawnErrorKind {
        self.kind
    }
    pub(crate) fn no_runtime() -> Self {
        SpawnError {
            kind: SpawnErrorKind::NoRuntime,
        }
    }
    pub(crate) fn shutdown() -> Self {
        SpawnError {
            kind: SpawnErrorKind::Shutdown,
        }
    }
}
impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.kind)
    }
}
impl std::error::Error for SpawnError {}
