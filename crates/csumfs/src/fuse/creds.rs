//! The caller's credentials, judged as the kernel judges them where FUSE
//! does not pass the judgement along: a request names the caller's uid,
//! fsgid and pid, and `/proc/PID/status` its supplementary groups and
//! effective capabilities. The rules are pure functions over those facts;
//! `/proc` is read only when a rule needs it.

use crate::inode::table::NewInode;
use crate::volume::Caller;

/// `CAP_FSETID`: keeps set-ID bits through a write, and the set-group-ID
/// bit outside the file's group.
pub(super) const CAP_FSETID: u32 = 4;
/// `CAP_SYS_RESOURCE`: may take the reserved blocks, and change `chattr +j`.
pub(super) const CAP_SYS_RESOURCE: u32 = 24;

/// What `/proc/PID/status` says of a process.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ProcStatus {
    /// `Groups:`, the supplementary groups.
    pub(super) groups: Vec<u32>,
    /// `CapEff:`, the effective capabilities.
    pub(super) capabilities: u64,
}

impl ProcStatus {
    /// The fields of a status file's text (missing or unreadable ones empty).
    pub(super) fn parse(text: &str) -> ProcStatus {
        let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim();
        ProcStatus {
            groups: field("Groups:").split_whitespace().filter_map(|g| g.parse().ok()).collect(),
            capabilities: u64::from_str_radix(field("CapEff:"), 16).unwrap_or(0),
        }
    }

    /// Whether the groups hold `gid` or the capabilities `capability`.
    pub(super) fn has(&self, gid: Option<u32>, capability: u32) -> bool {
        gid.is_some_and(|gid| self.groups.contains(&gid)) || self.capabilities & 1 << capability != 0
    }
}

/// Whether process `pid` (of uid `uid`) is in supplementary group `gid` or
/// holds `capability`; a process gone before it is read is judged by its
/// uid alone (root: capable).
pub(super) fn in_group_or_has(pid: u32, uid: u32, gid: Option<u32>, capability: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(text) => ProcStatus::parse(&text).has(gid, capability),
        Err(_) => uid == 0,
    }
}

/// The owner of a new inode of `mode` made by (`uid`, `gid`) in a
/// directory of `dir_mode` and `dir_gid`, as the kernel's
/// `inode_init_owner`: the caller, with the directory's group when the
/// directory is set-group-ID — and a new directory keeps the bit too.
pub(super) fn new_inode_owner(dir_mode: u16, dir_gid: u32, mode: u16, uid: u32, gid: u32) -> NewInode {
    let mut new = NewInode { mode, uid, gid };
    if dir_mode & 0o2000 != 0 {
        new.gid = dir_gid;
        if mode & 0o170_000 == 0o040_000 {
            new.mode |= 0o2000;
        }
    }
    new
}

/// The set-ID bits a change takes off a file of `mode` (the kernel's
/// `setattr_should_drop_suidgid`, left to csumfs with KILLPRIV_V2): none
/// from a directory, from a file without them, or from a caller holding
/// `CAP_FSETID` unless `judged` (a write the kernel found its caller
/// without, or a chown, which takes them from anyone); else set-user-ID,
/// and set-group-ID when the file is group-executable or the caller is
/// outside its group without `CAP_FSETID`. The two judgements are asked
/// only when the rule needs them (each may read `/proc`).
pub(super) fn setid_bits_to_drop(
    mode: u16,
    is_dir: bool,
    judged: bool,
    holds_fsetid: impl FnOnce() -> bool,
    in_group_or_capable: impl FnOnce() -> bool,
) -> u16 {
    if is_dir || mode & 0o6000 == 0 || !judged && holds_fsetid() {
        return 0;
    }
    let group_bit_goes = mode & 0o2000 != 0 && (mode & 0o010 != 0 || !in_group_or_capable());
    mode & 0o4000 | if group_bit_goes { 0o2000 } else { 0 }
}

