//! The crate's entry points: the phases given every template
//! ([`crate::templates`]). The phases name no template, so a template's
//! folder may use them; here, above both, they meet.

use crate::diag::{Diagnostic, KernelError};
use crate::front::RulesFor;
use crate::kernel::Kernel;
use crate::loops::Program;
use crate::lower::matrix::MatrixUnit;
use crate::templates;

/// Parses and checks a kernel file. `file` names it in diagnostics.
pub fn parse_kernel(file: &str, source: &str) -> Result<Kernel, KernelError> {
    parse_kernel_timed(file, source, &[]).map(|(k, _)| k)
}

/// [`parse_kernel`] for one configuration of its tune parameters: the
/// defaults overridden by `tune` (each checked against its candidates and
/// the constraints).
pub fn parse_kernel_with(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
) -> Result<Kernel, KernelError> {
    parse_kernel_timed(file, source, tune).map(|(k, _)| k)
}

/// [`parse_kernel_with`], also returning the time spent parsing TOML and
/// checking it.
pub fn parse_kernel_timed(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
) -> Result<(Kernel, [std::time::Duration; 2]), KernelError> {
    parse_kernel_defaults(file, source, tune, 2)
}

/// [`parse_kernel_timed`] with a level of default schedules for stages
/// the file gives none: 2 (the default) each stage's rule and row chains
/// fused, 1 each stage's rule only, 0 the one-thread nest (the fallbacks
/// where a default schedule fails to lower).
pub fn parse_kernel_defaults(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
    defaults: u8,
) -> Result<(Kernel, [std::time::Duration; 2]), KernelError> {
    parse_kernel_for(file, source, tune, defaults, RulesFor::default())
}

/// [`parse_kernel_defaults`] with the rules writing default schedules for
/// a target (the matrix-product rule's `mma` path and its numbers).
pub fn parse_kernel_for(
    file: &str,
    source: &str,
    tune: &[(String, i64)],
    defaults: u8,
    rules: RulesFor,
) -> Result<(Kernel, [std::time::Duration; 2]), KernelError> {
    crate::front::parse_kernel_for(file, source, tune, defaults, rules, &templates::FRONT)
}

/// Lowers every stage of a checked kernel to loop IR, one GPU kernel per
/// stage: inlined stages produce none, and stages computed at another
/// stage's loop are lowered inside that stage's kernel.
pub fn lower(k: &Kernel) -> Result<Program, Diagnostic> {
    lower_for(k, None)
}

/// [`lower`] for a target with matrix instructions (`unit`); stages with
/// `mma` are refused without one.
pub fn lower_for(k: &Kernel, unit: Option<&MatrixUnit>) -> Result<Program, Diagnostic> {
    let given = crate::lower::Given {
        unit,
        templates: &templates::LOWER,
    };
    crate::lower::lower_with(k, given)
}

/// [`lower_for`] with errors rendered against the kernel file.
pub fn lower_file(
    k: &Kernel,
    file: &str,
    source: &str,
    unit: Option<&MatrixUnit>,
) -> Result<Program, KernelError> {
    lower_for(k, unit).map_err(|d| KernelError {
        file: file.into(),
        source: source.into(),
        diagnostics: vec![d],
    })
}
