//! The online softmax in the score accumulators' own registers, where the
//! lanes sharing a row of the instruction's accumulator layout are few
//! (mma.sync's quads): each lane scales and masks its own scores, takes
//! the row maximum over its elements and then across the row's lanes by
//! butterfly exchanges ([`Stmt::Shuffle`]), weighs its scores with one
//! `exp2` each, keeps a partial row sum (the exchange of sums waits until
//! the last tile, as FlashAttention-2 does) and leaves the weights in the
//! score registers, which P·V reads as its A fragments where the layouts
//! agree ([`weights_in_place`]; else they go to LDS). Scores never go
//! through LDS and no row factor does either: the output accumulators of
//! a row sit in the same lanes as its scores.

use super::*;
use crate::mtype::rows::RowLanes;

/// Registers of the row state, one per slot of each row fragment.
#[derive(Clone, Copy, Debug)]
pub(super) struct RowRegs {
    pub max: u32,
    pub sum: u32,
    pub new_max: u32,
    pub alpha: u32,
    pub xchg: u32,
}

impl Emit {
    fn lanes(&self) -> (&RowLanes, RowRegs) {
        let (rl, g) = self.lanes.as_ref().expect("the register softmax");
        (rl, *g)
    }

    pub(super) fn slot(&self, fm: i64, e: u32) -> Index {
        let (rl, _) = self.lanes();
        Index::c(fm * i64::from(rl.slots) + i64::from(rl.slot_of[e as usize]))
    }

    /// Every slot's register index.
    pub(super) fn slots(&self) -> impl Iterator<Item = Index> {
        let (rl, _) = self.lanes();
        (0..self.rm / i64::from(self.instr.m) * i64::from(rl.slots)).map(Index::c)
    }

    /// `reg[slot] = op(reg[slot], value of the lanes across the row)` for
    /// every exchange mask.
    fn across_row(&self, local: u32, slot: &Index, combine: BinOp) -> Vec<Stmt> {
        let (rl, regs) = self.lanes();
        let mut out = Vec::new();
        for &mask in &rl.masks {
            out.push(Stmt::Shuffle {
                local: regs.xchg,
                index: Index::c(0),
                value: reg(local, slot.clone()),
                mask,
                lane: self.lane.clone(),
                wave: self.wave.clone(),
                width: self.instr.wave,
            });
            out.push(Stmt::LocalStore {
                local,
                index: slot.clone(),
                value: op(
                    combine,
                    reg(local, slot.clone()),
                    reg(regs.xchg, Index::c(0)),
                ),
            });
        }
        out
    }

    /// Statements for each element of the score accumulators, from its
    /// register index, block row, tile column and row slot.
    fn each_score(&self, f: &dyn Fn(Index, Index, Index, Index) -> Vec<Stmt>) -> Vec<Stmt> {
        let mut out = Vec::new();
        self.each_acc(&mut |at, fm, e, row, col| out.extend(f(at, row, col, self.slot(fm, e))));
        out
    }

    /// The scores scaled into base 2 in place (with `scale`); with `keys`,
    /// keys at or past a row's count as −∞.
    pub(super) fn scale_in_place(
        &self,
        scale: Option<&Expr>,
        key0: &Index,
        keys: Option<&dyn Fn(Index) -> Index>,
    ) -> Vec<Stmt> {
        self.scaled_scores(scale, key0, keys, &|at, _, _, value| Stmt::LocalStore {
            local: self.sacc,
            index: at,
            value,
        })
    }

