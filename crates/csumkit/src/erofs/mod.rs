//! A user-space reader of erofs images (seed 003): superblock and its
//! checksum, compact and extended inodes, directories, inline and shared
//! xattrs, long xattr prefixes, and the per-inode xattr name filter —
//! checked against it, or retrofitted onto images built without it.
//!
//! Everything is read from one byte slice (a file's `mmap`): a truncated or
//! corrupt image is an [`Error::Corrupt`] naming what and where, never a
//! panic (the `erofs_image` fuzz target checks that). Data of compressed or
//! chunked files is not read: listing, xattrs and filters never need it.
//!
//! ```no_run
//! let bytes = std::fs::read("image.erofs")?;
//! let image = csumkit::erofs::Image::open(&bytes)?;
//! let inode = image.lookup("/usr/bin/ping")?;
//! let caps = image.getxattr(&inode, "security.capability", true)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod dir;
mod filter;
mod inode;
mod superblock;
mod xattr;

pub use dir::DirEntry;
pub use filter::{FilterMismatch, FilterReport, FilterRetrofit};
pub use inode::{Inode, Layout};
pub use superblock::{Superblock, MAGIC, SUPER_OFFSET};
pub use xattr::{LongPrefix, Lookup, Xattr};

use crate::Error;

/// An erofs image opened for reading.
pub struct Image<'a> {
    data: &'a [u8],
    sb: Superblock,
    prefixes: Vec<LongPrefix>,
}

impl<'a> Image<'a> {
    /// Parses the superblock (verifying its checksum when the image has
    /// one, as the kernel does at mount) and the long prefix table.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a damaged image, [`Error::Invalid`] for
    /// features this reader does not support.
    pub fn open(data: &'a [u8]) -> Result<Image<'a>, Error> {
        let sb = Superblock::parse(data)?;
        let mut image = Image { data, sb, prefixes: Vec::new() };
        image.prefixes = xattr::long_prefixes(&image)?;
        Ok(image)
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The long xattr prefixes.
    pub fn long_prefixes(&self) -> &[LongPrefix] {
        &self.prefixes
    }

    /// `len` bytes at `offset`, or a corruption error naming `what()`
    /// (a closure: lookups are hot and must not format strings).
    fn bytes(&self, offset: u64, len: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], Error> {
        usize::try_from(offset).ok().and_then(|start| self.data.get(start..start.checked_add(len)?)).ok_or_else(|| {
            corrupt(&what(), format!("bytes [{offset}, +{len}) are outside the {}-byte image", self.data.len()))
        })
    }
}

fn corrupt(location: &str, detail: String) -> Error {
    Error::Corrupt { location: format!("erofs {location}"), detail }
}
