//! Generate, verify and remap PI over many blocks, in an extended-LBA
//! buffer (metadata interleaved after each block's data, "DIF") or with the
//! metadata in a buffer of its own ("DIX").

use super::format::{PiFormat, PiType, Tuple};
use super::layout::Protection;
use crate::Error;
use std::fmt;

/// Which fields a verify compares (the NVMe PRCHK bits, plus the storage
/// tag check STC), and in which order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Checks {
    /// Compare the guard with the CRC of the block.
    pub guard: bool,
    /// Compare the application tag under [`Tags::app_tag_mask`].
    pub app_tag: bool,
    /// Compare the reference tag (never for type 3, where it is opaque).
    pub ref_tag: bool,
    /// Compare the storage tag under [`Tags::storage_tag_mask`].
    pub storage_tag: bool,
    /// Whose rules: the order fields are checked in, which are, and the
    /// type-3 escape.
    pub order: Order,
}

/// How a verifier walks one tuple. Both skip escaped blocks, by the
/// specification's rule ([`PiFormat::is_escape`]); they differ in the first
/// field reported when several are wrong, and in what they compare at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// SPDK's `spdk_dif_verify` (and the NVMe field order): guard,
    /// application tag, reference tag, storage tag, each when its check is
    /// on.
    #[default]
    Spdk,
    /// Linux's `t10_pi_verify` / `ext_pi_crc64_verify` (block/t10-pi.c):
    /// reference tag (types 1 and 2), then guard; the application and
    /// storage tags are never compared.
    Kernel,
}

impl Checks {
    /// Guard, application tag and reference tag (PRCHK = 111b); storage tag
    /// off; SPDK's order.
    pub const ALL: Checks =
        Checks { guard: true, app_tag: true, ref_tag: true, storage_tag: false, order: Order::Spdk };
    /// Nothing is compared.
    pub const NONE: Checks =
        Checks { guard: false, app_tag: false, ref_tag: false, storage_tag: false, order: Order::Spdk };
}

impl Default for Checks {
    fn default() -> Self {
        Checks::ALL
    }
}

/// The tag values of a command: what generate writes and verify expects.
/// The default is all zeros with the whole application tag compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tags {
    /// Reference tag of the first block: its LBA for type 1, the command's
    /// initial reference tag for type 2 (both + 1 per block, wrapping at the
    /// reference-tag width), an opaque value written to every block for type 3.
    pub ref_tag: u64,
    /// Application tag.
    pub app_tag: u16,
    /// Bits of the application tag that verify compares.
    pub app_tag_mask: u16,
    /// Storage tag (0 when the format has none).
    pub storage_tag: u64,
    /// Bits of the storage tag that verify compares (all by default).
    pub storage_tag_mask: u64,
}

impl Default for Tags {
    fn default() -> Self {
        Tags::for_lba(0)
    }
}

impl Tags {
    /// Tags for a command starting at `lba`: reference tag = LBA, application
    /// tag 0 compared in full.
    pub fn for_lba(lba: u64) -> Tags {
        Tags { ref_tag: lba, app_tag: 0, app_tag_mask: 0xFFFF, storage_tag: 0, storage_tag_mask: u64::MAX }
    }

    /// The tags of the block `blocks` further on (the reference tag moves on
    /// for types 1 and 2), for processing a long buffer in pieces.
    pub fn advanced(&self, format: PiFormat, blocks: u64) -> Tags {
        Tags { ref_tag: expected_ref_tag(format, self, blocks), ..*self }
    }
}

/// A PI field that can fail its check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PiField {
    /// The CRC.
    Guard,
    /// The application tag.
    AppTag,
    /// The reference tag.
    RefTag,
    /// The storage tag.
    StorageTag,
}

impl fmt::Display for PiField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PiField::Guard => "guard",
            PiField::AppTag => "application tag",
            PiField::RefTag => "reference tag",
            PiField::StorageTag => "storage tag",
        })
    }
}

/// One block that failed verification: which, why, and the two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Failure {
    /// Block index from the start of the buffer (the device adds the LBA).
    pub block: u64,
    /// The first field that did not match (guard, then app tag, then ref tag).
    pub field: PiField,
    /// What the field should hold.
    pub expected: u64,
    /// What it holds.
    pub actual: u64,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block {}: {} check failed: expected {:#x}, found {:#x}",
            self.block, self.field, self.expected, self.actual
        )
    }
}

