//! The checks: every checksummed structure found from the superblock and
//! descriptors, its checksum recomputed and compared.

use super::checker::Checker;
use super::checksum::{self, INODE_CSUM_HI, INODE_CSUM_LO};
use super::feature_bits::{
    COMPAT_HAS_JOURNAL, COMPAT_ORPHAN_FILE, INCOMPAT_FILETYPE, INCOMPAT_JOURNAL_DEV, INCOMPAT_LARGEDIR,
    INCOMPAT_RECOVER, RO_COMPAT_BIGALLOC, RO_COMPAT_HUGE_FILE,
};
use super::fields::{
    DX_ROOT_HASH_VERSION, DX_ROOT_INDIRECT_LEVELS, DX_ROOT_INFO_LENGTH, EE_LEN, EE_START_HI, EE_START_LO, EH_DEPTH,
    EH_ENTRIES, EH_MAGIC, EH_MAX, EI_LEAF_HI, EI_LEAF_LO, EXT_MAGIC, I_BLOCKS_HIGH, I_BLOCKS_LO, I_FLAGS,
    I_LINKS_COUNT, S_CHECKSUM, S_FIRST_INO, S_FREE_BLOCKS_HI, S_FREE_BLOCKS_LO, S_FREE_INODES, S_JOURNAL_INUM,
    S_ORPHAN_FILE_INUM,
};
use super::inode_rules::{self as rules, S_IFDIR, S_IFLNK, S_IFREG};
use super::jbd2::{self, Journal};
use super::layout::{superblock_checksum, Group, Layout, SUPER_OFFSET};
use super::report::{Finding, JournalCheck, Report, Unchecked};
use super::structure::{self, Claim};
use super::tree_rules::{self, Tree, ROOT};
use super::{bytes, corrupt};
use crate::le::{le16, le32};
use crate::{crc32c, Error};
use std::collections::{HashMap, HashSet};

const INODE_FLAG_INDEX: u32 = rules::FLAG_INDEX;
const INODE_FLAG_EXTENTS: u32 = rules::FLAG_EXTENTS;
const INODE_FLAG_INLINE_DATA: u32 = rules::FLAG_INLINE_DATA;
const INODE_FLAG_EA_INODE: u32 = rules::FLAG_EA_INODE;
/// Deeper extent trees than this are corrupt (ext4 allows 5 levels).
const EXTENT_DEPTH_MAX: u16 = 5;
/// Logical blocks an extent-mapped file can address (32-bit `ee_block`).
const LOGICAL_BLOCKS: u64 = 1 << 32;

/// The highest hash a name can have (0xFFFFFFFE is the end cookie).
const HASH_MAX: u32 = 0xFFFF_FFFC;

/// An htree directory's index, as [`Checker::htree_index_blocks`] reads it.
#[derive(Default)]
pub(super) struct HtreeIndex {
    /// `dx_root_info.hash_version`.
    version: u8,
    /// Index blocks by logical block: the offset of their count/limit.
    index: HashMap<u64, usize>,
    /// Leaf blocks by logical block: the hashes their names must lie in.
    ranges: HashMap<u64, (u32, u32)>,
}

/// A block-mapped inode's blocks as an [`ExtentWalk`]: one-block leaves
/// in logical order, `indirect` blocks of the map.
fn block_mapped_walk(leaves: Vec<(u32, u64, u16)>, indirect: u64) -> ExtentWalk {
    let end = leaves.iter().map(|&(first, _, len)| u64::from(first) + u64::from(len)).max().unwrap_or(0);
    let mapped = leaves.iter().map(|&(_, _, len)| u64::from(len)).sum();
    ExtentWalk { leaves, tree_blocks: indirect, mapped, end, written_end: end, next: end, ..ExtentWalk::default() }
}

/// What an inode's extent tree holds, gathered as it is walked.
#[derive(Default)]
pub(super) struct ExtentWalk {
    /// Leaf extents (logical, physical, length).
    pub leaves: Vec<(u32, u64, u16)>,
    /// Index and leaf blocks below the root.
    tree_blocks: u64,
    /// Blocks the leaves map (unwritten ones too).
    mapped: u64,
    /// One past the last logical block mapped, and past the last written one.
    end: u64,
    written_end: u64,
    /// One past the last leaf so far: the next must start at or after it.
    next: u64,
    /// Any unwritten extent.
    unwritten: bool,
    /// The first way the tree's shape is wrong.
    damage: Option<String>,
}

/// Checks every metadata checksum of an ext4 image.
///
/// # Errors
/// [`Error::Invalid`] without `metadata_csum`; [`Error::Corrupt`] when the
/// metadata is too damaged to follow (not for wrong checksums: those are
/// [`Report::findings`]).
pub fn check(image: &[u8]) -> Result<Report, Error> {
    check_image(image, None)
}

