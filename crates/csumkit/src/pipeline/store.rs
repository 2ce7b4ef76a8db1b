//! Where the checksums go. A write records its blocks' checksums only after
//! its data is written; a failed write invalidates the checksums its range
//! had, because the media under them may have changed.
//!
//! The [`ChecksumTree`](crate::csum_tree::ChecksumTree) of the offload
//! model (what PI offload replaces) is a store too, for CRC32C: its items change
//! in memory and reach the medium at the tree's next commit.
//!
//! [`ChecksumFile`] layout: entry `i` (block `i`) is 16 bytes at `16 i`:
//! the checksum (little-endian u64; CRC32C and CRC16 zero-extended) then a
//! little-endian u64 state, 1 = valid, anything else = no checksum. Blocks
//! never written read as no checksum (a sparse hole is zeros).

use crate::{DurableFile, Error};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// A per-block checksum store.
pub trait ChecksumStore: Send {
    /// Records `checksums[i]` for block `first_block + i`.
    ///
    /// # Errors
    /// The I/O error.
    fn record(&mut self, first_block: u64, checksums: &[u64]) -> io::Result<()>;

    /// Forgets the checksums of `blocks` blocks from `first_block`.
    ///
    /// # Errors
    /// The I/O error.
    fn invalidate(&mut self, first_block: u64, blocks: u64) -> io::Result<()>;

    /// Makes what was recorded and invalidated durable, for a store that
    /// keeps its checksums on a medium.
    ///
    /// # Errors
    /// The I/O error.
    fn sync(&mut self) -> io::Result<()>;
}

/// Checksums in memory (tests, and callers with their own persistence).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStore {
    checksums: BTreeMap<u64, u64>,
}

impl MemoryStore {
    /// The checksum of `block`, if one is recorded.
    pub fn get(&self, block: u64) -> Option<u64> {
        self.checksums.get(&block).copied()
    }

    /// Number of blocks with a checksum.
    pub fn len(&self) -> usize {
        self.checksums.len()
    }

    /// Whether no block has a checksum.
    pub fn is_empty(&self) -> bool {
        self.checksums.is_empty()
    }
}

impl ChecksumStore for MemoryStore {
    fn record(&mut self, first_block: u64, checksums: &[u64]) -> io::Result<()> {
        for (i, &c) in checksums.iter().enumerate() {
            self.checksums.insert(first_block + i as u64, c);
        }
        Ok(())
    }

    fn invalidate(&mut self, first_block: u64, blocks: u64) -> io::Result<()> {
        let doomed: Vec<u64> = self.checksums.range(first_block..first_block + blocks).map(|(&b, _)| b).collect();
        for b in doomed {
            self.checksums.remove(&b);
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(()) // memory only: nothing to make durable
    }
}

const ENTRY: u64 = 16;
const VALID: u64 = 1;

/// Checksums in a file beside the data (see the module docs for the layout):
/// an ordinary [`File`], or any [`DurableFile`] (a power-cut test's
/// simulated disk).
#[derive(Debug)]
pub struct ChecksumFile<F: DurableFile = File> {
    file: F,
}

impl ChecksumFile {
    /// Opens or creates the checksum file at `path`.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path.
    pub fn create(path: &Path) -> Result<Self, Error> {
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(|source| {
                Error::Io { context: format!("{}: cannot open checksum file", path.display()), source }
            })?;
        Ok(ChecksumFile { file })
    }
}

impl<F: DurableFile> ChecksumFile<F> {
    /// The checksum file kept in `file`.
    pub fn on(file: F) -> Self {
        ChecksumFile { file }
    }

    /// The checksum of `block`, if one is recorded.
    ///
    /// # Errors
    /// The I/O error.
    pub fn get(&self, block: u64) -> io::Result<Option<u64>> {
        let mut entry = [0u8; ENTRY as usize];
        if self.file.size()? < (block + 1) * ENTRY {
            return Ok(None); // past the end: never written
        }
        self.file.read_exact_at(&mut entry, block * ENTRY)?;
        let state = u64::from_le_bytes(entry[8..].try_into().expect("8 bytes"));
        Ok((state == VALID).then(|| u64::from_le_bytes(entry[..8].try_into().expect("8 bytes"))))
    }

    /// Flushes the checksums to stable storage.
    ///
    /// # Errors
    /// The I/O error.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

impl<F: DurableFile> ChecksumStore for ChecksumFile<F> {
    fn record(&mut self, first_block: u64, checksums: &[u64]) -> io::Result<()> {
        let mut entries = Vec::with_capacity(checksums.len() * ENTRY as usize);
        for &c in checksums {
            entries.extend_from_slice(&c.to_le_bytes());
            entries.extend_from_slice(&VALID.to_le_bytes());
        }
        self.file.write_all_at(&entries, first_block * ENTRY)
    }

    fn invalidate(&mut self, first_block: u64, blocks: u64) -> io::Result<()> {
        let zeros = vec![0u8; (blocks * ENTRY) as usize];
        self.file.write_all_at(&zeros, first_block * ENTRY)
    }

    fn sync(&mut self) -> io::Result<()> {
        ChecksumFile::sync(self)
    }
}

/// The copy-on-write checksum tree as a write path's store (CRC32C only:
/// its items are 32 bits). A whole call is checked before anything changes.
impl ChecksumStore for crate::csum_tree::ChecksumTree {
    fn record(&mut self, first_block: u64, checksums: &[u64]) -> io::Result<()> {
        check_tree_range(self.blocks(), first_block, checksums.len() as u64)?;
        if let Some(wide) = checksums.iter().find(|&&c| c > u64::from(u32::MAX)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("checksum {wide:#x} is wider than the tree's 32-bit CRC32C items"),
            ));
        }
        for (block, &checksum) in (first_block..).zip(checksums) {
            self.update(block, checksum as u32);
        }
        Ok(())
    }

    fn invalidate(&mut self, first_block: u64, blocks: u64) -> io::Result<()> {
        check_tree_range(self.blocks(), first_block, blocks)?;
        for block in first_block..first_block + blocks {
            self.remove(block);
        }
        Ok(())
    }

    /// Nothing here: the tree's items reach its medium at the caller's next
    /// [`commit`](crate::csum_tree::ChecksumTree::commit), which needs the
    /// tree's node store.
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn check_tree_range(tree_blocks: u64, first_block: u64, blocks: u64) -> io::Result<()> {
    match first_block.checked_add(blocks) {
        Some(end) if end <= tree_blocks => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("blocks [{first_block}, +{blocks}) outside a checksum tree of {tree_blocks} blocks"),
        )),
    }
}
