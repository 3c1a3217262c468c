//! The encoding of [`super::PackedGroupValues`]' keys: a key of up to 32 bytes
//! ([`Packed`]) with its hash, and the column kernels that write a batch's key columns into
//! packed keys (a column at a time) and build key columns back from stored keys.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, LargeStringArray, NullBufferBuilder, StringArray,
    StringViewArray, make_array,
};
use datafusion::arrow::buffer::{Buffer, MutableBuffer};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, internal_err};

use super::short_keys::BYTE_MASKS;

/// Bytes of a packed key.
pub(super) const PACKED_BYTES: usize = 32;

/// A key encoded in 32 bytes, aligned for word-wise hashing and comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(16))]
pub(super) struct Packed(pub [u8; PACKED_BYTES]);

impl Packed {
    pub(super) const ZERO: Packed = Packed([0; PACKED_BYTES]);

    pub(super) fn word(&self, i: usize) -> u64 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&self.0[i * 8..i * 8 + 8]);
        u64::from_le_bytes(word)
    }

    /// The table slot of this key in a table of `1 << bits` slots: the top bits of a
    /// Fibonacci multiply of the hash.
    #[inline]
    pub(super) fn slot(&self, bits: u32) -> usize {
        (self.hash().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// Two folded multiplies over the four words.
    pub(super) fn hash(&self) -> u64 {
        fold(
            self.word(0) ^ 0x243f_6a88_85a3_08d3,
            self.word(1) ^ 0x1319_8a2e_0370_7344,
        ) ^ fold(
            self.word(2) ^ 0xa409_3822_299f_31d0,
            self.word(3) ^ 0x082e_fa98_ec4e_6c89,
        )
    }
}

pub(super) fn fold(a: u64, b: u64) -> u64 {
    let product = (a as u128) * (b as u128);
    (product as u64) ^ ((product >> 64) as u64)
}

/// Types whose values are equal exactly when their bytes are.
pub(super) fn has_bitwise_equality(data_type: &DataType) -> bool {
    data_type.is_integer()
        || matches!(
            data_type,
            DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(_, _)
                | DataType::Duration(_)
                | DataType::Decimal128(_, _)
        )
}

/// The value bytes of a primitive array (`width` bytes per row, from its offset).
pub(super) fn fixed_bytes(array: &dyn Array, width: usize) -> Result<Buffer> {
    let data = array.to_data();
    let Some(buffer) = data.buffers().first() else {
        return internal_err!("primitive key column without a values buffer");
    };
    let start = data.offset() * width;
    let length = data.len() * width;
    if buffer.len() < start + length {
        return internal_err!("primitive key column shorter than its length");
    }
    Ok(buffer.slice_with_length(start, length))
}

pub(super) fn pack_fixed(
    array: &dyn Array,
    header: usize,
    width: usize,
    offset: usize,
    keys: &mut [Packed],
) -> Result<()> {
    let values = fixed_bytes(array, width)?;
    let nulls = array.logical_nulls();
    match (width, &nulls) {
        (8, None) => pack_fixed_valid::<8>(&values, header, offset, keys)?,
        (4, None) => pack_fixed_valid::<4>(&values, header, offset, keys)?,
        _ => {
            for (row, (key, value)) in keys.iter_mut().zip(values.chunks_exact(width)).enumerate() {
                if nulls.as_ref().is_none_or(|n| n.is_valid(row)) {
                    key.0[header] = 1;
                    key.0[offset..offset + width].copy_from_slice(value);
                }
            }
        }
    }
    Ok(())
}

/// A fixed-width column without nulls, `WIDTH` bytes per value.
pub(super) fn pack_fixed_valid<const WIDTH: usize>(
    values: &[u8],
    header: usize,
    offset: usize,
    keys: &mut [Packed],
) -> Result<()> {
    if offset + WIDTH > PACKED_BYTES || header >= PACKED_BYTES {
        return internal_err!("packed key layout out of bounds");
    }
    for (key, value) in keys.iter_mut().zip(values.chunks_exact(WIDTH)) {
        key.0[header] = 1;
        key.0[offset..offset + WIDTH].copy_from_slice(value);
    }
    Ok(())
}

/// The length of the longest string of a string column.
pub(crate) fn longest_string(array: &dyn Array) -> Result<usize> {
    Ok(match array.data_type() {
        DataType::Utf8 => max_length_i32(array.as_string::<i32>().value_offsets()),
        DataType::LargeUtf8 => max_length(array.as_string::<i64>().value_offsets()),
        DataType::Utf8View => {
            let views = array.as_string_view().views();
            views.iter().map(|v| *v as u32 as usize).max().unwrap_or(0)
        }
        other => return internal_err!("{other} is not a string key column"),
    })
}

/// As [`max_length`] in `i32` arithmetic, which vectorizes.
pub(crate) fn max_length_i32(offsets: &[i32]) -> usize {
    let ends = offsets.get(1..).unwrap_or_default();
    ends.iter()
        .zip(offsets)
        .map(|(end, start)| end.wrapping_sub(*start))
        .max()
        .unwrap_or(0)
        .max(0) as usize
}

pub(super) fn max_length<O: Copy + Into<i64>>(offsets: &[O]) -> usize {
    offsets
        .windows(2)
        .map(|w| (w[1].into() - w[0].into()) as usize)
        .max()
        .unwrap_or(0)
}

pub(super) fn pack_string(
    array: &dyn Array,
    header: usize,
    slot: usize,
    offset: usize,
    keys: &mut [Packed],
    long_rows: &mut [bool],
) -> Result<()> {
    let nulls = array.logical_nulls();
    match (array.data_type(), slot) {
        (DataType::Utf8, 8) => pack_utf8::<8>(array, header, offset, keys, long_rows),
        (DataType::Utf8, 12) => pack_utf8::<12>(array, header, offset, keys, long_rows),
        (DataType::Utf8, 16) => pack_utf8::<16>(array, header, offset, keys, long_rows),
        (DataType::Utf8View, 8) => pack_inline_views::<8>(array, header, offset, keys, long_rows),
        (DataType::Utf8View, 12) => pack_inline_views::<12>(array, header, offset, keys, long_rows),
        _ => {
            for (row, key) in keys.iter_mut().enumerate() {
                if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                    continue;
                }
                match string_value(array, row)? {
                    Some(bytes) if bytes.len() <= slot => {
                        key.0[header] = bytes.len() as u8 + 1;
                        key.0[offset..offset + bytes.len()].copy_from_slice(bytes);
                    }
                    Some(_) => long_rows[row] = true,
                    None => {}
                }
            }
        }
    }
    Ok(())
}

