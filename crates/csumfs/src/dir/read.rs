//! Directories: entries of every leaf block (checksum tails verified), of
//! inline directories, and lookups through the htree index when the
//! directory has one.

use crate::dir::htree::is_index_block;
use crate::error::{corrupt, Error};
use crate::inode::table::{Inode, FLAG_INDEX, FLAG_INLINE_DATA};
use crate::volume::Volume;
use csumkit::crc32c;
use csumkit::le::{le16, le32};

/// A directory block: where an entry was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub physical: u64,
    pub logical: u64,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Name bytes.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u32,
    /// `EXT4_FT_*` (1 file, 2 dir, 3 chr, 4 blk, 5 fifo, 6 sock, 7 symlink).
    pub file_type: u8,
}

impl Volume {
    /// Every entry of directory `dir` (with `.` and `..`), in on-media order.
    ///
    /// # Errors
    /// [`Error::NotDir`]; [`Error::Checksum`] for a leaf block's checksum;
    /// [`Error::Corrupt`] for entries that overrun their block.
    pub fn read_dir(&self, dir: &Inode) -> Result<Vec<DirEntry>, Error> {
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {}", dir.ino)));
        }
        let mut out = Vec::new();
        if dir.flags & FLAG_INLINE_DATA != 0 {
            let data = self.inline_data(dir)?;
            out.push(DirEntry { name: b".".to_vec(), ino: dir.ino, file_type: 2 });
            out.push(DirEntry { name: b"..".to_vec(), ino: le32(&data, 0), file_type: 2 });
            // i_block after the parent, then system.data: each a run of dirents.
            let split = 60.min(data.len());
            parse_entries(&data[4..split], dir.ino, &mut out)?;
            parse_entries(&data[split..], dir.ino, &mut out)?;
            return Ok(out);
        }
        let bs = self.layout.block_size;
        for run in self.runs(dir)? {
            for k in 0..run.len {
                let (logical, physical) = (run.logical + k, run.physical + k);
                let block = self.block(physical, &|| format!("directory {} block {physical}", dir.ino))?;
                if dir.flags & FLAG_INDEX != 0 && is_index_block(block, logical, bs) {
                    // The root's "." and ".." precede its index; nodes hold none.
                    if logical == 0 {
                        for record in records(block, 24, || format!("directory {} htree root", dir.ino)) {
                            out.push(entry_of(record?));
                        }
                    }
                    continue;
                }
                self.verify_leaf(dir, physical, block)?;
                parse_entries(&block[..bs as usize - 12], dir.ino, &mut out)?;
            }
        }
        Ok(out)
    }

    /// The entry `name` of `dir` (see `find_in_blocks`).
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::NameTooLong`]; as [`read_dir`](Self::read_dir).
    pub fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<DirEntry, Error> {
        let shown = || String::from_utf8_lossy(name).into_owned();
        if name.len() > 255 {
            return Err(Error::NameTooLong(shown()));
        }
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {}", dir.ino)));
        }
        if dir.flags & FLAG_INLINE_DATA != 0 {
            return self.read_dir(dir)?.into_iter().find(|e| e.name == name).ok_or_else(|| Error::NotFound(shown()));
        }
        let found = self.find_in_blocks(dir, name)?;
        found.map(|(_, entry)| entry).ok_or_else(|| Error::NotFound(shown()))
    }

    /// `name`'s entry in a directory of blocks, and the block holding it
    /// (physical, logical): through the htree index when there is one (one
    /// leaf read), else by scanning each leaf in place, up to the name.
    pub(crate) fn find_in_blocks(&self, dir: &Inode, name: &[u8]) -> Result<Option<(Place, DirEntry)>, Error> {
        if dir.flags & FLAG_INDEX != 0 {
            if name == b"." || name == b".." {
                // Outside the index, at the start of the root block (as
                // the kernel's `__ext4_find_entry` looks for them): `..`'s
                // record spans the root's index data.
                let root = self.runs(dir)?.first().filter(|r| r.logical == 0).map(|r| r.physical);
                let root = root.ok_or_else(|| corrupt(format!("directory {}", dir.ino), "no block 0"))?;
                let block = self.block(root, &|| format!("directory {} htree root", dir.ino))?;
                let found = find_record(block, 24, name, || format!("directory {} htree root", dir.ino))?;
                return Ok(found.map(|r| (Place { physical: root, logical: 0 }, entry_of(r))));
            }
            return self.htree_find(dir, name);
        }
        self.scan_leaves(dir, name)
    }

    /// `name` found by reading every leaf in turn (an indexed directory's
    /// index blocks passed over).
    fn scan_leaves(&self, dir: &Inode, name: &[u8]) -> Result<Option<(Place, DirEntry)>, Error> {
        let bs = self.layout.block_size as usize;
        for run in self.runs(dir)? {
            for k in 0..run.len {
                let place = Place { physical: run.physical + k, logical: run.logical + k };
                let block =
                    self.block(place.physical, &|| format!("directory {} block {}", dir.ino, place.physical))?;
                if dir.flags & FLAG_INDEX != 0 && is_index_block(block, place.logical, bs as u64) {
                    continue;
                }
                if let Some(found) = self.search_leaf(dir, place, block, name)? {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// `name` in `block`, the leaf at `place`, its checksum verified first.
    fn search_leaf(
        &self,
        dir: &Inode,
        place: Place,
        block: &[u8],
        name: &[u8],
    ) -> Result<Option<(Place, DirEntry)>, Error> {
        let what = || format!("directory {} block {}", dir.ino, place.physical);
        self.verify_leaf(dir, place.physical, block)?;
        let area = &block[..block.len() - 12];
        Ok(find_record(area, area.len(), name, what)?.map(|found| (place, entry_of(found))))
    }

    /// The inode at `path` (absolute; symlinks are not followed).
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::NotDir`] naming the path; as
    /// [`lookup`](Self::lookup).
    pub fn resolve(&self, path: &str) -> Result<Inode, Error> {
        match self.walk(path, false)? {
            Walked::At(inode) => Ok(inode),
            Walked::Link(_) => unreachable!("symlinks are followed only when asked"),
        }
    }

    /// The inode at `path` with every symlink on it followed, the last
    /// component's too (relative targets from the link's directory), as
    /// the kernel's path walk does for `open`.
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve); `ELOOP` past [`SYMLINK_HOPS_MAX`] links.
    pub fn resolve_following(&self, path: &str) -> Result<Inode, Error> {
        let mut path = path.to_string();
        for _ in 0..=SYMLINK_HOPS_MAX {
            match self.walk(&path, true)? {
                Walked::At(inode) => return Ok(inode),
                Walked::Link(next) => path = next,
            }
        }
        Err(Error::Io {
            context: format!("{path}: more than {SYMLINK_HOPS_MAX} symlinks"),
            source: std::io::Error::from_raw_os_error(libc::ELOOP),
        })
    }

    /// Walks `path` from the root; with `follow`, stops at the first
    /// symlink and says where it leads (the rest of the path appended).
    fn walk(&self, path: &str, follow: bool) -> Result<Walked, Error> {
        let mut inode = self.inode(crate::inode::table::ROOT)?;
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        for (k, component) in components.iter().enumerate() {
            if !inode.is_dir() {
                return Err(Error::NotDir(path.to_string()));
            }
            let entry = self.lookup(&inode, component.as_bytes()).map_err(|e| match e {
                Error::NotFound(_) => Error::NotFound(path.to_string()),
                other => other,
            })?;
            inode = self.inode(entry.ino)?;
            if follow && inode.is_symlink() {
                let target = String::from_utf8_lossy(&self.read_link(&inode)?).into_owned();
                let base = if target.starts_with('/') { String::new() } else { components[..k].join("/") };
                return Ok(Walked::Link(format!("/{base}/{target}/{}", components[k + 1..].join("/"))));
            }
        }
        Ok(Walked::At(inode))
    }

    /// `name` through the htree index: the leaf for its hash, then the
    /// leaves that continue a run of names sharing that hash. An index
    /// that is bad but whole is looked past, as the kernel's
    /// `__ext4_find_entry` does: every leaf is scanned.
    fn htree_find(&self, dir: &Inode, name: &[u8]) -> Result<Option<(Place, DirEntry)>, Error> {
        let Ok(mut path) = self.htree_path(dir, name)? else { return self.scan_leaves(dir, name) };
        loop {
            let place = Place { physical: path.leaf_physical, logical: path.leaf };
            let block = self.block(place.physical, &|| format!("directory {} block {}", dir.ino, place.physical))?;
            if let Some(found) = self.search_leaf(dir, place, block, name)? {
                return Ok(Some(found));
            }
            match self.next_colliding_leaf(dir, &mut path)? {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(_) => return self.scan_leaves(dir, name),
            }
        }
    }

    fn verify_leaf(&self, dir: &Inode, physical: u64, block: &[u8]) -> Result<(), Error> {
        let bs = block.len();
        if !csumkit::ext4::checksum::has_dir_tail(block) {
            return Err(corrupt(format!("directory {} block {physical}", dir.ino), "no checksum tail"));
        }
        if self.verified_dir_block(physical, dir.csum_seed) {
            return Ok(());
        }
        let computed = crc32c::raw_update(dir.csum_seed, &block[..bs - 12]);
        self.verify(&|| format!("directory {} block {physical}", dir.ino), le32(block, bs - 4), computed)?;
        self.remember_verified_dir_block(physical, dir.csum_seed);
        Ok(())
    }

    /// Whether the directory block at `physical` (of the directory whose
    /// checksum seed is `seed`) was verified since this volume opened it:
    /// csumfs's own writes keep checksums right, so once is enough.
    pub(crate) fn verified_dir_block(&self, physical: u64, seed: u32) -> bool {
        self.verified_dir_blocks.lock().expect("verified directory blocks").contains(&(physical, seed))
    }

    pub(crate) fn remember_verified_dir_block(&self, physical: u64, seed: u32) {
        let mut verified = self.verified_dir_blocks.lock().expect("verified directory blocks");
        if verified.len() >= VERIFIED_DIR_BLOCKS_MAX {
            verified.clear();
        }
        verified.insert((physical, seed));
    }
}