/// [`check`] of the filesystem as recovery of its journal leaves it, when
/// the superblock says `needs_recovery`: the log read as the kernel's
/// recovery reads it — every descriptor, revoke and commit block and
/// every logged copy against its checksum — and replayed into `image`, a
/// private copy, before the rest is checked ([`Report::journal`] says
/// what). A log recovery must not trust is reported there, and the image
/// checked as it is.
///
/// # Errors
/// As [`check`].
pub fn check_recovering(image: &mut [u8]) -> Result<Report, Error> {
    let layout = Layout::parse(image)?;
    if layout.features.incompat & INCOMPAT_RECOVER == 0 {
        return check(image);
    }
    // Opened once: the label, and the fast-commit area (journal blocks,
    // which the replay never writes), after the replay.
    let opened = Journal::open(image, &layout).ok().flatten();
    let checksums = opened.as_ref().map_or("none", |j| {
        let sb = &j.superblock;
        if sb.incompat & jbd2::INCOMPAT_CSUM_V3 != 0 {
            "csum_v3"
        } else if sb.incompat & jbd2::INCOMPAT_CSUM_V2 != 0 {
            "csum_v2"
        } else if sb.compat & jbd2::COMPAT_CHECKSUM != 0 {
            "v1"
        } else {
            "none"
        }
    });
    let journal = match jbd2::replay_into(image, &layout) {
        Ok(recovery) => recovery.map(|r| {
            // An empty log has no fast commits after it (as the kernel's
            // recovery, and csumfs's, never look).
            let fast = opened
                .as_ref()
                .filter(|j| j.superblock.start != 0)
                .map(|j| jbd2::fast_commit::scan(j, image, r.end_transaction, layout.inode_size as usize));
            let (fast_commits, mut error) = match fast {
                Some(Err(e)) => (Default::default(), Some(e.to_string())),
                Some(Ok(f)) => (f, None),
                None => (Default::default(), None),
            };
            if let Some(id) = r.failed_commit {
                error = Some(format!(
                    "the commit block of transaction {id} fails its checksum: the log ends before it, and the \
                     kernel refuses the journal"
                ));
            }
            JournalCheck {
                transactions: (r.first_transaction, r.end_transaction),
                blocks: r.blocks.len() as u64,
                log_blocks: r.log_blocks,
                checksums,
                fast_commits,
                fast_commits_replayed: false,
                error,
            }
        }),
        Err(e) => Some(JournalCheck { checksums, error: Some(e.to_string()), ..JournalCheck::default() }),
    };
    check_image(image, journal)
}

fn check_image(image: &[u8], journal: Option<JournalCheck>) -> Result<Report, Error> {
    let layout = Layout::parse(image)?;
    let sb = &image[SUPER_OFFSET as usize..][..1024];
    let features = layout.features;
    let journal_inum = (features.compat & COMPAT_HAS_JOURNAL != 0 && features.incompat & INCOMPAT_JOURNAL_DEV == 0)
        .then(|| u64::from(le32(sb, S_JOURNAL_INUM)))
        .filter(|&i| i != 0);
    let orphan_inum = (features.compat & COMPAT_ORPHAN_FILE != 0)
        .then(|| u64::from(le32(sb, S_ORPHAN_FILE_INUM)))
        .filter(|&i| i != 0);
    let first_ino = match le32(sb, S_FIRST_INO) {
        0 => 11, // revision 0
        n => u64::from(n),
    };
    // s_usr_quota_inum, s_grp_quota_inum, s_prj_quota_inum.
    let quota = [0x240, 0x244, 0x26C].map(|at| u64::from(le32(sb, at)));
    let unnamed = journal_inum.into_iter().chain(orphan_inum).chain(quota).filter(|&i| i != 0).collect();
    let mut checker = Checker {
        image,
        layout,
        report: Report { journal, ..Report::default() },
        claims: Vec::new(),
        inode_damage: HashMap::new(),
        xattr_blocks: super::xattr_entries::XattrBlocks::new(),
        journal_inum,
        orphan_inum,
        first_ino,
        unnamed,
        tree: Tree::default(),
        hash: super::hash::HashSetup::from_superblock(sb),
    };
    checker.superblock();
    checker.mmp()?;
    for g in 0..checker.layout.groups {
        let group = checker.layout.group(image, g)?;
        checker.group(&group)?;
    }
    checker.note_unchecked(sb);
    checker.xattr_refcounts();
    let mut damage = structure::shared_blocks(&mut checker.claims);
    for (inode, why) in checker.inode_damage {
        damage.entry(inode).or_insert(why);
    }
    let verdict = checker.tree.judge(features.incompat & INCOMPAT_FILETYPE != 0);
    for (inode, why) in verdict.damage {
        damage.entry(inode).or_insert(why);
    }
    for finding in &mut checker.report.findings {
        if finding.damage.is_some() {
            continue;
        }
        if let Some(why) = finding.inode.and_then(|i| damage.get(&i)) {
            finding.damage = Some(why.clone());
        } else if let Some(why) =
            verdict.disagreement.as_ref().filter(|_| matches!(finding.what, "directory block" | "htree block"))
        {
            // Any directory block with a wrong checksum may be what broke the tree.
            finding.damage = Some(format!("the directory tree disagrees with the inodes ({why})"));
        }
    }
    Ok(checker.report)
}

/// Bit `n` of an ext4 bitmap (little-endian bit order within each byte).
fn is_set(bitmap: &[u8], n: u64) -> bool {
    bitmap[(n / 8) as usize] >> (n % 8) & 1 == 1
}

fn lo16(v: u32) -> Vec<u8> {
    (v as u16).to_le_bytes().to_vec()
}

impl<'a> Checker<'a> {
    /// Records a wrong checksum; returns it so the caller can say whether
    /// the structure is otherwise damaged.
    pub(super) fn finding(
        &mut self,
        what: &'static str,
        location: String,
        stored: u32,
        computed: u32,
        fix: Vec<(u64, Vec<u8>)>,
    ) -> Option<&mut Finding> {
        if stored == computed {
            return None;
        }
        self.report.findings.push(Finding { what, location, stored, computed, fix, damage: None, inode: None });
        self.report.findings.last_mut()
    }

