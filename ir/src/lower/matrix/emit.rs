//! Emitting a checked `mma` stage: operand fills, the instruction over
//! its fragment loops, the accumulator stores, and for warpgroup
//! instructions (`wgmma`) the fenced, committed groups of each k tile.

use super::check::Frags;
use super::{bin, coord, group_lag, local, zero, MatrixUnit, Stage};
use crate::index::{IOp, Index, VarId};
use crate::kernel::{BinOp, Expr, ExprKind};
use crate::lower::body::build;
use crate::lower::{region, Lowering, Stmt};
use crate::schedule::Guard;
use crate::DType;
use rocmc_target::matrix::MatrixInstr;
use std::collections::HashMap;

/// Emitting one `mma` stage's body: its checked instruction, its operands
/// (loads clamped into range) and its fragment loops.
pub(super) struct Emit<'a> {
    pub(super) l: &'a Lowering<'a>,
    pub(super) st: &'a Stage<'a>,
    pub(super) unit: &'a MatrixUnit,
    pub(super) instr: &'static MatrixInstr,
    pub(super) acc_t: DType,
    pub(super) fa: Expr,
    pub(super) fb: Expr,
    pub(super) f: Frags<'a>,
    /// The guards on reduction loops: out-of-range k reads as zero.
    pub(super) kguards: Vec<&'a Guard>,
    pub(super) lane: Index,
    /// Where `instr` reads A and B from LDS: the warp instruction of its k
    /// tail ([`super::tail_instr`]), whose fragments are locals 3 and 4.
    pub(super) tail: Option<&'static MatrixInstr>,
    /// The operands clamped as if no tile staged them, for a k tail run
    /// after the loop.
    pub(super) whole: (Expr, Expr),
    /// Whether A and B are read from tiles holding zeros past the tensor
    /// ([`super::zero_filled`]): no select for k's tail.
    pub(super) filled: (bool, bool),
}

