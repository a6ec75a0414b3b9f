// TEMPORARY stand-in until the real stack module lands.
use super::error::SpawnError;
pub(crate) const DEFAULT_STACK_SIZE: usize = 2 * 1024 * 1024;
pub(crate) struct Stack(corosensei::stack::DefaultStack, usize);
// SAFETY: temp
unsafe impl Send for Stack {}
// SAFETY: temp
unsafe impl corosensei::stack::Stack for Stack {
    fn base(&self) -> corosensei::stack::StackPointer {
        self.0.base()
    }
    fn limit(&self) -> corosensei::stack::StackPointer {
        self.0.limit()
    }
}
impl Stack {
    pub(crate) fn usable_size(&self) -> usize {
        self.1
    }
    pub(crate) fn guard_range(&self) -> (usize, usize) {
        use corosensei::stack::Stack as _;
        let l = self.0.limit().get();
        (l, l + 4096)
    }
}
pub(crate) fn default_size() -> usize {
    DEFAULT_STACK_SIZE
}
pub(crate) fn acquire(size: usize) -> Result<Stack, SpawnError> {
    corosensei::stack::DefaultStack::new(size)
        .map(|s| Stack(s, size))
        .map_err(|_| SpawnError::shutdown())
}
pub(crate) fn release(_stack: Stack) {}
pub(crate) struct StackStats {
    pub(crate) pooled: usize,
    pub(crate) reserved_bytes: u64,
    pub(crate) mapped: usize,
}
pub(crate) fn stats() -> StackStats {
    StackStats {
        pooled: 0,
        reserved_bytes: 0,
        mapped: 0,
    }
}
