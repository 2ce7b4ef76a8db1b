//! Saving and loading a volume's allocation metadata: a 64-byte header,
//! the descriptor table, then every group's bitmap.
//!
//! | offset | size | field                                   |
//! |-------:|-----:|-----------------------------------------|
//! | 0      | 8    | magic `CSKALLOC`                        |
//! | 8      | 4    | format version (1)                      |
//! | 12     | 4    | block size                              |
//! | 16     | 4    | blocks per group                        |
//! | 20     | 4    | zero                                    |
//! | 24     | 8    | blocks count                            |
//! | 32     | 16   | volume UUID                             |
//! | 48     | 4    | CRC32C of bytes `[0, 48)`               |
//! | 52     | 12   | zero                                    |
//! | 64     | 64 G | group descriptors                       |
//! | …      | B G  | bitmaps, `B` = blocks per group / 8     |
//!
//! All integers little-endian. Loading checks everything [`Volume::verify`]
//! checks; a damaged image is an [`Error::Corrupt`], never a panic.

use super::bitmap::Bitmap;
use super::descriptor::{Descriptor, DESC_SIZE};
use super::volume::Group;
use super::{Geometry, NoProbe, Strategy, Volume};
use crate::{crc32c, Error};

const MAGIC: &[u8; 8] = b"CSKALLOC";
const VERSION: u32 = 1;
const HEADER: usize = 64;

impl<P: super::Probe> Volume<P> {
    /// The volume's allocation metadata as bytes (see the module docs).
    pub fn to_image(&self) -> Vec<u8> {
        let g = &self.geometry;
        let mut out = vec![0u8; HEADER];
        out[0..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&g.block_size.to_le_bytes());
        out[16..20].copy_from_slice(&g.blocks_per_group.to_le_bytes());
        out[24..32].copy_from_slice(&g.blocks_count.to_le_bytes());
        out[32..48].copy_from_slice(&self.uuid);
        let crc = crc32c::checksum(&out[..48]);
        out[48..52].copy_from_slice(&crc.to_le_bytes());
        for group in &self.groups {
            out.extend_from_slice(group.desc.as_media());
        }
        for group in &self.groups {
            out.extend_from_slice(group.bitmap.as_media());
        }
        out
    }
}

impl Volume<NoProbe> {
    /// A volume from [`to_image`](Volume::to_image) bytes, fully verified.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a damaged or truncated image,
    /// [`Error::Invalid`] for an impossible geometry.
    pub fn load(image: &[u8], strategy: Strategy) -> Result<Self, Error> {
        let corrupt = |detail: String| Error::Corrupt { location: "volume image".into(), detail };
        if image.len() < HEADER {
            return Err(corrupt(format!("{} bytes, shorter than the {HEADER}-byte header", image.len())));
        }
        if &image[0..8] != MAGIC {
            return Err(corrupt("bad magic (not a csumkit allocator image)".into()));
        }
        let u32_at = |at: usize| u32::from_le_bytes(image[at..at + 4].try_into().expect("4 bytes"));
        if u32_at(8) != VERSION {
            return Err(corrupt(format!("format version {}, this build reads {VERSION}", u32_at(8))));
        }
        if image[20..24].iter().chain(&image[52..HEADER]).any(|&b| b != 0) {
            return Err(corrupt("reserved header bytes are not zero".into()));
        }
        let (stored, computed) = (u32_at(48), crc32c::checksum(&image[..48]));
        if stored != computed {
            return Err(corrupt(format!("header checksum {stored:#010x}, computed {computed:#010x}")));
        }
        let geometry = Geometry {
            block_size: u32_at(12),
            blocks_per_group: u32_at(16),
            blocks_count: u64::from_le_bytes(image[24..32].try_into().expect("8 bytes")),
        };
        geometry.validate()?;
        let groups = geometry.groups() as usize;
        let bitmap_bytes = geometry.bitmap_bytes();
        let expected = HEADER + groups * (DESC_SIZE + bitmap_bytes);
        if image.len() != expected {
            return Err(corrupt(format!("{} bytes, the geometry needs {expected}", image.len())));
        }
        let bitmaps_at = HEADER + groups * DESC_SIZE;
        let groups = (0..groups)
            .map(|g| {
                let desc = image[HEADER + g * DESC_SIZE..HEADER + (g + 1) * DESC_SIZE].try_into().expect("64 bytes");
                let bitmap = &image[bitmaps_at + g * bitmap_bytes..bitmaps_at + (g + 1) * bitmap_bytes];
                Group { bitmap: Bitmap::from_media(bitmap), desc: Descriptor::from_media(desc), tree: None }
            })
            .collect();
        let uuid = image[32..48].try_into().expect("16 bytes");
        // Free counts are summed in u64 before verify compares them.
        let volume = Volume::assemble(geometry, uuid, strategy, groups, NoProbe);
        volume.verify()?;
        Ok(volume)
    }
}