/// Whose allocations a request's are (`ext4_has_free_clusters`): the
/// reserved blocks' owner (`owner_uid`), a member of their group
/// (`owner_gid`, not root's) by the caller's own gid or its supplementary
/// groups, or a holder of `CAP_SYS_RESOURCE` may take them. `in_group_or_has`
/// (a `/proc` read) is asked only for a caller who is neither by uid nor gid.
pub(super) fn reserve_caller(
    uid: u32,
    gid: u32,
    (owner_uid, owner_gid): (u32, u32),
    in_group_or_has: impl FnOnce(Option<u32>) -> bool,
) -> Caller {
    let group = (owner_gid != 0).then_some(owner_gid);
    if uid == owner_uid || group == Some(gid) || in_group_or_has(group) {
        Caller::Privileged
    } else {
        Caller::Unprivileged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_file_gives_its_groups_and_effective_capabilities() {
        let text = "Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 1000 \nCapEff:\t0000000000000010\n";
        let status = ProcStatus::parse(text);
        assert_eq!(status, ProcStatus { groups: vec![4, 24, 1000], capabilities: 0x10 });
        assert!(status.has(Some(24), CAP_SYS_RESOURCE), "in group 24");
        assert!(status.has(None, CAP_FSETID), "bit 4 is CAP_FSETID");
        assert!(!status.has(Some(7), CAP_SYS_RESOURCE));
        assert_eq!(ProcStatus::parse("Name:\tx\n"), ProcStatus::default(), "fields missing: nothing held");
    }

    #[test]
    fn a_new_inode_takes_a_set_group_id_directorys_group() {
        let plain = new_inode_owner(0o755, 50, 0o100_644, 1000, 1000);
        assert_eq!((plain.uid, plain.gid, plain.mode), (1000, 1000, 0o100_644));
        let file = new_inode_owner(0o2775, 50, 0o100_644, 1000, 1000);
        assert_eq!((file.gid, file.mode), (50, 0o100_644), "a file takes the group, not the bit");
        let dir = new_inode_owner(0o2775, 50, 0o040_755, 1000, 1000);
        assert_eq!((dir.gid, dir.mode), (50, 0o042_755), "a directory takes both");
    }

    #[test]
    fn set_id_bits_go_as_the_kernel_drops_them() {
        let never = || -> bool { panic!("not asked") };
        let (yes, no) = (|| true, || false);
        assert_eq!(setid_bits_to_drop(0o100_644, false, false, never, never), 0, "no set-ID bits");
        assert_eq!(setid_bits_to_drop(0o046_755, true, true, never, never), 0, "a directory keeps them");
        assert_eq!(setid_bits_to_drop(0o106_755, false, false, yes, never), 0, "CAP_FSETID keeps them");
        assert_eq!(setid_bits_to_drop(0o106_755, false, true, never, yes), 0o6000, "judged: group-executable");
        assert_eq!(setid_bits_to_drop(0o106_745, false, false, no, yes), 0o4000, "in the group: set-group-ID stays");
        assert_eq!(setid_bits_to_drop(0o106_745, false, false, no, no), 0o6000, "outside the group: both go");
        assert_eq!(setid_bits_to_drop(0o102_745, false, false, no, yes), 0, "set-group-ID alone, in the group");
    }

    #[test]
    fn the_reserved_blocks_go_to_their_owner_group_or_capability() {
        let never = |_: Option<u32>| -> bool { panic!("not asked") };
        assert_eq!(reserve_caller(0, 0, (0, 0), never), Caller::Privileged, "root owns them by default");
        assert_eq!(reserve_caller(1000, 50, (0, 50), never), Caller::Privileged, "their group, by gid");
        assert_eq!(reserve_caller(1000, 1000, (0, 50), |g| g == Some(50)), Caller::Privileged);
        assert_eq!(
            reserve_caller(1000, 1000, (0, 0), |g| g.is_some()),
            Caller::Unprivileged,
            "root's group counts for no one"
        );
        assert_eq!(reserve_caller(1000, 1000, (0, 0), |_| false), Caller::Unprivileged);
    }
}
