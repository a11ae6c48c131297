//! `cache_read(..., swizzle=128)`: the tile's rows are 128 bytes, and the
//! 16-byte chunk `c` of row `r` sits at chunk `c ^ r % 8` of its row. With
//! the array on a 1024-byte boundary this is the layout Hopper's `wgmma`
//! reads through a descriptor in 128-byte swizzle mode (address bits 4-6
//! exclusive-or'd with bits 7-9), and a column's eight rows fall in eight
//! different bank groups, which is what `pad` is for elsewhere.
//!
//! A tile whose last dimension is longer than 128 bytes (B stored `[K, N]`
//! staged 64 f16 of k by 256 of n) is cut into 128-byte column blocks,
//! each a whole tile of the rows, one after the other: the layout `wgmma`
//! reads a transposed ("MN-major") operand in, 64 elements of n by 8 of k
//! per swizzle atom.
//!
//! `swizzle=64` and `swizzle=32` are the hardware's narrower modes: rows
//! of 64 (32) bytes, 4 (2) chunks each, chunk `c` of row `r` at
//! `c ^ (r / 2) % 4` (`c ^ (r / 4) % 2`) — address bits 4-5 exclusive-or'd
//! with 7-8 (bit 4 with bit 7) — the pattern repeating every 8 rows too.
//!
//! [`swizzled`] builds the index of an element; [`unswizzled`] takes one
//! apart again, for pass `matrix_descs`, which proves that a fragment's
//! reads are a whole operand in this layout.

use crate::index::{IOp, Index};

/// Bytes of a row in the widest swizzle (and of a column block).
pub(crate) const ROW_BYTES: i64 = 128;
/// The swizzles' row spans, in bytes.
pub(crate) const SPANS: [i64; 3] = [32, 64, 128];
/// Bytes of a chunk, the unit the swizzle permutes.
pub(crate) const CHUNK_BYTES: i64 = 16;

/// The parts of a swizzled tile's index.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Swizzled {
    /// The buffer's first element (`stages=`), a multiple of 8 rows.
    pub slot: Index,
    /// The row within the buffer and the element within the row.
    pub row: Index,
    pub col: Index,
    /// Elements per row and per chunk: their ratio (8, 4 or 2 chunks a
    /// row) is the swizzle's span (128, 64 or 32 bytes).
    pub width: i64,
    pub chunk: i64,
    /// Where the last dimension spans several 128-byte blocks: the
    /// elements between one block and the next (the rows times `width`).
    pub block: Option<i64>,
}

/// Row `row`'s chunk permutation: `row % 8` for 8 chunks a row, else
/// `(row / (8 / chunks)) % chunks`.
fn phase(row: &Index, chunks: i64) -> Index {
    let c = Index::c;
    if chunks == 8 {
        Index::bin(IOp::Mod, row.clone(), c(8))
    } else {
        Index::bin(
            IOp::Mod,
            Index::bin(IOp::Div, row.clone(), c(8 / chunks)),
            c(chunks),
        )
    }
}

/// `slot + row * width + (col / chunk ^ phase(row)) * chunk + col % chunk`;
/// with blocks, `col` is first split into `col / width` (times `block`)
/// and `col % width`.
pub(crate) fn swizzled(s: &Swizzled) -> Index {
    let c = Index::c;
    let (blk, col) = match s.block {
        None => (None, s.col.clone()),
        Some(b) => (
            Some(Index::bin(
                IOp::Mul,
                Index::bin(IOp::Div, s.col.clone(), c(s.width)),
                c(b),
            )),
            Index::bin(IOp::Mod, s.col.clone(), c(s.width)),
        ),
    };
    let chunk_ix = Index::bin(
        IOp::Xor,
        Index::bin(IOp::Div, col.clone(), c(s.chunk)),
        phase(&s.row, s.width / s.chunk),
    );
    let within = Index::bin(
        IOp::Add,
        Index::bin(IOp::Mul, chunk_ix, c(s.chunk)),
        Index::bin(IOp::Mod, col, c(s.chunk)),
    );
    let in_block = Index::bin(
        IOp::Add,
        Index::bin(IOp::Mul, s.row.clone(), c(s.width)),
        within,
    );
    let in_buffer = match blk {
        None => in_block,
        Some(b) => Index::Bin(IOp::Add, Box::new(b), Box::new(in_block)),
    };
    Index::bin(IOp::Add, s.slot.clone(), in_buffer)
}

/// The parts of an index [`swizzled`] built; `None` for any other index.
/// Each shape is tried whole (slot and blocks, blocks, slot, neither), so
/// a slot is never taken for a block or the other way round.
pub(crate) fn unswizzled(ix: &Index) -> Option<Swizzled> {
    let after_slot = match ix {
        Index::Bin(IOp::Add, slot, rest) => Some(((**slot).clone(), &**rest)),
        _ => None,
    };
    let with_slot = |f: fn(&Index) -> Option<Swizzled>| {
        after_slot.as_ref().and_then(|(slot, rest)| {
            f(rest).map(|s| Swizzled {
                slot: slot.clone(),
                ..s
            })
        })
    };
    with_slot(blocked)
        .or_else(|| blocked(ix))
        .or_else(|| with_slot(in_block))
        .or_else(|| in_block(ix))
}

/// `col / width * block + ` a block's index of `col % width`.
fn blocked(ix: &Index) -> Option<Swizzled> {
    use Index::Bin;
    let Bin(IOp::Add, blk, rest) = ix else {
        return None;
    };
    let Bin(IOp::Mul, q, b) = &**blk else {
        return None;
    };
    let (Bin(IOp::Div, col, w), Some(b)) = (&**q, b.as_const()) else {
        return None;
    };
    let s = in_block(rest)?;
    let Bin(IOp::Mod, col2, w2) = &s.col else {
        return None;
    };
    let same = col2 == col && w2.as_const() == Some(s.width) && w.as_const() == Some(s.width);
    same.then(|| Swizzled {
        col: (**col).clone(),
        block: Some(b),
        ..s
    })
}

