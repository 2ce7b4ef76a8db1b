//! The erofs xattr name filter: a 32-bit Bloom filter per inode,
//! stored in `h_name_filter` of the inode's xattr ibody header, that lets a
//! lookup of an absent xattr answer "absent" without reading any xattr.
//!
//! One hash per xattr: `xxh32(name after its short prefix, seed
//! 0x25BBE08F + prefix index) & 31`. For a name stored under a long prefix
//! the hashed bytes are the long prefix's infix followed by the stored
//! suffix, and the index is the long prefix's base index, so the filter
//! depends only on the full name. Bits are stored inverted: a set bit means
//! "no xattr hashes here", so the all-zero filter of an image built before
//! the feature existed rules nothing out. The filter is used only when the
//! superblock has compat bit [`FEATURE_COMPAT_XATTR_FILTER`] set and
//! `xattr_filter_reserved` is zero, exactly as the kernel does.
//!
//! ```
//! use csumkit::xattr_filter::Filter;
//! let filter = Filter::from_names(["user.mime_type", "security.selinux"])?;
//! assert!(filter.may_contain("user.mime_type")?);
//! assert!(!filter.may_contain("system.posix_acl_access")?); // hashes to an empty bit
//! # Ok::<(), csumkit::Error>(())
//! ```

use crate::Error;
use xxhash_rust::xxh32::xxh32;

/// `EROFS_XATTR_FILTER_SEED`.
pub const SEED: u32 = 0x25BB_E08F;
/// `EROFS_XATTR_FILTER_BITS`: one 32-bit word.
pub const BITS: u32 = 32;
/// `EROFS_FEATURE_COMPAT_XATTR_FILTER` in the superblock's `feature_compat`.
pub const FEATURE_COMPAT_XATTR_FILTER: u32 = 0x4;
/// Longest xattr name suffix erofs stores (`EROFS_NAME_LEN`).
pub const NAME_LEN_MAX: usize = 255;

/// The short prefixes of erofs (`e_name_index` 1..=6; 5, lustre, has no
/// handler in Linux and mkfs.erofs never writes it). The two POSIX ACL
/// names are whole names, not prefixes: their suffix is always empty.
pub const PREFIXES: [(u8, &str); 5] =
    [(1, "user."), (2, "system.posix_acl_access"), (3, "system.posix_acl_default"), (4, "trusted."), (6, "security.")];

/// The short prefix string of `index`, if erofs defines one.
pub fn prefix_of(index: u8) -> Option<&'static str> {
    PREFIXES.iter().find(|(i, _)| *i == index).map(|(_, p)| *p)
}

/// Splits a full xattr name into its short prefix index and the suffix
/// erofs hashes and stores (for the ACL names, the empty suffix).
///
/// # Errors
/// [`Error::Invalid`] for a name in no erofs namespace (mkfs.erofs skips
/// those; the kernel answers `EOPNOTSUPP`) or a suffix over 255 bytes.
pub fn split_name(name: &str) -> Result<(u8, &str), Error> {
    let invalid = |detail: String| Error::Invalid { what: "xattr name", detail };
    for (index, prefix) in PREFIXES {
        let Some(suffix) = name.strip_prefix(prefix) else { continue };
        let is_acl = matches!(index, 2 | 3);
        if is_acl && !suffix.is_empty() {
            continue;
        }
        if suffix.len() > NAME_LEN_MAX {
            return Err(invalid(format!(
                "{name:?}: suffix is {} bytes, erofs stores at most {NAME_LEN_MAX}",
                suffix.len()
            )));
        }
        return Ok((index, suffix));
    }
    Err(invalid(format!(
        "{name:?} is in no erofs xattr namespace (user., trusted., security., system.posix_acl_access/default)"
    )))
}

/// The filter bit of a name given as (short prefix index, suffix bytes).
pub fn bit_of(index: u8, suffix: &[u8]) -> u32 {
    xxh32(suffix, SEED.wrapping_add(u32::from(index))) & (BITS - 1)
}