fn expected_ref_tag(format: PiFormat, tags: &Tags, block: u64) -> u64 {
    match format.pi_type() {
        PiType::Type1 | PiType::Type2 => tags.ref_tag.wrapping_add(block) & format.ref_tag_mask(),
        PiType::Type3 => tags.ref_tag,
    }
}

fn check_tags(p: &Protection, tags: &Tags) -> Result<(), Error> {
    let format = p.format();
    if tags.ref_tag > format.ref_tag_mask() && format.pi_type() == PiType::Type3 {
        return Err(Error::Invalid {
            what: "reference tag",
            detail: format!("{:#x} is wider than {} bits", tags.ref_tag, format.ref_tag_bits()),
        });
    }
    if tags.storage_tag > format.storage_tag_mask() {
        return Err(Error::Invalid {
            what: "storage tag",
            detail: format!("{:#x} is wider than {} bits", tags.storage_tag, format.storage_tag_bits()),
        });
    }
    Ok(())
}

fn whole_blocks(len: usize, block_bytes: usize, what: &'static str) -> Result<usize, Error> {
    if !len.is_multiple_of(block_bytes) {
        return Err(Error::Invalid {
            what,
            detail: format!("{len} bytes is not a whole number of {block_bytes}-byte blocks"),
        });
    }
    Ok(len / block_bytes)
}

/// Compares one tuple with what it should hold; `None` when it passes or
/// is an escape.
fn check_tuple(p: &Protection, tuple: &Tuple, guard: u64, tags: &Tags, block: u64, checks: Checks) -> Option<Failure> {
    let format = p.format();
    if format.is_escape(tuple) {
        return None;
    }
    let fail = |field, expected, actual| Some(Failure { block, field, expected, actual });
    let expected_ref = expected_ref_tag(format, tags, block);
    if checks.order == Order::Kernel {
        if checks.ref_tag && format.pi_type() != PiType::Type3 && tuple.ref_tag != expected_ref {
            return fail(PiField::RefTag, expected_ref, tuple.ref_tag);
        }
        if checks.guard && tuple.guard != guard {
            return fail(PiField::Guard, guard, tuple.guard);
        }
        return None;
    }
    if checks.guard && tuple.guard != guard {
        return fail(PiField::Guard, guard, tuple.guard);
    }
    let mask = tags.app_tag_mask;
    if checks.app_tag && tuple.app_tag & mask != tags.app_tag & mask {
        return fail(PiField::AppTag, tags.app_tag as u64, tuple.app_tag as u64);
    }
    if checks.ref_tag && format.pi_type() != PiType::Type3 && tuple.ref_tag != expected_ref {
        return fail(PiField::RefTag, expected_ref, tuple.ref_tag);
    }
    if checks.storage_tag && (tuple.storage_tag ^ tags.storage_tag) & tags.storage_tag_mask != 0 {
        return fail(PiField::StorageTag, tags.storage_tag, tuple.storage_tag);
    }
    None
}

fn tuple_for(p: &Protection, guard: u64, tags: &Tags, block: u64) -> Tuple {
    Tuple {
        guard,
        app_tag: tags.app_tag,
        storage_tag: tags.storage_tag,
        ref_tag: expected_ref_tag(p.format(), tags, block),
    }
}

/// The guard of one interleaved block: its data and the metadata bytes
/// before the tuple are contiguous, so one CRC call covers them.
fn interleaved_guard(p: &Protection, block: &[u8]) -> u64 {
    p.format().guard().checksum(&block[..p.lba().data_bytes() + p.guarded_metadata_bytes()])
}

/// The guard of one block whose metadata is in a separate buffer: the two
/// CRCs are joined with `combine`, never by copying the bytes together.
fn separate_guard(p: &Protection, data: &[u8], metadata: &[u8]) -> u64 {
    let guard = p.format().guard();
    let data_crc = guard.checksum(data);
    match p.guarded_metadata_bytes() {
        0 => data_crc,
        n => guard.combine(data_crc, guard.checksum(&metadata[..n]), n as u64),
    }
}

