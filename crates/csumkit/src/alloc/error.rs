//! What the block allocator refuses. Converts into [`crate::Error`]; a
//! range that is not the allocator's to free is `Error::BadBlockRange`,
//! shared with the other block maps.

/// A block allocator refusal.
#[allow(missing_docs)] // variant fields are named for what they hold
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// Not enough free blocks for a request.
    #[error("no space: {requested} blocks requested, {free} free")]
    NoSpace { requested: u64, free: u64 },
}