    /// The first block of `start..start + len` not marked in use in its
    /// group's block bitmap (every block of a group whose bitmap is
    /// uninitialised is unmarked): one descriptor and bitmap read per group
    /// the run crosses.
    fn first_unmarked(&self, start: u64, len: u64) -> Result<Option<u64>, Error> {
        let l = &self.layout;
        let ratio = l.blocks_per_group / l.clusters_per_group;
        let (mut b, end) = (start, start + len);
        while b < end {
            let g = (b - l.first_data_block) / l.blocks_per_group;
            let stop = end.min((g + 1) * l.blocks_per_group + l.first_data_block);
            let group = l.group(self.image, g)?;
            if group.block_uninit() {
                return Ok(Some(b));
            }
            let bitmap = self.block(group.block_bitmap, &|| format!("group {g} block bitmap"))?;
            let marked = |x: u64| {
                let bit = ((x - l.first_data_block) % l.blocks_per_group) / ratio;
                is_set(bitmap, bit)
            };
            if let Some(x) = (b..stop).find(|&x| !marked(x)) {
                return Ok(Some(x));
            }
            b = stop;
        }
        Ok(None)
    }

    /// Whether inode `inum` is marked in use in its group's inode bitmap
    /// (an uninitialised group's inodes are all free; a bitmap that cannot
    /// be read marks nothing).
    fn inode_in_use(&self, inum: u64) -> bool {
        let l = &self.layout;
        let (g, bit) = l.inode_group(inum);
        let Ok(group) = l.group(self.image, g) else { return false };
        if group.inode_uninit() {
            return false;
        }
        let Ok(bitmap) = self.block(group.inode_bitmap, &|| format!("group {g} inode bitmap")) else { return false };
        is_set(bitmap, bit)
    }

    /// What the check found but could not verify.
    fn note_unchecked(&mut self, sb: &[u8]) {
        let features = self.layout.features;
        let mut note = |what, count, why| {
            if count > 0 {
                self.report.unchecked.push(Unchecked { what, count, why });
            }
        };
        let replayed = self.report.journal.as_ref().is_some_and(|j| j.error.is_none());
        let recover = features.incompat & INCOMPAT_RECOVER != 0 && !replayed;
        note(
            "journal awaiting replay",
            u64::from(recover),
            "transactions not yet replayed (descriptor and commit block checksums): `csumkit ext4 check` replays \
             them in memory, `csumkit ext4 recover` into the image",
        );
        let fast = self
            .report
            .journal
            .as_ref()
            .filter(|j| !j.fast_commits_replayed)
            .map_or(0, |j| u64::from(j.fast_commits.records));
        note(
            "fast-commit records not replayed",
            fast,
            "the journal ends in ext4 fast commits (their checksums valid), not replayed here: the image checked \
             lacks them (a kernel mount replays them)",
        );
        let unsummed = self.report.journal.as_ref().filter(|j| j.checksums == "none").map_or(0, |j| j.log_blocks);
        note(
            "journal blocks without checksums",
            unsummed,
            "the journal has no checksums (metadata_csum or mount -o journal_checksum gives it csum_v3)",
        );
        let external = features.incompat & INCOMPAT_JOURNAL_DEV == 0
            && features.compat & COMPAT_HAS_JOURNAL != 0
            && le32(sb, S_JOURNAL_INUM) == 0;
        note("external journal", u64::from(external), "the journal is on another device: check that device");
    }

    fn superblock(&mut self) {
        let sb = &self.image[SUPER_OFFSET as usize..SUPER_OFFSET as usize + 1024];
        let computed = superblock_checksum(sb);
        let free_blocks = u64::from(le32(sb, S_FREE_BLOCKS_LO))
            | if self.layout.desc_size >= 64 { u64::from(le32(sb, S_FREE_BLOCKS_HI)) << 32 } else { 0 };
        let free_inodes = u64::from(le32(sb, S_FREE_INODES));
        let (blocks, inodes) = (self.layout.blocks_count, self.layout.inodes_count);
        let damage = (free_blocks > blocks || free_inodes > inodes)
            .then(|| format!("{free_blocks} free blocks of {blocks}, {free_inodes} free inodes of {inodes}"));
        if let Some(f) = self.finding(
            "superblock",
            "block 0".into(),
            le32(sb, S_CHECKSUM),
            computed,
            vec![(SUPER_OFFSET + 0x3FC, computed.to_le_bytes().to_vec())],
        ) {
            f.damage = damage;
        }
    }

    pub(super) fn block(&self, block: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], Error> {
        let bs = self.layout.block_size;
        if block >= self.layout.blocks_count {
            return Err(corrupt(
                &what(),
                format!("block {block} is beyond the filesystem's {} blocks", self.layout.blocks_count),
            ));
        }
        let at = block.checked_mul(bs).ok_or_else(|| corrupt(&what(), format!("block {block} overflows")))?;
        bytes(self.image, at, bs as usize, what)
    }

    /// A bitmap checksum split into lo (descriptor offset `lo`) and, with
    /// wide descriptors, hi (`hi`) halves. Returns the disagreement of the
    /// bitmap with its descriptor's free count, if any: damage of whichever
    /// of the two has a wrong checksum.
    fn bitmap(
        &mut self,
        group: &Group,
        what: &'static str,
        block: u64,
        bits: u64,
        (lo, hi): (usize, usize),
    ) -> Result<Option<String>, Error> {
        let g = group.number;
        let data = self.block(block, &|| format!("group {g} {what} at block {block}"))?;
        let computed = crc32c::raw_update(self.layout.csum_seed, &data[..(bits / 8) as usize]);
        let d = bytes(self.image, group.desc_offset, self.layout.desc_size as usize, &|| "descriptor".into())?;
        let wide = self.layout.desc_size >= 0x3C;
        let stored = u32::from(le16(d, lo)) | if wide { u32::from(le16(d, hi)) << 16 } else { 0 };
        let computed = if wide { computed } else { computed & 0xFFFF };
        let mut fix = vec![(group.desc_offset + lo as u64, lo16(computed))];
        if wide {
            fix.push((group.desc_offset + hi as u64, lo16(computed >> 16)));
        }
        // The descriptor's free count of this bitmap (blocks: 0x0C/0x2C,
        // inodes: 0x0E/0x2E) must agree with its zero bits.
        let count_at = if lo == 0x18 { 0x0C } else { 0x0E };
        let counted = u64::from(le16(d, count_at)) | if wide { u64::from(le16(d, count_at + 0x20)) << 16 } else { 0 };
        let free = structure::free_bits(data, bits);
        let damage =
            (free != counted).then(|| format!("the {what} has {free} free, its descriptor says {counted}: run e2fsck"));
        if let Some(f) = self.finding(what, format!("group {g} (block {block})"), stored, computed, fix) {
            f.damage.clone_from(&damage);
        }
        Ok(damage)
    }

