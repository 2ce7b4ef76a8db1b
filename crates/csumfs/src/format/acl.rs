//! POSIX ACLs as xattr values, in their two encodings: the VFS's
//! (version 2, 8-byte entries, what `getxattr` and `setxattr` carry) and
//! ext4's on disk (version 1; 4-byte entries for the owner, group, mask
//! and other, 8-byte ones for named users and groups). The kernel's
//! `fs/ext4/acl.h`.

use crate::error::Error;
use csumkit::le::{le16, le32};

const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// The id of an entry that names no one (and an id no one has).
const NO_ID: u32 = u32::MAX;
/// xattr name indexes of the access and the default ACL.
pub(crate) const ACCESS: u8 = 2;
pub(crate) const DEFAULT: u8 = 3;

/// One entry: tag, permission bits (rwx), user or group id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AclEntry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A POSIX ACL, its entries in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Acl(Vec<AclEntry>);

impl Acl {
    /// A `setxattr` value in the VFS encoding: `None` for an empty one
    /// (no bytes, or the header alone), which removes the ACL.
    ///
    /// # Errors
    /// As `posix_acl_from_xattr` and `posix_acl_valid`: `EINVAL` for a
    /// value shorter than its header, a length between entries, or
    /// entries out of order, repeated or missing; `EOPNOTSUPP` for another
    /// version.
    pub(crate) fn from_vfs(value: &[u8]) -> Result<Option<Acl>, Error> {
        if value.is_empty() {
            return Ok(None);
        }
        if value.len() < 4 {
            return Err(Error::Invalid(format!("{} bytes are not a POSIX ACL", value.len())));
        }
        if le32(value, 0) != 2 {
            return Err(Error::Unsupported {
                feature: "this POSIX ACL version",
                remedy: "the VFS encoding is version 2",
            });
        }
        if !(value.len() - 4).is_multiple_of(8) {
            return Err(Error::Invalid(format!("{} bytes are not a whole number of ACL entries", value.len())));
        }
        let entries: Vec<AclEntry> = value[4..]
            .chunks_exact(8)
            .map(|e| AclEntry { tag: le16(e, 0), perm: le16(e, 2), id: le32(e, 4) })
            .collect();
        if entries.is_empty() {
            return Ok(None);
        }
        let acl = Acl(entries);
        acl.check()?;
        Ok(Some(acl))
    }

    /// `posix_acl_valid`: owner, named users, group, named groups, mask,
    /// other — in that order, each single entry once, a mask when anything
    /// is named, permissions within rwx, ids someone can have.
    fn check(&self) -> Result<(), Error> {
        // States: the next entry may be the owner, a named user or the
        // group, a named group or the mask or other, other only, nothing.
        #[derive(PartialEq)]
        enum Next {
            Owner,
            Users,
            Groups,
            Other,
            End,
        }
        let (mut next, mut needs_mask) = (Next::Owner, false);
        let bad = |why: &str| Err(Error::Invalid(format!("POSIX ACL: {why}")));
        for e in &self.0 {
            if e.perm & !0o7 != 0 {
                return bad(&format!("permissions {:#o}", e.perm));
            }
            next = match (e.tag, &next) {
                (USER_OBJ, Next::Owner) => Next::Users,
                (USER, Next::Users) | (GROUP, Next::Groups) if e.id != NO_ID => {
                    needs_mask = true;
                    continue;
                }
                (GROUP_OBJ, Next::Users) => Next::Groups,
                (MASK, Next::Groups) => Next::Other,
                (OTHER, Next::Other) => Next::End,
                (OTHER, Next::Groups) if !needs_mask => Next::End,
                _ => return bad(&format!("entry tag {:#x} out of place, repeated or naming no one", e.tag)),
            };
        }
        if next == Next::End {
            Ok(())
        } else {
            bad("the owner, group and other entries are required (and a mask with named entries)")
        }
    }