/// Utf8 into slots of `SLOT` (8, 12 or 16) bytes: each string is read as whole words masked
/// to its length (the last one cut to the slot), where the values buffer has the slot's
/// bytes from the string's start.
pub(super) fn pack_utf8<const SLOT: usize>(
    array: &dyn Array,
    header: usize,
    offset: usize,
    keys: &mut [Packed],
    long_rows: &mut [bool],
) {
    pub(super) const WORD: usize = 8;
    let strings = array.as_string::<i32>();
    let offsets = strings.value_offsets();
    let values = strings.values().as_slice();
    let nulls = strings.logical_nulls();
    if offset + SLOT > PACKED_BYTES || header >= PACKED_BYTES {
        long_rows.fill(true);
        return;
    }
    for (row, ((key, long), bounds)) in keys
        .iter_mut()
        .zip(long_rows.iter_mut())
        .zip(offsets.windows(2))
        .enumerate()
    {
        if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
            continue;
        }
        let (from, to) = (bounds[0] as usize, bounds[1] as usize);
        let length = to.saturating_sub(from);
        if length > SLOT {
            *long = true;
            continue;
        }
        key.0[header] = length as u8 + 1;
        match values.get(from..from + SLOT) {
            Some(bytes) => {
                for (word, chunk) in bytes.chunks(WORD).enumerate() {
                    let mut buffer = [0u8; WORD];
                    buffer[..chunk.len()].copy_from_slice(chunk);
                    let kept = length.saturating_sub(word * WORD).min(WORD);
                    let value = u64::from_le_bytes(buffer) & BYTE_MASKS[kept];
                    let at = offset + word * WORD;
                    key.0[at..at + chunk.len()]
                        .copy_from_slice(&value.to_le_bytes()[..chunk.len()]);
                }
            }
            None => {
                let bytes = values.get(from..to).unwrap_or_default();
                key.0[offset..offset + bytes.len()].copy_from_slice(bytes);
            }
        }
    }
}

