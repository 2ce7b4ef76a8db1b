//! Durability on the volume: the operation boundary (`transaction` over
//! the undo log), commits to a ByteLog or the image's journal, syncs and
//! checkpoints, group commit,
//! data checksums kept in step with data writes, and PI offload. The
//! media these write are `store/`.

pub(crate) mod datasum;
pub(crate) mod fast_commit;
pub(crate) mod fast_commit_write;
pub(crate) mod group_sync;
pub(crate) mod journal;
pub(crate) mod journaled;
pub(crate) mod part_write;
pub(crate) mod pi;
pub(crate) mod redo;
pub(crate) mod stores;
pub(crate) mod undo;
