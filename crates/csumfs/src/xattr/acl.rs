//! POSIX ACLs kept in step with the mode, as ext4 keeps them
//! (`fs/ext4/acl.c` over `fs/posix_acl.c`). Under FUSE with POSIX ACLs on,
//! the kernel caches and enforces ACLs but leaves these to the file system
//! (libfuse's `FUSE_CAP_POSIX_ACL`): setting an access ACL sets the mode's
//! permission bits from it, and an ACL the mode says exactly is not stored;
//! `chmod` rewrites the stored ACL's owner, mask (or group) and other
//! entries — else a named user keeps access a `chmod 600` meant to take
//! away; a new inode in a directory with a default ACL takes its
//! permissions from that ACL instead of the umask, a new directory the
//! default ACL too.
//!
//! The encodings are `format/acl.rs`.

use crate::error::Error;
use crate::format::acl::{Acl, ACCESS, DEFAULT};
use crate::inode::table::Inode;
use crate::volume::Volume;
use crate::xattr::write::XattrMode;

/// The ACLs a new inode takes from its directory's default ACL
/// ([`Volume::acl_create`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InheritedAcls {
    access: Option<Acl>,
    default: Option<Acl>,
}

impl Volume {
    /// The ACL `index` ([`ACCESS`] or [`DEFAULT`]) of `inode`, if it has one.
    fn acl(&self, inode: &Inode, index: u8) -> Result<Option<Acl>, Error> {
        let entries = self.entries(inode)?;
        let Some(entry) = entries.iter().find(|e| e.index == index && e.suffix.is_empty()) else {
            return Ok(None);
        };
        Acl::from_disk(&entry.value, inode.ino)
    }

    /// `setxattr` of an ACL name (`ext4_set_acl`): `value` in the VFS
    /// encoding; the create/replace flags do not apply, as for the
    /// kernel's ACL handlers. An access ACL sets the mode's permission
    /// bits and is dropped when the mode says it all; a default ACL is for
    /// directories only (`EACCES` elsewhere, unless empty). Symlinks take
    /// none (`EOPNOTSUPP`, as ext4's have no ACL operations). `kill_sgid`:
    /// an access ACL also clears the set-group-ID bit (a caller outside the
    /// file's group, without `CAP_FSETID`).
    pub(crate) fn set_acl(&mut self, inode: Inode, index: u8, value: &[u8], kill_sgid: bool) -> Result<Inode, Error> {
        if inode.is_symlink() {
            return Err(Error::Unsupported { feature: "ACLs on symlinks", remedy: "set the ACL of the target" });
        }
        let mut acl = Acl::from_vfs(value)?;
        if index == DEFAULT && !inode.is_dir() {
            return match acl {
                Some(_) => Err(Error::Io {
                    context: format!("inode {}: a default ACL on a non-directory", inode.ino),
                    source: std::io::Error::from_raw_os_error(libc::EACCES),
                }),
                None => Ok(inode),
            };
        }
        let mut inode = inode;
        if index == ACCESS {
            if let Some(given) = &acl {
                let (mut mode, equivalent) = given.equiv_mode(inode.mode);
                if equivalent {
                    acl = None;
                }
                if kill_sgid {
                    mode &= !0o2000;
                }
                if mode != inode.mode {
                    inode = self.set_mode_bits(&inode, mode)?;
                }
            }
        }
        self.store_acl(inode, index, acl.as_ref())
    }

    /// Stores `acl` as ACL `index` of `inode`, or removes it (`None`;
    /// nothing when there is none).
    fn store_acl(&mut self, inode: Inode, index: u8, acl: Option<&Acl>) -> Result<Inode, Error> {
        match acl {
            Some(acl) => self.set_xattr_entry(inode, index, &[], acl.to_disk(), XattrMode::Either),
            None => self.remove_xattr_entry(inode, index, &[]).map(|(inode, _)| inode),
        }
    }

    /// After a `chmod` (`posix_acl_chmod`): the access ACL, if any, takes
    /// the new permission bits — and is stored as `ext4_set_acl` stores
    /// one, so an ACL the mode now says exactly (no mask: one another tool
    /// stored) goes.
    pub(crate) fn chmod_acl(&mut self, inode: Inode) -> Result<Inode, Error> {
        if inode.is_symlink() {
            return Ok(inode);
        }
        match self.acl(&inode, ACCESS)? {
            Some(mut acl) => {
                acl.chmod(inode.mode);
                let (_, equivalent) = acl.equiv_mode(inode.mode);
                self.store_acl(inode, ACCESS, (!equivalent).then_some(&acl))
            }
            None => Ok(inode),
        }
    }

    /// `posix_acl_create`: the mode a new inode of `mode` (type and
    /// permission bits as asked, before the umask) gets in directory
    /// `dir`, and the ACLs it inherits — with no default ACL on `dir`,
    /// `mode` less `umask` and none; else the default ACL narrowed to
    /// `mode` (the umask does not apply), stored as its access ACL when
    /// the mode cannot say it, and a directory's default ACL too.
    /// Symlinks take nothing, and no umask: they are 0777. [`store_inherited_acls`](Self::store_inherited_acls)
    /// stores them once the inode exists.
    ///
    /// # Errors
    /// As [`inode`](Self::inode); a damaged ACL on `dir`.
    pub fn acl_create(&self, dir: u32, mode: u16, umask: u16) -> Result<(u16, InheritedAcls), Error> {
        if mode & 0o170_000 == 0o120_000 {
            return Ok((mode, InheritedAcls::default()));
        }
        let masked = mode & !(umask & 0o777);
        let dir = self.inode(dir)?;
        let Some(default) = self.acl(&dir, DEFAULT)? else {
            return Ok((masked, InheritedAcls::default()));
        };
        let (mut access, mut mode) = (default.clone(), mode);
        let needed = access.create_masq(&mut mode);
        let is_dir = mode & 0o170_000 == 0o040_000;
        Ok((mode, InheritedAcls { access: needed.then_some(access), default: is_dir.then_some(default) }))
    }

    /// Stores on new inode `ino` what [`acl_create`](Self::acl_create)
    /// said it inherits.
    ///
    /// # Errors
    /// As [`setxattr`](Self::setxattr).
    pub fn store_inherited_acls(&mut self, ino: u32, inherited: &InheritedAcls) -> Result<Inode, Error> {
        let mut inode = self.inode(ino)?;
        for (index, acl) in [(DEFAULT, &inherited.default), (ACCESS, &inherited.access)] {
            if let Some(acl) = acl {
                inode = self.set_xattr_entry(inode, index, &[], acl.to_disk(), XattrMode::Either)?;
            }
        }
        Ok(inode)
    }
}