/// Writes the PI of every block of an extended-LBA buffer (`data+meta`
/// per block).
pub fn generate(p: &Protection, buffer: &mut [u8], tags: &Tags) -> Result<(), Error> {
    check_tags(p, tags)?;
    let ext = p.lba().extended_bytes();
    whole_blocks(buffer.len(), ext, "extended-LBA buffer")?;
    let (format, at) = (p.format(), p.lba().data_bytes() + p.tuple_offset());
    for (i, block) in buffer.chunks_exact_mut(ext).enumerate() {
        let guard = interleaved_guard(p, block);
        format.encode(&tuple_for(p, guard, tags, i as u64), &mut block[at..at + format.tuple_bytes()]);
    }
    Ok(())
}

/// Writes the PI of every block into a separate metadata buffer (`meta`
/// bytes per block of `data`).
pub fn generate_separate(p: &Protection, data: &[u8], metadata: &mut [u8], tags: &Tags) -> Result<(), Error> {
    check_tags(p, tags)?;
    let blocks = separate_blocks(p, data.len(), metadata.len())?;
    let (format, at, md) = (p.format(), p.tuple_offset(), p.lba().metadata_bytes());
    for i in 0..blocks {
        let block_data = &data[i * p.lba().data_bytes()..][..p.lba().data_bytes()];
        let block_md = &mut metadata[i * md..][..md];
        let guard = separate_guard(p, block_data, block_md);
        format.encode(&tuple_for(p, guard, tags, i as u64), &mut block_md[at..at + format.tuple_bytes()]);
    }
    Ok(())
}

fn separate_blocks(p: &Protection, data_len: usize, metadata_len: usize) -> Result<usize, Error> {
    let blocks = whole_blocks(data_len, p.lba().data_bytes(), "data buffer")?;
    if metadata_len != blocks * p.lba().metadata_bytes() {
        return Err(Error::Invalid {
            what: "metadata buffer",
            detail: format!(
                "{metadata_len} bytes for {blocks} blocks; {} bytes expected ({} per block)",
                blocks * p.lba().metadata_bytes(),
                p.lba().metadata_bytes()
            ),
        });
    }
    Ok(blocks)
}

/// Verifies an extended-LBA buffer; the first failing block is the error
/// ([`Error::PiCheck`]).
pub fn verify(p: &Protection, buffer: &[u8], tags: &Tags, checks: Checks) -> Result<(), Error> {
    match first_failure(verify_each(p, buffer, tags, checks))? {
        Some(failure) => Err(Error::PiCheck(failure)),
        None => Ok(()),
    }
}

/// Verifies a data buffer against its separate metadata; the first failing
/// block is the error.
pub fn verify_separate(p: &Protection, data: &[u8], metadata: &[u8], tags: &Tags, checks: Checks) -> Result<(), Error> {
    match first_failure(verify_separate_each(p, data, metadata, tags, checks))? {
        Some(failure) => Err(Error::PiCheck(failure)),
        None => Ok(()),
    }
}

fn first_failure(mut failures: impl Iterator<Item = Result<Failure, Error>>) -> Result<Option<Failure>, Error> {
    failures.next().transpose()
}

/// Every failing block of an extended-LBA buffer, in order (an error item
/// only for a buffer that is not whole blocks or bad tags, and then alone).
pub fn verify_each<'a>(
    p: &'a Protection,
    buffer: &'a [u8],
    tags: &'a Tags,
    checks: Checks,
) -> impl Iterator<Item = Result<Failure, Error>> + 'a {
    let ext = p.lba().extended_bytes();
    let setup = check_tags(p, tags).and_then(|()| whole_blocks(buffer.len(), ext, "extended-LBA buffer"));
    let at = p.lba().data_bytes() + p.tuple_offset();
    let format = p.format();
    let blocks = match &setup {
        Ok(_) => buffer.chunks_exact(ext),
        Err(_) => buffer[..0].chunks_exact(ext),
    };
    setup.err().map(Err).into_iter().chain(blocks.enumerate().filter_map(move |(i, block)| {
        let tuple = format.decode(&block[at..at + format.tuple_bytes()]);
        let guard = if checks.guard && !format.is_escape(&tuple) { interleaved_guard(p, block) } else { 0 };
        check_tuple(p, &tuple, guard, tags, i as u64, checks).map(Ok)
    }))
}

