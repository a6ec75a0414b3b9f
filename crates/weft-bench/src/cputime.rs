//! Process CPU time, from `getrusage(RUSAGE_SELF)`: user plus system time
//! of every thread of the process, the running ones included up to the call.
//!
//! Linux keeps the total (`utime + stime`) exact to the scheduler's clock;
//! only the split between user and system time is estimated from ticks, so
//! the sum is what this module reports.

use std::mem::MaybeUninit;
use std::time::Duration;

/// User plus system CPU time this process has used so far.
///
/// # Panics
/// If `getrusage` fails (it cannot for `RUSAGE_SELF` and a valid pointer).
pub fn process_cpu() -> Duration {
    let mut usage = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is valid for writes of one `rusage`, which is all
    // `getrusage` writes.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    // SAFETY: it returned 0, so it filled `usage` in (and it was zeroed).
    let usage = unsafe { usage.assume_init() };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u32::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

/// CPU time spent by the process between two points.
#[derive(Debug, Clone, Copy)]
pub struct CpuClock(Duration);

impl CpuClock {
    /// Starts counting now.
    pub fn start() -> CpuClock {
        CpuClock(process_cpu())
    }

    /// CPU time used since [`CpuClock::start`].
    pub fn elapsed(&self) -> Duration {
        process_cpu().saturating_sub(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_busy_loop() {
        let clock = CpuClock::start();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let cpu = clock.elapsed();
        // Generous bounds: the test may be descheduled on a loaded machine.
        assert!(cpu >= Duration::from_millis(5), "{cpu:?}");
        assert!(cpu <= Duration::from_secs(5), "{cpu:?}");
    }
}
