//! Writing one jbd2 transaction into a journal's log, as the kernel's
//! commit (`fs/jbd2/commit.c`) lays it out for a `csum_v3` journal:
//! descriptor blocks of 16-byte tags (the first followed by the journal's
//! UUID, the rest `SAME_UUID`, the last `LAST_TAG`; a copy whose first
//! four bytes are the magic stored escaped), each tag's CRC32C over the
//! sequence and the copy, each descriptor's tail over the block, then the
//! copies, then a commit block checksummed whole. [`super::recover`] (and
//! the kernel's and e2fsck's recovery) replays it like any other.

use super::{Superblock, COMMIT_BLOCK, DESCRIPTOR_BLOCK, FLAG_ESCAPE, FLAG_LAST_TAG, FLAG_SAME_UUID, HEADER_BYTES};
use super::{INCOMPAT_CSUM_V3, MAGIC, TAIL_BYTES};
use crate::le::be32;
use crate::{crc32c, Error};

fn header(kind: u32, tid: u32, block_size: usize) -> Vec<u8> {
    let mut block = vec![0u8; block_size];
    block[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    block[4..8].copy_from_slice(&kind.to_be_bytes());
    block[8..12].copy_from_slice(&tid.to_be_bytes());
    block
}

/// The log blocks of transaction `tid` logging `blocks` (filesystem
/// block, its new bytes), from log block `head` on (wrapping at the log's
/// end): `(log block, bytes)` in the order to write them, the commit last,
/// committed at `time` (seconds, nanoseconds).
///
/// # Errors
/// [`Error::Invalid`] for a journal without `csum_v3` (the layout written
/// here), a copy that is not one block, or a transaction that does not fit
/// in the log's free blocks (`free`: those between its head and its tail).
pub fn transaction(
    sb: &Superblock,
    head: u32,
    free: u32,
    tid: u32,
    blocks: &[(u64, Vec<u8>)],
    time: (u64, u32),
) -> Result<Vec<(u32, Vec<u8>)>, Error> {
    let invalid = |detail: String| Error::Invalid { what: "journal transaction", detail };
    if sb.incompat & INCOMPAT_CSUM_V3 == 0 {
        return Err(invalid("only csum_v3 journals (every metadata_csum filesystem's) are written here".into()));
    }
    let bs = sb.block_size as usize;
    if let Some((block, _)) = blocks.iter().find(|(_, bytes)| bytes.len() != bs) {
        return Err(invalid(format!("the copy of block {block} is not one {bs}-byte block")));
    }
    // Tags after the first carry no UUID; the first is followed by 16 bytes of it.
    let per_descriptor = (bs - HEADER_BYTES - TAIL_BYTES - 16) / 16;
    let descriptors = blocks.len().div_ceil(per_descriptor);
    let total = descriptors + blocks.len() + 1;
    if total as u64 >= u64::from(free) {
        return Err(invalid(format!("{total} blocks do not fit in the log's {free} free blocks")));
    }
    let seed = sb.csum_seed();
    let mut out = Vec::with_capacity(total);
    let mut at = head;
    let mut next = || {
        let here = at;
        at += 1;
        if at >= sb.last() {
            at = sb.first;
        }
        here
    };
    for chunk in blocks.chunks(per_descriptor) {
        let mut descriptor = header(DESCRIPTOR_BLOCK, tid, bs);
        let mut copies = Vec::with_capacity(chunk.len());
        let mut tag = HEADER_BYTES;
        for (i, (block, bytes)) in chunk.iter().enumerate() {
            let mut copy = bytes.clone();
            let mut flags = if i == 0 { 0 } else { u32::from(FLAG_SAME_UUID) };
            if i + 1 == chunk.len() {
                flags |= u32::from(FLAG_LAST_TAG);
            }
            if be32(&copy, 0) == MAGIC {
                copy[..4].fill(0);
                flags |= u32::from(FLAG_ESCAPE);
            }
            // The tag's checksum is over the copy as logged (escaped), as
            // the kernel's commit computes it and recovery checks it.
            let crc = crc32c::raw_update(crc32c::raw_update(seed, &tid.to_be_bytes()), &copy);
            descriptor[tag..tag + 4].copy_from_slice(&(*block as u32).to_be_bytes());
            descriptor[tag + 4..tag + 8].copy_from_slice(&flags.to_be_bytes());
            descriptor[tag + 8..tag + 12].copy_from_slice(&((*block >> 32) as u32).to_be_bytes());
            descriptor[tag + 12..tag + 16].copy_from_slice(&crc.to_be_bytes());
            tag += 16;
            if i == 0 {
                descriptor[tag..tag + 16].copy_from_slice(&sb.uuid);
                tag += 16;
            }
            copies.push(copy);
        }
        let crc = crc32c::raw_update(seed, &descriptor[..bs - TAIL_BYTES]);
        let crc = crc32c::raw_update(crc, &[0; 4]);
        descriptor[bs - TAIL_BYTES..].copy_from_slice(&crc.to_be_bytes());
        out.push((next(), descriptor));
        for copy in copies {
            out.push((next(), copy));
        }
    }
    let mut commit = header(COMMIT_BLOCK, tid, bs);
    commit[0x30..0x38].copy_from_slice(&time.0.to_be_bytes());
    commit[0x38..0x3C].copy_from_slice(&time.1.to_be_bytes());
    let crc = crc32c::raw_update(seed, &commit);
    commit[0x10..0x14].copy_from_slice(&crc.to_be_bytes());
    out.push((next(), commit));
    Ok(out)
}
