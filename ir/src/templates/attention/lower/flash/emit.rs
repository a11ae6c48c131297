//! The statements of a `flash` kernel, from what [`super::build`] chose:
//! the tile copies, the two products on the matrix instruction, the
//! softmax through LDS, and the rescaling of the outputs.

use super::*;

/// Everything the statements are built from.
pub(super) struct Emit {
    pub(super) instr: &'static MatrixInstr,
    pub(super) t: DType,
    /// Rows per wave (= lanes; 64 per warpgroup), threads of the
    /// work-group.
    pub(super) rm: i64,
    pub(super) threads: i64,
    /// Lanes of a wave (128 for a warpgroup).
    pub(super) wave_lanes: i64,
    /// The warpgroup instructions and arrays, on sm_90a ([`group`]).
    pub(super) group: Option<group::Group>,
    pub(super) bn: i64,
    /// Head dimension of q·k (`e`), of v (`d`), both padded to the instruction.
    pub(super) e: i64,
    pub(super) ep: i64,
    pub(super) d: i64,
    pub(super) dp: i64,
    pub(super) lane: Index,
    pub(super) wave: Index,
    pub(super) tid: Index,
    /// The first row of the block (its row tile times BM).
    pub(super) row0: Index,
    /// Registers: scores, outputs, A and B fragments, the row's state.
    pub(super) sacc: u32,
    pub(super) oacc: u32,
    pub(super) af: u32,
    pub(super) bf: u32,
    pub(super) m: u32,
    pub(super) sum: u32,
    pub(super) mnew: u32,
    pub(super) rs: u32,
    pub(super) p: u32,
    pub(super) alpha: u32,
    /// The register softmax's layout and row state, where it applies.
    pub(super) lanes: Option<(crate::mtype::rows::RowLanes, lanes::RowRegs)>,
    /// P's A fragments as score registers, where the weights stay in place.
    pub(super) p_in_place: Option<crate::mtype::rows::InPlace>,
    /// The wave's Q fragments for every k step, loaded once from memory
    /// (AMD's register path: no Q tile in LDS, which then holds only K
    /// and V); else Q is read from its LDS tile at every key tile.
    pub(super) q_regs: Option<u32>,
    /// B fragments loaded two at a time (where `ldmatrix` takes both at once).
    pub(super) pair_b: bool,
    /// The LDS tiles' layouts and the weights' and scores' row strides.
    pub(super) q_tile: Layout,
    pub(super) k_tile: Layout,
    pub(super) v_tile: Layout,
    pub(super) s_stride: i64,
    pub(super) p_stride: i64,
}

impl Emit {
    pub(super) fn lds(&self, array: u32, index: Index, t: DType) -> Expr {
        typed(
            ExprKind::Shared {
                shared: array,
                index,
            },
            t,
        )
    }

    /// A fragment element read from LDS, zero where the head column `col`
    /// is past `limit` (the head dimension is no multiple of k).
    pub(super) fn frag_read(
        &self,
        array: u32,
        index: Index,
        col: Index,
        limit: i64,
        padded: i64,
    ) -> Expr {
        let v = self.lds(array, index, self.t);
        if limit == padded {
            return v;
        }
        select(
            op(BinOp::Lt, idx_expr(col), idx_expr(Index::c(limit))),
            v,
            typed(ExprKind::Float(0.0), self.t),
        )
    }

    /// The block row of this lane's element at row coordinate `r` of row
    /// fragment `fm` of its wave.
    pub(super) fn row(&self, fm: i64, r: &LaneCoord) -> Index {
        let m = i64::from(self.instr.m);
        self.wave.clone() * Index::c(self.rm) + Index::c(fm * m) + coord(r, &self.lane)
    }

    /// The block row this lane owns in the softmax: one per lane.
    pub(super) fn own_row(&self) -> Index {
        self.wave.clone() * Index::c(self.rm) + self.lane.clone()
    }

    /// `body` for the lanes that own a row in the LDS softmax: all of
    /// them, unless a wave takes fewer rows than it has lanes.
    pub(super) fn row_owners(&self, body: Vec<Stmt>) -> Vec<Stmt> {
        if self.rm >= self.wave_lanes {
            return body;
        }
        vec![Stmt::If {
            guards: vec![Guard {
                value: self.lane.clone(),
                extent: Index::c(self.rm),
            }],
            body,
        }]
    }

