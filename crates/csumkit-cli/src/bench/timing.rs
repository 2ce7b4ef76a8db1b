//! Median-of-samples timing with automatic batch sizing.

use std::time::{Duration, Instant};

/// How long and how often to sample.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Samples per measurement; the median is reported.
    pub samples: usize,
    /// Target duration of one sample (a batch of calls).
    pub sample_time: Duration,
}

impl Budget {
    pub fn new(quick: bool) -> Self {
        if quick {
            Budget { samples: 5, sample_time: Duration::from_micros(300) }
        } else {
            Budget { samples: 21, sample_time: Duration::from_millis(4) }
        }
    }

    /// Runs the CPU flat out for a moment so the first table is not measured
    /// while the clock is still ramping up.
    pub fn warm_up(&self) {
        let data = vec![0x5au8; 1 << 16];
        let start = Instant::now();
        let mut crc = 0;
        while start.elapsed() < Duration::from_millis(if self.samples > 5 { 300 } else { 50 }) {
            crc = csumkit::crc32c::update(crc, std::hint::black_box(&data));
        }
        std::hint::black_box(crc);
    }

    /// Median nanoseconds per call of `op`, which runs the operation `n` times.
    pub fn ns_per_op(&self, mut op: impl FnMut(u64)) -> f64 {
        self.compare(&mut [&mut op])[0]
    }

    /// Median nanoseconds per call of each op, sampled round-robin so that
    /// every op sees the same machine load: on a shared machine the ratios
    /// between columns stay meaningful even when absolute times drift.
    pub fn compare(&self, ops: &mut [&mut dyn FnMut(u64)]) -> Vec<f64> {
        let batches: Vec<u64> = ops.iter_mut().map(|op| self.calibrate(&mut **op)).collect();
        let mut samples = vec![Vec::with_capacity(self.samples); ops.len()];
        for _ in 0..self.samples {
            for (i, op) in ops.iter_mut().enumerate() {
                let start = Instant::now();
                op(batches[i]);
                samples[i].push(start.elapsed().as_nanos() as f64 / batches[i] as f64);
            }
        }
        samples
            .into_iter()
            .map(|mut s| {
                s.sort_by(|a, b| a.total_cmp(b));
                s[s.len() / 2]
            })
            .collect()
    }

    /// The batch size whose run takes about one sample time.
    fn calibrate(&self, op: &mut dyn FnMut(u64)) -> u64 {
        let mut batch = 1u64;
        loop {
            let start = Instant::now();
            op(batch);
            let elapsed = start.elapsed();
            if elapsed >= self.sample_time || batch >= 1 << 40 {
                return batch;
            }
            let factor = (self.sample_time.as_secs_f64() / elapsed.as_secs_f64().max(1e-9)).clamp(1.5, 100.0);
            batch = ((batch as f64) * factor).ceil() as u64;
        }
    }
}
