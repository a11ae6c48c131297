//! Matrix instructions on the CPU: each executed as a wave does, through
//! the instruction's own lane layout.

use super::{bin, coord, local};
use crate::index::{IOp, Index};
use crate::kernel::{BinOp, Expr, ExprKind};
use crate::loops::{GpuKernel, Local};
use crate::lower::Stmt;
use crate::DType;
use rocmc_target::matrix::MatrixInstr;
use std::collections::HashMap;

/// `g` with every matrix instruction executed as statements the CPU runs:
/// each lane puts its A and B elements where the instruction's layout says
/// they belong in a per-wave LDS scratch copy of the matrices, and after a
/// barrier computes its own elements of D from them. A fragment loaded into
/// the wrong lane or element lands in the wrong place of the matrix, as on
/// the GPU. gfx11's replicated halves each get their own copy, read by the
/// lanes of that half, so both must be filled right. Lane exchanges
/// ([`Stmt::Shuffle`]) go through an LDS slot per thread between two
/// barriers the same way.
///
/// The scratch arrays are appended after the kernel's own LDS arrays, so
/// `g.shared.len()` before the call is where they start.
pub fn expand(mut g: GpuKernel, exchange: Exchange) -> GpuKernel {
    let mut scratch: HashMap<(&'static str, bool), (u32, u32)> = HashMap::new();
    let threads = g.threads();
    let body = std::mem::take(&mut g.body);
    let mut cx = Cx {
        scratch: &mut scratch,
        threads,
        exchange,
    };
    g.body = expand_body(&mut g, body, &mut cx);
    g
}

/// How the lanes' exchange through the scratch arrays is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// Work-group barriers around each exchange: the CPU runs the lanes one
    /// after another between barriers, so nothing else orders them.
    Barriers,
    /// No barrier: the loop-IR interpreter runs every statement for all
    /// lanes before the next, which orders the exchange already. Barriers
    /// here would be ones the GPU code does not have, and the race check
    /// would take them for real ones (it missed the flash attention race
    /// across key tiles because of them).
    Lockstep,
}

struct Cx<'s> {
    scratch: &'s mut HashMap<(&'static str, bool), (u32, u32)>,
    threads: u32,
    exchange: Exchange,
}

impl Cx<'_> {
    fn sync(&self, out: &mut Vec<Stmt>) {
        if self.exchange == Exchange::Barriers {
            out.push(Stmt::Barrier);
        }
    }
}

