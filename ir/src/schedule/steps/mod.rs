//! One module per schedule primitive: its parsing and checks (`parse`,
//! from the step's syntax to a typed [`StepKind`]) and what it does to the
//! loop nest (`apply`). [`PRIMITIVES`] is the registry: the step names
//! (and the "did you mean" of a misspelt one) come from it.
//!
//! A new primitive is a new module here, an entry in [`PRIMITIVES`], a
//! `StepKind` variant, and its arm in `State::apply` (which does not
//! compile until it has one).

use crate::diag::Diagnostic;
use crate::schedule::StepKind;
use crate::syntax::StepStmt;

pub mod attention;
pub mod bind;
pub mod cache;
pub mod compute_at;
pub mod compute_inline;
pub mod fuse;
pub mod mma;
pub mod occupancy;
pub mod privatize;
pub mod reorder;
pub mod scan;
pub mod split;
pub mod tile;
pub mod topk;
pub mod unroll;
pub mod vectorize;

/// A primitive: the name a schedule calls it by and its parser.
pub struct Primitive {
    pub name: &'static str,
    pub parse: fn(&StepStmt) -> Result<StepKind, Diagnostic>,
}

/// Every primitive, in the order the documentation lists them.
pub const PRIMITIVES: [Primitive; 18] = [
    Primitive {
        name: "split",
        parse: split::parse,
    },
    Primitive {
        name: "fuse",
        parse: fuse::parse,
    },
    Primitive {
        name: "reorder",
        parse: reorder::parse,
    },
    Primitive {
        name: "tile",
        parse: tile::parse,
    },
    Primitive {
        name: "bind",
        parse: bind::parse,
    },
    Primitive {
        name: "unroll",
        parse: unroll::parse,
    },
    Primitive {
        name: "vectorize",
        parse: vectorize::parse,
    },
    Primitive {
        name: "mma",
        parse: mma::parse,
    },
    Primitive {
        name: "occupancy",
        parse: occupancy::parse,
    },
    Primitive {
        name: "privatize",
        parse: privatize::parse,
    },
    Primitive {
        name: "scan",
        parse: scan::parse,
    },
    Primitive {
        name: "topk",
        parse: topk::parse,
    },
    Primitive {
        name: "rowwise",
        parse: attention::parse_rowwise,
    },
    Primitive {
        name: "flash",
        parse: attention::parse_flash,
    },
    Primitive {
        name: "compute_inline",
        parse: compute_inline::parse,
    },
    Primitive {
        name: "compute_at",
        parse: compute_at::parse,
    },
    Primitive {
        name: "cache_read",
        parse: cache::parse,
    },
    Primitive {
        name: "cache_write",
        parse: cache::parse,
    },
];

/// Helpers for the primitives' tests: a two-stage kernel (`T = A * 2`,
/// then `Y = T + 1` over `r`, `c`, with a reduction-free body) whose
/// second stage takes the schedule under test.
#[cfg(test)]
pub(crate) mod testing {
    use crate::schedule::LoopNest;

    /// The loop nest of the schedule, or the rendered error.
    pub fn nest(schedule: &[&str]) -> Result<LoopNest, String> {
        let steps: Vec<String> = schedule.iter().map(|s| format!("{s:?}")).collect();
        let src = format!(
            "[kernel]\nname = \"k\"\nsizes = [\"R\", \"C\"]\n\n[inputs]\nA = {{ dtype = \"f32\", shape = [\"R\", \"C\"] }}\n\n[[stage]]\ncompute = \"T[r, c] = A[r, c] * 2.0\"\nshape = [\"R\", \"C\"]\nschedule = [\"compute_inline()\"]\n\n[[stage]]\ncompute = \"Y[r, c] = T[r, c] + 1.0\"\nshape = [\"R\", \"C\"]\nschedule = [{}]\n",
            steps.join(", ")
        );
        let k = crate::parse_kernel("k.toml", &src).map_err(|e| e.render())?;
        Ok(k.stages[1].nest.clone().expect("scheduled"))
    }

    /// The names of the leaf loops, outermost first.
    pub fn order(n: &LoopNest) -> Vec<String> {
        n.order.iter().map(|v| n.var(*v).name.clone()).collect()
    }
}
