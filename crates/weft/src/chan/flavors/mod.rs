//! The lock-free buffers of the buffered channels: a ring for bounded capacities, a
//! list of blocks for unbounded (and very large) ones, and the backoff both use while
//! another thread finishes a step it has begun.

pub(crate) mod list;
pub(crate) mod ring;
#[cfg(not(loom))]
mod slab;

/// Moves the value in `src` to `dst` and leaves `None` in `src` without dropping
/// anything: a push's one copy of its value, from the sender's place straight into
/// its slot (handed down by value instead, a large value was copied at every layer).
///
/// # Safety
///
/// `src` holds a value; `dst` is valid for writes of a `T`, holds none (nothing is
/// dropped there) and does not overlap `src`.
#[inline(always)]
pub(crate) unsafe fn move_out_of<T>(src: &mut Option<T>, dst: *mut T) {
    let Some(from) = src.as_ref().map(|v| v as *const T) else {
        unreachable!("a push checks for a value before it claims");
    };
    // SAFETY: the caller's contract: `from` points into `src`, distinct from `dst`.
    unsafe { std::ptr::copy_nonoverlapping(from, dst, 1) };
    // SAFETY: the value now lives at `dst`, so `src` forgets it: `None` written over
    // it without dropping what it held.
    unsafe { std::ptr::write(src, None) };
}

/// Backoff for the short waits of the buffers (and of the channel's drain of a push in
/// progress): each round spins twice as long as the last, up to 2^6 spin hints.
/// [`spin`](Backoff::spin) follows a lost claim (the winner's line is still travelling
/// between cores, and retrying at once only pulls it back before the winner has used
/// it); [`snooze`](Backoff::snooze) waits for another thread's write and, past the
/// spins, yields the core in case that thread was preempted. Under loom both yield.
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// Rounds of growing spins before `snooze` yields.
    #[cfg(not(loom))]
    const SPIN_ROUNDS: u32 = 6;

    pub(crate) fn new() -> Backoff {
        Backoff { step: 0 }
    }

    /// After a lost compare-and-swap: spin, never yield.
    pub(crate) fn spin(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        for _ in 0..(1u32 << self.step.min(Self::SPIN_ROUNDS)) {
            std::hint::spin_loop();
        }
        // Saturating: a wait on a preempted thread may snooze past any count.
        self.step = self.step.saturating_add(1);
    }

    /// While another thread completes a step it has begun: spin, then yield.
    pub(crate) fn snooze(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        if self.step < Self::SPIN_ROUNDS {
            for _ in 0..(1u32 << self.step) {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
        // Saturating: a wait on a preempted thread may snooze past any count.
        self.step = self.step.saturating_add(1);
    }
}
