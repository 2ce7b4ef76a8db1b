//! erofs extended attributes: the xattr ibody after each inode (header,
//! shared xattr ids, inline entries), the shared xattr area, and long
//! name prefixes.
//!
//! ibody header (12 bytes), then `h_shared_count` 4-byte shared ids, then
//! inline entries to the end of the ibody:
//!
//! | offset | size | field                                          |
//! |-------:|-----:|------------------------------------------------|
//! | 0      | 4    | `h_name_filter` (see [`crate::xattr_filter`])  |
//! | 4      | 1    | `h_shared_count`                               |
//! | 5      | 7    | reserved                                       |
//!
//! Entry (inline, or at `xattr_blkaddr * block size + 4 * id` when shared),
//! padded to 4 bytes:
//!
//! | offset | size | field                                          |
//! |-------:|-----:|------------------------------------------------|
//! | 0      | 1    | `e_name_len`                                   |
//! | 1      | 1    | `e_name_index` (bit 7: long prefix number)     |
//! | 2      | 2    | `e_value_size`                                 |
//! | 4      | n+v  | name suffix, then value                        |
//!
//! A long prefix (`struct erofs_xattr_long_prefix`: base index, infix) is
//! stored as a 2-byte length and its bytes, each 4-byte aligned, from byte
//! `xattr_prefix_start * 4` of the metadata area or the packed inode.

use super::{corrupt, Image, Inode};
use crate::le::{le16, le32};
use crate::xattr_filter::{self, Filter, Query};
use crate::Error;

/// Size of the xattr ibody header.
pub const IBODY_HEADER: u64 = 12;
const LONG_PREFIX_FLAG: u8 = 0x80;

/// A long xattr name prefix: a short prefix plus an infix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LongPrefix {
    /// The short prefix it extends.
    pub base_index: u8,
    /// Bytes after the short prefix.
    pub infix: Vec<u8>,
}

/// One stored xattr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xattr<'a> {
    /// Short prefix index the name hashes under.
    pub base_index: u8,
    /// Long-prefix infix (empty for short prefixes).
    pub infix: &'a [u8],
    /// Stored name suffix.
    pub suffix: &'a [u8],
    /// Value bytes.
    pub value: &'a [u8],
    /// Stored in the shared area (else inline).
    pub shared: bool,
}

impl Xattr<'_> {
    /// Whether its name index has a namespace (user, trusted, security,
    /// the POSIX ACLs, lustre): entries with other indexes are skipped, as
    /// the kernel skips them.
    pub fn is_known(&self) -> bool {
        xattr_filter::prefix_of(self.base_index).is_some() || self.base_index == 5
    }

    /// The full name, e.g. `user.mime_type`.
    pub fn full_name(&self) -> String {
        let prefix = xattr_filter::prefix_of(self.base_index).unwrap_or("lustre.");
        format!("{prefix}{}{}", String::from_utf8_lossy(self.infix), String::from_utf8_lossy(self.suffix))
    }

    /// True when this is the xattr `(index, suffix)` (suffix as split by
    /// [`xattr_filter::split_name`]).
    pub fn is(&self, index: u8, suffix: &[u8]) -> bool {
        self.base_index == index
            && suffix.len() == self.infix.len() + self.suffix.len()
            && suffix.starts_with(self.infix)
            && &suffix[self.infix.len()..] == self.suffix
    }
}

/// What a lookup of one name found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// Present, with this value.
    Found(&'a [u8]),
    /// Absent; `filtered` when the name filter said so without reading xattrs.
    Absent {
        /// Answered by the filter.
        filtered: bool,
    },
}

/// Where an inode's xattrs are: the parsed ibody header.
struct Ibody<'a> {
    shared_ids: &'a [u8],
    inline: &'a [u8],
    inline_at: u64,
}