    fn group(&mut self, group: &Group) -> Result<(), Error> {
        let (g, size) = (group.number, self.layout.desc_size as usize);
        let d = bytes(self.image, group.desc_offset, size, &|| format!("group {g} descriptor"))?;
        let computed = checksum::descriptor_checksum(self.layout.csum_seed, g as u32, d);
        let stored = u32::from(le16(d, checksum::DESC_CSUM));
        self.report.checked.descriptors += 1;
        // Bitmaps first: their checksums live in the descriptor, so a repair
        // of them changes the descriptor checksum (found on the next pass).
        let mut count_wrong = None;
        if !group.block_uninit() {
            let bits = self.layout.clusters_per_group;
            count_wrong = self.bitmap(group, "block bitmap", group.block_bitmap, bits, (0x18, 0x38))?;
            self.report.checked.block_bitmaps += 1;
        }
        if !group.inode_uninit() {
            let bits = self.layout.inodes_per_group;
            let wrong = self.bitmap(group, "inode bitmap", group.inode_bitmap, bits, (0x1A, 0x3A))?;
            count_wrong = count_wrong.or(wrong);
            self.report.checked.inode_bitmaps += 1;
        }
        // A free count that disagrees with its bitmap may be the
        // descriptor's own damage: its checksum is not re-sealed over it.
        let damage = [("block bitmap", group.block_bitmap), ("inode bitmap", group.inode_bitmap)]
            .into_iter()
            .chain([("inode table", group.inode_table)])
            .find_map(|(what, b)| structure::out_of_range(&self.layout, b, 1).map(|why| format!("{what}: {why}")))
            .or(count_wrong);
        if let Some(f) = self.finding(
            "group descriptor",
            format!("group {g}"),
            stored,
            computed,
            vec![(group.desc_offset + checksum::DESC_CSUM as u64, lo16(computed))],
        ) {
            f.damage = damage;
        }
        self.claim_metadata(group);
        if !group.inode_uninit() {
            self.inodes(group)?;
        }
        Ok(())
    }

    /// The group's superblock copy and descriptor blocks, its bitmaps and
    /// inode table: an extent onto any of them is damage, never a checksum
    /// to rewrite. Runs outside the filesystem are the descriptor's damage
    /// (above), not claims.
    fn claim_metadata(&mut self, group: &Group) {
        let l = &self.layout;
        let table_blocks = (l.inodes_per_group * l.inode_size).div_ceil(l.block_size);
        let base = l.first_data_block + group.number * l.blocks_per_group;
        let runs = [
            (base, l.base_meta_blocks(group.number)),
            (group.block_bitmap, 1),
            (group.inode_bitmap, 1),
            (group.inode_table, table_blocks),
        ];
        for (start, len) in runs {
            if len > 0 && structure::out_of_range(l, start, len).is_none() {
                self.claims.push(Claim { start, len, inode: structure::METADATA });
            }
        }
    }

    fn inodes(&mut self, group: &Group) -> Result<(), Error> {
        let g = group.number;
        let bitmap = self.block(group.inode_bitmap, &|| format!("group {g} inode bitmap"))?;
        let ipg = self.layout.inodes_per_group;
        let used: Vec<u64> = (0..ipg).filter(|&i| is_set(bitmap, i)).collect();
        let size = self.layout.inode_size;
        for i in used {
            let inum = g * ipg + i + 1;
            // A forged table address saturates and then fails the bounds check.
            let at = group.inode_table.saturating_mul(self.layout.block_size).saturating_add(i * size);
            let raw = bytes(self.image, at, size as usize, &|| format!("inode {inum}"))?;
            self.inode(inum, at, raw)?;
        }
        Ok(())
    }