    /// One product of the wave's rows, `ks` steps of k, into the `f_n`
    /// column fragments of accumulator array `acc`. `read_a(fm, ks, e,
    /// row, k)` (element `e` of row fragment `fm`'s A fragment at k step
    /// `ks`, block row `row`, column `k`) and `read_b(k, col)` give the
    /// operands; each B fragment is loaded once and used by every row
    /// fragment at once; with `pair_b`, two column fragments are loaded
    /// together (one `ldmatrix.x4` instead of two `.x2`). With `a_regs`,
    /// the A fragments already lie in that register array (as
    /// [`Emit::q_reg`] orders them) and the instructions read them there:
    /// a copy into the fragment array would reach LLVM as a byte copy
    /// whose mixed types keep the array out of registers.
    pub(super) fn product(
        &self,
        ks_n: i64,
        f_n: i64,
        acc: u32,
        read_a: &dyn Fn(i64, i64, u32, Index, Index) -> Expr,
        read_b: &dyn Fn(Index, Index) -> Expr,
        a_regs: Option<u32>,
    ) -> Vec<Stmt> {
        if let Some(g) = &self.group {
            // Which product it is tells the instruction and its arrays.
            let (issue, arrays) = if acc == self.sacc {
                (g.scores, (self.af, self.bf))
            } else {
                (g.values, (g.pf, g.vf))
            };
            return self.group_product(issue, arrays, ks_n, f_n, acc, read_a, read_b);
        }
        let (i, lane) = (self.instr, &self.lane);
        let (m, n, k) = (i64::from(i.m), i64::from(i.n), i64::from(i.k));
        let (pa, pb, pc) = (
            i64::from(i.a_per_lane()),
            i64::from(i.b_per_lane()),
            i64::from(i.acc_per_lane()),
        );
        let fm_n = self.rm / m;
        let mut out = Vec::new();
        for ks in 0..ks_n {
            for fm in (0..fm_n).filter(|_| a_regs.is_none()) {
                for e in 0..i.a_per_lane() {
                    let (r, kk) = i.a_coord(e);
                    out.push(Stmt::LocalStore {
                        local: self.af,
                        index: Index::c(fm * pa + i64::from(e)),
                        value: read_a(
                            fm,
                            ks,
                            e,
                            self.row(fm, &r),
                            Index::c(ks * k) + coord(&kk, lane),
                        ),
                    });
                }
            }
            let pair = if self.pair_b && f_n % 2 == 0 { 2 } else { 1 };
            for f0 in (0..f_n).step_by(pair as usize) {
                for h in 0..pair {
                    for e in 0..i.b_per_lane() {
                        let (kk, c) = i.b_coord(e);
                        out.push(Stmt::LocalStore {
                            local: self.bf,
                            index: Index::c(h * pb + i64::from(e)),
                            value: read_b(
                                Index::c(ks * k) + coord(&kk, lane),
                                Index::c((f0 + h) * n) + coord(&c, lane),
                            ),
                        });
                    }
                }
                for h in 0..pair {
                    for fm in 0..fm_n {
                        let a = match a_regs {
                            Some(q) => (q, self.q_reg(fm, ks, 0)),
                            None => (self.af, Index::c(fm * pa)),
                        };
                        out.push(Stmt::Matrix {
                            instr: i,
                            a,
                            b: (self.bf, Index::c(h * pb)),
                            acc: (acc, Index::c((fm * f_n + f0 + h) * pc)),
                            lane: lane.clone(),
                            wave: self.wave.clone(),
                            desc: None,
                        });
                    }
                }
            }
        }
        out
    }