/// A name prepared for many lookups: split and hashed once, so testing it
/// against each inode's filter is one load and one bit test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// Short prefix index.
    pub index: u8,
    /// Suffix after the short prefix (what erofs stores and hashes).
    pub suffix: Box<[u8]>,
    /// Its filter bit.
    pub bit: u32,
}

impl Query {
    /// Prepares a full xattr name.
    ///
    /// # Errors
    /// As [`split_name`].
    pub fn new(name: &str) -> Result<Query, Error> {
        let (index, suffix) = split_name(name)?;
        Ok(Query { index, suffix: suffix.as_bytes().into(), bit: bit_of(index, suffix.as_bytes()) })
    }
}

/// One inode's filter as stored on media (inverted bits).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Filter(pub u32);

impl Filter {
    /// The filter of an inode without xattrs: every bit says "absent".
    pub const EMPTY: Filter = Filter(u32::MAX);

    /// The filter of an inode with these (prefix index, suffix) pairs.
    pub fn from_split<'a>(names: impl IntoIterator<Item = (u8, &'a [u8])>) -> Filter {
        let present = names.into_iter().fold(0u32, |acc, (index, suffix)| acc | 1 << bit_of(index, suffix));
        Filter(!present)
    }

    /// The filter of an inode with these full xattr names.
    ///
    /// # Errors
    /// As [`split_name`].
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Filter, Error> {
        let split = names.into_iter().map(split_name).collect::<Result<Vec<_>, _>>()?;
        Ok(Filter::from_split(split.iter().map(|&(i, s)| (i, s.as_bytes()))))
    }

    /// False when the filter proves the name absent; true means "maybe".
    pub fn may_contain_query(self, query: &Query) -> bool {
        self.0 & (1 << query.bit) == 0
    }

    /// [`may_contain_query`](Self::may_contain_query) of a full name.
    ///
    /// # Errors
    /// As [`split_name`].
    pub fn may_contain(self, name: &str) -> Result<bool, Error> {
        Ok(self.may_contain_query(&Query::new(name)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_into_erofs_namespaces() {
        assert_eq!(split_name("user.x").unwrap(), (1, "x"));
        assert_eq!(split_name("system.posix_acl_access").unwrap(), (2, ""));
        assert_eq!(split_name("system.posix_acl_default").unwrap(), (3, ""));
        assert_eq!(split_name("trusted.overlay.opaque").unwrap(), (4, "overlay.opaque"));
        assert_eq!(split_name("security.capability").unwrap(), (6, "capability"));
        for bad in ["system.posix_acl_access.x", "system.foo", "lustre.x", "user", "", "os2.x"] {
            assert!(matches!(split_name(bad), Err(Error::Invalid { .. })), "{bad}");
        }
        let long = format!("user.{}", "n".repeat(256));
        assert!(split_name(&long).is_err());
        assert!(split_name(&long[..5 + 255]).is_ok());
    }

    #[test]
    fn filter_bits_are_inverted_and_one_per_name() {
        assert_eq!(Filter::from_names([]).unwrap(), Filter::EMPTY);
        let one = Filter::from_names(["user.x"]).unwrap();
        assert_eq!((!one.0).count_ones(), 1);
        assert!(one.may_contain("user.x").unwrap());
        // An all-zero filter (image made before the feature) rules nothing out.
        assert!(Filter(0).may_contain("security.capability").unwrap());
    }

    /// The bits mkfs.erofs 1.9.3 wrote for `/a.txt` of the shared test image
    /// (`tests/data/erofs/mixed.json`), against xxh32 here.
    #[test]
    fn bits_match_mkfs_erofs() {
        assert_eq!(bit_of(6, b"selinux"), 11);
        assert_eq!(bit_of(4, b"foo"), 13);
        assert_eq!(bit_of(1, b"empty"), 16);
        assert_eq!(bit_of(1, b"x"), 23);
        let names = ["security.selinux", "trusted.foo", "user.empty", "user.x"];
        assert_eq!(Filter::from_names(names).unwrap(), Filter(0xff7e_d7ff));
    }
}
