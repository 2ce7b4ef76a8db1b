//! Everything the volume keeps on media, below the volume itself: the
//! image's bytes and its lock, multiple-mount protection, the ByteLog
//! (medium, record codec, writer), the image's own journal as csumfs writes it, the undo log, the data checksum
//! sidecar and the PI device. Nothing here knows the `Volume`.

pub(crate) mod bytes;
pub(crate) mod crc_helper;
pub(crate) mod data_sums;
pub(crate) mod fc_bytelog;
pub(crate) mod image_journal;
pub(crate) mod image_lock;
pub(crate) mod journal_replay;
pub(crate) mod kernel_mounts;
pub(crate) mod log_writer;
pub(crate) mod logged_sums;
pub(crate) mod medium;
pub(crate) mod mmp;
pub(crate) mod pi_device;
pub(crate) mod private_map;
pub(crate) mod redo_log;
pub(crate) mod undo_log;