    /// Q × K of the wave's rows and the tile's keys into the score accumulators.
    pub(super) fn scores(&self, buf: Index) -> Vec<Stmt> {
        let i = self.instr;
        let (n, k, pc) = (i64::from(i.n), i64::from(i.k), i64::from(i.acc_per_lane()));
        let fn_n = self.bn / n;
        let mut out: Vec<Stmt> = (0..self.rm / i64::from(i.m) * fn_n * pc)
            .map(|x| Stmt::LocalStore {
                local: self.sacc,
                index: Index::c(x),
                value: float(0.0),
            })
            .collect();
        let kbase = self.k_tile.stage(buf, self.bn);
        out.extend(self.product(
            self.ep / k,
            fn_n,
            self.sacc,
            &|_, _, _, row, col| {
                let at = self.q_tile.at(Index::c(0), row, col.clone());
                self.frag_read(QS, at, col, self.e, self.ep)
            },
            &|col, key| {
                let at = self.k_tile.at(kbase.clone(), key, col.clone());
                self.frag_read(KS, at, col, self.e, self.ep)
            },
            self.q_regs,
        ));
        out
    }

    /// Where Q's element `e` of row fragment `fm` at k step `ks` is in
    /// [`Emit::q_regs`].
    fn q_reg(&self, fm: i64, ks: i64, e: u32) -> Index {
        let fm_n = self.rm / i64::from(self.instr.m);
        Index::c((ks * fm_n + fm) * i64::from(self.instr.a_per_lane()) + i64::from(e))
    }

    /// Every Q fragment of the wave's rows into [`Emit::q_regs`], read by
    /// `load(row, col)` from memory (block row, head column); zero past
    /// the head dimension.
    pub(super) fn q_to_registers(&self, q: u32, load: &dyn Fn(Index, Index) -> Expr) -> Vec<Stmt> {
        let i = self.instr;
        let (m, k) = (i64::from(i.m), i64::from(i.k));
        let mut out = Vec::new();
        for ks in 0..self.ep / k {
            for fm in 0..self.rm / m {
                for e in 0..i.a_per_lane() {
                    let (r, kk) = i.a_coord(e);
                    let col = Index::c(ks * k) + coord(&kk, &self.lane);
                    let at = self.q_reg(fm, ks, e);
                    let set = Stmt::LocalStore {
                        local: q,
                        index: at.clone(),
                        value: load(self.row(fm, &r), col.clone()),
                    };
                    if self.ep == self.e {
                        out.push(set);
                        continue;
                    }
                    out.push(Stmt::LocalStore {
                        local: q,
                        index: at,
                        value: typed(ExprKind::Float(0.0), self.t),
                    });
                    out.push(Stmt::If {
                        guards: vec![Guard {
                            value: col,
                            extent: Index::c(self.e),
                        }],
                        body: vec![set],
                    });
                }
            }
        }
        out
    }

    /// Calls `f(at, fm, e, row, col)` for each element of the score
    /// accumulators: its register index, row fragment, element, block row
    /// and tile column.
    pub(super) fn each_acc(&self, f: &mut dyn FnMut(Index, i64, u32, Index, Index)) {
        let i = self.instr;
        let (m, n, pc) = (i64::from(i.m), i64::from(i.n), i64::from(i.acc_per_lane()));
        let (fm_n, fn_n) = (self.rm / m, self.bn / n);
        for fm in 0..fm_n {
            for fc in 0..fn_n {
                for e in 0..i.acc_per_lane() {
                    let (r, c) = i.acc_coord(e);
                    let at = Index::c((fm * fn_n + fc) * pc + i64::from(e));
                    let col = Index::c(fc * n) + coord(&c, &self.lane);
                    f(at, fm, e, self.row(fm, &r), col);
                }
            }
        }
    }

    /// Each score scaled into base 2 (unless `scale` is None: the weights
    /// then scale it) and, with `keys` (the key count of a row, as a
    /// function of its local row), keys at or past it as −∞; `put(at, row,
    /// col, value)` says where it goes.
    pub(super) fn scaled_scores(
        &self,
        scale: Option<&Expr>,
        key0: &Index,
        keys: Option<&dyn Fn(Index) -> Index>,
        put: &dyn Fn(Index, Index, Index, Expr) -> Stmt,
    ) -> Vec<Stmt> {
        let scale2 = scale.map(|s| base2(s.clone()));
        let mut out = Vec::new();
        if scale2.is_none() && keys.is_none() {
            return out;
        }
        self.each_acc(&mut |at, _, _, row, col| {
            let s = match &scale2 {
                Some(c) => op(BinOp::Mul, reg(self.sacc, at.clone()), c.clone()),
                None => reg(self.sacc, at.clone()),
            };
            let value = match keys {
                None => s,
                Some(count) => select(
                    op(
                        BinOp::Lt,
                        idx_expr(key0.clone() + col.clone()),
                        idx_expr(count(row.clone())),
                    ),
                    s,
                    float(f64::NEG_INFINITY),
                ),
            };
            out.push(put(at, row, col, value));
        });
        out
    }