    fn inode(&mut self, inum: u64, at: u64, raw: &[u8]) -> Result<(), Error> {
        let seed = checksum::inode_seed(self.layout.csum_seed, inum as u32, raw);
        let (stored, crc) = checksum::inode_checksum(raw, seed);
        let mut fix = vec![(at + INODE_CSUM_LO as u64, lo16(crc))];
        if checksum::inode_has_csum_hi(raw) {
            fix.push((at + INODE_CSUM_HI as u64, lo16(crc >> 16)));
        }
        self.report.checked.inodes += 1;
        if let Some(f) = self.finding("inode", format!("inode {inum}"), stored, crc, fix) {
            f.inode = Some(inum);
        }
        let (mode, flags) = (le16(raw, 0), le32(raw, I_FLAGS));
        let file_type = rules::file_type(mode);
        // Inodes below s_first_ino but the root are the kernel's own.
        let reserved = inum < self.first_ino && inum != ROOT;
        let features = self.layout.features;
        if let Some(why) = rules::content(features, self.layout.inode_size as usize, raw, reserved) {
            self.damage(inum, why);
        }
        if inum == ROOT && file_type != Some(S_IFDIR) {
            self.damage(inum, "the root is not a directory".into());
        }
        if !reserved && !self.unnamed.contains(&inum) && flags & INODE_FLAG_EA_INODE == 0 {
            if let Some(t) = file_type {
                self.tree.nodes.insert(inum, (le16(raw, I_LINKS_COUNT), t));
            }
        }

        let xattr_clusters = self.xattr_charge(inum, raw)?;
        let is_dir = file_type == Some(S_IFDIR);
        if flags & INODE_FLAG_INLINE_DATA != 0 {
            // Inline data (a small file or directory) lives in the inode
            // and its system.data xattr: the inode checksum covers it.
            if is_dir && !reserved {
                self.inline_dir(inum, raw);
            }
            self.judge_blocks(inum, raw, xattr_clusters, None);
            return Ok(());
        }
        let special = Some(inum) == self.journal_inum || Some(inum) == self.orphan_inum;
        let walk = if flags & INODE_FLAG_EXTENTS != 0 {
            let mut walk = ExtentWalk::default();
            let root = &raw[rules::I_BLOCK..rules::I_BLOCK + 60];
            self.extent_node(inum, seed, root, None, None, (0, LOGICAL_BLOCKS), &mut walk)?;
            walk
        } else if is_dir
            || special
            || (!reserved && (file_type == Some(S_IFREG) || (file_type == Some(S_IFLNK) && rules::size(raw) >= 60)))
        {
            // Block-mapped (no `extents`): indirect blocks carry no
            // checksum, but they count, and the directory blocks they
            // reach carry theirs.
            let (leaves, indirect) = self.block_map(inum, raw, is_dir || special)?;
            self.claim_leaves(inum, &indirect.iter().map(|&b| (0, b, 1)).collect::<Vec<_>>())?;
            block_mapped_walk(leaves, indirect.len() as u64)
        } else {
            if !reserved {
                self.judge_blocks(inum, raw, xattr_clusters, None);
            }
            return Ok(());
        };
        let leaves = &walk.leaves;
        // Blocks outside the filesystem or free first: the most specific damage is named.
        self.claim_leaves(inum, leaves)?;
        if !reserved {
            self.judge_blocks(inum, raw, xattr_clusters, Some(&walk));
        }
        if flags & INODE_FLAG_EA_INODE != 0 {
            self.ea_inode_value(inum, raw, leaves)?;
        }
        if Some(inum) == self.journal_inum {
            self.journal_superblock(inum, leaves)?;
        }
        if Some(inum) == self.orphan_inum {
            self.orphan_blocks(inum, seed, leaves)?;
        }
        if is_dir {
            // As the kernel's __ext4_read_dirblock: in an indexed directory
            // the root (logical block 0) and the interior nodes are index
            // blocks whatever their last bytes say (a root the kernel made
            // by make_indexed_dir keeps the old leaf's dirent tail).
            let htree = if flags & INODE_FLAG_INDEX != 0 { Some(self.htree_index_blocks(inum, leaves)?) } else { None };
            for &(logical, physical, len) in leaves {
                for k in 0..u64::from(len) {
                    let logical = u64::from(logical) + k;
                    self.dir_block(inum, seed, htree.as_ref(), logical, physical + k)?;
                }
            }
        }
        Ok(())
    }

    /// Notes why inode `inum` (and every structure of its) is damaged; the first reason stays.
    fn damage(&mut self, inum: u64, why: String) {
        self.inode_damage.entry(inum).or_insert(why);
    }

    /// An inline directory's entries: the parent in the first four bytes
    /// of `i_block`, entries in the rest and in the `system.data` value.
    fn inline_dir(&mut self, inum: u64, raw: &[u8]) {
        let data = match rules::inline_data(self.layout.inode_size as usize, raw) {
            Ok(data) => data,
            Err(why) => return self.damage(inum, why),
        };
        let parent = u64::from(le32(&data, 0));
        let mut why = (parent == 0 || parent > self.layout.inodes_count || !self.inode_in_use(parent))
            .then(|| format!("its parent, inode {parent}, is not in use"));
        for region in [&data[4..60], &data[60..]] {
            match tree_rules::entries(region, region.len(), "the end of the inline data") {
                Ok(list) => {
                    let first_ino = self.first_ino;
                    let local = self.tree.inline(inum, parent, &list, first_ino);
                    why = why.or(local).or_else(|| self.entries_in_use(&list));
                }
                Err(e) => why = why.or(Some(e)),
            }
        }
        if let Some(why) = why {
            self.damage(inum, why);
        }
    }

    /// The first entry naming an inode out of range or not in use.
    fn entries_in_use(&self, list: &[tree_rules::Entry]) -> Option<String> {
        list.iter().filter(|e| e.inode != 0).find_map(|e| {
            if e.inode > self.layout.inodes_count {
                Some(format!("directory entry at byte {}: inode {} beyond {}", e.at, e.inode, self.layout.inodes_count))
            } else if !self.inode_in_use(e.inode) {
                Some(format!("directory entry at byte {}: inode {} is not in use", e.at, e.inode))
            } else {
                None
            }
        })
    }

