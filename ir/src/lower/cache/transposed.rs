//! `transpose=1` tiles: the last two dimensions swapped in LDS, so that a
//! matrix operand stored k-major (`B[k, j]`) is read k-contiguous, as AMD's
//! MFMA and WMMA fragments need.
//!
//! A thread copies `pack` consecutive rows of a column block at once
//! (4 of 8-bit, 2 of 16-bit elements), so that each column's rows go to
//! LDS as one 4-byte store rather than `pack` scattered ones. Unpadded
//! rows of whole 64-byte lines are also swizzled: 16-byte chunk `c` of
//! LDS row `b` (a column of the tensor) sits at `c ^ key(b)`, with
//! `key(b) = (b / d) ^ (b / (d * vec))` and `d` the LDS rows per
//! 128-byte line. The first term spreads the consecutive columns a
//! fragment read visits; the second the columns `vec` apart that one
//! pass of the copy writes. Counted on 32 banks of 4 bytes (gfx950's fp8
//! B tile, 128 x 128 bytes, 512 threads): no conflicts in the stores or
//! the 16-byte fragment reads, where 16 bytes of padding leave the
//! stores 8-way conflicted and the unpacked byte stores hit 2 banks.

use super::Tile;
use crate::index::{IOp, Index};
use crate::kernel::Expr;
use crate::lower::Stmt;

/// Bytes of a swizzled chunk: one 16-byte fragment read.
const CHUNK: i64 = 16;

/// How cache `c` lays out its tile of `size` (`esize`-byte elements):
/// the rows a thread packs ([`pack`]) and the swizzle ([`swizzle`]) of a
/// transposed tile copied through registers into LDS; `(1, None)` else.
pub(super) fn layout(
    c: &crate::schedule::Cache,
    size: &[i64],
    esize: i64,
) -> (i64, Option<(i64, i64, i64)>) {
    if !c.transpose || c.kind.write() || c.kind.local() || c.tma {
        return (1, None);
    }
    let vec = c.vec.max(1);
    let pack = pack(size, vec, esize);
    (pack, swizzle(size, c.pad, (vec, pack), esize))
}

/// The rows of the tensor's second-to-last dimension a thread copies
/// together into a transposed tile of `size` with `vec`-wide copies of
/// `esize`-byte elements: what fills a 4-byte word, where the tile's rows
/// divide into such packs; else 1.
pub(super) fn pack(size: &[i64], vec: i64, esize: i64) -> i64 {
    let n = size.len();
    let p = 4 / esize.max(1);
    if n < 2 || vec < 2 || p < 2 || size[n - 2] % p != 0 {
        return 1;
    }
    p
}

/// The swizzle of a packed transposed tile of `size` (unpadded, `pad`
/// 0) copied `vec` elements at a time: (elements per chunk, LDS rows per
/// 128-byte line, `vec`), where an LDS row (the tensor's second-to-last
/// dimension) is whole 64-byte lines.
pub(super) fn swizzle(
    size: &[i64],
    pad: i64,
    (vec, pack): (i64, i64),
    esize: i64,
) -> Option<(i64, i64, i64)> {
    let n = size.len();
    let row = size[n - 2] * esize;
    if pack < 2 || pad != 0 || row % 64 != 0 {
        return None;
    }
    Some((CHUNK / esize, (128 / row).max(1), vec))
}

/// Element `(a, b)` (`a` the tensor's second-to-last dimension, `b` its
/// last) of a swizzled transposed tile: `a` with its chunk permuted by
/// `b`. A constant part of `a` that stays within its chunk is added
/// after the swizzle, so the back end still sees one fragment's elements
/// at consecutive addresses and merges their reads.
pub(super) fn swizzled_row(
    a: &Index,
    b: &Index,
    (chunk, d, vec): (i64, i64, i64),
    row: i64,
) -> Index {
    let chunks = row / chunk;
    let (a, off) = a.split_aligned(chunk);
    let key = Index::bin(
        IOp::Xor,
        b.clone() / Index::c(d),
        b.clone() / Index::c(d * vec),
    ) % Index::c(chunks);
    let c = Index::bin(IOp::Xor, a.clone() / Index::c(chunk), key);
    c * Index::c(chunk) + a % Index::c(chunk) + Index::c(off)
}