/// Directory blocks remembered as verified; past this many the memory
/// starts again.
const VERIFIED_DIR_BLOCKS_MAX: usize = 1 << 20;

/// One record of a run of dirents, live (`ino` not 0) or unused.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record<'a> {
    /// Offset in the run.
    pub at: usize,
    pub rec_len: usize,
    pub ino: u32,
    pub name: &'a [u8],
    pub file_type: u8,
}

impl Record<'_> {
    /// The bytes its entry takes; the rest of the record is slack. None
    /// for an unused record.
    pub fn used(&self) -> usize {
        if self.ino == 0 {
            0
        } else {
            record_len(self.name.len())
        }
    }
}

/// Bytes a record needs for a name of `len` bytes (the kernel's
/// `ext4_dir_rec_len`).
pub(crate) fn record_len(len: usize) -> usize {
    (8 + len).next_multiple_of(4)
}

/// The records of a run of dirents that start before `starts_before`
/// (a leaf: its whole area; an htree root: its first 24 bytes, `.` and
/// `..`), each checked as the kernel's `ext4_check_dir_entry` checks one:
/// at least 12 bytes, a multiple of 4, inside the run, its name inside
/// it. The first bad record is the last item, as [`Error::Corrupt`] at
/// `location()`.
pub(crate) fn records<'a, F: Fn() -> String>(area: &'a [u8], starts_before: usize, location: F) -> Records<'a, F> {
    Records { area, starts_before, location, at: 0, failed: false }
}