    /// An ACL as ext4 stores it; `None` for the header alone, which the
    /// kernel reads as no ACL (`ENODATA`).
    ///
    /// # Errors
    /// `EINVAL`, as the kernel answers, for a value that is not one or an
    /// ACL `posix_acl_valid` refuses (e2fsck does not look inside ACLs).
    pub(crate) fn from_disk(value: &[u8], ino: u32) -> Result<Option<Acl>, Error> {
        let bad = |detail: String| Error::Invalid(format!("inode {ino}: stored ACL: {detail}"));
        if value.len() < 4 || le32(value, 0) != 1 {
            return Err(bad(format!("{} bytes, not an ext4 ACL (version 1)", value.len())));
        }
        let (mut entries, mut at) = (Vec::new(), 4);
        while at < value.len() {
            let short = value.get(at..at + 4).ok_or_else(|| bad(format!("truncated entry at {at}")))?;
            let (tag, perm) = (le16(short, 0), le16(short, 2));
            let (id, size) = match tag {
                USER | GROUP => {
                    let id = value.get(at + 4..at + 8).ok_or_else(|| bad(format!("truncated entry at {at}")))?;
                    (le32(id, 0), 8)
                }
                USER_OBJ | GROUP_OBJ | MASK | OTHER => (NO_ID, 4),
                other => return Err(bad(format!("tag {other:#x} at {at}"))),
            };
            entries.push(AclEntry { tag, perm, id });
            at += size;
        }
        if entries.is_empty() {
            return Ok(None);
        }
        let acl = Acl(entries);
        acl.check().map_err(|e| bad(e.to_string()))?;
        Ok(Some(acl))
    }

    /// The VFS encoding.
    pub(crate) fn to_vfs(&self) -> Vec<u8> {
        let mut out = 2u32.to_le_bytes().to_vec();
        for e in &self.0 {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// ext4's encoding.
    pub(crate) fn to_disk(&self) -> Vec<u8> {
        let mut out = 1u32.to_le_bytes().to_vec();
        for e in &self.0 {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            if matches!(e.tag, USER | GROUP) {
                out.extend_from_slice(&e.id.to_le_bytes());
            }
        }
        out
    }

    /// `posix_acl_equiv_mode`: `mode` with its permission bits from the
    /// ACL (the group's from the mask when there is one), and whether the
    /// mode says all the ACL does (no mask, nothing named).
    pub(crate) fn equiv_mode(&self, mode: u16) -> (u16, bool) {
        let (mut bits, mut equivalent) = (0u16, true);
        for e in &self.0 {
            match e.tag {
                USER_OBJ => bits |= (e.perm & 0o7) << 6,
                GROUP_OBJ => bits |= (e.perm & 0o7) << 3,
                OTHER => bits |= e.perm & 0o7,
                MASK => {
                    bits = (bits & !0o070) | (e.perm & 0o7) << 3;
                    equivalent = false;
                }
                _ => equivalent = false,
            }
        }
        ((mode & !0o777) | bits, equivalent)
    }

    /// `__posix_acl_chmod`: the owner, other and mask (the group when no
    /// mask) entries from `mode`'s permission bits.
    pub(crate) fn chmod(&mut self, mode: u16) {
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &mut self.0 {
            match e.tag {
                USER_OBJ => e.perm = (mode >> 6) & 0o7,
                OTHER => e.perm = mode & 0o7,
                MASK => e.perm = (mode >> 3) & 0o7,
                GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 0o7,
                _ => {}
            }
        }
    }

    /// `posix_acl_create_masq`: a directory's default ACL narrowed to a
    /// new inode's requested `mode`, and `mode` narrowed to it; whether
    /// the mode cannot say all of it (so it is stored).
    pub(crate) fn create_masq(&mut self, mode: &mut u16) -> bool {
        let mut bits = *mode & 0o777;
        let mut needed = false;
        let (mut group, mut mask) = (None, None);
        for (i, e) in self.0.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => {
                    e.perm &= bits >> 6;
                    bits &= (e.perm << 6) | !0o700;
                }
                OTHER => {
                    e.perm &= bits & 0o7;
                    bits &= e.perm | !0o007;
                }
                GROUP_OBJ => group = Some(i),
                MASK => {
                    mask = Some(i);
                    needed = true;
                }
                _ => needed = true,
            }
        }
        if let Some(i) = mask.or(group) {
            let e = &mut self.0[i];
            e.perm &= (bits >> 3) & 0o7;
            bits &= (e.perm << 3) | !0o070;
        }
        *mode = (*mode & !0o777) | (bits & 0o777);
        needed
    }
}
