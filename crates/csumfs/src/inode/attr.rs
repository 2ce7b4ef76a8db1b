//! Inode attributes a caller sets: mode bits, owner, times, size
//! (`chmod`, `chown`, `utimensat`, `truncate`), device nodes (`mknod`),
//! and inodes kept alive by open handles after their last name is gone.
//! Every change is spliced into the inode's checksum over the bytes it
//! moves.

use crate::error::Error;
use crate::format::flags::{dax_compatible, mask_flags, FLAGS_MODIFIABLE, FLAGS_SETTABLE, FLAG_NOCOW, SETTABLE_REMEDY};
use crate::format::inode::{encode_time, now, put_time, Timespec};
use crate::inode::immutable::{self, FLAG_IMMUTABLE};
use crate::inode::table::{Inode, NewInode, FLAG_EXTENTS};
use crate::volume::Volume;
use csumkit::ext4::feature_bits::COMPAT_HAS_JOURNAL;
use csumkit::ext4::fields::{
    I_ATIME, I_ATIME_EXTRA, I_BLOCK, I_CTIME, I_CTIME_EXTRA, I_FLAGS, I_GID, I_GID_HIGH, I_MODE, I_MTIME,
    I_MTIME_EXTRA, I_UID, I_UID_HIGH,
};
use csumkit::ext4::format::FLAG_JOURNAL_DATA;
use csumkit::le::{put16, put32};

/// What [`Volume::set_attr`] changes; `None` leaves a field as it is.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// Permission bits (`0o7777`; the type bits are kept).
    pub mode: Option<u16>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Size (regular files): see [`Volume::truncate`].
    pub size: Option<u64>,
    /// Last access.
    pub atime: Option<Timespec>,
    /// Last data change.
    pub mtime: Option<Timespec>,
    /// Last inode change; now when unset and anything else changes.
    pub ctime: Option<Timespec>,
    /// `atime`/`mtime` are the clock's now (`utimensat`'s `UTIME_NOW`, a
    /// `touch`), not times the caller chose: allowed on an append-only
    /// inode, as `notify_change` allows them.
    pub times_now: bool,
}

impl Volume {
    /// Changes the attributes `attr` names, then sets ctime (to now unless
    /// given).
    ///
    /// # Errors
    /// As [`inode`](Self::inode) and [`truncate`](Self::truncate).
    pub fn set_attr(&mut self, ino: u32, attr: SetAttr) -> Result<Inode, Error> {
        // A directory's inode is not in a fast commit (its replay rebuilds
        // only entries): its attributes need a full commit.
        if self.inode(ino)?.is_dir() {
            return self.set_attr_now(ino, attr);
        }
        self.fast_eligible(|v| v.set_attr_now(ino, attr))
    }

    /// [`set_attr`](Self::set_attr)'s work.
    fn set_attr_now(&mut self, ino: u32, attr: SetAttr) -> Result<Inode, Error> {
        let mut inode = self.inode(ino)?;
        let chosen = attr.mode.is_some()
            || attr.uid.is_some()
            || attr.gid.is_some()
            || attr.size.is_some()
            || !attr.times_now && (attr.atime.is_some() || attr.mtime.is_some());
        if inode.is_immutable() || chosen {
            immutable::may_modify(&inode, "no attribute change")?;
        }
        if let Some(size) = attr.size {
            inode = self.truncate(ino, size)?;
        }
        let ctime = encode_time(attr.ctime.unwrap_or_else(now));
        let time = |t: Option<Timespec>| t.map(encode_time);
        let (atime, mtime) = (time(attr.atime), time(attr.mtime));
        let inode = self.edit_inode(&inode, |r| {
            if let Some(mode) = attr.mode {
                let kept = u16::from_le_bytes([r[0], r[1]]) & 0o170_000;
                put16(r, I_MODE, kept | mode & 0o7777);
            }
            if let Some(uid) = attr.uid {
                put16(r, I_UID, uid as u16);
                put16(r, I_UID_HIGH, (uid >> 16) as u16);
            }
            if let Some(gid) = attr.gid {
                put16(r, I_GID, gid as u16);
                put16(r, I_GID_HIGH, (gid >> 16) as u16);
            }
            for (value, base, extra) in [
                (atime, I_ATIME, I_ATIME_EXTRA),
                (mtime, I_MTIME, I_MTIME_EXTRA),
                (Some(ctime), I_CTIME, I_CTIME_EXTRA),
            ] {
                if let Some((sec, e)) = value {
                    put_time(r, base, extra, (sec, e));
                }
            }
        })?;
        match attr.mode {
            Some(_) => self.chmod_acl(inode),
            None => Ok(inode),
        }
    }

