//! The crash-consistency harness: runs a workload on a [`SimMedium`] and,
//! at every store, flush and fence, crashes it in many ways — every subset
//! of the dirty lines reaching the medium (all of them when there are few),
//! and lines torn at 8-byte granularity — then replays each crash image and
//! checks it against what the workload was told.
//!
//! For every crash state: replay succeeds; every acknowledged record not
//! truncated is returned, intact and in order; nothing else is returned
//! except, possibly, the one record whose commit was in flight, intact.

use super::log::{decode_tlvs, encode_tlvs, ByteLog, Tlv};
use super::medium::{Medium, SimMedium};
use crate::bytelog::LogError;
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
/// Lines of one subset torn at most (picked at random beyond): a record of
/// many pages leaves hundreds of lines dirty, and tearing each of them in
/// each subset would spend the run's states on one crash point.
const TORN_LINES_MAX: usize = 16;

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
    /// Truncations through a chosen record the workload made.
    pub truncations: u64,
    /// Checkpoints (the whole log emptied) the workload chose (not the
    /// ones a full log forced).
    pub checkpoints: u64,
    /// Records holding several TLVs.
    pub batches: u64,
    /// Payload bytes of the records committed.
    pub payload_bytes: u64,
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
    /// A generator from `seed`; xorshift's state must never be zero.
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
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
        for (subset, torn) in crash_states(&self.sim.dirty_lines(), &mut self.rng) {
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

/// The crash states of one crash point: each subset of the `dirty` lines
/// reaching the medium (every subset of up to [`ALL_SUBSETS_MAX_LINES`],
/// else [`RANDOM_SUBSETS`] random ones), each whole and with each of its
/// lines (up to [`TORN_LINES_MAX`] of them, random ones beyond) torn by
/// [`TORN_MASKS_PER_LINE`] random nonzero 8-byte-word masks.
type CrashState = (Vec<usize>, Option<(usize, u8)>);

fn crash_states(dirty: &[usize], rng: &mut Rng) -> Vec<CrashState> {
    let subsets: Vec<Vec<usize>> = if dirty.len() <= ALL_SUBSETS_MAX_LINES {
        (0..1u32 << dirty.len())
            .map(|m| dirty.iter().enumerate().filter(|(i, _)| m & (1 << i) != 0).map(|(_, &l)| l).collect())
            .collect()
    } else {
        (0..RANDOM_SUBSETS).map(|_| dirty.iter().copied().filter(|_| rng.next() & 1 == 1).collect()).collect()
    };
    let mut states = Vec::new();
    for subset in subsets {
        let mut torn = Vec::new();
        let torn_lines: Vec<usize> = if subset.len() <= TORN_LINES_MAX {
            subset.clone()
        } else {
            (0..TORN_LINES_MAX).map(|_| subset[rng.below(subset.len() as u64) as usize]).collect()
        };
        for &line in &torn_lines {
            for _ in 0..TORN_MASKS_PER_LINE {
                torn.push(Some((line, (rng.next() as u8) | 1)));
            }
        }
        states.push((subset.clone(), None));
        states.extend(torn.into_iter().map(|t| (subset.clone(), t)));
    }
    states
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
    /// Largest TLV value (64; values take 24 bytes up to it). Values of tens
    /// of KiB put records of many pages under crash testing — a batch is
    /// cut to the TLVs that fit one record.
    pub value_bytes_max: u64,
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
            value_bytes_max: 64,
        }
    }
}

