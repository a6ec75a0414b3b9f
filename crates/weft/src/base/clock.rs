//! A cheap monotonic clock for the scheduler's own bookkeeping: heartbeat checks, the
//! length of outermost joins and of task ticks.
//!
//! `Instant::now` goes through the vDSO, which fences the pipeline before it reads the
//! time stamp counter; in the middle of a memory-bound recursion that fence waits for
//! every load in flight, and two reads per outermost join cost ~0.3 µs of a 2.8 µs tree
//! sum (measured with `weft-bench forkjoin --case tree_1023`). The scheduler only needs
//! durations to within a few per cent, so on x86-64 with an invariant time stamp counter
//! this clock reads the counter without a fence and scales it by a factor calibrated
//! once per process against `Instant`. Anywhere else (other CPUs, a counter that may
//! stop or drift, loom) it falls back to `Instant`.
//!
//! Readings are nanoseconds from a process-wide origin. Readings from two threads may
//! differ by the cores' counter skew (nanoseconds on an invariant counter), so subtract
//! with [`since`], which never underflows.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nanoseconds from this process's clock origin.
#[inline]
pub(crate) fn now_ns() -> u64 {
    match source() {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        Source::Tsc { mult, origin } => tsc::to_ns(tsc::read(), *mult).saturating_sub(*origin),
        Source::Instant(origin) => origin.elapsed().as_nanos() as u64,
    }
}

/// `later - earlier` as a duration, zero if `later` is not after `earlier` (readings
/// from two cores whose counters disagree slightly).
#[inline]
pub(crate) fn since(later: u64, earlier: u64) -> Duration {
    Duration::from_nanos(later.saturating_sub(earlier))
}

/// The coarse clock: milliseconds from this process's clock origin as last published
/// by [`refresh_coarse`]. Diagnostics stamp task events with it (`task::diag`): one
/// relaxed load of a word that changes at most once a millisecond, instead of a clock
/// read on the poll and wake paths. Workers publish a reading they take anyway (the end
/// of a tick of polls, a park), so it lags real time by at most the length of a
/// worker's recent polls. A plain std atomic also under loom: nothing synchronises
/// through it.
static COARSE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The coarse clock's last published reading (see [`COARSE_MS`]).
#[inline]
pub(crate) fn coarse_ms() -> u64 {
    COARSE_MS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Publishes `now` (a [`now_ns`] reading) on the coarse clock. Written only when the
/// millisecond changed, so readers' cached copies of the line stay valid meanwhile.
#[inline]
pub(crate) fn refresh_coarse(now: u64) {
    let ms = now / 1_000_000;
    if COARSE_MS.load(std::sync::atomic::Ordering::Relaxed) < ms {
        COARSE_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

enum Source {
    /// Time stamp counter ticks times `mult`, shifted right by [`tsc::SHIFT`], is ns.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    Tsc {
        mult: u64,
        /// The scaled reading at the origin: the counter counts from the machine's
        /// boot, and readings are taken from the process's origin (found in review: a
        /// dump said a task of a process 300 ms old had waited 1,609 s, the uptime).
        origin: u64,
    },
    Instant(Instant),
}

#[inline]
fn source() -> &'static Source {
    static SOURCE: OnceLock<Source> = OnceLock::new();
    SOURCE.get_or_init(pick)
}

#[cold]
fn pick() -> Source {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    if let Some(mult) = tsc::calibrate() {
        return Source::Tsc {
            mult,
            origin: tsc::to_ns(tsc::read(), mult),
        };
    }
    Source::Instant(Instant::now())
}

#[cfg(all(target_arch = "x86_64", not(loom)))]
mod tsc {
    use std::arch::x86_64::{__cpuid, _rdtsc};
    use std::time::{Duration, Instant};

    /// Fixed-point fraction bits of the ns-per-tick factor.
    pub(super) const SHIFT: u32 = 32;

    /// How long calibration watches both clocks.
    const WINDOW: Duration = Duration::from_micros(200);

    #[inline]
    pub(super) fn read() -> u64 {
        // No fence: the clock may run a few dozen cycles ahead of or behind the
        // surrounding code, far below the microseconds the scheduler measures.
        // SAFETY: RDTSC is part of baseline x86-64 and only reads a register; the
        // intrinsic is `unsafe` as all `core::arch` intrinsics are. (A process that made
        // it fault with prctl(PR_SET_TSC) gets a signal, not undefined behaviour.)
        unsafe { _rdtsc() }
    }

    #[inline]
    pub(super) fn to_ns(ticks: u64, mult: u64) -> u64 {
        ((u128::from(ticks) * u128::from(mult)) >> SHIFT) as u64
    }

    /// Whether the counter ticks at a constant rate in every power state (CPUID
    /// 0x8000_0007, EDX bit 8), so that ticks measure time.
    fn invariant() -> bool {
        let max_extended = __cpuid(0x8000_0000).eax;
        max_extended >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }

    /// A paired reading of both clocks, retried until the pair was not split by a
    /// preemption (the two counter reads around `Instant::now` less than 80,000 ticks
    /// apart: tens of microseconds at any plausible rate).
    fn pair() -> (u64, Instant) {
        loop {
            let before = read();
            let at = Instant::now();
            let after = read();
            if after.wrapping_sub(before) < 80_000 {
                return (before + (after - before) / 2, at);
            }
        }
    }

    /// The ns-per-tick factor in fixed point, or `None` when the counter is not fit
    /// for timing (not invariant, or a rate outside 100 MHz to 20 GHz).
    pub(super) fn calibrate() -> Option<u64> {
        if !invariant() {
            return None;
        }
        let (t0, i0) = pair();
        while i0.elapsed() < WINDOW {
            std::hint::spin_loop();
        }
        let (t1, i1) = pair();
        let ticks = t1.checked_sub(t0)?;
        let ns = i1.duration_since(i0).as_nanos();
        let hz = ticks as f64 * 1e9 / ns as f64;
        if !(1e8..=2e10).contains(&hz) {
            return None;
        }
        Some(((ns << SHIFT) / u128::from(ticks)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This clock's reading and `Instant`'s at one moment: the clock read between two
    /// `Instant` reads, the closest bracket of many (a thread preempted between its two
    /// reads, as on a loaded machine, put milliseconds between them and failed the
    /// test below once in six runs of the crate's tests).
    fn paired() -> (u64, Instant) {
        let mut best: Option<(Duration, u64, Instant)> = None;
        for _ in 0..1000 {
            let a = Instant::now();
            let c = now_ns();
            let b = Instant::now();
            let gap = b - a;
            if best.is_none_or(|(g, _, _)| gap < g) {
                best = Some((gap, c, a + gap / 2));
            }
            if gap < Duration::from_micros(20) {
                break;
            }
        }
        let (_, c, i) = best.expect("at least one pair");
        (c, i)
    }

    #[test]
    fn clock_follows_instant() {
        let (c0, i0) = paired();
        std::thread::sleep(Duration::from_millis(20));
        let (c1, i1) = paired();
        let clock = since(c1, c0).as_secs_f64();
        let real = i1.duration_since(i0).as_secs_f64();
        // Within 5 % (plus the reads' own gap): the scheduler's tolerance.
        assert!(
            (clock - real).abs() <= real * 0.05 + 1e-4,
            "clock {clock} s against Instant {real} s"
        );
    }

    #[test]
    fn since_saturates() {
        assert_eq!(since(5, 9), Duration::ZERO);
        assert_eq!(since(9, 5), Duration::from_nanos(4));
    }
}
