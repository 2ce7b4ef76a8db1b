//! The crash-consistency harness: runs a workload on a [`SimMedium`] and,
//! at every store, flush and fence, crashes it in many ways — every subset
//! of the dirty lines reaching the medium (all of them when there are few),
//! and lines torn at 8-byte granularity — then replays each crash image and
//! checks it against what the workload was told.
//!
//! For every crash state: replay succeeds; every acknowledged record not
//! truncated is returned, intact and in order; nothing else is returned
//! except, possibly, the one record whose commit was in flight, intact.

use super::format::PAYLOAD_BYTES_MAX;
use super::log::{decode_tlvs, encode_tlvs, ByteLog, Tlv};
use super::medium::{Medium, SimMedium};
use crate::Error;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Dirty lines up to which every subset is tried; above it, random subsets.
const ALL_SUBSETS_MAX_LINES: usize = 8;
/// Random subsets tried when there are more dirty lines.
const RANDOM_SUBSETS: usize = 64;
/// Torn variants (random 8-byte word masks) per line of each subset.
const TORN_MASKS_PER_LINE: usize = 2;

/// What a run checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Crash points (stores, flushes and fences of the workload).
    pub points: u64,
    /// Crash images replayed and checked.
    pub states: u64,
    /// Records the workload committed.
    pub records: u64,
    /// Times the ring wrapped.
    pub wraps: u64,
}

