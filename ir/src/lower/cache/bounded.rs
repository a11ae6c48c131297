//! Tiles over loops of symbolic extent, bounded by the sizes' `max`: how
//! far their copy runs and what they take at launch.

use super::super::region::leading_live;
use super::{Cx, Tile};
use crate::diag::Diagnostic;
use crate::index::Index;
use crate::schedule;

/// The elements of a tile spanned by loops of symbolic extent in one
/// dimension, with only unit dimensions before it, that the kernel uses at
/// run time: the reached extent times the padded rows after it.
pub(super) fn used_at_run_time(tile: &Tile) -> Option<Index> {
    let d = leading_live(&tile.live, &tile.size)?;
    let after: i64 = tile.padded[d + 1..].iter().product();
    Some(tile.live[d].clone()? * Index::c(after))
}

/// Where loops of symbolic extent span the tile in one dimension, with
/// only unit dimensions before it: the number of `vec` groups they reach
/// (the copy's trip count follows it). `None` where the tile is copied
/// whole, or guarded per dimension. Refuses what needs constant extents.
pub(super) fn live_groups(
    cx: &Cx,
    c: &schedule::Cache,
    tile: &Tile,
    vec: i64,
) -> Result<Option<Index>, Diagnostic> {
    let names: Vec<String> = cx.vars.iter().map(|v| v.name.clone()).collect();
    let Some(d) = tile.live.iter().position(Option::is_some) else {
        return Ok(None);
    };
    let err = |what: &str| {
        Diagnostic::new(
            c.span,
            format!(
                "`{}` stages a part spanned by loops of symbolic extent (dimension {d} reaches `{}` elements, up to {}), and {what}",
                c.name,
                tile.live[d]
                    .as_ref()
                    .map_or(String::new(), |l| l.display(&cx.k.size_names(), &names).to_string()),
                tile.size[d]
            ),
        )
        .hint("stage it in LDS (`shared`), once per iteration, or at a loop inside which every extent is constant")
    };
    if c.kind.local() {
        return Err(err("a register tile needs constant indices"));
    }
    if c.stages > 1 || c.prefetch {
        return Err(err(
            "`stages`/`prefetch` copy tiles of one constant shape ahead",
        ));
    }
    if leading_live(&tile.live, &tile.size) != Some(d) {
        return Ok(None);
    }
    let stride: i64 = tile.size[d + 1..].iter().product();
    let reached = tile.live[d].clone().expect("found above") * Index::c(stride);
    if !reached.known_divisor().is_multiple_of(vec as u64) {
        return Err(err(&format!(
            "`vec={vec}` needs the reached extent to be a multiple of {vec}"
        )));
    }
    Ok(Some(if vec > 1 {
        reached / Index::c(vec)
    } else {
        reached
    }))
}