    /// `i_size` and `i_blocks` against the blocks the inode maps, as
    /// e2fsck's `check_blocks` (`walk`: the extent tree; `None`: no
    /// blocks — inline data, a fast symlink, a device).
    /// `xattr_clusters`: what its xattr block and ea_inode values charge.
    fn judge_blocks(&mut self, inum: u64, raw: &[u8], xattr_clusters: u64, walk: Option<&ExtentWalk>) {
        let l = &self.layout;
        let (bs, features) = (l.block_size, l.features);
        let (mode, flags) = (le16(raw, 0), le32(raw, I_FLAGS));
        let file_type = rules::file_type(mode);
        let size = rules::size(raw);
        let empty = ExtentWalk::default();
        let w = walk.unwrap_or(&empty);
        if let Some(why) = &w.damage {
            return self.damage(inum, why.clone());
        }
        let huge = features.ro_compat & RO_COMPAT_HUGE_FILE != 0;
        let stored =
            u64::from(le32(raw, I_BLOCKS_LO)) | if huge { u64::from(le16(raw, I_BLOCKS_HIGH)) << 32 } else { 0 };
        // Bigalloc charges whole clusters: each one the leaves touch, each
        // tree block's and the xattrs'.
        let ratio = l.blocks_per_group / l.clusters_per_group;
        let blocks = if features.ro_compat & RO_COMPAT_BIGALLOC != 0 && ratio > 1 {
            let mut clusters = HashSet::new();
            for &(_, start, len) in &w.leaves {
                if len > 0 {
                    clusters.extend(start / ratio..=(start + u64::from(len) - 1) / ratio);
                }
            }
            (clusters.len() as u64 + w.tree_blocks + xattr_clusters) * ratio
        } else {
            w.tree_blocks + w.mapped + xattr_clusters
        };
        let counted = if huge && flags & rules::FLAG_HUGE_FILE != 0 { blocks } else { blocks * (bs / 512) };
        if stored != counted {
            return self.damage(inum, format!("i_blocks {stored}, but it maps {counted} 512-byte sectors"));
        }
        let why = match file_type {
            Some(S_IFDIR) if flags & INODE_FLAG_INLINE_DATA != 0 => {
                let inline = rules::inline_data(l.inode_size as usize, raw).map(|d| d.len() as u64);
                (inline != Ok(size)).then(|| format!("an inline directory of size {size} holding {inline:?} bytes"))
            }
            Some(S_IFDIR) => {
                let prealloc = u64::from(self.image[SUPER_OFFSET as usize + 0xCD]);
                if walk.is_some() && w.mapped == 0 {
                    Some("a directory with no blocks".into())
                } else if w.unwritten {
                    Some("a directory with unwritten extents".into())
                } else if !size.is_multiple_of(bs) {
                    Some(format!("a directory of size {size}, not a whole number of blocks"))
                } else if size / bs > w.end || w.end - size / bs > prealloc {
                    Some(format!("a directory of size {size} mapping {} blocks", w.end))
                } else {
                    None
                }
            }
            Some(S_IFLNK) if size >= 60 && flags & INODE_FLAG_INLINE_DATA == 0 => self.slow_symlink(size, w),
            _ if w.written_end > 0 && size < (w.written_end - 1) * bs => {
                Some(format!("size {size}, but block {} is written", w.written_end - 1))
            }
            _ if size > LOGICAL_BLOCKS * bs - 1 => Some(format!("size {size} is past what extents address")),
            _ => None,
        };
        if let Some(why) = why {
            self.damage(inum, why);
        }
    }

    /// A slow symlink: one block at logical 0, its target NUL-terminated
    /// within it and as long as the size (`e2fsck_pass1_check_symlink`).
    fn slow_symlink(&self, size: u64, w: &ExtentWalk) -> Option<String> {
        let bs = self.layout.block_size;
        let [(0, physical, 1)] = w.leaves[..] else {
            return Some(format!("a symlink of size {size} with {} extents", w.leaves.len()));
        };
        if w.tree_blocks != 0 || size >= bs {
            return Some(format!("a symlink of size {size} in a {bs}-byte block"));
        }
        let target = self.block(physical, &|| String::new()).ok()?;
        let len = target.iter().position(|&b| b == 0).unwrap_or(target.len()) as u64;
        (len != size).then(|| format!("a symlink of size {size} whose target is {len} bytes"))
    }