/// The parts of `row * width + (col / chunk ^ phase(row)) * chunk + col % chunk`.
fn in_block(rest: &Index) -> Option<Swizzled> {
    use Index::Bin;
    let Bin(IOp::Add, rw, within) = rest else {
        return None;
    };
    let Bin(IOp::Mul, row, width) = &**rw else {
        return None;
    };
    let Bin(IOp::Add, scaled, low) = &**within else {
        return None;
    };
    let Bin(IOp::Mul, xor, chunk) = &**scaled else {
        return None;
    };
    let Bin(IOp::Xor, hi, rmod) = &**xor else {
        return None;
    };
    let (Bin(IOp::Div, col, c1), Bin(IOp::Mod, col2, c2)) = (&**hi, &**low) else {
        return None;
    };
    let (width, chunk) = (width.as_const()?, chunk.as_const()?);
    let chunks = width.checked_div(chunk)?;
    let same = SPANS.iter().any(|s| s / 16 == chunks)
        && **rmod == phase(row, chunks)
        && col2 == col
        && c1.as_const() == Some(chunk)
        && c2.as_const() == Some(chunk);
    same.then(|| Swizzled {
        slot: Index::c(0),
        row: (**row).clone(),
        col: (**col).clone(),
        width,
        chunk,
        block: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::VarId;

    #[test]
    fn the_layout_permutes_chunks_by_row_and_takes_apart_again() {
        let (r, k, s) = (
            Index::Var(VarId(0)),
            Index::Var(VarId(1)),
            Index::Var(VarId(2)),
        );
        for slot in [Index::c(0), s.clone() * Index::c(8192)] {
            let sw = Swizzled {
                slot,
                row: r.clone() + Index::c(8),
                col: k.clone(),
                width: 64,
                chunk: 8,
                block: None,
            };
            let ix = swizzled(&sw);
            assert_eq!(unswizzled(&ix), Some(sw.clone()));
            // Row 3, column 17 (chunk 2, element 1): chunk 2 ^ 3 = 1.
            let at = ix.eval(&[], &[3 - 8, 17, 1]).unwrap();
            let slot = if sw.slot == Index::c(0) { 0 } else { 8192 };
            assert_eq!(at, slot + 3 * 64 + 8 + 1);
        }
        assert_eq!(unswizzled(&(r * Index::c(64) + k)), None);
    }

    /// A 256-wide row in four 64-wide blocks of 16 rows each: column 130 of
    /// row 5 is block 2, column 2 (chunk 0 ^ 5 = 5).
    #[test]
    fn wide_rows_are_blocks_of_128_bytes() {
        let (r, k, s) = (
            Index::Var(VarId(0)),
            Index::Var(VarId(1)),
            Index::Var(VarId(2)),
        );
        for slot in [Index::c(0), s * Index::c(4096)] {
            let sw = Swizzled {
                slot,
                row: r.clone(),
                col: k.clone(),
                width: 64,
                chunk: 8,
                block: Some(16 * 64),
            };
            let ix = swizzled(&sw);
            assert_eq!(unswizzled(&ix), Some(sw.clone()));
            let base = if sw.slot == Index::c(0) { 0 } else { 4096 };
            assert_eq!(
                ix.eval(&[], &[5, 130, 1]).unwrap(),
                base + 2 * 1024 + 5 * 64 + 5 * 8 + 2
            );
        }
    }

    /// The narrower swizzles: 64-byte rows (32 f16, 4 chunks) permuted by
    /// `(r / 2) % 4`, 32-byte rows (16 f16, 2 chunks) by `(r / 4) % 2`;
    /// each takes apart again and permutes each row's chunks.
    #[test]
    fn sixty_four_and_thirty_two_byte_rows() {
        let (r, k, s) = (
            Index::Var(VarId(0)),
            Index::Var(VarId(1)),
            Index::Var(VarId(2)),
        );
        for (width, block) in [(32, None), (16, None), (32, Some(16 * 32))] {
            let sw = Swizzled {
                slot: s.clone() * Index::c(4096),
                row: r.clone(),
                col: k.clone(),
                width,
                chunk: 8,
                block,
            };
            let ix = swizzled(&sw);
            assert_eq!(unswizzled(&ix), Some(sw.clone()), "{width}");
            let chunks = width / 8;
            for row in 0..16 {
                let mut seen = std::collections::HashSet::new();
                for col in 0..width {
                    let at = ix.eval(&[], &[row, col, 0]).unwrap();
                    assert!((row * width..row * width + width).contains(&at));
                    assert!(seen.insert(at));
                    let want = ((col / 8) ^ ((row / (8 / chunks)) % chunks)) * 8 + col % 8;
                    assert_eq!(at - row * width, want, "row {row} col {col}");
                }
            }
        }
    }

    /// Every row is a permutation of its chunks: no two elements collide.
    #[test]
    fn each_row_holds_each_element_once() {
        let sw = Swizzled {
            slot: Index::c(0),
            row: Index::Var(VarId(0)),
            col: Index::Var(VarId(1)),
            width: 64,
            chunk: 8,
            block: None,
        };
        let ix = swizzled(&sw);
        let mut seen = std::collections::HashSet::new();
        for r in 0..16 {
            for c in 0..64 {
                let at = ix.eval(&[], &[r, c]).unwrap();
                assert!((r * 64..r * 64 + 64).contains(&at) && seen.insert(at));
            }
        }
    }
}
