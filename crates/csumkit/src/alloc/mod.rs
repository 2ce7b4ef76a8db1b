//! A checksummed block-group allocator with ext4's geometry and on-media
//! formats: per-group block bitmaps whose CRC32C is kept current
//! after every change, group descriptors with their own checksums, per-file
//! extent trees whose leaf blocks carry a checksum tail, and an optional
//! per-group free-space tree.
//!
//! The patch series' three techniques are independent switches of a [`Strategy`];
//! every strategy produces byte-identical media (tests compare them):
//!
//! - bitmap checksum: recomputed over the whole bitmap ([`BitmapCsum::Full`],
//!   the kernel before the incremental bitmap checksums) or updated with [`crc32c::flip_range`]
//!   ([`BitmapCsum::FlipRange`]);
//! - extent leaf checksum: recomputed ([`LeafCsum::Full`]) or updated with
//!   [`crc32c::splice`] over the 12–264 changed bytes ([`LeafCsum::Splice`]);
//! - free-space search: word-at-a-time bitmap scans ([`Search::Linear`]) or
//!   the free-space tree ([`Search::FreeSpaceTree`]).
//!
//! ```
//! use csumkit::alloc::{File, Geometry, Strategy, Volume};
//! let geometry = Geometry::ext4(4096, Geometry::MKE2FS_BLOCKS_PER_GROUP_MAX, 4)?;
//! let mut volume = Volume::new(geometry, [7; 16], Strategy::FREE_SPACE_TREE)?;
//! let mut file = File::new(volume.csum_seed(), 12, 0);
//! volume.fallocate(&mut file, 0, 1000)?; // logical blocks [0, 1000)
//! assert_eq!(file.blocks(), 1000);
//! volume.verify_with_files(&[&file], &[])?;
//! # Ok::<(), csumkit::Error>(())
//! ```
//!
//! [`crc32c::flip_range`]: crate::crc32c::flip_range
//! [`crc32c::splice`]: crate::crc32c::splice

mod bitmap;
mod descriptor;
mod error;
mod extent;
mod file;
mod free_space;
mod geometry;
mod image;
mod verify;
mod volume;

pub use descriptor::{Descriptor, DESC_SIZE};
pub use error::AllocError;
pub use extent::{Extent, Leaf, MAX_UNWRITTEN_LEN};
pub use file::File;
pub use free_space::FreeSpace;
pub use geometry::Geometry;
pub use volume::{Run, Volume};

use crate::Error;

/// How the block bitmap checksum is kept current.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BitmapCsum {
    /// CRC32C over the whole bitmap after every change.
    Full,
    /// [`crate::crc32c::flip_range`] over the changed run of bits.
    FlipRange,
}

/// How an extent leaf's checksum is kept current.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LeafCsum {
    /// CRC32C over the whole leaf after every change.
    Full,
    /// [`crate::crc32c::splice`] over the changed bytes.
    Splice,
}

/// How free space is found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Search {
    /// `find_next_zero_bit`-style scans of the bitmaps.
    Linear,
    /// The per-group free-space tree.
    FreeSpaceTree,
}

/// The allocator's choice of each technique.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Strategy {
    /// Bitmap checksum maintenance.
    pub bitmap_csum: BitmapCsum,
    /// Extent leaf checksum maintenance.
    pub leaf_csum: LeafCsum,
    /// Free-space search.
    pub search: Search,
}

impl Strategy {
    /// The kernel before the incremental bitmap checksums: full recomputes, linear search.
    pub const BEFORE: Strategy =
        Strategy { bitmap_csum: BitmapCsum::Full, leaf_csum: LeafCsum::Full, search: Search::Linear };
    /// `+crc_flip_range`.
    pub const FLIP_RANGE: Strategy = Strategy { bitmap_csum: BitmapCsum::FlipRange, ..Strategy::BEFORE };
    /// `+crc_splice` (on top of flip_range).
    pub const CRC_SPLICE: Strategy = Strategy { leaf_csum: LeafCsum::Splice, ..Strategy::FLIP_RANGE };
    /// `+free_space_tree` (on top of both).
    pub const FREE_SPACE_TREE: Strategy = Strategy { search: Search::FreeSpaceTree, ..Strategy::CRC_SPLICE };

    /// The patch series' columns, each adding one technique to the previous.
    pub const LADDER: [(&'static str, Strategy); 4] = [
        ("Before", Strategy::BEFORE),
        ("+crc_flip_range", Strategy::FLIP_RANGE),
        ("+crc_splice", Strategy::CRC_SPLICE),
        ("+free_space_tree", Strategy::FREE_SPACE_TREE),
    ];

    /// The strategy of a [`LADDER`](Self::LADDER) column name (also accepts
    /// `before`, `flip_range`, `crc_splice`, `free_space_tree`).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the accepted names.
    pub fn from_name(name: &str) -> Result<Strategy, Error> {
        let wanted = name.trim_start_matches('+').to_ascii_lowercase();
        Strategy::LADDER
            .iter()
            .find(|(n, _)| {
                let n = n.trim_start_matches('+').to_ascii_lowercase();
                n == wanted || n.trim_start_matches("crc_") == wanted
            })
            .map(|&(_, s)| s)
            .ok_or_else(|| Error::Invalid {
                what: "strategy",
                detail: format!(
                    "unknown strategy {name:?} (expected before, flip_range, crc_splice or free_space_tree)"
                ),
            })
    }
}

/// Where an allocator operation spends its time; see [`Probe`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(usize)]
pub enum Phase {
    /// Anything not below: argument checks, extent lookup, bookkeeping.
    Other,
    /// Finding free space.
    Search,
    /// Setting or clearing bits and updating the free-space tree.
    Bitmap,
    /// Bitmap, descriptor and extent leaf checksums.
    Checksum,
    /// Descriptor fields.
    Descriptor,
    /// Extent leaf edits.
    Extent,
}

impl Phase {
    /// Every phase, in `repr` order.
    pub const ALL: [Phase; 6] =
        [Phase::Other, Phase::Search, Phase::Bitmap, Phase::Checksum, Phase::Descriptor, Phase::Extent];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        ["other", "search", "bitmap", "checksum", "descriptor", "extent"][self as usize]
    }
}

/// Told when the allocator moves from one [`Phase`] to the next, so that a
/// benchmark can attribute time. [`NoProbe`] compiles to nothing.
pub trait Probe {
    /// The allocator now works on `phase`.
    fn enter(&mut self, phase: Phase);
}

/// The probe that does nothing (the default).
#[derive(Clone, Copy, Default, Debug)]
pub struct NoProbe;

impl Probe for NoProbe {
    #[inline(always)]
    fn enter(&mut self, _phase: Phase) {}
}
