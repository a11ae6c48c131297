//! What the front end decides for stages the file leaves unscheduled: the
//! default rules' schedules, their knobs, fused producers and row chains.

use super::*;
use crate::diag::{Diagnostic, Span};
use crate::kernel::*;
use crate::schedule::{self, Step};
use crate::syntax::{self};

impl<'s> Cx<'s> {
    /// The knobs of the default schedules join the kernel's tune space
    /// (so `rocmc tune` searches an unscheduled kernel); values given for
    /// them were applied by the rules and are checked here.
    pub(super) fn knobs(&mut self, k: &mut Kernel) {
        use crate::tune::{TuneParam, Tuning};
        let at: Vec<(Span, &schedule::default::Knob)> = k
            .stages
            .iter()
            .filter_map(|s| s.default.as_ref().map(|d| (s.span, d)))
            .flat_map(|(span, d)| d.knobs.iter().map(move |kb| (span, kb)))
            .collect();
        let knobs: Vec<&schedule::default::Knob> = at.iter().map(|x| x.1).collect();
        // Without a target, a matrix product's knobs may be those of the
        // rule the target will choose: checked when it is known.
        let later = self.rules.target.is_none()
            && k.stages
                .iter()
                .any(|s| s.default.as_ref().is_some_and(|d| d.by_target));
        let mut errors = Vec::new();
        for (n, v) in self.knobs_given.iter().filter(|_| !later) {
            let found = at.iter().find(|(_, kb)| kb.name == *n);
            // A knob's errors point at the stage whose rule reads it.
            let span = found.map_or(Span::default(), |f| f.0);
            let msg = match found.map(|f| f.1) {
                Some(kb) if kb.values.contains(v) => continue,
                Some(kb) => crate::tune::not_a_candidate(n, *v, &kb.values),
                None => {
                    let mut names: Vec<&str> = knobs.iter().map(|kb| kb.name.as_str()).collect();
                    if let Some(t) = &k.tuning {
                        names.extend(t.space.params.iter().map(|p| p.name.as_str()));
                    }
                    if names.is_empty() {
                        format!("tune parameter `{n}` given, but the kernel has no [tune] section and no default schedule with knobs")
                    } else {
                        format!(
                            "no tune parameter `{n}`; the kernel has: {}",
                            names.join(", ")
                        )
                    }
                }
            };
            errors.push(Diagnostic::new(span, msg));
        }
        for e in errors {
            self.error(e);
        }
        if knobs.is_empty() || !self.diags.is_empty() {
            return;
        }
        let t = k.tuning.get_or_insert_with(|| Tuning {
            space: Default::default(),
            config: Vec::new(),
        });
        let texts: Vec<&String> = k
            .stages
            .iter()
            .filter_map(|s| s.default.as_ref())
            .flat_map(|d| &d.constraints)
            .collect();
        for kb in knobs {
            if t.space.params.iter().any(|p| p.name == kb.name) {
                continue;
            }
            t.space.params.push(TuneParam {
                name: kb.name.clone(),
                values: kb.values.clone(),
                default: kb.default,
                span: Span::default(),
            });
            t.config.push((kb.name.clone(), kb.value));
        }
        // Kept where the defaults meet them (rocmc wrote both).
        let defaults = t.space.default_config();
        for text in texts {
            let Ok(ast) = syntax::parse_expr(text, 0) else {
                continue;
            };
            if matches!(crate::tune::eval(&ast, &defaults), Ok(v) if v != 0) {
                t.space.constraints.push(crate::tune::Constraint {
                    text: text.clone(),
                    ast,
                    span: Span::default(),
                });
            }
        }
    }

    /// Templates written out over several stages made the template
    /// ([`super::Templates::rewrite`]), each rewritten stage scheduled
    /// as a new one would be.
    pub(super) fn rewrite_templates(&mut self, k: &mut Kernel) {
        for o in (self.templates.rewrite)(k) {
            let mut st = k.stages[o].clone();
            if self.defaults > 0 {
                self.default_schedule(k, &mut st);
            }
            if st.nest.is_none() {
                match schedule::apply_with_source(k, &st, self.src) {
                    Ok(nest) => st.nest = Some(nest),
                    Err(e) => self.error(e),
                }
            }
            k.stages[o] = st;
        }
    }