/// Iterator of [`records`].
pub(crate) struct Records<'a, F> {
    area: &'a [u8],
    starts_before: usize,
    location: F,
    at: usize,
    failed: bool,
}

impl<'a, F: Fn() -> String> Iterator for Records<'a, F> {
    type Item = Result<Record<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let (area, at) = (self.area, self.at);
        if self.failed || at >= self.starts_before.min(area.len()) {
            return None;
        }
        let bad = |detail: String| {
            let location = (self.location)();
            Some(Err(corrupt(location, detail)))
        };
        if at + 8 > area.len() {
            self.failed = true;
            return bad(format!("entry at {at}: {} bytes left, under a record header", area.len() - at));
        }
        let raw = le16(area, at + 4);
        // A 64 KiB record does not fit 16 bits (`ext4_rec_len_from_disk`).
        let rec_len = if raw == 0 || raw == 65535 && area.len() >= 65524 { 65536 } else { usize::from(raw) };
        let name_len = usize::from(area[at + 6]);
        if rec_len < 12 || !rec_len.is_multiple_of(4) || at + rec_len > area.len() || 8 + name_len > rec_len {
            self.failed = true;
            return bad(format!("entry at {at}: record length {rec_len}, name length {name_len}"));
        }
        self.at += rec_len;
        Some(Ok(Record {
            at,
            rec_len,
            ino: le32(area, at),
            name: &area[at + 8..at + 8 + name_len],
            file_type: area[at + 7],
        }))
    }
}

