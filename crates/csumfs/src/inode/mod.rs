//! Inodes: reading them from the table and verifying their checksums,
//! attributes and flags (`setattr`, `chattr`), the immutable and
//! append-only rules, the orphan list, and migration to extents.

pub(crate) mod attr;
pub(crate) mod immutable;
pub(crate) mod migrate;
pub(crate) mod orphan;
pub(crate) mod table;
pub(crate) mod write;