/// [`run`] with a chosen ring size, anchor interval and truncation rate:
/// a large ring with a small anchor interval and few truncations puts the
/// periodic anchor under crash testing (with the defaults it never occurs).
pub fn run_with(config: Config) -> Result<CrashReport, Error> {
    let Config { ops, seed, states_max, ring_bytes, anchor_every, truncate_percent, value_bytes_max } = config;
    if !(24..=u64::from(u16::MAX)).contains(&value_bytes_max) {
        return Err(Error::Invalid {
            what: "crash harness value_bytes_max",
            detail: format!("{value_bytes_max} (TLV values take 24 to 65535 bytes)"),
        });
    }
    let model = Rc::new(RefCell::new(Model::default()));
    let report = Rc::new(RefCell::new(CrashReport::default()));
    let failure = Rc::new(RefCell::new(None));
    let armed = Rc::new(std::cell::Cell::new(false));
    let probe = Probe {
        sim: SimMedium::new((super::format::RING_OFFSET + ring_bytes) as usize),
        model: model.clone(),
        rng: Rng::new(seed),
        report: report.clone(),
        failure: failure.clone(),
        states_max,
        armed: armed.clone(),
    };
    let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
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
            let mut r = report.borrow_mut();
            if through.is_some() {
                r.truncations += 1;
            } else {
                r.checkpoints += 1;
            }
            drop(r);
            let mut m = model.borrow_mut();
            m.truncated = m.truncating.take().expect("set above");
            continue;
        }
        let count = if choice < 80 { 1 } else { 2 + rng.below(15) as usize };
        let mut values: Vec<Vec<u8>> = (0..count)
            .map(|_| {
                let len = (24 + rng.below(value_bytes_max - 23)).min(log.payload_max() as u64 - 4);
                (0..len).map(|_| rng.next() as u8).collect()
            })
            .collect();
        let mut bytes = 0;
        values.retain(|v| {
            bytes += 4 + v.len();
            bytes <= log.payload_max()
        });
        let tlvs: Vec<Tlv> = values.iter().enumerate().map(|(i, v)| Tlv { tag: 1 + i as u16, value: v }).collect();
        let payload = encode_tlvs(&tlvs)?;
        model.borrow_mut().in_flight = Some(payload.clone());
        let seq = match log.append_tlvs(&tlvs) {
            Ok(seq) => seq,
            Err(Error::Log(LogError::Full { .. })) => {
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
        let mut r = report.borrow_mut();
        r.records += 1;
        r.batches += u64::from(count > 1);
        r.payload_bytes += payload.len() as u64;
        m.acked.insert(seq, payload);
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
        // Truncated through record 1: replaying it is wrong even though
        // its bytes are right.
        let through_one = Model { acked: model.acked.clone(), truncated: 1, ..Model::default() };
        assert!(check(&through_one, image.clone()).unwrap_err().contains("record 1 was truncated but replayed"));
        // The record in flight may come back only as the last, and only if
        // nothing after it was acknowledged.
        let mut later = Model { acked: model.acked.clone(), ..Model::default() };
        later.in_flight = later.acked.remove(&3);
        later.acked.insert(5, vec![5]);
        assert!(check(&later, image.clone()).unwrap_err().contains("record 3 was never committed"));
        let mut unreadable = image;
        unreadable[0] ^= 1; // the superblock
        assert!(check(&model, unreadable).unwrap_err().contains("replay failed"));
    }

    /// The harness's generator is Marsaglia's xorshift64 (13, 7, 17): the
    /// subsets and tears it picks are the ones a seed names.
    #[test]
    fn the_generator_is_xorshift64() {
        let reference = |x: u64| {
            let x = x ^ x.wrapping_shl(13);
            let x = x ^ x.wrapping_shr(7);
            x ^ x.wrapping_shl(17)
        };
        let (mut rng, mut x) = (Rng(0x9E37_79B9_7F4A_7C15), 0x9E37_79B9_7F4A_7C15u64);
        assert_eq!(Rng(1).next(), 1_082_269_761);
        assert!((0..8).all(|seed| Rng::new(seed).next() != 0), "no seed gives the stuck zero state");
        for _ in 0..1000 {
            x = reference(x);
            assert_eq!(rng.next(), x);
        }
    }

    /// A few dirty lines: every subset, each whole and torn twice per line
    /// with an odd (nonzero) mask; many: 64 random subsets, neither all
    /// empty nor all full nor all alike.
    #[test]
    fn crash_states_cover_every_subset_of_few_dirty_lines_and_sample_many() {
        let mut rng = Rng(7);
        let states = crash_states(&[3, 5, 9], &mut rng);
        let subsets: std::collections::BTreeSet<Vec<usize>> = states.iter().map(|(s, _)| s.clone()).collect();
        let want: std::collections::BTreeSet<Vec<usize>> = (0..8u32)
            .map(|m| [3, 5, 9].iter().enumerate().filter(|(i, _)| m >> i & 1 == 1).map(|(_, &l)| l).collect())
            .collect();
        assert_eq!(subsets, want, "every subset of the dirty lines");
        assert_eq!(states.len(), 8 + 2 * 12, "one whole and two torn states per line of each subset");
        for subset in &want {
            let torn: Vec<_> = states.iter().filter(|(s, _)| s == subset).map(|(_, t)| *t).collect();
            assert_eq!(torn.iter().filter(|t| t.is_none()).count(), 1);
            for &line in subset {
                let masks: Vec<u8> = torn.iter().flatten().filter(|(l, _)| *l == line).map(|(_, m)| *m).collect();
                assert_eq!(masks.len(), 2, "line {line} of {subset:?}");
                assert!(masks.iter().all(|m| m & 1 == 1), "a torn line keeps at least its first word: {masks:?}");
            }
        }
        let masks: std::collections::BTreeSet<u8> = states.iter().filter_map(|(_, t)| t.map(|(_, m)| m)).collect();
        assert!(masks.len() > 8, "masks vary: {masks:?}");

        let dirty: Vec<usize> = (0..20).collect();
        let states = crash_states(&dirty, &mut rng);
        let subsets: Vec<&Vec<usize>> = states.iter().filter(|(_, t)| t.is_none()).map(|(s, _)| s).collect();
        assert_eq!(subsets.len(), RANDOM_SUBSETS);
        let sizes: Vec<usize> = subsets.iter().map(|s| s.len()).collect();
        assert!(sizes.iter().all(|&n| n < 20) && sizes.iter().any(|&n| n > 0), "{sizes:?}");
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!((6.0..14.0).contains(&mean), "about half the lines each: {mean}");
        let distinct: std::collections::BTreeSet<_> = subsets.iter().collect();
        assert!(distinct.len() > 60, "{} distinct subsets of 64", distinct.len());

        // A record of many pages: each subset is torn in at most 16 of its
        // lines, picked from it.
        let dirty: Vec<usize> = (0..600).collect();
        let states = crash_states(&dirty, &mut rng);
        assert_eq!(states.iter().filter(|(_, t)| t.is_none()).count(), RANDOM_SUBSETS);
        assert_eq!(states.len(), RANDOM_SUBSETS * (1 + TORN_LINES_MAX * TORN_MASKS_PER_LINE));
        assert!(states.iter().all(|(s, t)| t.is_none_or(|(line, _)| s.contains(&line))));
    }

    /// The default workload is the mix the harness claims: single records
    /// and batches of 24–64-byte values, truncations through a record and
    /// checkpoints, and a ring that wraps.
    #[test]
    fn the_default_workload_mixes_what_it_claims() {
        let r = run(200, 1, u64::MAX).unwrap();
        assert!(r.wraps >= 1, "{r:?}");
        assert!((3..=20).contains(&r.truncations) && (2..=12).contains(&r.checkpoints), "{r:?}");
        assert!((15..=70).contains(&r.batches), "{r:?}");
        let singles = r.records - r.batches;
        // A single record: 24–64 value bytes and its TLV header; a batch of
        // 2–16 of them.
        let mean = r.payload_bytes / r.records;
        assert!(singles > r.batches && (40..=200).contains(&mean), "{r:?}");
    }

    /// Crash points are counted (each gives at least one state); nothing is
    /// crashed while the log is formatted, and the run stops at its cap.
    #[test]
    fn crash_points_are_counted_only_once_armed_and_the_run_stops_at_its_cap() {
        let empty = run(0, 1, 30_000).unwrap();
        assert_eq!((empty.points, empty.states), (0, 0), "formatting is not a commit");
        for value_bytes_max in [23, 65_536] {
            let config = Config { ops: 1, value_bytes_max, ..Config::default() };
            assert!(matches!(run_with(config), Err(Error::Invalid { .. })), "values of up to {value_bytes_max} bytes");
        }
        let small = run(20, 1, 1_000_000).unwrap();
        assert!(small.points > 0 && small.points <= small.states, "{small:?}");
        // A seed names one run; another seed, another run.
        assert_eq!(run(40, 1, 1_000_000).unwrap(), run(40, 1, 1_000_000).unwrap());
        assert_ne!(run(40, 1, 1_000_000).unwrap(), run(40, 2, 1_000_000).unwrap());
        // Capped at one state: the first crash point runs whole, no other.
        let capped = run(2000, 1, 1).unwrap();
        assert_eq!(capped.points, 1, "{capped:?}");
        assert!(capped.states >= 1 && capped.records <= 1, "{capped:?}");
    }
}