/// Utf8View into slots of `SLOT` (at most 12) bytes: a string that fits is the inline part
/// of its view (a view holds a string of up to 12 bytes after its length), masked to its
/// length, so the data buffers are never read.
pub(super) fn pack_inline_views<const SLOT: usize>(
    array: &dyn Array,
    header: usize,
    offset: usize,
    keys: &mut [Packed],
    long_rows: &mut [bool],
) {
    const INLINE: usize = 12;
    let views = array.as_string_view().views();
    let nulls = array.logical_nulls();
    if SLOT > INLINE || offset + SLOT > PACKED_BYTES || header >= PACKED_BYTES {
        long_rows.fill(true);
        return;
    }
    for (row, ((key, long), &view)) in keys
        .iter_mut()
        .zip(long_rows.iter_mut())
        .zip(views.iter())
        .enumerate()
    {
        if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
            continue;
        }
        let length = view as u32 as usize;
        if length > SLOT {
            *long = true;
            continue;
        }
        key.0[header] = length as u8 + 1;
        // Bytes past the string are padding, zero by the format but masked all the same.
        let inline = (view >> 32) & ((1u128 << (8 * length)) - 1);
        key.0[offset..offset + SLOT].copy_from_slice(&inline.to_le_bytes()[..SLOT]);
    }
}

/// Row `row` of a Utf8, LargeUtf8 or Utf8View array, `None` if null.
pub(super) fn string_value(array: &dyn Array, row: usize) -> Result<Option<&[u8]>> {
    if array.is_null(row) {
        return Ok(None);
    }
    Ok(Some(match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row).as_bytes(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).as_bytes(),
        DataType::Utf8View => array.as_string_view().value(row).as_bytes(),
        other => return internal_err!("{other} is not a string key column"),
    }))
}

pub(super) fn build_fixed(
    values: &[Option<&[u8]>],
    width: usize,
    data_type: &DataType,
) -> Result<ArrayRef> {
    let mut buffer = MutableBuffer::new(values.len() * width);
    let mut nulls = NullBufferBuilder::new(values.len());
    for value in values {
        match value {
            Some(bytes) => {
                buffer.extend_from_slice(bytes);
                nulls.append_non_null();
            }
            None => {
                buffer.extend_zeros(width);
                nulls.append_null();
            }
        }
    }
    let data = ArrayData::builder(data_type.clone())
        .len(values.len())
        .add_buffer(Buffer::from(buffer))
        .nulls(nulls.finish())
        .build()?;
    Ok(make_array(data))
}

pub(super) fn build_string(values: &[Option<&[u8]>], data_type: &DataType) -> Result<ArrayRef> {
    let texts = match values
        .iter()
        .map(|v| v.map(std::str::from_utf8).transpose())
        .collect::<std::result::Result<Vec<Option<&str>>, _>>()
    {
        Ok(texts) => texts,
        Err(e) => return internal_err!("packed string key is not UTF-8: {e}"),
    };
    Ok(match data_type {
        DataType::Utf8 => Arc::new(StringArray::from(texts)),
        DataType::LargeUtf8 => Arc::new(LargeStringArray::from(texts)),
        DataType::Utf8View => Arc::new(StringViewArray::from(texts)),
        other => return internal_err!("{other} is not a string key column"),
    })
}