impl<'a> Image<'a> {
    fn ibody(&self, inode: &Inode) -> Result<Option<Ibody<'_>>, Error> {
        let Some(at) = inode.xattr_offset() else { return Ok(None) };
        let where_ = || format!("xattrs of nid {}", inode.nid);
        let body = self.meta_bytes(inode.in_metabox, at, inode.xattr_size() as usize, &where_)?;
        let shared = usize::from(body[4]) * 4;
        if IBODY_HEADER as usize + shared > body.len() {
            return Err(corrupt(&where_(), format!("{} shared ids overflow the ibody", body[4])));
        }
        let inline_start = IBODY_HEADER as usize + shared;
        Ok(Some(Ibody {
            shared_ids: &body[IBODY_HEADER as usize..inline_start],
            inline: &body[inline_start..],
            inline_at: at + inline_start as u64,
        }))
    }

    fn entry<'s>(
        &'s self,
        bytes: &'s [u8],
        at: usize,
        shared: bool,
        where_: &dyn Fn() -> String,
    ) -> Result<(Xattr<'s>, usize), Error> {
        let head = bytes.get(at..at + 4).ok_or_else(|| corrupt(&where_(), format!("entry at {at} is truncated")))?;
        let (name_len, index, value_len) = (usize::from(head[0]), head[1], usize::from(le16(head, 2)));
        let end = at + 4 + name_len + value_len;
        if end > bytes.len() {
            return Err(corrupt(
                &where_(),
                format!("entry at {at} ({name_len}-byte name, {value_len}-byte value) is truncated"),
            ));
        }
        let (base_index, infix) = if index & LONG_PREFIX_FLAG != 0 {
            let n = usize::from(index & !LONG_PREFIX_FLAG);
            let prefix = self
                .prefixes
                .get(n)
                .ok_or_else(|| corrupt(&where_(), format!("long prefix {n} of {} defined", self.prefixes.len())))?;
            (prefix.base_index, prefix.infix.as_slice())
        } else {
            // An index the kernel has no handler for (0: the zero padding
            // `--root-xattr-isize` leaves) is valid and skipped by readers.
            (index, &[][..])
        };
        let xattr = Xattr {
            base_index,
            infix,
            suffix: &bytes[at + 4..at + 4 + name_len],
            value: &bytes[at + 4 + name_len..end],
            shared,
        };
        Ok((xattr, (end - at).next_multiple_of(4)))
    }

    /// Calls `visit` on each xattr of `inode` with a known name index (inline
    /// first, then shared, as the kernel searches) until it returns `true`;
    /// returns whether it did.
    fn visit_xattrs<'s>(&'s self, inode: &Inode, mut visit: impl FnMut(Xattr<'s>) -> bool) -> Result<bool, Error> {
        let Some(body) = self.ibody(inode)? else { return Ok(false) };
        let where_ = || format!("inline xattrs of nid {} (at byte {})", inode.nid, body.inline_at);
        let mut at = 0;
        while at < body.inline.len() {
            let (xattr, size) = self.entry(body.inline, at, false, &where_)?;
            if xattr.is_known() && visit(xattr) {
                return Ok(true);
            }
            at += size;
        }
        let area = u64::from(self.sb.xattr_blkaddr) * u64::from(self.sb.block_size);
        let in_metabox = self.sb.feature_compat & super::superblock::COMPAT_SHARED_EA_IN_METABOX != 0;
        for id in body.shared_ids.chunks_exact(4) {
            let id = u64::from(le32(id, 0));
            let start = area + 4 * id;
            let where_ = || format!("shared xattr {id} of nid {}", inode.nid);
            let rest = self.meta_bytes(in_metabox, start, 4, &where_)?;
            let len = 4 + usize::from(rest[0]) + usize::from(le16(rest, 2));
            let bytes = self.meta_bytes(in_metabox, start, len, &where_)?;
            let (xattr, _) = self.entry(bytes, 0, true, &where_)?;
            if xattr.is_known() && visit(xattr) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Every xattr of `inode`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for malformed or out-of-image entries.
    pub fn xattrs(&self, inode: &Inode) -> Result<Vec<Xattr<'_>>, Error> {
        let mut all = Vec::new();
        self.visit_xattrs(inode, |x| {
            all.push(x);
            false
        })?;
        Ok(all)
    }

    /// Looks up one xattr the way the kernel's `erofs_getxattr` does: no
    /// ibody means absent; then, with `use_filter` and the feature on, the
    /// name filter may answer "absent" before any entry is read.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a name in no erofs namespace;
    /// [`Error::Corrupt`] for malformed xattrs.
    pub fn getxattr(&self, inode: &Inode, name: &str, use_filter: bool) -> Result<Lookup<'_>, Error> {
        self.getxattr_query(inode, &Query::new(name)?, use_filter)
    }

    /// [`getxattr`](Self::getxattr) of a prepared name (split and hashed
    /// once, for many inodes).
    ///
    /// # Errors
    /// As [`getxattr`](Self::getxattr).
    pub fn getxattr_query(&self, inode: &Inode, query: &Query, use_filter: bool) -> Result<Lookup<'_>, Error> {
        let Some(filter) = inode.name_filter else { return Ok(Lookup::Absent { filtered: false }) };
        if use_filter && self.sb.uses_xattr_filter() && !filter.may_contain_query(query) {
            return Ok(Lookup::Absent { filtered: true });
        }
        let (index, suffix) = (query.index, &query.suffix[..]);
        let mut value = None;
        self.visit_xattrs(inode, |x| {
            let hit = x.is(index, suffix);
            if hit {
                value = Some(x.value);
            }
            hit
        })?;
        Ok(value.map_or(Lookup::Absent { filtered: false }, Lookup::Found))
    }

    /// The filter `inode` should store, from its xattrs; `None` without an
    /// ibody.
    ///
    /// # Errors
    /// As [`xattrs`](Self::xattrs).
    pub fn computed_filter(&self, inode: &Inode) -> Result<Option<Filter>, Error> {
        if inode.xattr_icount == 0 {
            return Ok(None);
        }
        let mut present = 0u32;
        self.visit_xattrs(inode, |x| {
            // The hashed bytes are infix ++ suffix: hash them contiguously.
            let bit = if x.infix.is_empty() {
                xattr_filter::bit_of(x.base_index, x.suffix)
            } else {
                xattr_filter::bit_of(x.base_index, &[x.infix, x.suffix].concat())
            };
            present |= 1 << bit;
            false
        })?;
        Ok(Some(Filter(!present)))
    }
}