impl Emit<'_> {
    /// Operand `f` at the lane coordinates `map`, zero where k is out of
    /// range when `zero_tail`.
    fn element(&self, f: &Expr, map: HashMap<VarId, Index>, zero_tail: bool) -> Expr {
        let kguards = &self.kguards;
        let v = f.map_indices(&|ix| ix.subst(&map));
        let mut cond: Option<Expr> = None;
        for g in kguards.iter().filter(|_| zero_tail) {
            let c = bin(
                BinOp::Lt,
                Expr {
                    kind: ExprKind::Index(g.value.subst(&map)),
                    dtype: DType::I32,
                },
                Expr {
                    kind: ExprKind::Index(g.extent.subst(&map)),
                    dtype: DType::I32,
                },
                DType::Bool,
            );
            cond = Some(match cond {
                None => c,
                Some(p) => bin(BinOp::And, p, c, DType::Bool),
            });
        }
        match cond {
            None => v,
            Some(c) => Expr {
                dtype: v.dtype,
                kind: ExprKind::Select(Box::new(c), Box::new(v), Box::new(zero(f.dtype))),
            },
        }
    }

    /// Each lane's loads of its A and B elements.
    fn fills(&self, zero_tail: bool) -> (Vec<Stmt>, Vec<Stmt>) {
        let req = self.l.nest.matrix.as_ref().expect("a stage with mma");
        let (ri, rj, rk) = (req.rows, req.cols, req.k);
        let (instr, lane_ix) = (self.instr, &self.lane);
        let (a_ix, b_ix) = (&self.f.ix[1], &self.f.ix[2]);
        let (pa, pb) = (self.f.per_lane[1], self.f.per_lane[2]);
        let mut a_fill = Vec::new();
        for e in 0..instr.a_per_lane() {
            let (r, kk) = instr.a_coord(e);
            let map = HashMap::from([(ri, coord(&r, lane_ix)), (rk, coord(&kk, lane_ix))]);
            a_fill.push(Stmt::LocalStore {
                local: 1,
                index: a_ix.clone() * Index::c(pa) + Index::c(i64::from(e)),
                value: self.element(&self.fa, map, zero_tail && !self.filled.0),
            });
        }
        let mut b_fill = Vec::new();
        for e in 0..instr.b_per_lane() {
            let (kk, c) = instr.b_coord(e);
            let map = HashMap::from([(rk, coord(&kk, lane_ix)), (rj, coord(&c, lane_ix))]);
            b_fill.push(Stmt::LocalStore {
                local: 2,
                index: b_ix.clone() * Index::c(pb) + Index::c(i64::from(e)),
                value: self.element(&self.fb, map, zero_tail && !self.filled.1),
            });
        }
        (a_fill, b_fill)
    }

    /// Where a whole tile of k is in range, its operands need no zeroing:
    /// inside the outermost k loop, an unswitch on the tile's last k runs
    /// the loads without their selects (the k guards grow with the inner k
    /// loops and the instruction's k, so the last k bounds them all). On
    /// NVIDIA only: it is what lets ldmatrix and the straight-line bodies
    /// apply there, while on AMD it only duplicated the step (gfx942's
    /// gemm_f16: 92 -> 105 VGPRs, one occupancy step lost).
    fn full_tile(&self) -> Option<Vec<Guard>> {
        let (nest, unit, kloops, kguards) =
            (&self.l.nest, self.unit, &self.f.kloops, &self.kguards);
        let rk = nest.matrix.as_ref().expect("a stage with mma").k;
        kloops
            .first()
            .filter(|_| unit.unswitches_full_k_tiles())
            .and_then(|_| {
                let inner: Vec<VarId> = kloops[1..].iter().copied().chain([rk]).collect();
                let mut last = HashMap::new();
                for v in &inner {
                    let ext = nest.var(*v).extent.as_const()?;
                    last.insert(*v, Index::c(ext - 1));
                }
                let gs = kguards
                    .iter()
                    .map(|g| {
                        let (terms, _) = region::split_varying(&g.value, &inner)?;
                        terms
                            .iter()
                            .all(|(t, c)| matches!(t, Index::Var(_)) && *c > 0)
                            .then(|| Guard {
                                value: g.value.subst(&last),
                                extent: g.extent.clone(),
                            })
                    })
                    .collect::<Option<Vec<Guard>>>()?;
                (!gs.is_empty()).then_some(gs)
            })
    }

    /// The wave (for `wgmma`, the warpgroup) within the work-group.
    fn wave(&self) -> Index {
        let st = self.st;
        st.waves[0].1.map_or(Index::c(0), Index::Var)
            + st.waves[1].1.map_or(Index::c(0), Index::Var) * Index::c(i64::from(st.waves[0].0))
    }

    /// One step of k for a warpgroup instruction's k tail ([`super::tail_instr`]):
    /// each warp loads its 16 rows of A, then per 8 columns a B fragment
    /// and one warp instruction into those columns' accumulators.
    fn tail_step(&self, t: &'static MatrixInstr, after_loop: bool) -> Vec<Stmt> {
        let (fa, fb) = if after_loop {
            (&self.whole.0, &self.whole.1)
        } else {
            (&self.fa, &self.fb)
        };
        let nest = &self.l.nest;
        let req = nest.matrix.as_ref().expect("a stage with mma");
        let (ri, rj, rk) = (req.rows, req.cols, req.k);
        let warp_lanes = i64::from(t.wave);
        let lane = Index::bin(IOp::Mod, self.lane.clone(), Index::c(warp_lanes));
        let warp = Index::bin(IOp::Div, self.lane.clone(), Index::c(warp_lanes));
        let warps = i64::from(self.instr.wave / t.wave);
        let row0 = warp.clone() * Index::c(i64::from(t.m));
        let [acc_ix, a_ix, _] = &self.f.ix;
        let pc = self.f.per_lane[0];
        let (ta, tb) = (3u32, 4u32);
        let pa = i64::from(t.a_per_lane());
        let a_fill: Vec<Stmt> = (0..t.a_per_lane())
            .map(|e| {
                let (r, kk) = t.a_coord(e);
                let map = HashMap::from([
                    (ri, row0.clone() + coord(&r, &lane)),
                    (rk, coord(&kk, &lane)),
                ]);
                Stmt::LocalStore {
                    local: ta,
                    index: a_ix.clone() * Index::c(pa) + Index::c(i64::from(e)),
                    value: self.element(fa, map, true),
                }
            })
            .collect();
        let mut per_frag = Vec::new();
        for j in 0..self.instr.n / t.n {
            for e in 0..t.b_per_lane() {
                let (kk, c) = t.b_coord(e);
                let map = HashMap::from([
                    (rk, coord(&kk, &lane)),
                    (rj, Index::c(i64::from(j * t.n)) + coord(&c, &lane)),
                ]);
                per_frag.push(Stmt::LocalStore {
                    local: tb,
                    index: Index::c(i64::from(e)),
                    value: self.element(fb, map, true),
                });
            }
            per_frag.push(Stmt::Matrix {
                instr: t,
                a: (ta, a_ix.clone() * Index::c(pa)),
                b: (tb, Index::c(0)),
                acc: (
                    0,
                    acc_ix.clone() * Index::c(pc) + Index::c(i64::from(j * t.acc_per_lane())),
                ),
                lane: lane.clone(),
                wave: self.wave() * Index::c(warps) + warp.clone(),
                desc: None,
            });
        }
        let mut step = build(nest, &self.f.a_frags, &[], a_fill);
        step.extend(build(nest, &self.f.frags, &[], per_frag));
        step
    }

    /// The matrix instruction on this lane's fragments.
    fn instruction(&self) -> Stmt {
        let (instr, lane_ix) = (self.instr, &self.lane);
        let [acc_ix, a_ix, b_ix] = &self.f.ix;
        let [pc, pa, pb] = self.f.per_lane;
        let wave = self.wave();
        Stmt::Matrix {
            instr,
            a: (1, a_ix.clone() * Index::c(pa)),
            b: (2, b_ix.clone() * Index::c(pb)),
            acc: (0, acc_ix.clone() * Index::c(pc)),
            lane: lane_ix.clone(),
            wave,
            desc: None,
        }
    }

    /// The stores of the accumulator's elements, each under the output's guards.
    fn stores(&self) -> Vec<Stmt> {
        let req = self.l.nest.matrix.as_ref().expect("a stage with mma");
        let (ri, rj) = (req.rows, req.cols);
        let (st, instr, lane_ix, acc_t, kguards) =
            (self.st, self.instr, &self.lane, self.acc_t, &self.kguards);
        let (acc_ix, pc) = (&self.f.ix[0], self.f.per_lane[0]);
        let mut store = Vec::new();
        for e in 0..instr.acc_per_lane() {
            let (r, c) = instr.acc_coord(e);
            let map = HashMap::from([(ri, coord(&r, lane_ix)), (rj, coord(&c, lane_ix))]);
            let acc = local(
                0,
                acc_ix.clone() * Index::c(pc) + Index::c(i64::from(e)),
                acc_t,
            );
            let s = Stmt::Store {
                tensor: st.output,
                indices: st.indices.iter().map(|i| i.subst(&map)).collect(),
                value: st
                    .value
                    .map_indices(&|ix| ix.subst(&map))
                    .replace_reduced(&acc),
            };
            let guards: Vec<Guard> = st
                .guards
                .iter()
                .filter(|g| !kguards.contains(g))
                .map(|g| Guard {
                    value: g.value.subst(&map),
                    extent: g.extent.subst(&map),
                })
                .collect();
            store.push(if guards.is_empty() {
                s
            } else {
                Stmt::If {
                    guards,
                    body: vec![s],
                }
            });
        }
        store
    }

    /// One step of k: the A and B fills, then the instructions.
    fn step(&self, zero_tail: bool) -> Vec<Stmt> {
        let nest = &self.l.nest;
        let Frags {
            frags,
            a_frags,
            b_frags,
            ..
        } = &self.f;
        let (a_fill, b_fill) = self.fills(zero_tail);
        let mut step = build(nest, a_frags, &[], a_fill);
        step.extend(build(nest, b_frags, &[], b_fill));
        step.extend(build(nest, frags, &[], vec![self.instruction()]));
        step
    }

    /// The whole body: accumulators zeroed, the k loops, the stores.
    pub(super) fn body(&self) -> Vec<Stmt> {
        let nest = &self.l.nest;
        let Frags {
            outer,
            kloops,
            frags,
            ..
        } = &self.f;
        let (acc_ix, pc, acc_t) = (&self.f.ix[0], self.f.per_lane[0], self.acc_t);
        let init: Vec<Stmt> = (0..pc)
            .map(|e| Stmt::LocalStore {
                local: 0,
                index: acc_ix.clone() * Index::c(pc) + Index::c(e),
                value: zero(acc_t),
            })
            .collect();
        let full_tile = self.full_tile();
        let mut leaf = build(nest, frags, &[], init);
        if self.instr.warpgroup() {
            let empty: Vec<Stmt> = leaf
                .iter()
                .cloned()
                .chain(build(nest, frags, &[], self.stores()))
                .collect();
            leaf.extend(self.group_body(self.tail, full_tile));
            leaf.extend(build(nest, frags, &[], self.stores()));
            // No k at all is its own branch: where the loop's zero-trip
            // path joins its exit, LLVM copies the zeros into the
            // accumulators there, and ptxas, seeing other instructions
            // write them while a group may be in flight, serializes every
            // wgmma of the kernel.
            let body = match kloops.first() {
                Some(k0) => vec![Stmt::Unswitch {
                    guards: vec![Guard {
                        value: Index::c(0),
                        extent: nest.var(*k0).extent.clone(),
                    }],
                    fast: leaf,
                    slow: empty,
                }],
                None => leaf,
            };
            return build(nest, outer, &[], body);
        }
        match full_tile {
            Some(guards) => {
                let inner = &kloops[1..];
                let split = vec![Stmt::Unswitch {
                    guards,
                    fast: build(nest, inner, &[], self.step(false)),
                    slow: build(nest, inner, &[], self.step(true)),
                }];
                leaf.extend(build(nest, &kloops[..1], &[], split));
            }
            None => leaf.extend(build(nest, kloops, &[], self.step(true))),
        }
        leaf.extend(build(nest, frags, &[], self.stores()));
        build(nest, outer, &[], leaf)
    }
}