fn expand_body(g: &mut GpuKernel, body: Vec<Stmt>, cx: &mut Cx) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Matrix {
                instr,
                a,
                b,
                acc,
                lane,
                wave,
                desc: _,
            } => {
                let copies = match instr.family {
                    rocmc_target::matrix::Family::WmmaGfx11 => instr.wave / 16,
                    _ => 1,
                };
                let (m, n, k) = (instr.m, instr.n, instr.k);
                let waves = cx.threads.div_ceil(instr.wave);
                let at = g.locals[a.0 as usize].dtype;
                let bt = g.locals[b.0 as usize].dtype;
                let ct = g.locals[acc.0 as usize].dtype;
                let (sa, sb) = *cx
                    .scratch
                    .entry((instr.name, instr.transposed))
                    .or_insert_with(|| {
                        let span = g.locals[a.0 as usize].span;
                        g.shared.push(Local {
                            name: "mma_a".into(),
                            dtype: at,
                            len: waves * copies * m * k,
                            span,
                        });
                        g.shared.push(Local {
                            name: "mma_b".into(),
                            dtype: bt,
                            len: waves * copies * k * n,
                            span,
                        });
                        (g.shared.len() as u32 - 2, g.shared.len() as u32 - 1)
                    });
                let copy = if copies > 1 {
                    Index::bin(IOp::Div, lane.clone(), Index::c(16))
                } else {
                    Index::c(0)
                };
                let a_base = (wave.clone() * Index::c(i64::from(copies)) + copy.clone())
                    * Index::c(i64::from(m * k));
                let b_base =
                    (wave * Index::c(i64::from(copies)) + copy) * Index::c(i64::from(k * n));
                for e in 0..instr.a_per_lane() {
                    let (r, kk) = instr.a_coord(e);
                    out.push(Stmt::SharedStore {
                        shared: sa,
                        index: a_base.clone()
                            + coord(&r, &lane) * Index::c(i64::from(k))
                            + coord(&kk, &lane),
                        value: local(a.0, a.1.clone() + Index::c(i64::from(e)), at),
                    });
                }
                for e in 0..instr.b_per_lane() {
                    let (kk, c) = instr.b_coord(e);
                    out.push(Stmt::SharedStore {
                        shared: sb,
                        index: b_base.clone()
                            + coord(&kk, &lane) * Index::c(i64::from(n))
                            + coord(&c, &lane),
                        value: local(b.0, b.1.clone() + Index::c(i64::from(e)), bt),
                    });
                }
                cx.sync(&mut out);
                let cast = |e: Expr| Expr {
                    kind: ExprKind::Cast(Box::new(e)),
                    dtype: ct,
                };
                for e in 0..instr.acc_per_lane() {
                    let (r, c) = instr.acc_coord(e);
                    let (r, c) = (coord(&r, &lane), coord(&c, &lane));
                    let ix = acc.1.clone() + Index::c(i64::from(e));
                    let mut sum = local(acc.0, ix.clone(), ct);
                    for kk in 0..k {
                        let x = Expr {
                            kind: ExprKind::Shared {
                                shared: sa,
                                index: a_base.clone()
                                    + r.clone() * Index::c(i64::from(k))
                                    + Index::c(i64::from(kk)),
                            },
                            dtype: at,
                        };
                        let y = Expr {
                            kind: ExprKind::Shared {
                                shared: sb,
                                index: b_base.clone() + Index::c(i64::from(kk * n)) + c.clone(),
                            },
                            dtype: bt,
                        };
                        sum = bin(BinOp::Add, sum, bin(BinOp::Mul, cast(x), cast(y), ct), ct);
                    }
                    out.push(Stmt::LocalStore {
                        local: acc.0,
                        index: ix,
                        value: sum,
                    });
                }
                cx.sync(&mut out);
            }
            s @ Stmt::Shuffle { .. } => out.extend(shuffle_through_lds(g, s, cx)),
            other => {
                let mut f = |b: Vec<Stmt>| expand_body(g, b, cx);
                out.push(other.map_bodies(&mut f));
            }
        }
    }
    out
}

/// A lane exchange where the target has none: each lane's value through
/// an LDS slot, between barriers.
fn shuffle_through_lds(g: &mut GpuKernel, s: Stmt, cx: &mut Cx) -> Vec<Stmt> {
    let Stmt::Shuffle {
        local: dst,
        index,
        value,
        mask,
        lane,
        wave,
        width,
    } = s
    else {
        unreachable!("shuffle_through_lds is called on lane exchanges only")
    };
    let mut out = Vec::new();
    let threads = cx.threads;
    let (slots, _) = *cx.scratch.entry(("lane_xor", false)).or_insert_with(|| {
        g.shared.push(Local {
            name: "lane_xor".into(),
            dtype: DType::F32,
            len: threads.div_ceil(width) * width,
            span: g.locals[dst as usize].span,
        });
        (g.shared.len() as u32 - 1, 0)
    });
    let base = wave * Index::c(i64::from(width));
    out.push(Stmt::SharedStore {
        shared: slots,
        index: base.clone() + lane.clone(),
        value,
    });
    cx.sync(&mut out);
    out.push(Stmt::LocalStore {
        local: dst,
        index,
        value: Expr {
            kind: ExprKind::Shared {
                shared: slots,
                index: base + lane_xor(&lane, mask),
            },
            dtype: DType::F32,
        },
    });
    cx.sync(&mut out);
    out
}

/// `lane ^ mask` as an index: each set bit of the mask adds its value
/// where the lane's bit is clear and subtracts it where set.
pub fn lane_xor(lane: &Index, mask: u32) -> Index {
    let mut at = lane.clone();
    for b in 0..32 {
        let bit = 1i64 << b;
        if mask & (1 << b) != 0 {
            let set = Index::bin(
                IOp::Mod,
                Index::bin(IOp::Div, lane.clone(), Index::c(bit)),
                Index::c(2),
            );
            at = at + Index::c(bit) - set * Index::c(2 * bit);
        }
    }
    at
}

/// The matrix instructions the kernels of `p` execute, each once.
pub fn uses_matrix(p: &crate::loops::Program) -> Vec<&'static MatrixInstr> {
    let mut found = Vec::new();
    for g in &p.kernels {
        crate::loops::visit::walk(&g.body, &mut |s| {
            if let Stmt::Matrix { instr, .. } = s {
                if !found.contains(instr) {
                    found.push(*instr);
                }
            }
        });
    }
    found
}
