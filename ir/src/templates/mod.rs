//! Templates: compound constructs defined by ordinary stages of the
//! general language, each with a fast path beside that definition.
//!
//! A template's meaning is a stage the general language can already write
//! (a scan is the triangular reduction `sum(X[r, k], k)` over `k < c + 1`),
//! so the interpreter, every schedule and every back end give it that
//! meaning, and it is the fallback wherever the fast path refuses. What a
//! template adds, each in its own folder here:
//! - the **recogniser** ([`Template::recognise`]) that finds the template
//!   in a stage written without naming it and marks the stage as it —
//!   never changing what the stage computes, only which rule and steps
//!   apply to it;
//! - the kernel language's spelling of it (`cumsum(x, c)`), which builds
//!   the same marked stage;
//! - its schedule step, default rule and fast lowering.
//!
//! [`TEMPLATES`] is the registry; the front end asks it once per stage,
//! before the default rules run.

use crate::kernel::{Kernel, Stage};

pub mod scan;

/// A template: its name and how it is found in ordinary stages.
pub struct Template {
    /// The construct's name, as docs and `--explain` output call it.
    pub name: &'static str,
    /// Marks `stage` as this template where its reduction is the
    /// template's definition written out; `true` where it did. The stage
    /// computes exactly what it did before.
    pub recognise: fn(&Kernel, &mut Stage) -> bool,
}

/// Every template, in the order the recognisers are tried.
pub const TEMPLATES: [Template; 1] = [Template {
    name: "scan",
    recognise: scan::recognise,
}];

/// Marks `stage` as the first template that recognises it; its name.
pub fn recognise(k: &Kernel, stage: &mut Stage) -> Option<&'static str> {
    TEMPLATES
        .iter()
        .find(|t| (t.recognise)(k, stage))
        .map(|t| t.name)
}
