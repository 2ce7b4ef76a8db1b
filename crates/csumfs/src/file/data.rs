//! File contents: blocks through the data runs (holes and unwritten
//! extents read as zeros), inline data, symlink targets.

use crate::error::{corrupt, Error};
use crate::inode::table::{Inode, FLAG_INLINE_DATA};
use crate::volume::Volume;

/// A piece of file data at least this long is read in with one request
/// before it is copied (the map is advised random: faults read a page each).
const WILL_NEED_BYTES: u64 = 32 << 10;
/// How far past such a piece the same extent is read in too.
const READ_AHEAD_BYTES: u64 = 2 << 20;

impl Volume {
    /// Up to `buf.len()` bytes from `offset` (fewer at the end of the file).
    ///
    /// # Errors
    /// [`Error::IsDir`] for a directory; as [`runs`](Self::runs).
    pub fn read(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize, Error> {
        if inode.is_dir() {
            return Err(Error::IsDir(format!("inode {}", inode.ino)));
        }
        self.read_any(inode, offset, buf)
    }

    /// The whole content of `inode` (a file, directory or symlink).
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn read_all(&self, inode: &Inode) -> Result<Vec<u8>, Error> {
        let size = usize::try_from(inode.size)
            .ok()
            .filter(|&s| s as u64 <= self.layout.blocks_count * self.layout.block_size)
            .ok_or_else(|| {
                corrupt(format!("inode {}", inode.ino), format!("size {} exceeds the filesystem", inode.size))
            })?;
        let mut out = vec![0u8; size];
        let n = self.read_any(inode, 0, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    fn read_any(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize, Error> {
        if offset >= inode.size {
            return Ok(0);
        }
        let len = buf.len().min((inode.size - offset) as usize);
        let buf = &mut buf[..len];
        if inode.flags & FLAG_INLINE_DATA != 0 {
            let inline = self.inline_data(inode)?;
            for (i, b) in buf.iter_mut().enumerate() {
                *b = inline.get(offset as usize + i).copied().unwrap_or(0);
            }
            return Ok(len);
        }
        buf.fill(0);
        let bs = self.layout.block_size;
        for run in self.runs(inode)? {
            if run.uninit {
                continue;
            }
            let (start, end) = (run.logical * bs, (run.logical + run.len) * bs);
            let (from, to) = (start.max(offset), end.min(offset + len as u64));
            if from >= to {
                continue;
            }
            let disk = run.physical * bs + (from - start);
            if to - from >= WILL_NEED_BYTES {
                // This piece and, as readahead would, what follows it in the extent.
                let ahead = (to - from + READ_AHEAD_BYTES).min(end - from);
                self.map.will_need(disk as usize, ahead as usize);
            }
            for k in (from - start) / bs..(to - start).div_ceil(bs) {
                self.verify_data(inode, run.logical + k, run.physical + k)?;
            }
            let src = self.bytes(disk, (to - from) as usize, &|| format!("inode {} data", inode.ino))?;
            buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
        }
        Ok(len)
    }

    /// Inline data: the 60 bytes of `i_block`, then the value of the
    /// in-inode `system.data` xattr.
    pub(crate) fn inline_data(&self, inode: &Inode) -> Result<Vec<u8>, Error> {
        let mut data = inode.i_block.to_vec();
        if let Some(more) = self.entries(inode)?.into_iter().find(|e| e.index == 7 && e.suffix == b"data") {
            data.extend_from_slice(&more.value);
        }
        Ok(data)
    }

    /// A symlink's target: in `i_block` when short (a "fast" symlink: no
    /// blocks, no extents), else in its data.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `inode` is not a symlink.
    pub fn read_link(&self, inode: &Inode) -> Result<Vec<u8>, Error> {
        if !inode.is_symlink() {
            return Err(Error::Invalid(format!("inode {} is not a symbolic link", inode.ino)));
        }
        if inode.is_fast_symlink() {
            return Ok(inode.i_block[..inode.size as usize].to_vec());
        }
        self.read_all(inode)
    }
}
