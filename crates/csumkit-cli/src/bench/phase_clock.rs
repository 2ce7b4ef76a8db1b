//! A [`Probe`] that charges the time between phase changes to the phase that
//! was running, read from the time-stamp counter on x86_64 (about 10 ns a
//! read) and from the monotonic clock elsewhere. The benchmark calibrates
//! the cost of a reading in place — the instrumented run against the same
//! run without the probe — and subtracts it, so the shares describe the
//! allocator, not the probe.

use csumkit::alloc::{Phase, Probe};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct PhaseClock {
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))] // the clock of other targets
    epoch: Instant,
    last: u64,
    current: Phase,
    ticks: [u64; Phase::ALL.len()],
    entries: [u64; Phase::ALL.len()],
}

impl Default for PhaseClock {
    fn default() -> Self {
        let epoch = Instant::now();
        let mut clock = PhaseClock {
            epoch,
            last: 0,
            current: Phase::Other,
            ticks: [0; Phase::ALL.len()],
            entries: [0; Phase::ALL.len()],
        };
        clock.last = clock.now();
        clock
    }
}

impl PhaseClock {
    #[inline(always)]
    fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: RDTSC exists on every x86_64 CPU.
            #[allow(unused_unsafe)]
            unsafe {
                std::arch::x86_64::_rdtsc()
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.epoch.elapsed().as_nanos() as u64
        }
    }

    /// Clears the counts (the volume is reused across runs).
    pub fn reset(&mut self) {
        self.ticks = [0; Phase::ALL.len()];
        self.entries = [0; Phase::ALL.len()];
        self.current = Phase::Other;
        self.last = self.now();
    }

    /// Ticks charged to each phase, less the calibrated cost of the readings
    /// that bounded them.
    pub fn corrected_ticks(&self, per_reading: f64) -> [f64; Phase::ALL.len()] {
        let mut out = [0.0; Phase::ALL.len()];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = (self.ticks[i] as f64 - self.entries[i] as f64 * per_reading).max(0.0);
        }
        out
    }

    /// Nanoseconds per tick, measured against the monotonic clock.
    pub fn ns_per_tick() -> f64 {
        let clock = PhaseClock::default();
        let (t0, c0) = (Instant::now(), clock.now());
        while t0.elapsed().as_millis() < 20 {
            std::hint::spin_loop();
        }
        let (t1, c1) = (Instant::now(), clock.now());
        (t1 - t0).as_nanos() as f64 / (c1 - c0).max(1) as f64
    }

    /// All ticks and phase changes counted.
    pub fn totals(&self) -> (u64, u64) {
        (self.ticks.iter().sum(), self.entries.iter().sum())
    }
}

impl Probe for PhaseClock {
    #[inline(always)]
    fn enter(&mut self, phase: Phase) {
        let now = self.now();
        let i = self.current as usize;
        self.ticks[i] += now.wrapping_sub(self.last);
        self.entries[i] += 1;
        self.last = now;
        self.current = phase;
    }
}