    /// Sets `inode`'s permission bits (`0o7777`) to `mode`'s, and ctime to
    /// now.
    pub(crate) fn set_mode_bits(&mut self, inode: &Inode, mode: u16) -> Result<Inode, Error> {
        let (sec, e) = encode_time(now());
        self.edit_inode(inode, |r| {
            let kept = u16::from_le_bytes([r[0], r[1]]) & 0o170_000;
            put16(r, I_MODE, kept | mode & 0o7777);
            put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, e));
        })
    }

    /// `FS_IOC_SETFLAGS`: sets inode `ino`'s flags to `flags` (as `chattr`
    /// passes them: every user-visible flag, changed or not), as the
    /// kernel's ext4 does (`ext4_fileattr_set`, `ext4_ioctl_setflags`):
    /// visible flags no caller sets are left as they are; of the rest,
    /// immutable (`i`) and append-only (`a`) are enforced (immutable.rs;
    /// who may change them is the caller's check — `CAP_LINUX_IMMUTABLE`),
    /// synchronous updates (`S`, and `D` on a directory) kept
    /// (`is_synchronous`), noatime (`A`) true of csumfs anyway (it never
    /// updates atime on reads), and the others stored as marks ext4 keeps
    /// without acting on them: nodump (`d`), secure deletion (`s`),
    /// undelete (`u`), compression (`c`), no tail merging (`t`), top of a
    /// hierarchy (`T`, a hint to ext4's allocator), DAX (`x`, for a DAX
    /// mount of the image) and project inheritance (`P`). Data journaling
    /// (`j`) is stored on an image with a journal only, as ext4 stores it
    /// (its `CAP_SYS_RESOURCE` is the caller's check). Extents (`e`)
    /// converts the mapping as ext4 does (`migrate`). ctime becomes now.
    ///
    /// # Errors
    /// [`Error::Permission`] (`EPERM`) for a change to an immutable
    /// inode's other flags while it stays immutable
    /// (`ext4_ioctl_check_immutable`); [`Error::Unsupported`]
    /// (`EOPNOTSUPP`) for a flag ext4 does not show (`C`, no copy on write),
    /// one the inode's type cannot have (`ext4_mask_flags`: `D`, `T`, `P`
    /// on a file), DAX beside a flag it excludes, casefold (`F`: a feature
    /// csumfs lacks) and a block map ext4 would not make (`-e`); as
    /// `migrate`.
    pub fn set_flags(&mut self, ino: u32, flags: u32) -> Result<Inode, Error> {
        let inode = self.inode(ino)?;
        if flags & !FLAGS_USER_VISIBLE != 0 {
            let feature = if flags & FLAG_NOCOW != 0 { "the no-copy-on-write flag (C)" } else { "an inode flag" };
            return Err(Error::Unsupported { feature, remedy: "ext4 has no such flag (lsattr shows those it has)" });
        }
        let flags = flags & FLAGS_MODIFIABLE;
        if mask_flags(inode.mode, flags) != flags {
            return Err(Error::Unsupported {
                feature: "a flag of directories only (D, T, project inheritance, casefold)",
                remedy: "set it on a directory (ext4 refuses it on a file)",
            });
        }
        let changed = (flags ^ inode.flags) & FLAGS_MODIFIABLE;
        if inode.is_immutable() && flags & FLAG_IMMUTABLE != 0 && changed != 0 {
            return Err(Error::Permission(format!("inode {ino} is immutable: its flags stay")));
        }
        if let Some(&(_, name)) = FLAG_NAMES.iter().find(|(bit, _)| changed & bit != 0) {
            return Err(Error::Unsupported { feature: name, remedy: SETTABLE_REMEDY });
        }
        if !dax_compatible(inode.mode, inode.flags, flags) {
            return Err(Error::Unsupported {
                feature: "DAX (x) beside data journaling, inline data, encryption or verity",
                remedy: "ext4 refuses them together",
            });
        }
        // `chattr +e` / `-e`: the mapping changes first (if it is refused,
        // nothing has changed), then the other flags of the inode it leaves.
        let inode = if changed & FLAG_EXTENTS != 0 && (inode.is_file() || inode.is_dir() || inode.is_symlink()) {
            self.migrate(ino, flags & FLAG_EXTENTS != 0)?
        } else {
            inode
        };
        let flags = flags & !FLAG_EXTENTS | inode.flags & FLAG_EXTENTS;
        // Data journaling is stored on an image with a journal, as ext4
        // stores it (`ext4_change_inode_journal_flag` does nothing without
        // one); the ByteLog journals such a file's data (`store_file_data`).
        let journal = self.layout.features.compat & COMPAT_HAS_JOURNAL != 0;
        let settable = if journal { FLAGS_SETTABLE | FLAG_JOURNAL_DATA } else { FLAGS_SETTABLE };
        let new = inode.flags & !settable | flags & settable;
        let (sec, extra) = encode_time(now());
        self.edit_inode(&inode, |r| {
            put32(r, I_FLAGS, new);
            put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, extra));
        })
    }

    /// What a write takes from a file (the kernel's `file_remove_privs`,
    /// which FUSE leaves to csumfs with `FUSE_HANDLE_KILLPRIV_V2`): the
    /// set-ID bits `setid` (the writer's rule: `setattr_should_drop_suidgid`,
    /// judged by the caller) and the `security.capability` xattr, whoever
    /// writes. Nothing to take changes nothing.
    ///
    /// # Errors
    /// As [`set_attr`](Self::set_attr) and [`removexattr`](Self::removexattr)
    /// — `EPERM` on an append-only file with either to take, as ext4's
    /// `notify_change` refuses the write.
    pub fn remove_privileges(&mut self, ino: u32, setid: u16) -> Result<(), Error> {
        let (inode, setid) = (self.inode(ino)?, setid & 0o6000);
        if inode.mode & setid != 0 {
            self.set_attr(ino, SetAttr { mode: Some(inode.mode & 0o7777 & !setid), ..SetAttr::default() })?;
        }
        if self.getxattr(&inode, "security.capability").is_ok() {
            self.removexattr(ino, "security.capability")?;
        }
        Ok(())
    }

    /// Creates a device node, FIFO or socket `name` in `dir` (the type in
    /// `new.mode`), with device number `rdev` (Linux's encoding:
    /// major in bits 8–19, minor in 0–7 and 20–31).
    ///
    /// # Errors
    /// As [`create`](Self::create); [`Error::Invalid`] for a regular file,
    /// directory or symlink type.
    pub fn mknod(&mut self, dir: u32, name: &[u8], new: NewInode, rdev: u32) -> Result<Inode, Error> {
        if !matches!(new.mode & 0o170_000, 0o020_000 | 0o060_000 | 0o010_000 | 0o140_000) {
            return Err(Error::Invalid(format!("mknod of mode {:o}", new.mode)));
        }
        let inode = self.create(dir, name, new)?;
        if rdev == 0 || !matches!(new.mode & 0o170_000, 0o020_000 | 0o060_000) {
            return Ok(inode);
        }
        let (major, minor) = ((rdev >> 8) & 0xFFF, (rdev & 0xFF) | ((rdev >> 12) & 0xF_FF00));
        // As ext4_set_inode's device encoding: the old 16-bit form in
        // i_block[0] when it fits, else 0 there and the new form in i_block[1].
        let (old, new_form) = if major < 256 && minor < 256 {
            (major << 8 | minor, 0)
        } else {
            (0, (minor & 0xFF) | major << 8 | (minor & !0xFF) << 12)
        };
        self.edit_inode(&inode, |r| {
            put32(r, I_BLOCK, old);
            put32(r, I_BLOCK + 4, new_form);
        })
    }

    /// Keeps inode `ino` alive while a handle to it is open: when its last
    /// name goes, it is freed at the last [`unhold`](Self::unhold), not
    /// before (the kernel keeps it on its orphan list meanwhile).
    pub fn hold(&mut self, ino: u32) {
        *self.holds.entry(ino).or_insert(0) += 1;
    }

    /// Drops one hold; frees the inode if that was the last hold and it
    /// has no names left.
    ///
    /// # Errors
    /// As [`inode`](Self::inode).
    pub fn unhold(&mut self, ino: u32) -> Result<(), Error> {
        let Some(count) = self.holds.get_mut(&ino) else { return Ok(()) };
        *count -= 1;
        if *count > 0 {
            return Ok(());
        }
        self.holds.remove(&ino);
        if self.orphans.remove(&ino) {
            self.orphan_del(ino)?;
            let inode = self.inode(ino)?;
            if inode.links == 0 {
                return self.release(inode);
            }
        }
        Ok(())
    }

    /// Whether inode `ino` has open holds.
    pub(crate) fn is_held(&self, ino: u32) -> bool {
        self.holds.contains_key(&ino)
    }

    /// Frees every inode whose last name went while it was held (at
    /// unmount: the handles are gone).
    ///
    /// # Errors
    /// As [`inode`](Self::inode).
    pub fn release_orphans(&mut self) -> Result<(), Error> {
        self.holds.clear();
        for ino in std::mem::take(&mut self.orphans) {
            self.orphan_del(ino)?;
            let inode = self.inode(ino)?;
            if inode.links == 0 {
                self.release(inode)?;
            }
        }
        Ok(())
    }
}

/// `EXT4_FL_USER_VISIBLE`: the flags `FS_IOC_GETFLAGS` reports.
const FLAGS_USER_VISIBLE: u32 = 0x725B_DFFF;

/// The flags `FS_IOC_GETFLAGS` reports of `inode` (`ext4_fileattr_get`):
/// the user-visible ones, project inheritance but on a regular file.
pub(crate) fn visible_flags(inode: &Inode) -> u32 {
    let on_file = if inode.mode & 0o170_000 == 0o100_000 { 0x2000_0000 } else { 0 };
    inode.flags & FLAGS_USER_VISIBLE & !on_file
}
/// Flags a caller may ask to change that csumfs refuses to, by `chattr`'s
/// names.
const FLAG_NAMES: [(u32, &str); 1] = [(csumkit::ext4::format::FLAG_CASEFOLD, "the casefold flag (F)")];