/// What the workload has been told so far.
#[derive(Default)]
struct Model {
    acked: BTreeMap<u64, Vec<u8>>,
    in_flight: Option<Vec<u8>>,
    truncated: u64,
    truncating: Option<u64>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A SimMedium that runs the crash checks after every event.
struct Probe {
    sim: SimMedium,
    model: Rc<RefCell<Model>>,
    rng: Rng,
    report: Rc<RefCell<CrashReport>>,
    failure: Rc<RefCell<Option<String>>>,
    states_max: u64,
    /// Off while the log is being formatted (a format is not a commit).
    armed: Rc<std::cell::Cell<bool>>,
}

impl Probe {
    fn crash_here(&mut self) {
        if !self.armed.get() || self.failure.borrow().is_some() || self.report.borrow().states >= self.states_max {
            return;
        }
        self.report.borrow_mut().points += 1;
        let dirty = self.sim.dirty_lines();
        let subsets: Vec<Vec<usize>> = if dirty.len() <= ALL_SUBSETS_MAX_LINES {
            (0..1u32 << dirty.len())
                .map(|m| dirty.iter().enumerate().filter(|(i, _)| m & (1 << i) != 0).map(|(_, &l)| l).collect())
                .collect()
        } else {
            (0..RANDOM_SUBSETS).map(|_| dirty.iter().copied().filter(|_| self.rng.next() & 1 == 1).collect()).collect()
        };
        for subset in subsets {
            let mut variants = vec![None];
            for &line in &subset {
                for _ in 0..TORN_MASKS_PER_LINE {
                    variants.push(Some((line, (self.rng.next() as u8) | 1)));
                }
            }
            for torn in variants {
                let image = self.sim.crash_image(&subset, torn);
                self.report.borrow_mut().states += 1;
                if let Err(why) = check(&self.model.borrow(), image) {
                    *self.failure.borrow_mut() =
                        Some(format!("crash after event {}, lines {subset:?} torn {torn:?}: {why}", self.sim.events));
                    return;
                }
            }
        }
    }
}

impl Medium for Probe {
    fn len(&self) -> u64 {
        self.sim.len()
    }
    fn view(&self, offset: u64, len: u64) -> Result<&[u8], Error> {
        self.sim.view(offset, len)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.sim.write(offset, data)?;
        self.crash_here();
        Ok(())
    }
    fn flush(&mut self, offset: u64, len: u64) -> Result<(), Error> {
        self.sim.flush(offset, len)?;
        self.crash_here();
        Ok(())
    }
    fn fence(&mut self) -> Result<(), Error> {
        self.sim.fence()?;
        self.crash_here();
        Ok(())
    }
}

/// Replays a crash image and compares it with the model.
fn check(model: &Model, image: Vec<u8>) -> Result<(), String> {
    let (_, records) = ByteLog::open(SimMedium::from_image(image)).map_err(|e| format!("replay failed: {e}"))?;
    let floor = model.truncating.unwrap_or(model.truncated);
    let mut last = 0;
    for (i, r) in records.iter().enumerate() {
        if r.seq <= last {
            return Err(format!("record {} after {last}", r.seq));
        }
        last = r.seq;
        match model.acked.get(&r.seq) {
            Some(payload) if r.seq > model.truncated => {
                if *payload != r.payload {
                    return Err(format!("record {} replayed with different bytes", r.seq));
                }
            }
            Some(_) => return Err(format!("record {} was truncated but replayed", r.seq)),
            None => {
                let in_flight = model.in_flight.as_ref().is_some_and(|p| *p == r.payload);
                if !in_flight || i + 1 != records.len() || model.acked.keys().next_back().is_some_and(|&k| k > r.seq) {
                    return Err(format!("record {} was never committed", r.seq));
                }
            }
        }
        decode_tlvs(&r.payload).map_err(|e| format!("record {}: {e}", r.seq))?;
    }
    for &seq in model.acked.keys().filter(|&&s| s > floor) {
        if !records.iter().any(|r| r.seq == seq) {
            return Err(format!("acknowledged record {seq} lost"));
        }
    }
    Ok(())
}

/// Runs `ops` random operations (single-TLV commits, batches, partial
/// truncations, checkpoints, wrapping a small ring many times) with crashes
/// checked at every event, until `states_max` crash states; `seed` picks
/// the workload.
pub fn run(ops: u64, seed: u64, states_max: u64) -> Result<CrashReport, Error> {
    run_with(Config { ops, seed, states_max, ..Config::default() })
}

/// A harness run's shape.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Random operations at most.
    pub ops: u64,
    /// Picks the workload.
    pub seed: u64,
    /// Crash states to check at most.
    pub states_max: u64,
    /// Ring bytes ([`super::RING_BYTES_MIN`] by default: it wraps often).
    pub ring_bytes: u64,
    /// Bytes of log between periodic anchors (the log's default when `None`).
    pub anchor_every: Option<u64>,
    /// In every hundred operations, how many truncate or checkpoint (8).
    pub truncate_percent: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ops: 1_000_000,
            seed: 1,
            states_max: 30_000,
            ring_bytes: super::RING_BYTES_MIN,
            anchor_every: None,
            truncate_percent: 8,
        }
    }
}