impl Emit<'_> {
    /// The k loops of a warpgroup instruction (`wgmma`): each tile of k
    /// fenced, its instructions committed as one group and waited for
    /// before the next tile's barrier lets the copies overwrite its LDS
    /// operands. Tiles of k partly out of range run the warp instruction
    /// `t` on zeroed registers instead.
    fn group_body(
        &self,
        tail: Option<&'static MatrixInstr>,
        full_tile: Option<Vec<Guard>>,
    ) -> Vec<Stmt> {
        use crate::loops::MatrixAsync;
        let nest = &self.l.nest;
        let kloops = &self.f.kloops;
        let stages = kloops.first().and_then(|k| {
            nest.caches
                .iter()
                .filter(|c| c.at == *k && c.stages > 1 && !c.prefetch)
                .map(|c| c.stages)
                .min()
        });
        let lag = match (kloops.first(), stages) {
            (Some(k), Some(s)) => group_lag(nest, self.unit, *k, s),
            _ => 0,
        };
        // The last tile drains the pipeline inside the loop: with a group
        // still in flight at the loop's exit, the accumulators' values
        // merging there (the zero-trip path's zeros) count for ptxas as
        // other instructions writing them mid-flight, and it serializes.
        let ko_next = kloops.first().map(|k| Index::Var(*k) + Index::c(1));
        let ko_extent = kloops.first().map(|k| nest.var(*k).extent.clone());
        let around = |mut body: Vec<Stmt>| {
            body.insert(0, Stmt::MatrixAsync(MatrixAsync::Fence));
            body.push(Stmt::MatrixAsync(MatrixAsync::Commit));
            match (&ko_next, &ko_extent) {
                (Some(next), Some(extent)) if lag > 0 => body.push(Stmt::Unswitch {
                    guards: vec![Guard {
                        value: next.clone(),
                        extent: extent.clone(),
                    }],
                    fast: vec![Stmt::MatrixAsync(MatrixAsync::Wait(lag))],
                    slow: vec![Stmt::MatrixAsync(MatrixAsync::Wait(0))],
                }),
                _ => body.push(Stmt::MatrixAsync(MatrixAsync::Wait(lag))),
            }
            body
        };
        let drain = Stmt::MatrixAsync(MatrixAsync::Wait(0));
        // No warp instruction for a tail: the sizes make every tile whole
        // (checked by `tail_instr`), so the guards always hold.
        let (full_tile, whole) = match tail {
            Some(_) => (full_tile, false),
            None => (None, true),
        };
        match (full_tile, tail) {
            (Some(guards), Some(t)) => {
                let inner = &kloops[1..];
                // Full tiles in the loop, the partial last one after it: a
                // join of the two inside the loop makes LLVM copy the
                // accumulators while a group is in flight, which ptxas
                // answers by serializing every wgmma.
                let ko = kloops[0];
                let full = vec![Stmt::If {
                    guards: guards.clone(),
                    body: around(build(nest, inner, &[], self.step(false))),
                }];
                let mut out = build(nest, &kloops[..1], &[], full);
                out.push(drain);
                let extent = nest.var(ko).extent.clone();
                let last = HashMap::from([(ko, extent.clone() - Index::c(1))]);
                let tail = crate::loops::visit::map_indices(
                    build(nest, inner, &[], self.tail_step(t, true)),
                    &|ix| ix.subst(&last),
                );
                let partial: Vec<Guard> = guards
                    .iter()
                    .map(|g| Guard {
                        value: g.value.subst(&last),
                        extent: g.extent.clone(),
                    })
                    .collect();
                out.push(Stmt::Unswitch {
                    guards: partial,
                    fast: Vec::new(),
                    slow: vec![Stmt::If {
                        guards: vec![Guard {
                            value: Index::c(0),
                            extent,
                        }],
                        body: tail,
                    }],
                });
                out
            }
            _ if whole || self.kguards.is_empty() => {
                let mut out = match kloops.split_first() {
                    Some((first, inner)) => build(
                        nest,
                        &[*first],
                        &[],
                        around(build(nest, inner, &[], self.step(false))),
                    ),
                    None => around(self.step(false)),
                };
                out.push(drain);
                out
            }
            (_, Some(t)) => build(nest, kloops, &[], self.tail_step(t, false)),
            (_, None) => unreachable!("no tail instruction only with whole tiles"),
        }
    }
}
