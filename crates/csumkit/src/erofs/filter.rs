//! Checking every inode's xattr name filter, and retrofitting filters onto
//! an image built without them (e.g. by mkfs.erofs 1.5).

use super::superblock::{Superblock, SUPER_OFFSET};
use super::Image;
use crate::xattr_filter::{Filter, FEATURE_COMPAT_XATTR_FILTER};
use crate::Error;

/// An inode whose stored filter differs from its xattrs' filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterMismatch {
    /// Its nid.
    pub nid: u64,
    /// Its first path.
    pub path: String,
    /// `h_name_filter` on media.
    pub stored: Filter,
    /// Recomputed from the xattr names.
    pub computed: Filter,
}

/// The result of [`Image::check_filters`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterReport {
    /// Inodes reachable from the root.
    pub inodes: usize,
    /// Of those, inodes with an xattr ibody (the ones that store a filter).
    pub with_ibody: usize,
    /// The superblock enables the filter (compat bit set, reserved byte 0).
    pub enabled: bool,
    /// Stored filters that differ from the recomputed ones.
    pub mismatches: Vec<FilterMismatch>,
}

/// The writes that give an image correct filters: see [`Image::plan_filters`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterRetrofit {
    /// (byte offset of `h_name_filter`, new value) for every filter that
    /// changes outside what the superblock checksum covers.
    pub filters: Vec<(u64, Filter)>,
    /// The new bytes from 1024 to [`Superblock::checksum_end`]: superblock
    /// with the feature bit and re-sealed checksum, and the filters of
    /// inodes stored there (the checksum covers them). `None` when none of
    /// it changes.
    ///
    /// [`Superblock::checksum_end`]: super::Superblock::checksum_end
    pub superblock_span: Option<Vec<u8>>,
    /// Inodes with an ibody.
    pub with_ibody: usize,
}

impl Image<'_> {
    /// Recomputes every reachable inode's filter and compares it with the
    /// stored one. On an image without the feature the stored words are
    /// not filters (older mkfs wrote zero), so they are reported only when
    /// `enabled` is true.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a damaged image.
    pub fn check_filters(&self) -> Result<FilterReport, Error> {
        let enabled = self.sb.uses_xattr_filter();
        let all = self.walk()?;
        let mut report = FilterReport { inodes: all.len(), with_ibody: 0, enabled, mismatches: Vec::new() };
        for (path, inode) in all {
            let (Some(stored), Some(computed)) = (inode.name_filter, self.computed_filter(&inode)?) else {
                continue;
            };
            report.with_ibody += 1;
            if enabled && stored != computed {
                report.mismatches.push(FilterMismatch { nid: inode.nid, path, stored, computed });
            }
        }
        Ok(report)
    }

    /// The writes that make every filter correct and turn the feature on.
    /// Filters outside the superblock checksum's span are written first:
    /// until the superblock bit is set the kernel ignores them, so a crash
    /// before the second step leaves a valid image. The span's changes (the
    /// superblock, and filters of inodes the checksum covers) go in one
    /// write.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a damaged image; [`Error::Invalid`] when
    /// `xattr_filter_reserved` is nonzero (the kernel would ignore filters).
    pub fn plan_filters(&self) -> Result<FilterRetrofit, Error> {
        if self.has_metabox() {
            // Its inodes are bytes of the metabox inode's (maybe compressed) data.
            return Err(Error::Invalid {
                what: "erofs image",
                detail: "filters of inodes kept in a metabox are not rewritten by this command".into(),
            });
        }
        if self.sb.xattr_filter_reserved != 0 {
            return Err(Error::Invalid {
                what: "erofs image",
                detail: format!(
                    "xattr_filter_reserved is {} (filters would be ignored)",
                    self.sb.xattr_filter_reserved
                ),
            });
        }
        let end = Superblock::checksum_end(self.sb.block_size);
        let mut head = self.bytes(0, end, &|| "superblock".into())?.to_vec();
        let mut head_changed = self.sb.feature_compat & FEATURE_COMPAT_XATTR_FILTER == 0;
        let mut plan = FilterRetrofit { filters: Vec::new(), superblock_span: None, with_ibody: 0 };
        for (_, inode) in self.walk()? {
            let (Some(stored), Some(computed)) = (inode.name_filter, self.computed_filter(&inode)?) else {
                continue;
            };
            plan.with_ibody += 1;
            if stored != computed {
                let at = inode.xattr_offset().expect("an inode with a filter has an ibody");
                let at_usize = at as usize;
                if at_usize + 4 <= end && at_usize >= SUPER_OFFSET {
                    head[at_usize..at_usize + 4].copy_from_slice(&computed.0.to_le_bytes());
                    head_changed = true;
                } else {
                    plan.filters.push((at, computed));
                }
            }
        }
        if head_changed {
            self.sb.set_compat_and_seal(&mut head, FEATURE_COMPAT_XATTR_FILTER)?;
            plan.superblock_span = Some(head[SUPER_OFFSET..].to_vec());
        }
        Ok(plan)
    }
}

impl FilterRetrofit {
    /// True when the image already has the feature and correct filters.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty() && self.superblock_span.is_none()
    }

    /// Applies the plan to an in-memory image.
    pub fn apply(&self, image: &mut [u8]) {
        for &(at, filter) in &self.filters {
            image[at as usize..at as usize + 4].copy_from_slice(&filter.0.to_le_bytes());
        }
        if let Some(span) = &self.superblock_span {
            image[SUPER_OFFSET..SUPER_OFFSET + span.len()].copy_from_slice(span);
        }
    }

    /// Applies the plan to the image file in place: filters outside the
    /// superblock's span, `fdatasync`, then the span in one write, `fdatasync`.
    ///
    /// # Errors
    /// [`Error::Io`] when a write or sync fails.
    #[cfg(unix)]
    pub fn write_to(&self, file: &std::fs::File) -> Result<(), Error> {
        use std::os::unix::fs::FileExt;
        let io = |context: &str| {
            let context = context.to_string();
            move |source| Error::Io { context, source }
        };
        for &(at, filter) in &self.filters {
            file.write_all_at(&filter.0.to_le_bytes(), at).map_err(io("writing a filter"))?;
        }
        file.sync_data().map_err(io("syncing filters"))?;
        if let Some(span) = &self.superblock_span {
            file.write_all_at(span, SUPER_OFFSET as u64).map_err(io("writing the superblock"))?;
            file.sync_data().map_err(io("syncing the superblock"))?;
        }
        Ok(())
    }
}