    /// An extent tree node (the 60-byte root in the inode when `block` is
    /// `None`, of any depth; below it, one level less than its parent's)
    /// whose entries must lie in the range of logical blocks `start..end`;
    /// its leaves and shape go into `walk`.
    #[allow(clippy::too_many_arguments)]
    fn extent_node(
        &mut self,
        inum: u64,
        seed: u32,
        node: &[u8],
        block: Option<u64>,
        depth_expected: Option<u16>,
        (start, end): (u64, u64),
        walk: &mut ExtentWalk,
    ) -> Result<(), Error> {
        let where_ = || match block {
            Some(b) => format!("inode {inum} extent block {b}"),
            None => format!("inode {inum} extent root"),
        };
        let (magic, entries, max, depth) =
            (le16(node, EH_MAGIC), le16(node, EH_ENTRIES), le16(node, EH_MAX), le16(node, EH_DEPTH));
        let depth_max = depth_expected.unwrap_or(EXTENT_DEPTH_MAX);
        if magic != EXT_MAGIC || entries > max || 12 + 12 * usize::from(max) > node.len() || depth > depth_max {
            return Err(corrupt(
                &where_(),
                format!("bad extent header (magic {magic:#06x}, {entries}/{max} entries, depth {depth})"),
            ));
        }
        let mut shape = |why: String| {
            walk.damage.get_or_insert_with(|| format!("{}: {why}", where_()));
        };
        // As ext2fs_extent_header_verify: eh_max within 2 of what the node holds.
        let holds = (node.len() - 12) / 12;
        if usize::from(max) + 2 < holds {
            shape(format!("eh_max {max}, but the node holds {holds}"));
        }
        if depth_expected.is_some_and(|d| d != depth) {
            shape(format!("depth {depth} below a node of depth {}", depth_expected.unwrap_or(0) + 1));
        }
        if block.is_some() && entries == 0 {
            shape("an extent block with no entries".into());
        }
        if block.is_some() && entries > 0 && u64::from(le32(node, 12)) != start {
            shape(format!("its first entry starts at {}, its index at {start}", le32(node, 12)));
        }
        if let Some(b) = block {
            let tail = 12 + 12 * usize::from(max);
            let t = bytes(node, tail as u64, 4, &where_)?;
            let computed = crc32c::raw_update(seed, &node[..tail]);
            let at = b * self.layout.block_size + tail as u64;
            self.report.checked.extent_blocks += 1;
            walk.tree_blocks += 1;
            self.claims.push(Claim { start: b, len: 1, inode: inum });
            if let Some(f) = self.finding(
                "extent block",
                format!("inode {inum} block {b}"),
                le32(t, 0),
                computed,
                vec![(at, computed.to_le_bytes().to_vec())],
            ) {
                f.inode = Some(inum);
            }
        }
        let first = |e: usize| u64::from(le32(node, 12 + 12 * e));
        for e in 0..usize::from(entries) {
            let entry = &node[12 + 12 * e..24 + 12 * e];
            let logical = first(e);
            if depth == 0 {
                let raw_len = le16(entry, EE_LEN);
                let unwritten = raw_len > 32768;
                let len = if unwritten { raw_len - 32768 } else { raw_len };
                let physical = u64::from(le32(entry, EE_START_LO)) | u64::from(le16(entry, EE_START_HI)) << 32;
                let last = logical + u64::from(len);
                let mut shape = |why: String| {
                    walk.damage.get_or_insert_with(|| format!("{}: {why}", where_()));
                };
                if len == 0 {
                    shape(format!("an extent of length 0 at logical {logical}"));
                } else if logical < walk.next || logical < start {
                    shape(format!("extent at logical {logical} overlaps or is out of order"));
                } else if last > end {
                    shape(format!("extent {logical}..{last} runs past its index's {end}"));
                }
                walk.next = walk.next.max(last);
                walk.end = walk.end.max(last);
                walk.mapped += u64::from(len);
                walk.unwritten |= unwritten;
                if !unwritten {
                    walk.written_end = walk.written_end.max(last);
                }
                walk.leaves.push((logical as u32, physical, len));
            } else {
                let child = u64::from(le32(entry, EI_LEAF_LO)) | u64::from(le16(entry, EI_LEAF_HI)) << 32;
                let child_end = if e + 1 < usize::from(entries) { first(e + 1) } else { end };
                if logical < start || child_end <= logical {
                    walk.damage.get_or_insert_with(|| {
                        format!("{}: index at logical {logical} out of order (next at {child_end})", where_())
                    });
                    continue;
                }
                let data = self.block(child, &where_)?;
                self.extent_node(inum, seed, data, Some(child), Some(depth - 1), (logical, child_end), walk)?;
            }
        }
        Ok(())
    }

    /// Records the blocks of `inum`'s leaf extents and notes the first one
    /// outside the filesystem or not marked in use in its block bitmap.
    pub(super) fn claim_leaves(&mut self, inum: u64, leaves: &[(u32, u64, u16)]) -> Result<(), Error> {
        for &(_, start, len) in leaves {
            let len = u64::from(len);
            if let Some(why) = structure::out_of_range(&self.layout, start, len) {
                self.inode_damage.entry(inum).or_insert(why);
                continue;
            }
            self.claims.push(Claim { start, len, inode: inum });
            if let Some(b) = self.first_unmarked(start, len)? {
                self.inode_damage.entry(inum).or_insert_with(|| format!("block {b} is free in the block bitmap"));
            }
        }
        Ok(())
    }

    /// The index of an htree directory: its index blocks by logical block,
    /// with the offset of their count/limit header — the root (logical 0,
    /// after its `dx_root_info`) and, level by level down to
    /// `indirect_levels`, the interior nodes its entries point at (after an
    /// 8-byte empty dirent) — and the hash range each leaf's names must lie
    /// in. Hashes out of order and blocks referenced twice or not at all
    /// are the directory's damage (e2fsck's pass 2 rebuilds such an index).
    fn htree_index_blocks(&mut self, inum: u64, leaves: &[(u32, u64, u16)]) -> Result<HtreeIndex, Error> {
        let bs = self.layout.block_size as usize;
        let physical = |logical: u64| super::leaves::physical(leaves, logical);
        let where_ = || format!("inode {inum} htree");
        let root_block = physical(0).ok_or_else(|| corrupt(&where_(), "no block 0".into()))?;
        let root = self.block(root_block, &where_)?;
        let (version, info_length, levels) =
            (root[DX_ROOT_HASH_VERSION], usize::from(root[DX_ROOT_INFO_LENGTH]), root[DX_ROOT_INDIRECT_LEVELS]);
        // As dx_probe: indirect_levels below ext4_dir_htree_level (3 index
        // levels with large_dir, else 2).
        let htree_levels = if self.layout.features.incompat & INCOMPAT_LARGEDIR != 0 { 3 } else { 2 };
        if info_length != 8 || levels >= htree_levels {
            return Err(corrupt(&where_(), format!("dx_root info length {info_length}, {levels} indirect levels")));
        }
        let mut htree = HtreeIndex { version, ..HtreeIndex::default() };
        htree.index.insert(0, 0x18 + info_length);
        let mut damage = None;
        // (logical, count offset, lowest hash, highest hash) of each node of a level.
        let mut level = vec![(0u64, 0x18 + info_length, 0u32, HASH_MAX)];
        for depth in 0..=levels {
            let mut next = Vec::new();
            for (logical, count_offset, lo, hi) in level {
                let block = physical(logical).ok_or_else(|| corrupt(&where_(), format!("no block {logical}")))?;
                let node = self.block(block, &where_)?;
                let (limit, count) = (usize::from(le16(node, count_offset)), usize::from(le16(node, count_offset + 2)));
                if count > limit || count_offset + 8 * limit > bs {
                    return Err(corrupt(&where_(), format!("count {count} / limit {limit} at block {logical}")));
                }
                // Entry 0's hash is its node's lowest; the others' low bit marks a continued run.
                let hash = |e: usize| if e == 0 { lo } else { le32(node, count_offset + 8 * e) & !1 };
                for e in 0..count {
                    let (from, to) = (hash(e), if e + 1 < count { hash(e + 1) } else { hi });
                    if from < lo || from > hi || (e > 0 && from < hash(e - 1)) {
                        damage.get_or_insert_with(|| format!("htree block {logical}: hashes out of order"));
                    }
                    // Entry 0's block follows count/limit; entry e's follows its hash.
                    let child = u64::from(le32(node, count_offset + 8 * e + 4)) & 0x0FFF_FFFF;
                    let twice = if depth < levels {
                        next.push((child, 8, from, to));
                        htree.index.insert(child, 8).is_some()
                    } else {
                        htree.ranges.insert(child, (from, to)).is_some()
                    };
                    if twice || child == 0 {
                        damage.get_or_insert_with(|| format!("htree: block {child} is referenced twice"));
                    }
                }
            }
            level = next;
        }
        let blocks = leaves.iter().map(|&(first, _, len)| u64::from(first) + u64::from(len)).max().unwrap_or(0);
        if let Some(b) = (1..blocks).find(|b| !htree.index.contains_key(b) && !htree.ranges.contains_key(b)) {
            damage.get_or_insert_with(|| format!("htree: block {b} is in no index"));
        }
        if let Some(why) = damage {
            self.damage(inum, why);
        }
        Ok(htree)
    }