    /// The online softmax of the tile's scores, the weights in place of
    /// the scores (and to LDS where P·V cannot read them there), and the
    /// output accumulators rescaled. With `scale2` (a positive base-2
    /// scale the scores have not been multiplied by), the row maximum is
    /// taken of the raw scores and scaled once, and each weight is
    /// `exp2(s · scale2 − max)`.
    pub(super) fn softmax_in_registers(&self, scale2: Option<Expr>) -> Vec<Stmt> {
        let (_, g) = self.lanes();
        let set = |local: u32, at: Index, value: Expr| Stmt::LocalStore {
            local,
            index: at,
            value,
        };
        let mut out: Vec<Stmt> = self
            .slots()
            .map(|s| {
                let start = match scale2 {
                    Some(_) => float(f64::NEG_INFINITY),
                    None => reg(g.max, s.clone()),
                };
                set(g.new_max, s, start)
            })
            .collect();
        out.extend(self.each_score(&|at, _, _, slot| {
            vec![set(
                g.new_max,
                slot.clone(),
                op(BinOp::Max, reg(g.new_max, slot), reg(self.sacc, at)),
            )]
        }));
        for s in self.slots().collect::<Vec<_>>() {
            out.extend(self.across_row(g.new_max, &s, BinOp::Max));
            if let Some(c) = &scale2 {
                out.push(set(
                    g.new_max,
                    s.clone(),
                    op(
                        BinOp::Max,
                        reg(g.max, s.clone()),
                        op(BinOp::Mul, reg(g.new_max, s.clone()), c.clone()),
                    ),
                ));
            }
            // A row with every key masked so far keeps −∞; its weights
            // must still be 0, not NaN.
            let safe = select(
                op(
                    BinOp::Eq,
                    reg(g.new_max, s.clone()),
                    float(f64::NEG_INFINITY),
                ),
                float(0.0),
                reg(g.new_max, s.clone()),
            );
            // The maximum itself stays −∞ there: a stand-in of 0 would
            // underflow the weights of a row whose scores are all far below.
            out.extend([
                set(
                    g.alpha,
                    s.clone(),
                    exp2(op(BinOp::Sub, reg(g.max, s.clone()), safe.clone())),
                ),
                set(g.max, s.clone(), reg(g.new_max, s.clone())),
                set(g.new_max, s.clone(), safe),
                set(
                    g.sum,
                    s.clone(),
                    op(BinOp::Mul, reg(g.sum, s.clone()), reg(g.alpha, s.clone())),
                ),
            ]);
        }
        out.extend(self.each_score(&|at, row, col, slot| {
            let p = reg(self.sacc, at.clone());
            let s = match &scale2 {
                Some(c) => op(BinOp::Mul, p.clone(), c.clone()),
                None => p.clone(),
            };
            let mut body = vec![set(
                self.sacc,
                at.clone(),
                exp2(op(BinOp::Sub, s, reg(g.new_max, slot.clone()))),
            )];
            if self.p_in_place.is_none() {
                body.push(Stmt::SharedStore {
                    shared: PS,
                    index: row * Index::c(self.p_stride) + col,
                    value: cast(p.clone(), self.t),
                });
            }
            body.push(set(
                g.sum,
                slot.clone(),
                op(BinOp::Add, reg(g.sum, slot), p),
            ));
            body
        }));
        out.extend(self.rescale_in_registers());
        out
    }

    fn rescale_in_registers(&self) -> Vec<Stmt> {
        let (_, g) = self.lanes();
        let i = self.instr;
        let (m, n, pc) = (i64::from(i.m), i64::from(i.n), i64::from(i.acc_per_lane()));
        let (fm_n, fd_n) = (self.rm / m, self.dp / n);
        let mut out = Vec::new();
        for fm in 0..fm_n {
            for e in 0..i.acc_per_lane() {
                for fd in 0..fd_n {
                    let at = Index::c((fm * fd_n + fd) * pc + i64::from(e));
                    out.push(Stmt::LocalStore {
                        local: self.oacc,
                        index: at.clone(),
                        value: op(
                            BinOp::Mul,
                            reg(self.oacc, at),
                            reg(g.alpha, self.slot(fm, e)),
                        ),
                    });
                }
            }
        }
        out
    }

    /// After the last tile: each row's partial sums added across its
    /// lanes, and `1 / sum` (0 for a row without keys) in the factor
    /// registers.
    pub(super) fn finish_in_registers(&self) -> Vec<Stmt> {
        let (_, g) = self.lanes();
        let mut out = Vec::new();
        for s in self.slots().collect::<Vec<_>>() {
            out.extend(self.across_row(g.sum, &s, BinOp::Add));
            let live = op(BinOp::Gt, reg(g.sum, s.clone()), float(0.0));
            out.push(Stmt::LocalStore {
                local: g.alpha,
                index: s.clone(),
                value: select(
                    live,
                    op(BinOp::Div, float(1.0), reg(g.sum, s.clone())),
                    float(0.0),
                ),
            });
        }
        out
    }

    /// Each row slot of the lane, with its block row.
    pub(super) fn row_slots(&self) -> Vec<(Index, Index)> {
        let (rl, _) = self.lanes();
        let fm_n = self.rm / i64::from(self.instr.m);
        let mut out = Vec::new();
        for fm in 0..fm_n {
            for slot in 0..rl.slots {
                let e = rl
                    .slot_of
                    .iter()
                    .position(|s| *s == slot)
                    .expect("a slot has elements");
                let (r, _) = self.instr.acc_coord(e as u32);
                out.push((self.row(fm, &r), self.slot(fm, e as u32)));
            }
        }
        out
    }

    /// Holds for the lane of a row's lanes whose exchanged bits are all 0.
    pub(super) fn first_of_row(&self) -> crate::schedule::Guard {
        let (rl, _) = self.lanes();
        let bits = rl.masks.iter().fold(Index::c(0), |acc, &m| {
            acc + Index::bin(
                IOp::Mod,
                Index::bin(IOp::Div, self.lane.clone(), Index::c(i64::from(m))),
                Index::c(2),
            )
        });
        crate::schedule::Guard {
            value: bits,
            extent: Index::c(1),
        }
    }

    /// The log-sum-exp of the row in `slot`.
    pub(super) fn row_lse(&self, slot: Index) -> Expr {
        let (_, g) = self.lanes();
        lse(reg(g.max, slot.clone()), reg(g.sum, slot))
    }
}
