//! What the kernel left in an image's jbd2 journal, put where it belongs:
//! [`replay_in_memory`] writes each block's newest committed copy
//! (`csumkit::ext4::jbd2::recover`) over a private copy of the image — a
//! read-only open sees the filesystem as the kernel would after recovery
//! while the file keeps every byte — and clears `needs_recovery` there.

use crate::error::Error;
use csumkit::ext4::feature_bits::INCOMPAT_RECOVER;
use csumkit::ext4::fields::{S_CHECKSUM, S_FEATURE_INCOMPAT};
use csumkit::ext4::jbd2::{Journal, Recovery};
use csumkit::ext4::Layout;
use csumkit::le::{le32, put32};

/// Whether the superblock in `image` says its journal holds transactions
/// not yet written home.
pub(crate) fn needs_recovery(image: &[u8]) -> bool {
    image.len() >= 2048 && le32(image, 1024 + S_FEATURE_INCOMPAT) & INCOMPAT_RECOVER != 0
}

/// Replays the journal of `image` into `image` itself (a private copy:
/// nothing reaches the file), then clears `needs_recovery` and re-seals the
/// superblock, as the kernel does once the blocks are home. Returns what
/// was replayed.
///
/// # Errors
/// `Error::Format` for a journal recovery must not trust (named by
/// `csumkit::ext4::jbd2`), or an image without the journal its superblock
/// says it has.
pub(crate) fn replay_in_memory(image: &mut [u8]) -> Result<Recovery, Error> {
    let layout = Layout::parse(image)?;
    let Some(journal) = Journal::open(image, &layout)? else {
        return Err(crate::error::corrupt("journal", "the superblock says needs_recovery, but there is no journal"));
    };
    let recovery = journal.recover(image, layout.blocks_count)?;
    let bs = layout.block_size as usize;
    for (&block, &replay) in &recovery.blocks {
        let bytes = journal.replayed(image, replay)?;
        image[block as usize * bs..][..bs].copy_from_slice(&bytes);
    }
    let sb = &mut image[1024..2048];
    put32(sb, S_FEATURE_INCOMPAT, le32(sb, S_FEATURE_INCOMPAT) & !INCOMPAT_RECOVER);
    let crc = csumkit::crc32c::raw_update(!0, &sb[..S_CHECKSUM]);
    put32(sb, S_CHECKSUM, crc);
    Ok(recovery)
}