    /// An indexed directory's leaf: each name's hash inside the range its
    /// index gives the block.
    fn htree_leaf(&self, htree: &HtreeIndex, logical: u64, list: &[tree_rules::Entry]) -> Option<String> {
        let Some(&(lo, hi)) = htree.ranges.get(&logical) else {
            return Some(format!("htree: block {logical} is in no index"));
        };
        for e in list.iter().filter(|e| e.inode != 0) {
            let Some((hash, _)) = self.hash.hash(htree.version, e.name) else {
                return Some(format!("htree hash version {} is not judged here", htree.version));
            };
            if hash < lo || hash > hi {
                return Some(format!(
                    "the name at byte {} hashes to {hash:#010x}, outside {lo:#010x}..={hi:#010x}",
                    e.at
                ));
            }
        }
        None
    }

    fn dir_block(
        &mut self,
        inum: u64,
        seed: u32,
        htree: Option<&HtreeIndex>,
        logical: u64,
        block: u64,
    ) -> Result<(), Error> {
        let index_count_offset = htree.and_then(|h| h.index.get(&logical).copied());
        let bs = self.layout.block_size as usize;
        let data = self.block(block, &|| format!("inode {inum} directory block {block}"))?;
        let location = format!("inode {inum} block {block} (logical {logical})");
        let first_ino = self.first_ino;
        let Some(count_offset) = index_count_offset else {
            if !super::checksum::has_dir_tail(data) {
                self.report.missing_tails.push((inum, block));
                return Ok(());
            }
            let computed = crc32c::raw_update(seed, &data[..bs - 12]);
            let at = block * bs as u64 + bs as u64 - 4;
            self.report.checked.dir_blocks += 1;
            // Every block feeds the tree; the local judgement matters only
            // to a block whose checksum is wrong.
            let damage = match tree_rules::entries(data, bs - 12, "the checksum tail") {
                Ok(list) => {
                    let local = self.tree.block(inum, logical, &list, first_ino);
                    let leaf = htree.and_then(|h| self.htree_leaf(h, logical, &list));
                    if let Some(why) = &leaf {
                        // A name outside its range misleads every lookup: the index is wrong.
                        self.damage(inum, why.clone());
                    }
                    local.or(leaf).or_else(|| self.entries_in_use(&list))
                }
                Err(why) => Some(why),
            };
            if let Some(f) = self.finding(
                "directory block",
                location,
                le32(data, bs - 4),
                computed,
                vec![(at, computed.to_le_bytes().to_vec())],
            ) {
                f.damage = damage;
                f.inode = Some(inum);
            }
            return Ok(());
        };
        let (limit, count) = (usize::from(le16(data, count_offset)), usize::from(le16(data, count_offset + 2)));
        let tail_at = count_offset + 8 * limit;
        if count > limit || tail_at + 8 > bs {
            return Err(corrupt(&location, format!("htree count {count} / limit {limit} do not fit the block")));
        }
        // Entries in use, `dt_reserved`, then `dt_checksum` read as zero.
        let crc = crc32c::raw_update(seed, &data[..count_offset + 8 * count]);
        let crc = crc32c::raw_update(crc, &data[tail_at..tail_at + 4]);
        let computed = crc32c::raw_update(crc, &[0; 4]);
        let at = block * bs as u64 + tail_at as u64 + 4;
        self.report.checked.htree_blocks += 1;
        let mut damage = structure::htree_counts(bs, count_offset, limit, count);
        if logical == 0 {
            // The root holds '.' (12 bytes) and '..' (the rest) ahead of its index.
            let root = [&data[..12], &data[12..24]].concat();
            let mut dots = root.clone();
            dots[16..18].copy_from_slice(&12u16.to_le_bytes());
            let local = match tree_rules::entries(&dots, 24, "the htree root's '..'") {
                Ok(list) => self.tree.block(inum, 0, &list, first_ino),
                Err(why) => Some(why),
            };
            let dotdot = usize::from(le16(&root, 16));
            damage = damage.or(local).or_else(|| (dotdot != bs - 12).then(|| format!("'..' record length {dotdot}")));
        }
        if let Some(f) = self.finding(
            "htree block",
            location,
            le32(data, tail_at + 4),
            computed,
            vec![(at, computed.to_le_bytes().to_vec())],
        ) {
            f.damage = damage;
            f.inode = Some(inum);
        }
        Ok(())
    }
}