    /// The scaled scores to the LDS tile.
    pub(super) fn publish(
        &self,
        scale: &Expr,
        key0: &Index,
        keys: Option<&dyn Fn(Index) -> Index>,
    ) -> Vec<Stmt> {
        self.scaled_scores(Some(scale), key0, keys, &|_, row, col, value| {
            Stmt::SharedStore {
                shared: SS,
                index: row * Index::c(self.s_stride) + col,
                value,
            }
        })
    }

    /// The online softmax of the lane's own row (`lane` of this wave).
    pub(super) fn softmax(&self, c: VarId) -> Vec<Stmt> {
        let me = self.own_row();
        let set = |local: u32, value: Expr| Stmt::LocalStore {
            local,
            index: Index::c(0),
            value,
        };
        let r = |local: u32| reg(local, Index::c(0));
        let score = self.lds(
            SS,
            me.clone() * Index::c(self.s_stride) + Index::Var(c),
            DType::F32,
        );
        let each = |body: Vec<Stmt>| Stmt::Loop {
            var: c,
            extent: Index::c(self.bn),
            unroll: true,
            body,
        };
        let safe = select(
            op(BinOp::Eq, r(self.mnew), float(f64::NEG_INFINITY)),
            float(0.0),
            r(self.mnew),
        );
        vec![
            set(self.mnew, r(self.m)),
            each(vec![set(
                self.mnew,
                op(BinOp::Max, r(self.mnew), score.clone()),
            )]),
            set(self.alpha, exp2(op(BinOp::Sub, r(self.m), safe.clone()))),
            set(self.rs, float(0.0)),
            each(vec![
                set(self.p, exp2(op(BinOp::Sub, score, safe))),
                Stmt::SharedStore {
                    shared: PS,
                    index: me.clone() * Index::c(self.p_stride) + Index::Var(c),
                    value: cast(r(self.p), self.t),
                },
                set(self.rs, op(BinOp::Add, r(self.rs), r(self.p))),
            ]),
            set(
                self.sum,
                op(
                    BinOp::Add,
                    op(BinOp::Mul, r(self.sum), r(self.alpha)),
                    r(self.rs),
                ),
            ),
            set(self.m, r(self.mnew)),
            Stmt::SharedStore {
                shared: AL,
                index: me,
                value: r(self.alpha),
            },
        ]
    }

    /// Each output accumulator times its row's factor in LDS.
    pub(super) fn rescale(&self) -> Vec<Stmt> {
        let i = self.instr;
        let (m, n, pc) = (i64::from(i.m), i64::from(i.n), i64::from(i.acc_per_lane()));
        let (fm_n, fd_n) = (self.rm / m, self.dp / n);
        let mut out = Vec::new();
        for fm in 0..fm_n {
            for e in 0..i.acc_per_lane() {
                let (r, _) = i.acc_coord(e);
                let row = self.row(fm, &r);
                let factor = self.lds(AL, row, DType::F32);
                for fd in 0..fd_n {
                    let at = Index::c((fm * fd_n + fd) * pc + i64::from(e));
                    out.push(Stmt::LocalStore {
                        local: self.oacc,
                        index: at.clone(),
                        value: op(BinOp::Mul, reg(self.oacc, at), factor.clone()),
                    });
                }
            }
        }
        out
    }

