//! Where the journal lives: the blocks of the journal inode
//! (`s_journal_inum`), from its extent tree or, on images without extents,
//! its block map — read from the image as it is, before any replay (the
//! journal inode's own mapping is not journaled). Every walk is bounded by
//! the tree's depth and the journal's size.

use crate::ext4::fields::{
    EE_BLOCK, EE_LEN, EE_START_HI, EE_START_LO, EH_DEPTH, EH_ENTRIES, EH_MAGIC, EI_LEAF_HI, EI_LEAF_LO,
    EXT_ENTRY_BYTES, EXT_MAGIC, I_BLOCK, I_FLAGS, I_SIZE_HIGH, I_SIZE_LO, S_JOURNAL_INUM,
};
use crate::ext4::format::FLAG_EXTENTS;
use crate::ext4::Layout;
use crate::le::{le16, le32};
use crate::Error;

/// The deepest extent tree ext4 builds.
const MAX_DEPTH: u16 = 5;

fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupt { location: "journal inode".into(), detail: detail.into() }
}

/// Where the journal file lies in the image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalFile {
    /// `blocks[i]`: the image block of journal block `i`.
    pub blocks: Vec<u64>,
    /// The blocks of its mapping: extent index and leaf blocks, or
    /// indirect blocks.
    pub mapping: Vec<u64>,
}

/// The journal file's blocks and the blocks that map them. Empty when the
/// image has no internal journal (`s_journal_inum` 0).
///
/// # Errors
/// [`Error::Corrupt`] for a journal inode whose mapping is damaged, leaves
/// a hole, or points outside the image.
pub fn journal_file(image: &[u8], layout: &Layout) -> Result<JournalFile, Error> {
    let inum = u64::from(le32(image, 1024 + S_JOURNAL_INUM));
    if inum == 0 {
        return Ok(JournalFile::default());
    }
    let raw = inode(image, layout, inum)?;
    let size = u64::from(le32(raw, I_SIZE_LO)) | u64::from(le32(raw, I_SIZE_HIGH)) << 32;
    let blocks = size / layout.block_size;
    if blocks == 0 || blocks > layout.blocks_count {
        return Err(corrupt(format!("size {size} bytes")));
    }
    let mut file = JournalFile { blocks: vec![0u64; blocks as usize], mapping: Vec::new() };
    let root = &raw[I_BLOCK..I_BLOCK + 60];
    if le32(raw, I_FLAGS) & FLAG_EXTENTS != 0 {
        extents(image, layout, root, MAX_DEPTH + 1, &mut file)?;
    } else {
        block_map(image, layout, root, &mut file)?;
    }
    if let Some(hole) = file.blocks.iter().position(|&b| b == 0) {
        return Err(corrupt(format!("journal block {hole} is not mapped")));
    }
    Ok(file)
}

fn inode<'a>(image: &'a [u8], layout: &Layout, inum: u64) -> Result<&'a [u8], Error> {
    if inum > layout.inodes_count {
        return Err(corrupt(format!("inode {inum} past the {} inodes", layout.inodes_count)));
    }
    let (g, index) = layout.inode_group(inum);
    let table = layout.group(image, g)?.inode_table;
    let at = table * layout.block_size + index * layout.inode_size;
    image
        .get(at as usize..(at + layout.inode_size) as usize)
        .ok_or_else(|| corrupt("the inode table is past the image"))
}

fn block<'a>(image: &'a [u8], layout: &Layout, b: u64) -> Result<&'a [u8], Error> {
    let bs = layout.block_size;
    let range = (b < layout.blocks_count).then(|| (b * bs) as usize..((b + 1) * bs) as usize);
    range.and_then(|r| image.get(r)).ok_or_else(|| corrupt(format!("block {b} is outside the image")))
}

fn extents(image: &[u8], layout: &Layout, node: &[u8], depth_left: u16, file: &mut JournalFile) -> Result<(), Error> {
    let (entries, depth) = (usize::from(le16(node, EH_ENTRIES)), le16(node, EH_DEPTH));
    if le16(node, EH_MAGIC) != EXT_MAGIC || depth >= depth_left || (entries + 1) * EXT_ENTRY_BYTES > node.len() {
        return Err(corrupt(format!("an extent node of depth {depth} with {entries} entries is damaged")));
    }
    for e in 0..entries {
        let entry = &node[(e + 1) * EXT_ENTRY_BYTES..][..EXT_ENTRY_BYTES];
        if depth > 0 {
            let child = u64::from(le32(entry, EI_LEAF_LO)) | u64::from(le16(entry, EI_LEAF_HI)) << 32;
            file.mapping.push(child);
            extents(image, layout, block(image, layout, child)?, depth, file)?;
            continue;
        }
        let logical = u64::from(le32(entry, EE_BLOCK));
        let len = u64::from(le16(entry, EE_LEN));
        let len = if len > 32768 { len - 32768 } else { len };
        let physical = u64::from(le32(entry, EE_START_LO)) | u64::from(le16(entry, EE_START_HI)) << 32;
        for k in 0..len {
            if let Some(slot) = file.blocks.get_mut((logical + k) as usize) {
                if physical + k >= layout.blocks_count {
                    return Err(corrupt(format!("extent at block {physical} is outside the image")));
                }
                *slot = physical + k;
            }
        }
    }
    Ok(())
}

/// The classic block map: 12 direct blocks, then single, double and triple
/// indirect blocks of little-endian block numbers.
fn block_map(image: &[u8], layout: &Layout, root: &[u8], file: &mut JournalFile) -> Result<(), Error> {
    let per_block = layout.block_size / 4;
    let mut next = 0u64;
    for i in 0..12 {
        place(&mut file.blocks, &mut next, u64::from(le32(root, 4 * i)), layout)?;
    }
    for level in 1..=3 {
        let b = u64::from(le32(root, 4 * (11 + level)));
        if next >= file.blocks.len() as u64 {
            break;
        }
        indirect(image, layout, b, level, per_block, file, &mut next)?;
    }
    Ok(())
}

fn indirect(
    image: &[u8],
    layout: &Layout,
    b: u64,
    level: usize,
    per_block: u64,
    file: &mut JournalFile,
    next: &mut u64,
) -> Result<(), Error> {
    if b == 0 {
        *next += per_block.pow(level as u32); // a hole: checked by the caller
        return Ok(());
    }
    let pointers = block(image, layout, b)?;
    file.mapping.push(b);
    for i in 0..per_block as usize {
        if *next >= file.blocks.len() as u64 {
            break;
        }
        let child = u64::from(le32(pointers, 4 * i));
        if level == 1 {
            place(&mut file.blocks, next, child, layout)?;
        } else {
            indirect(image, layout, child, level - 1, per_block, file, next)?;
        }
    }
    Ok(())
}

fn place(map: &mut [u64], next: &mut u64, b: u64, layout: &Layout) -> Result<(), Error> {
    if b >= layout.blocks_count {
        return Err(corrupt(format!("block {b} is outside the image")));
    }
    if let Some(slot) = map.get_mut(*next as usize) {
        *slot = b;
    }
    *next += 1;
    Ok(())
}
