//! How flash's 16-bit tiles lie in LDS.

use crate::index::{IOp, Index};
use crate::lower::cache::swizzle::{swizzled, Swizzled};

/// Padding of 16-bit tile rows: keeps each row on 16 bytes (ldmatrix,
/// vector fills) and spreads rows over banks.
pub(super) const PAD: i64 = 8;

/// How a 16-bit tile lies in LDS: rows `stride` elements apart, and
/// whether each row's 16-byte chunks are permuted by the row.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    pub stride: i64,
    swizzled: bool,
    /// Where a warpgroup instruction reads the tile through descriptors:
    /// `cache_read(..., swizzle=128)`'s layout ([`swizzled`]), 128-byte
    /// rows of 64 16-bit elements in column blocks of this many rows.
    blocks_of: Option<i64>,
    /// Stored column by column, this many columns of which the first
    /// `.1` hold the tensor's: element (row, col) at `col * stride + row`
    /// ([`Layout::by_columns`]).
    columns: Option<(i64, i64)>,
}

/// Padding of a column of [`Layout::by_columns`]: 4 elements (8 bytes)
/// keep each column's 4-element reads aligned, and 16 columns read at
/// one row fall on 16 distinct pairs of banks (columns `rows / 2 + 2`
/// words apart: for 32 or 64 rows, 16 distinct even banks).
pub(super) const COLUMN_PAD: i64 = 4;

impl Layout {
    /// Rows of `width` elements. Where `ldmatrix` reads the tile (NVIDIA,
    /// sm_75 and later; the copies are asynchronous from sm_80) and a row
    /// is whole 128-byte lines, the rows are unpadded and chunk `c` of row
    /// `r` sits at `c ^ r % 8`: every 128-byte line a copy fetches lands on one
    /// aligned LDS line, and the 8 rows `ldmatrix` reads at one column
    /// still fall in 8 bank groups. A padded row (what AMD keeps) starts
    /// 16 bytes further round the banks instead, but splits each fetched
    /// line over two LDS lines: the H100 profile of the padded kernel
    /// (bench/gpu/runs/h100-attention-profile-2) put its only bank
    /// conflicts, 2.6 wavefronts per ideal one, in those copies.
    pub(super) fn of(width: i64, swizzle: bool) -> Layout {
        if swizzle && width % 64 == 0 {
            Layout {
                stride: width,
                swizzled: true,
                blocks_of: None,
                columns: None,
            }
        } else {
            Layout {
                stride: width + PAD,
                swizzled: false,
                blocks_of: None,
                columns: None,
            }
        }
    }

    /// `rows` rows of `width` columns stored column by column, each column
    /// padded by [`COLUMN_PAD`]. AMD's V tile on the transposed MFMA view:
    /// P·V's B fragments are 4 consecutive keys of one head column, one
    /// 8-byte read here where rows would take four 2-byte reads and their
    /// packing; the copy writes each element on its own, consecutive lanes
    /// at consecutive keys of a column.
    /// `valid` of the columns are the tensor's (the rest pad the head
    /// dimension to the instruction).
    pub(super) fn by_columns(width: i64, valid: i64, rows: i64) -> Layout {
        Layout {
            stride: rows + COLUMN_PAD,
            swizzled: false,
            blocks_of: None,
            columns: Some((width, valid)),
        }
    }

    /// For a tile stored column by column, how many of its columns hold
    /// the tensor's.
    pub(super) fn valid_columns(&self) -> Option<i64> {
        self.columns.map(|c| c.1)
    }

    /// Elements of one buffer of a tile of `rows` rows.
    pub(super) fn len(&self, rows: i64) -> i64 {
        self.columns
            .map_or(rows * self.stride, |(w, _)| w * self.stride)
    }

    /// `rows` rows of `width` (a multiple of 64) 16-bit elements as a
    /// warpgroup instruction's descriptors read them.
    pub(super) fn for_descriptors(width: i64, rows: i64) -> Layout {
        Layout {
            stride: width,
            swizzled: true,
            blocks_of: Some(rows),
            columns: None,
        }
    }

    /// Where buffer `buf` of a tile of `rows` rows starts.
    pub(super) fn stage(&self, buf: Index, rows: i64) -> Index {
        buf * Index::c(self.len(rows))
    }

    /// The element at tile row `row`, column `col`, from `base`.
    pub(super) fn at(&self, base: Index, row: Index, col: Index) -> Index {
        if self.columns.is_some() {
            return base + col * Index::c(self.stride) + row;
        }
        if let Some(rows) = self.blocks_of {
            let width = 128 / 2;
            return swizzled(&Swizzled {
                slot: base,
                row,
                col,
                width,
                chunk: 8,
                block: (self.stride > width).then_some(rows * width),
            });
        }
        if !self.swizzled {
            return base + row * Index::c(self.stride) + col;
        }
        let chunk = Index::bin(
            IOp::Xor,
            col.clone() / Index::c(8),
            row.clone() % Index::c(8),
        );
        base + row * Index::c(self.stride) + chunk * Index::c(8) + col % Index::c(8)
    }
}
