//! A user-space reader of erofs images: superblock and its checksum,
//! compact and extended inodes (in the metadata area or a metabox),
//! directories, inline and shared xattrs, long xattr prefixes, and the
//! per-inode xattr name filter — checked against it, or retrofitted onto
//! images built without it. Data is read from every layout: flat, inline,
//! chunked, and compressed (LZ4, MicroLZMA, DEFLATE, Zstandard or stored
//! pclusters, tail packing, fragments in the packed inode) — so compressed
//! directories, a compressed metabox and a compressed packed inode read.
//!
//! Everything is read from one byte slice (a file's `mmap`): a truncated or
//! corrupt image is an [`Error::Corrupt`] naming what and where, never a
//! panic (the `erofs_image` fuzz target checks that).
//!
//! ```no_run
//! let bytes = std::fs::read("image.erofs")?;
//! let image = csumkit::erofs::Image::open(&bytes)?;
//! let inode = image.lookup("/usr/bin/ping")?;
//! let caps = image.getxattr(&inode, "security.capability", true)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod codec;
mod data;
mod dir;
mod filter;
mod inode;
mod lz4;
mod superblock;
mod xattr;
mod zmap;

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
    /// The metabox inode's data: where inodes with nid bit 63 live.
    metabox: Option<Vec<u8>>,
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
        let mut image = Image { data, sb, prefixes: Vec::new(), metabox: None };
        if image.sb.feature_incompat & superblock::INCOMPAT_METABOX != 0 {
            let nid = image.sb.metabox_nid;
            if nid >> inode::NID_METABOX_BIT != 0 {
                return Err(corrupt("superblock", format!("the metabox nid {nid:#x} is itself in a metabox")));
            }
            let metabox = image.inode(nid)?;
            image.metabox = Some(image.data(&metabox)?);
        }
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

    /// Whether the image keeps inodes in a metabox.
    pub fn has_metabox(&self) -> bool {
        self.metabox.is_some()
    }

    /// The stream an inode's metadata lives in: the image, or the metabox.
    fn meta(&self, in_metabox: bool) -> &[u8] {
        match (&self.metabox, in_metabox) {
            (Some(metabox), true) => metabox,
            _ => self.data,
        }
    }

    /// `len` bytes at `offset` of the image or of the metabox.
    fn meta_bytes(&self, in_metabox: bool, offset: u64, len: usize, what: &dyn Fn() -> String) -> Result<&[u8], Error> {
        let stream = self.meta(in_metabox);
        let name = if in_metabox { "metabox" } else { "image" };
        usize::try_from(offset).ok().and_then(|start| stream.get(start..start.checked_add(len)?)).ok_or_else(|| {
            corrupt(&what(), format!("bytes [{offset}, +{len}) are outside the {}-byte {name}", stream.len()))
        })
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