/// [`run`] with a chosen ring size, anchor interval and truncation rate:
/// a large ring with a small anchor interval and few truncations puts the
/// periodic anchor under crash testing (with the defaults it never occurs).
pub fn run_with(config: Config) -> Result<CrashReport, Error> {
    let Config { ops, seed, states_max, ring_bytes, anchor_every, truncate_percent } = config;
    let model = Rc::new(RefCell::new(Model::default()));
    let report = Rc::new(RefCell::new(CrashReport::default()));
    let failure = Rc::new(RefCell::new(None));
    let armed = Rc::new(std::cell::Cell::new(false));
    let probe = Probe {
        sim: SimMedium::new((super::format::RING_OFFSET + ring_bytes) as usize),
        model: model.clone(),
        rng: Rng(seed | 1),
        report: report.clone(),
        failure: failure.clone(),
        states_max,
        armed: armed.clone(),
    };
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut log = ByteLog::format(probe, 1)?;
    if let Some(bytes) = anchor_every {
        log.set_anchor_interval(bytes);
    }
    armed.set(true);
    for _ in 0..ops {
        if failure.borrow().is_some() || report.borrow().states >= states_max {
            break;
        }
        let choice = rng.below(100);
        if choice < truncate_percent && log.next_seq() > 1 {
            let truncated = model.borrow().truncated;
            let acked: Vec<u64> = model.borrow().acked.keys().copied().filter(|&s| s > truncated).collect();
            let through = if choice < truncate_percent.min(3) || acked.is_empty() {
                None
            } else {
                Some(acked[rng.below(acked.len() as u64) as usize])
            };
            let target = through.unwrap_or(log.next_seq() - 1);
            model.borrow_mut().truncating = Some(target.max(truncated));
            match through {
                Some(seq) => log.truncate(seq)?,
                None => log.checkpoint()?,
            }
            let mut m = model.borrow_mut();
            m.truncated = m.truncating.take().expect("set above");
            continue;
        }
        let count = if choice < 80 { 1 } else { 2 + rng.below(15) as usize };
        let values: Vec<Vec<u8>> =
            (0..count).map(|_| (0..24 + rng.below(41)).map(|_| rng.next() as u8).collect()).collect();
        let tlvs: Vec<Tlv> = values.iter().enumerate().map(|(i, v)| Tlv { tag: 1 + i as u16, value: v }).collect();
        let payload = encode_tlvs(&tlvs)?;
        debug_assert!(payload.len() <= PAYLOAD_BYTES_MAX);
        model.borrow_mut().in_flight = Some(payload.clone());
        let seq = match log.append_tlvs(&tlvs) {
            Ok(seq) => seq,
            Err(Error::LogFull { .. }) => {
                model.borrow_mut().in_flight = None;
                let target = log.next_seq() - 1;
                model.borrow_mut().truncating = Some(target);
                log.checkpoint()?;
                let mut m = model.borrow_mut();
                m.truncated = m.truncating.take().expect("set above");
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut m = model.borrow_mut();
        m.in_flight = None;
        m.acked.insert(seq, payload);
        report.borrow_mut().records += 1;
    }
    // Wrap markers take sequence numbers of their own.
    let wraps = log.next_seq() - 1 - report.borrow().records;
    report.borrow_mut().wraps = wraps;
    if let Some(why) = failure.borrow_mut().take() {
        return Err(Error::Corrupt { location: "ByteLog crash harness".into(), detail: why });
    }
    let result = *report.borrow();
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log with records 1..=3 and the model that says so.
    fn committed() -> (Vec<u8>, Model) {
        let mut log = ByteLog::format(SimMedium::new((super::super::RING_OFFSET + 8192) as usize), 1).unwrap();
        let mut model = Model::default();
        for i in 0..3u8 {
            let payload = encode_tlvs(&[Tlv { tag: 1, value: &[i; 30] }]).unwrap();
            let seq = log.append_tlvs(&[Tlv { tag: 1, value: &[i; 30] }]).unwrap();
            model.acked.insert(seq, payload);
        }
        (log.into_medium().durable().to_vec(), model)
    }

    /// Negative controls: each oracle of `check` fails when its property is
    /// broken (a harness whose checks never fire proves nothing).
    #[test]
    fn every_oracle_fires() {
        let (image, model) = committed();
        check(&model, image.clone()).expect("the committed log passes");
        let mut lost = Model { acked: model.acked.clone(), ..Model::default() };
        lost.acked.insert(4, vec![1, 2, 3]);
        assert!(check(&lost, image.clone()).unwrap_err().contains("acknowledged record 4 lost"));
        let mut changed = Model { acked: model.acked.clone(), ..Model::default() };
        changed.acked.insert(2, vec![9]);
        assert!(check(&changed, image.clone()).unwrap_err().contains("replayed with different bytes"));
        let truncated = Model { acked: model.acked.clone(), truncated: 2, ..Model::default() };
        assert!(check(&truncated, image.clone()).unwrap_err().contains("truncated but replayed"));
        let mut never = Model { acked: model.acked.clone(), ..Model::default() };
        never.acked.remove(&3);
        assert!(check(&never, image.clone()).unwrap_err().contains("never committed"));
        let mut unreadable = image;
        unreadable[0] ^= 1; // the superblock
        assert!(check(&model, unreadable).unwrap_err().contains("replay failed"));
    }
}