/// Every failing block of a data buffer with separate metadata, in order.
pub fn verify_separate_each<'a>(
    p: &'a Protection,
    data: &'a [u8],
    metadata: &'a [u8],
    tags: &'a Tags,
    checks: Checks,
) -> impl Iterator<Item = Result<Failure, Error>> + 'a {
    let setup = check_tags(p, tags).and_then(|()| separate_blocks(p, data.len(), metadata.len()));
    let blocks = *setup.as_ref().unwrap_or(&0);
    let (format, at, md, db) = (p.format(), p.tuple_offset(), p.lba().metadata_bytes(), p.lba().data_bytes());
    setup.err().map(Err).into_iter().chain((0..blocks).filter_map(move |i| {
        let block_md = &metadata[i * md..][..md];
        let tuple = format.decode(&block_md[at..at + format.tuple_bytes()]);
        let guard = if checks.guard && !format.is_escape(&tuple) {
            separate_guard(p, &data[i * db..][..db], block_md)
        } else {
            0
        };
        check_tuple(p, &tuple, guard, tags, i as u64, checks).map(Ok)
    }))
}

/// How many blocks of an extended-LBA buffer carry escape tags, which
/// verify skips (whole blocks only; a partial last block is not counted).
pub fn count_escapes(p: &Protection, buffer: &[u8]) -> u64 {
    let (format, at) = (p.format(), p.lba().data_bytes() + p.tuple_offset());
    let escapes = buffer.chunks_exact(p.lba().extended_bytes());
    escapes.filter(|block| format.is_escape(&format.decode(&block[at..at + format.tuple_bytes()]))).count() as u64
}

/// How many blocks of a separate metadata buffer carry escape tags.
pub fn count_escapes_separate(p: &Protection, metadata: &[u8]) -> u64 {
    let (format, at) = (p.format(), p.tuple_offset());
    let escapes = metadata.chunks_exact(p.lba().metadata_bytes());
    escapes.filter(|md| format.is_escape(&format.decode(&md[at..at + format.tuple_bytes()]))).count() as u64
}

/// Whether `checks` compares anything at all for blocks of `format` with
/// `tags` (the reference tag is opaque for type 3; a mask of zero compares
/// no bit; the kernel's rules never compare the application or storage tag).
pub fn checks_anything(format: PiFormat, tags: &Tags, checks: Checks) -> bool {
    let spdk = checks.order == Order::Spdk;
    checks.guard
        || (spdk && checks.app_tag && tags.app_tag_mask != 0)
        || (checks.ref_tag && format.pi_type() != PiType::Type3)
        || (spdk && checks.storage_tag && tags.storage_tag_mask & format.storage_tag_mask() != 0)
}

/// Rewrites reference tags from one numbering to another, as the Linux
/// block layer does between a partition's and the disk's LBAs: every block
/// of types 1 and 2 whose tag is `from + i` becomes `to + i`; escapes and
/// tags that do not match are left alone. The guard does not cover the tag,
/// so nothing else changes. Returns the number of tuples rewritten.
pub fn remap_ref_tags(p: &Protection, buffer: &mut [u8], from: u64, to: u64) -> Result<u64, Error> {
    let ext = p.lba().extended_bytes();
    whole_blocks(buffer.len(), ext, "extended-LBA buffer")?;
    let at = p.lba().data_bytes() + p.tuple_offset();
    Ok(remap(p, buffer.chunks_exact_mut(ext).map(|b| &mut b[at..at + p.format().tuple_bytes()]), from, to))
}

/// [`remap_ref_tags`] for a separate metadata buffer.
pub fn remap_ref_tags_separate(p: &Protection, metadata: &mut [u8], from: u64, to: u64) -> Result<u64, Error> {
    let md = p.lba().metadata_bytes();
    whole_blocks(metadata.len(), md, "metadata buffer")?;
    let at = p.tuple_offset();
    Ok(remap(p, metadata.chunks_exact_mut(md).map(|b| &mut b[at..at + p.format().tuple_bytes()]), from, to))
}

fn remap<'a>(p: &Protection, tuples: impl Iterator<Item = &'a mut [u8]>, from: u64, to: u64) -> u64 {
    let format = p.format();
    if format.pi_type() == PiType::Type3 {
        return 0;
    }
    let mut remapped = 0;
    for (i, bytes) in tuples.enumerate() {
        let mut tuple = format.decode(bytes);
        let virt = from.wrapping_add(i as u64) & format.ref_tag_mask();
        if !format.is_escape(&tuple) && tuple.ref_tag == virt {
            tuple.ref_tag = to.wrapping_add(i as u64) & format.ref_tag_mask();
            format.encode(&tuple, bytes);
            remapped += 1;
        }
    }
    remapped
}