/// The stores of a thread's `pack` rows of `vec` elements (`staged(e,
/// r)`: the `e`-th along the tensor's last dimension of row `r`, from
/// offsets `offs`) into transposed tile `id`: column by column, each
/// column's `pack` rows adjacent, so that they merge into one store.
pub(super) fn put(
    tile: &Tile,
    id: u32,
    offs: &[Index],
    vec: i64,
    staged: &dyn Fn(i64, i64) -> Expr,
) -> Vec<Stmt> {
    let n = offs.len();
    let mut out = Vec::new();
    for e in 0..vec {
        for r in 0..tile.pack {
            let mut o = offs.to_vec();
            o[n - 1] = o[n - 1].clone() + Index::c(e);
            o[n - 2] = o[n - 2].clone() + Index::c(r);
            out.push(Stmt::SharedStore {
                shared: id,
                index: tile.flat(&o),
                value: staged(e, r),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Most lanes of one LDS pass that hit one bank at different words
    /// (32 banks of 4 bytes): each access `(byte address, bytes)`.
    fn ways(accesses: &[(i64, i64)]) -> usize {
        let mut banks: std::collections::HashMap<i64, std::collections::HashSet<i64>> =
            Default::default();
        for &(at, bytes) in accesses {
            for word in at / 4..(at + bytes) / 4 {
                banks.entry(word % 32).or_default().insert(word);
            }
        }
        banks.values().map(|w| w.len()).max().unwrap_or(0)
    }

    /// gfx950's fp8 B tile as the default GEMM stages it (k 128 by n 128
    /// bytes, 512 threads copying 8 bytes of 4 rows each): the swizzled
    /// layout's 4-byte stores (32 lanes a pass) are at most 2-way
    /// conflicted and the 16-byte fragment reads (8 lanes a pass, 16
    /// consecutive columns from one k) not at all, where the padded
    /// layout's stores are 16-way. The addresses come from
    /// [`swizzled_row`]'s index expressions, evaluated.
    #[test]
    fn the_swizzle_spreads_packed_stores_and_fragment_reads_over_the_banks() {
        let (k, n, vec, pack, threads) = (128i64, 128i64, 8i64, 4i64, 512i64);
        let sw = swizzle(&[k, n], 0, (vec, pack), 1).expect("a swizzled tile");
        let at = |a: i64, b: i64, swizzled: bool| -> i64 {
            match swizzled {
                true => {
                    let row = swizzled_row(&Index::c(a), &Index::c(b), sw, k);
                    b * k + row.eval(&[], &[]).expect("constant")
                }
                false => b * (k + 16) + a,
            }
        };
        for swizzled in [true, false] {
            let groups = k / pack * (n / vec);
            let mut stores = 0;
            for pass in 0..groups / threads {
                for half in 0..threads / 32 {
                    for e in 0..vec {
                        let lanes: Vec<(i64, i64)> = (0..32)
                            .map(|l| {
                                let g = pass * threads + half * 32 + l;
                                let (col, row) = ((g % (n / vec)) * vec + e, g / (n / vec) * pack);
                                (at(row, col, swizzled), 4)
                            })
                            .collect();
                        stores = stores.max(ways(&lanes));
                    }
                }
            }
            let mut reads = 0;
            for first in (0..n).step_by(8) {
                for chunk in (0..k).step_by(16) {
                    let lanes: Vec<(i64, i64)> = (0..8)
                        .map(|l| (at(chunk, first + l, swizzled), 16))
                        .collect();
                    reads = reads.max(ways(&lanes));
                }
            }
            match swizzled {
                true => assert!(
                    stores <= 2 && reads == 1,
                    "swizzled: {stores}-way stores, {reads}-way reads"
                ),
                false => assert!(stores >= 8, "padded: {stores}-way stores"),
            }
        }
    }

    /// A fragment's elements stay consecutive after the swizzle: element
    /// `a + e` of a 16-element chunk is `a`'s place plus `e`, so the back
    /// end merges the reads, and every place is distinct.
    #[test]
    fn a_chunk_stays_whole_and_the_places_are_a_permutation() {
        let (k, n) = (128i64, 64i64);
        let sw = swizzle(&[k, n], 0, (8, 4), 1).expect("a swizzled tile");
        let mut seen = std::collections::HashSet::new();
        for b in 0..n {
            for a in 0..k {
                let at = swizzled_row(&Index::c(a), &Index::c(b), sw, k)
                    .eval(&[], &[])
                    .unwrap();
                let first = swizzled_row(&Index::c(a / 16 * 16), &Index::c(b), sw, k)
                    .eval(&[], &[])
                    .unwrap();
                assert_eq!(at, first + a % 16);
                assert!((0..k).contains(&at) && seen.insert(b * k + at));
            }
        }
        assert!(
            swizzle(&[k, n], 16, (8, 4), 1).is_none(),
            "padded rows are not swizzled"
        );
        assert!(
            swizzle(&[48, n], 0, (8, 4), 1).is_none(),
            "48-byte rows are not swizzled"
        );
    }
}