    /// P × V of the wave's rows into the output accumulators, the weights
    /// read from the score registers or from LDS.
    pub(super) fn values(&self, buf: Index) -> Vec<Stmt> {
        let i = self.instr;
        let vbase = self.v_tile.stage(buf, self.bn);
        let (pa, per_fm) = (
            i64::from(i.a_per_lane()),
            self.bn / i64::from(i.n) * i64::from(i.acc_per_lane()),
        );
        self.product(
            self.bn / i64::from(i.k),
            self.dp / i64::from(i.n),
            self.oacc,
            &|fm, ks, e, row, key| match &self.p_in_place {
                Some(at) => cast(
                    reg(
                        self.sacc,
                        Index::c(fm * per_fm + at.regs[(ks * pa + i64::from(e)) as usize]),
                    ),
                    self.t,
                ),
                None => self.lds(PS, row * Index::c(self.p_stride) + key, self.t),
            },
            &|key, col| {
                let key = self.key_in_order(key);
                self.lds(VS, self.v_tile.at(vbase.clone(), key, col), self.t)
            },
            None,
        )
    }

    /// The key P·V's k index `key` stands for: itself, or where the score
    /// registers hold a step's keys in another order
    /// ([`crate::mtype::rows::InPlace::key_bits`]), that order's key, so
    /// that V is read in the order of the weights.
    fn key_in_order(&self, key: Index) -> Index {
        let Some(p) = self.p_in_place.as_ref().filter(|p| !p.identity()) else {
            return key;
        };
        let k = i64::from(self.instr.k);
        let bit = |b: usize| {
            let at = Index::bin(IOp::Div, key.clone(), Index::c(1 << b));
            Index::bin(IOp::Mod, at, Index::c(2))
        };
        p.key_bits.iter().enumerate().fold(
            Index::bin(IOp::Div, key.clone(), Index::c(k)) * Index::c(k),
            |acc, (b, &t)| acc + bit(b) * Index::c(1 << t),
        )
    }

    /// The work-group's copy of `rows` rows of `width` columns into LDS
    /// array `array` at `base`, laid out as `tile`: `load(r, c)` is the
    /// element at tile row r, column c (a load whose last index is c).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy(
        &self,
        v: VarId,
        array: u32,
        base: Index,
        tile: Layout,
        rows: i64,
        width: i64,
        load: &dyn Fn(Index, Index) -> Expr,
        asynchronous: bool,
    ) -> Stmt {
        let vec = 8;
        let per_row = width / vec;
        let total = rows * per_row;
        let at = Index::Var(v) * Index::c(self.threads) + self.tid.clone();
        let r = Index::bin(IOp::Div, at.clone(), Index::c(per_row));
        let c = Index::bin(IOp::Mod, at.clone(), Index::c(per_row)) * Index::c(vec);
        let fill = match tile.valid_columns() {
            // Consecutive threads take consecutive rows of one column
            // chunk: each of a chunk's 8 elements goes to its own column,
            // where the lanes' stores are consecutive. A column past the
            // tensor's holds a copy of its last (finite, and read only
            // into outputs past the head dimension, which are not stored).
            Some(valid) => {
                let r = Index::bin(IOp::Mod, at.clone(), Index::c(rows));
                let c = Index::bin(IOp::Div, at.clone(), Index::c(rows)) * Index::c(vec);
                let stores = (0..vec).map(|x| {
                    let col = c.clone() + Index::c(x);
                    let read = match valid < width {
                        true => Index::bin(IOp::Min, col.clone(), Index::c(valid - 1)),
                        false => col.clone(),
                    };
                    Stmt::SharedStore {
                        shared: array,
                        index: tile.at(base.clone(), r.clone(), col),
                        value: load(r.clone(), read),
                    }
                });
                stores.collect()
            }
            None => vec![Stmt::Fill {
                mem: Mem::Shared,
                array,
                index: tile.at(base, r.clone(), c.clone()),
                value: load(r, c),
                width: vec as u32,
                asynchronous,
                zero: false,
            }],
        };
        let body = if total % self.threads == 0 {
            fill
        } else {
            vec![Stmt::If {
                guards: vec![Guard {
                    value: at,
                    extent: Index::c(total),
                }],
                body: fill,
            }]
        };
        Stmt::Loop {
            var: v,
            extent: Index::c((total + self.threads - 1) / self.threads),
            unroll: true,
            body,
        }
    }
}