/// Reads the long prefix table.
pub(super) fn long_prefixes(image: &Image<'_>) -> Result<Vec<LongPrefix>, Error> {
    let sb = &image.sb;
    if sb.xattr_prefix_count == 0 {
        return Ok(Vec::new());
    }
    let plain = sb.feature_compat & super::superblock::COMPAT_PLAIN_XATTR_PFX != 0 || sb.packed_nid == 0;
    let mut at = sb.xattr_prefix_start as usize * 4;
    let table: std::borrow::Cow<'_, [u8]> = if plain {
        image.data.into()
    } else {
        // In the packed inode (compressed or not): each prefix is at most
        // 2 + 256 bytes, so the table is no longer than this.
        let packed = image.inode(sb.packed_nid)?;
        let table = image.read(&packed, at as u64, u64::from(sb.xattr_prefix_count) * 260)?;
        at = 0;
        table.into()
    };
    let mut prefixes = Vec::with_capacity(usize::from(sb.xattr_prefix_count));
    for i in 0..sb.xattr_prefix_count {
        let where_ = format!("long xattr prefix {i}");
        let len = table.get(at..at + 2).map(|b| usize::from(le16(b, 0)));
        let body = len.and_then(|len| table.get(at + 2..at + 2 + len));
        let body = body.ok_or_else(|| corrupt(&where_, format!("at byte {at} is outside its area")))?;
        let Some((&base_index, infix)) = body.split_first() else {
            return Err(corrupt(&where_, "empty".into()));
        };
        if xattr_filter::prefix_of(base_index).is_none() || infix.len() > xattr_filter::NAME_LEN_MAX {
            return Err(corrupt(&where_, format!("base index {base_index}, {}-byte infix", infix.len())));
        }
        prefixes.push(LongPrefix { base_index, infix: infix.to_vec() });
        at = (at + 2 + body.len()).next_multiple_of(4);
    }
    Ok(prefixes)
}