/// Live entries (inode not 0) of a run of dirents.
fn parse_entries(area: &[u8], dir: u32, out: &mut Vec<DirEntry>) -> Result<(), Error> {
    for record in records(area, area.len(), || format!("directory {dir}")) {
        let record = record?;
        if record.ino != 0 {
            out.push(DirEntry { name: record.name.to_vec(), ino: record.ino, file_type: record.file_type });
        }
    }
    Ok(())
}

/// The live record `name` of a run of dirents, found in place.
pub(crate) fn find_record<'a>(
    area: &'a [u8],
    starts_before: usize,
    name: &[u8],
    location: impl Fn() -> String,
) -> Result<Option<Record<'a>>, Error> {
    for record in records(area, starts_before, location) {
        let record = record?;
        if record.ino != 0 && record.name == name {
            return Ok(Some(record));
        }
    }
    Ok(None)
}

fn entry_of(record: Record<'_>) -> DirEntry {
    DirEntry { name: record.name.to_vec(), ino: record.ino, file_type: record.file_type }
}

/// Symlinks followed in one path before it is `ELOOP` (the kernel's 40).
pub const SYMLINK_HOPS_MAX: usize = 40;

/// Where a walk of a path ended.
enum Walked {
    At(Inode),
    /// At a symlink: the path it leads to.
    Link(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of dirents: (ino, rec_len, name).
    fn run(records: &[(u32, u16, &[u8])], len: usize) -> Vec<u8> {
        let mut area = vec![0u8; len];
        let mut at = 0;
        for &(ino, rec_len, name) in records {
            area[at..at + 4].copy_from_slice(&ino.to_le_bytes());
            area[at + 4..at + 6].copy_from_slice(&rec_len.to_le_bytes());
            area[at + 6] = name.len() as u8;
            area[at + 7] = 1;
            area[at + 8..at + 8 + name.len()].copy_from_slice(name);
            at += usize::from(rec_len).max(8);
        }
        area
    }

    /// A record as (offset, length, inode, name).
    type Walked = (usize, usize, u32, Vec<u8>);

    fn walk(area: &[u8], starts_before: usize) -> Result<Vec<Walked>, Error> {
        records(area, starts_before, || "test".into())
            .map(|r| r.map(|r| (r.at, r.rec_len, r.ino, r.name.to_vec())))
            .collect()
    }

    #[test]
    fn records_are_checked_as_the_kernel_checks_them() {
        let good = run(&[(11, 12, b"a"), (0, 16, b""), (12, 20, b"bcdefghijkl")], 48);
        let want = vec![(0, 12, 11, b"a".to_vec()), (12, 16, 0, vec![]), (28, 20, 12, b"bcdefghijkl".to_vec())];
        assert_eq!(walk(&good, 48).unwrap(), want);
        assert_eq!(walk(&good, 13).unwrap(), want[..2], "only records starting before 13");
        assert_eq!(walk(&good, 12).unwrap(), want[..1]);
        assert_eq!(walk(&[], 0).unwrap(), vec![]);
        for (bad, why) in [
            (run(&[(11, 8, b""), (11, 40, b"")], 48), "under 12 bytes"),
            (run(&[(11, 0, b"")], 48), "zero (64 KiB only in a 64 KiB block)"),
            (run(&[(11, 13, b"abcde"), (11, 35, b"")], 48), "not a multiple of 4 (its entry needs 16)"),
            (run(&[(11, 52, b"")], 48), "past the run"),
            (
                {
                    let mut area = run(&[(11, 12, b""), (11, 36, b"")], 48);
                    area[6] = 5;
                    area
                },
                "a name past its record",
            ),
            (run(&[(11, 44, b"")], 48), "4 bytes left over"),
        ] {
            let err = walk(&bad, bad.len()).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{why}: {err}");
        }
        // The first bad record ends the walk: the good ones before it come first.
        let area = run(&[(11, 12, b"a"), (12, 8, b"")], 48);
        let items: Vec<_> = records(&area, 48, || "test".into()).collect();
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok() && items[1].is_err());
        // A 64 KiB block's one record spanning it: stored as 0 or 65535.
        for raw in [0u16, 65535] {
            let area = run(&[(11, raw, b"x")], 65536);
            assert_eq!(walk(&area, 65536).unwrap(), vec![(0, 65536, 11, b"x".to_vec())]);
        }
        assert_eq!(record_len(1), 12);
        assert_eq!(record_len(4), 12);
        assert_eq!(record_len(5), 16);
        assert_eq!(record_len(255), 264);
    }
}
