//! Pass `addressing`: the kernel's argument list (the buffers its body
//! touches in tensor order, then every size, then every parameter) and how
//! it forms addresses, from the sizes' upper bounds.

use super::{Access, Addressing, ArgKind, KernelArg, Lowering, Stmt};
use crate::diag::Diagnostic;
use crate::index::SizeId;
use crate::kernel::{Kernel, ParamId, TensorId};
use crate::loops::visit::walk;
use crate::schedule;

pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    let (k, stage) = (l.k, l.k.stage(l.sid));
    let mut touched: Vec<TensorId> = Vec::new();
    // Tensors this kernel both reads and writes (a scatter's atomics, a
    // grid reduction's, an epilogue rewriting its output in place) are
    // neither `readonly` nor `writeonly`.
    let mut updated: Vec<TensorId> = Vec::new();
    let mut read: Vec<TensorId> = Vec::new();
    // Stored by this kernel: its stage's outputs, and a declared result
    // computed at one of its loops (compute_at), stored from there.
    let mut written: Vec<TensorId> = stage.outputs();
    walk(&l.g.body, &mut |s| {
        match s {
            Stmt::Store { tensor, .. } => {
                touched.push(*tensor);
                written.push(*tensor);
            }
            Stmt::Scatter {
                tensor,
                shared: None,
                ..
            } => {
                touched.push(*tensor);
                updated.push(*tensor);
            }
            _ => {}
        }
        for e in s.exprs() {
            e.visit_tensors(&mut |t| {
                touched.push(t);
                read.push(t);
            });
        }
    });
    touched.sort();
    touched.dedup();
    let mut args: Vec<KernelArg> = touched
        .iter()
        .map(|t| KernelArg {
            name: k.tensor(*t).name.clone(),
            kind: ArgKind::Buffer {
                tensor: *t,
                access: if updated.contains(t) || (written.contains(t) && read.contains(t)) {
                    Access::Update
                } else if written.contains(t) {
                    Access::Write
                } else {
                    Access::Read
                },
            },
        })
        .collect();
    args.extend(k.sizes.iter().enumerate().map(|(i, s)| KernelArg {
        name: s.name.clone(),
        kind: ArgKind::Size(SizeId(i as u32)),
    }));
    args.extend(k.params.iter().enumerate().map(|(i, p)| KernelArg {
        name: p.name.clone(),
        kind: ArgKind::Param(ParamId(i as u32)),
    }));
    l.g.args = args;
    l.g.addressing = addressing(k, stage, &l.nest, &touched)?.max(l.g.addressing);
    Ok(())
}

const U32_LIMIT: u128 = 1 << 32;

fn power_of_two(v: u128) -> String {
    if v >= 1 << 20 && v.is_power_of_two() {
        format!("2^{}", v.trailing_zeros())
    } else if v >= 1 << 40 {
        format!("~2^{}", 128 - v.leading_zeros())
    } else {
        v.to_string()
    }
}

/// Checks that loop counters and index values fit in 32 bits and picks the
/// addressing mode from the tensors' largest sizes.
fn addressing(
    k: &Kernel,
    stage: &crate::kernel::Stage,
    nest: &schedule::LoopNest,
    touched: &[TensorId],
) -> Result<Addressing, Diagnostic> {
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let hint = || {
        let names: Vec<String> = k
            .sizes
            .iter()
            .map(|s| format!("{} = ...", s.name))
            .collect();
        format!(
            "declare upper bounds of the sizes, e.g. `[kernel] max = {{ {} }}`",
            names.join(", ")
        )
    };
    // A triangular loop's extent depends on other loops (created in any
    // order): bound them until nothing changes.
    let mut var_max = vec![u64::MAX; nest.vars.len()];
    for _ in 0..nest.vars.len() {
        let next: Vec<u64> = nest
            .vars
            .iter()
            .map(|v| {
                let e = v.extent.max_value(&size_max, &var_max);
                e.saturating_sub(1).min(u64::MAX as u128) as u64
            })
            .collect();
        if next == var_max {
            break;
        }
        var_max = next;
    }
    for v in &nest.vars {
        let e = v.extent.max_value(&size_max, &var_max);
        if e >= U32_LIMIT {
            return Err(Diagnostic::new(v.span, format!("loop `{}` of stage `{}` can run up to {} iterations, more than a 32-bit loop counter holds", v.name, stage.name, power_of_two(e)))
                .hint(hint()));
        }
    }
    for (a, value) in stage.axes.iter().zip(&nest.axis_values) {
        let m = value.max_value(&size_max, &var_max);
        if m >= U32_LIMIT {
            return Err(Diagnostic::new(
                a.span,
                format!(
                    "axis `{}` of stage `{}` can reach {}, beyond 32-bit index arithmetic",
                    a.name,
                    stage.name,
                    power_of_two(m)
                ),
            )
            .hint(hint()));
        }
    }
    let mut mode = Addressing::Offset32;
    for t in touched {
        let t = k.tensor(*t);
        let elems = t.shape.iter().fold(1u128, |acc, e| {
            acc.saturating_mul(e.max_value(&size_max, &[]))
        });
        let bytes = elems.saturating_mul(t.dtype.size() as u128);
        let m = if elems >= 1 << 31 {
            Addressing::Index64
        } else if bytes >= U32_LIMIT {
            Addressing::Index32
        } else {
            Addressing::Offset32
        };
        mode = mode.max(m);
    }
    Ok(mode)
}
