//! Directories: lookups and listings (linear, hashed-tree and inline),
//! entry insertion and removal, and the namespace operations built on
//! them (create, link, rename, unlink, rmdir).

pub(crate) mod create;
pub(crate) mod htree;
pub(crate) mod inline;
pub(crate) mod namespace;
pub(crate) mod read;
pub(crate) mod remove;
pub(crate) mod write;
