//! What a check found: the structures checked and not checked, and each
//! wrong checksum with the damage, if any, that makes rewriting it unsafe.

/// One wrong checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The structure: `superblock`, `group descriptor`, `block bitmap`,
    /// `inode bitmap`, `inode`, `extent block`, `directory block`,
    /// `htree block`, `xattr block`, `ea_inode value`, `journal
    /// superblock`, `orphan file block`, `MMP block`.
    pub what: &'static str,
    /// Which one: group, inode, block.
    pub location: String,
    /// Checksum on media (16-bit ones zero-extended).
    pub stored: u32,
    /// Checksum recomputed from the bytes.
    pub computed: u32,
    /// Writes that store the computed checksum: (byte offset, bytes).
    /// None for a hash over data (an ea_inode value): the data is wrong.
    pub fix: Vec<(u64, Vec<u8>)>,
    /// Why the structure's content is itself wrong, if it is: then the
    /// checksum is wrong because the content is, and rewriting it would
    /// re-seal the damage. Repairs must skip such findings (e2fsck's job).
    pub damage: Option<String>,
    /// The inode the structure belongs to (inodes, extent and directory blocks).
    pub inode: Option<u64>,
}

impl Finding {
    /// Whether rewriting the checksum is a safe repair: the structure is
    /// otherwise consistent.
    pub fn repairable(&self) -> bool {
        self.damage.is_none()
    }
}

/// Structures whose checksum was checked, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// Group descriptors.
    pub descriptors: u64,
    /// Block bitmaps (initialised groups).
    pub block_bitmaps: u64,
    /// Inode bitmaps (initialised groups).
    pub inode_bitmaps: u64,
    /// In-use inodes.
    pub inodes: u64,
    /// Extent tree blocks.
    pub extent_blocks: u64,
    /// Directory leaf blocks.
    pub dir_blocks: u64,
    /// Directory htree index blocks.
    pub htree_blocks: u64,
    /// External xattr blocks (`i_file_acl`; a shared block once).
    pub xattr_blocks: u64,
    /// Values held in ea_inodes (their bytes against their hash).
    pub ea_inode_values: u64,
    /// The jbd2 superblock (checksum v2/v3).
    pub journal_superblocks: u64,
    /// Blocks of the orphan file.
    pub orphan_blocks: u64,
    /// The MMP block.
    pub mmp_blocks: u64,
}

/// Structures found but not checked, by kind: a report with any of these
/// is not "all checksums valid".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unchecked {
    /// What: `ea_inode values`, `journal transactions`, `external journal`.
    pub what: &'static str,
    /// How many.
    pub count: u64,
    /// Why, and what checks them.
    pub why: &'static str,
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Counts of checked structures.
    pub checked: Checked,
    /// Wrong checksums, in the order found.
    pub findings: Vec<Finding>,
    /// Directory blocks without a checksum tail or htree tail (kernel
    /// would refuse them): (inode, block).
    pub missing_tails: Vec<(u64, u64)>,
    /// Structures present but not checked.
    pub unchecked: Vec<Unchecked>,
    /// The kernel's journal of an image that needed recovery
    /// ([`check_recovering`](super::check_recovering)).
    pub journal: Option<JournalCheck>,
}

impl Report {
    /// No wrong checksum, no missing tail, no journal that fails.
    pub fn clean(&self) -> bool {
        self.findings.is_empty()
            && self.missing_tails.is_empty()
            && self.journal.as_ref().is_none_or(|j| j.error.is_none())
    }
}

/// The journal of an image that needed recovery: its log checked, and
/// replayed before the rest of the image was checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalCheck {
    /// The first transaction replayed, and one past the last.
    pub transactions: (u32, u32),
    /// Filesystem blocks replayed.
    pub blocks: u64,
    /// Descriptor, revoke and commit blocks read, with their checksums
    /// when the journal has them (`checksums`), as are the logged copies'.
    pub log_blocks: u64,
    /// The journal's checksums: `csum_v3`, `csum_v2`, `v1` (CRC32 per
    /// transaction) or `none`.
    pub checksums: &'static str,
    /// Fast commits after the log's last transaction, their tails'
    /// checksums checked; [`check_recovering`](super::check_recovering)
    /// does not replay them.
    pub fast_commits: crate::ext4::jbd2::fast_commit::FastCommits,
    /// The fast commits were replayed too (by csumfs) before the image was
    /// checked.
    pub fast_commits_replayed: bool,
    /// Why the log was not replayed — a checksum or tag that fails inside
    /// it, a block it must not write — with the journal block and
    /// transaction; the image was then checked as it is.
    pub error: Option<String>,
}