    /// Default-scheduled element-wise producers inlined into their
    /// readers ([`schedule::default::inlinable`]), whose rules then choose
    /// again; kept only if every changed stage applies.
    pub(super) fn fuse_producers(&self, k: &mut Kernel) {
        let plan = schedule::default::inlinable(k);
        if plan.is_empty() {
            return;
        }
        let mut next = k.clone();
        let fused: Vec<TensorId> = plan.iter().map(|(i, _)| k.stages[*i].output).collect();
        for (i, cand) in plan {
            let Some(steps) = default_steps(&cand, next.stages[i].span) else {
                return;
            };
            let st = &mut next.stages[i];
            st.schedule = steps;
            st.default = Some(cand);
            match schedule::apply_with_source(&next, &next.stages[i], self.src) {
                Ok(nest) => next.stages[i].nest = Some(nest),
                Err(_) => return,
            }
        }
        for i in 0..next.stages.len() {
            let st = &next.stages[i];
            if fused.contains(&st.output) || st.default.is_none() {
                continue;
            }
            let mut reads = false;
            for e in st.exprs() {
                e.visit_loads(&mut |t, _| reads |= fused.contains(&t));
            }
            if !reads {
                continue;
            }
            let mut again = st.clone();
            again.schedule.clear();
            again.default = None;
            again.nest = None;
            self.default_schedule(&next, &mut again);
            if again.nest.is_none() {
                return;
            }
            next.stages[i] = again;
        }
        *k = next;
    }

    /// Default-scheduled row reductions fused into the stage that
    /// normalises the rows ([`schedule::default::row_chains`]); kept only
    /// if every rescheduled stage applies.
    pub(super) fn row_chains(&self, k: &mut Kernel) {
        let cx = schedule::default::RuleCx {
            target: self.rules.target,
            shared_limit: self.rules.shared_limit,
            given: &self.knobs_given,
            templates: self.templates.rules,
        };
        let plan = schedule::default::row_chains(k, &cx);
        if plan.is_empty() {
            return;
        }
        let mut next = k.clone();
        for (i, cand) in plan {
            let Some(steps) = default_steps(&cand, next.stages[i].span) else {
                return;
            };
            let st = &mut next.stages[i];
            st.schedule = steps;
            st.nest = None;
            st.default = Some(cand);
        }
        for i in 0..next.stages.len() {
            let st = &next.stages[i];
            if st.nest.is_none() && st.compute_at().is_none() && !st.absorbed {
                match schedule::apply_with_source(&next, st, self.src) {
                    Ok(nest) => next.stages[i].nest = Some(nest),
                    Err(_) => return,
                }
            }
        }
        *k = next;
    }

    /// A stage the file gives no schedule: the first candidate of the
    /// rules that applies (see [`schedule::default`]), its steps pointing at
    /// the stage. None applying leaves the one-thread nest.
    pub(super) fn default_schedule(&self, k: &Kernel, stage: &mut Stage) {
        let cx = schedule::default::RuleCx {
            target: self.rules.target,
            shared_limit: self.rules.shared_limit,
            given: &self.knobs_given,
            templates: self.templates.rules,
        };
        for cand in schedule::default::candidates(k, stage, &cx) {
            // Rules whose tiles may not lower for every kernel come only
            // at the first level (see `frontend_with`'s fallbacks).
            if self.defaults < 2 && cand.rule == "matmul-tiles"
                || self.rules.skip.contains(&cand.rule)
            {
                continue;
            }
            if cand.bad_knob() {
                // Refused once the stages are parsed (`knobs`), naming
                // this rule's candidates.
                stage.default = Some(cand);
                return;
            }
            let Some(steps) = default_steps(&cand, stage.span) else {
                continue;
            };
            let mut trial = stage.clone();
            trial.schedule = steps;
            if let Ok(nest) = schedule::apply_with_source(k, &trial, self.src) {
                trial.nest = Some(nest);
                trial.default = Some(cand);
                *stage = trial;
                return;
            }
        }
    }
}

/// A rule's steps parsed, each pointing at the stage (`span`): the text
/// is rocmc's, not the file's.
pub(super) fn default_steps(
    cand: &schedule::default::DefaultSchedule,
    span: Span,
) -> Option<Vec<Step>> {
    let mut steps = cand
        .steps
        .iter()
        .map(|t| syntax::parse_step(t, span.start).and_then(|s| Step::from_syntax(&s)))
        .collect::<Result<Vec<Step>, Diagnostic>>()
        .ok()?;
    for s in &mut steps {
        s.span = span;
    }
    Some(steps)
}
