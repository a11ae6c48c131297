//! Versions for small sizes: where a rule says it would write a faster
//! schedule under a bound the kernel file does not state
//! (`DefaultSchedule::version_at`: AMD's row chains keep a row of up to
//! one run of a thread's steps in registers), the kernel is built a
//! second time under that bound and each of its kernels runs that
//! version at sizes within it, the general one elsewhere.

use super::{frontend_rules, rules_target, Error, Frontend, Options, Target};
use rocmc_ir::front::RulesFor;
use rocmc_ir::index::SizeId;
use rocmc_ir::loops::{version::versioned, Program};
use std::borrow::Cow;

impl Frontend {
    /// This kernel for `target`: its default schedules written again by
    /// rules that depend on the target (a matrix product onto its matrix
    /// instructions), and lowered again if a stage has an `mma` step; with
    /// the versions for small sizes rules ask for. On the CPU,
    /// `opts.emulate` names the processor whose rules and matrix
    /// instructions are used.
    pub fn for_target(&self, target: &Target, opts: &Options) -> Result<Cow<'_, Frontend>, Error> {
        let f = self.for_target_unversioned(target, opts)?;
        with_versions(self, f, target, opts)
    }
}

/// `f` (the kernel `base` lowered for `target`) with its versions for
/// small sizes, where a rule asks for one and both lowerings launch
/// alike; else `f` unchanged. A version that does not build leaves the
/// general kernel alone: it is an optimisation, never the user's error.
/// Versioned kernels that fail the loop IR's verifier (a rocmc bug) are
/// an error naming the pass `versions`, as a lowering pass's would be.
fn with_versions<'a>(
    base: &Frontend,
    f: Cow<'a, Frontend>,
    target: &Target,
    opts: &Options,
) -> Result<Cow<'a, Frontend>, Error> {
    let ask = f
        .kernel
        .stages
        .iter()
        .find_map(|s| s.default.as_ref()?.version_at.clone());
    let Some((size, bound)) = ask else {
        return Ok(f);
    };
    let Some(sid) = f.kernel.sizes.iter().position(|s| s.name == size) else {
        return Ok(f);
    };
    let Ok((rt, shared_limit)) = rules_target(target, opts) else {
        return Ok(f);
    };
    let bounds = [(size.as_str(), bound)];
    let rules = RulesFor {
        target: Some(&rt),
        shared_limit,
        bounds: &bounds,
        ..RulesFor::default()
    };
    let fast = frontend_rules(&base.file, &base.source, &base.tune, rules)
        .and_then(|v| v.lowered_for(target, opts).map(Cow::into_owned));
    let Ok(fast) = fast else {
        return Ok(f);
    };
    // The same rules for every stage, or the version is not the one the
    // rule asked for (a rule left out where its schedule did not lower).
    let rules_of = |fr: &Frontend| -> Vec<Option<&'static str>> {
        fr.kernel
            .stages
            .iter()
            .map(|s| s.default.as_ref().map(|d| d.rule))
            .collect()
    };
    if rules_of(&fast) != rules_of(&f) || fast.program.kernels.len() != f.program.kernels.len() {
        return Ok(f);
    }
    let kernels: Option<Vec<_>> = fast
        .program
        .kernels
        .iter()
        .zip(&f.program.kernels)
        .map(|(a, g)| versioned(a, g, SizeId(sid as u32), bound))
        .collect();
    let Some(kernels) = kernels else {
        return Ok(f);
    };
    let program = Program { kernels };
    if rocmc_ir::lower::verifying() {
        for g in &program.kernels {
            rocmc_ir::loops::verify::verify(&f.kernel, g, "versions").map_err(|e| {
                let span = f.kernel.stage(g.stage).span;
                base.diagnostic(rocmc_ir::Diagnostic::new(span, e.to_string()))
            })?;
        }
    }
    let mut f = f.into_owned();
    f.set_program(program);
    Ok(Cow::Owned(f))
}
