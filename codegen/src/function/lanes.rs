//! Loads and stores of a vectorised loop's lanes, aligned where the
//! loop's fast path checks it. On NVIDIA (natural alignment only) LLVM merges a thread's
//! consecutive element loads into one vector load only where it knows the
//! first is aligned to the whole vector: without that, an f16 elementwise
//! stage's four halves a thread were four 2-byte loads (a 4-D copy ran at
//! 56 % of copy bandwidth on the H200, bench/gpu/runs/h200-transpose-f16).
//! Where the fast path of `vectorize` (every lane inside the row) also
//! holds that each such tensor's rows and base are aligned to the vector,
//! its lanes' loads and stores say their alignment, and LLVM merges them.

use super::*;
use rocmc_ir::loops::Stmt;
use rocmc_ir::{DType, VarId};

/// Inside the fast path of a vectorised loop: its variable, its width,
/// and the loads and stores (tensor and subscripts) whose first lane the
/// path's condition proves aligned to the whole vector.
#[derive(Clone)]
pub(crate) struct LaneAlign {
    var: VarId,
    width: u32,
    accesses: Vec<(TensorId, Vec<Index>)>,
}

impl LaneAlign {
    /// Whether `tensor[indices]` is one of the accesses the path checked.
    fn checks(&self, tensor: TensorId, indices: &[Index]) -> bool {
        self.accesses
            .iter()
            .any(|(t, ix)| *t == tensor && ix.as_slice() == indices)
    }
}

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// For a vectorised loop's fast path (one unrolled loop of 2, 4 or 8
    /// lanes of stores, alone or inside unrolled loops, on a target that
    /// merges only aligned accesses):
    /// the loads and stores whose last subscript is `x + lane` with `x` a known
    /// multiple of the width, and the run-time condition that their rows
    /// and bases are aligned (loop-invariant: the row lengths and bases).
    pub(super) fn lane_alignment(
        &mut self,
        fast: &[Stmt],
    ) -> R<Option<(IntValue<'ctx>, LaneAlign)>> {
        if !self.be.vector_stores() {
            return Ok(None);
        }
        // The vectorised loop, innermost in a nest of unrolled loops (a
        // register tile's transpose stores `O[d + d_v, s + s_v]`, `d_v`
        // unrolled around the vectorised `s_v`): the outer loops' variables
        // stay symbolic in the check, so only an access whose first lane is
        // aligned at every one of their values counts.
        let mut fast = fast;
        while let [Stmt::Loop {
            unroll: true, body, ..
        }] = fast
        {
            match body.as_slice() {
                inner @ [Stmt::Loop { unroll: true, .. }] => fast = inner,
                _ => break,
            }
        }
        let [Stmt::Loop {
            var,
            extent,
            unroll: true,
            body,
        }] = fast
        else {
            return Ok(None);
        };
        let Some(w) = extent.as_const().filter(|w| matches!(w, 2 | 4 | 8)) else {
            return Ok(None);
        };
        let mut found: Vec<(TensorId, Vec<Index>)> = Vec::new();
        let mut note = |t: TensorId, ix: &[Index]| {
            if !found.iter().any(|(u, jx)| *u == t && jx.as_slice() == ix) {
                found.push((t, ix.to_vec()));
            }
        };
        for s in body {
            let Some((
                _,
                Stmt::Store {
                    tensor,
                    indices,
                    value,
                },
            )) = super::stmt::guarded_store(s)
            else {
                return Ok(None);
            };
            value.visit_loads(&mut |t, ix| note(t, ix));
            note(*tensor, indices);
        }
        let at0 = HashMap::from([(*var, Index::c(0))]);
        let mut cond = self.cx.bool_type().const_int(1, false);
        let mut accesses = Vec::new();
        for (t, ix) in found {
            let Some((last, lead)) = ix.split_last() else {
                continue;
            };
            let (terms, _) = last.affine();
            let lane = terms.get(&Index::Var(*var)).copied();
            if lane != Some(1) || lead.iter().any(|x| x.uses_var(*var)) {
                continue;
            }
            let dt = self.k.tensor(t).dtype;
            if dt == DType::Bool {
                continue;
            }
            let first: Vec<Index> = ix.iter().map(|x| x.subst(&at0)).collect();
            let Some(ok) = self.fill_aligned_known(t, &first, dt, w as u32)? else {
                continue;
            };
            cond = self.b.build_and(cond, ok, "").map_err(llvm_err)?;
            accesses.push((t, ix));
        }
        if accesses.is_empty() {
            return Ok(None);
        }
        Ok(Some((
            cond,
            LaneAlign {
                var: *var,
                width: w as u32,
                accesses,
            },
        )))
    }

    /// The alignment in bytes of `tensor[indices]` of `dt` (a load or a
    /// store) inside a fast path [`Self::lane_alignment`] proved: the
    /// vector's for its first lane, less for the others (the lane is the
    /// loop variable's value); the element's elsewhere.
    pub(super) fn access_alignment(&self, tensor: TensorId, indices: &[Index], dt: DType) -> u32 {
        let size = dt.size() as u32;
        let Some(la) = &self.lane_align else {
            return size;
        };
        if !la.checks(tensor, indices) {
            return size;
        }
        let Some(lane) = self.vars[la.var.0 as usize].and_then(|v| v.get_zero_extended_constant())
        else {
            return size;
        };
        let lane = lane as u32 % la.width;
        let lanes = if lane == 0 {
            la.width
        } else {
            1 << lane.trailing_zeros()
        };
        size * lanes
    }

    /// In a checked fast path: the vectorised loop `s` itself, when its
    /// body is one store of the path's checked accesses, as one vector
    /// store of its lanes (LLVM merged such stores only in part, across
    /// the lanes' loads). False where `s` is not that.
    pub(super) fn lane_vector_store(&mut self, s: &Stmt) -> R<bool> {
        let Some(la) = &self.lane_align else {
            return Ok(false);
        };
        let Stmt::Loop {
            var,
            extent,
            unroll: true,
            body,
        } = s
        else {
            return Ok(false);
        };
        let [Stmt::Store {
            tensor,
            indices,
            value,
        }] = body.as_slice()
        else {
            return Ok(false);
        };
        let width = la.width;
        if *var != la.var
            || extent.as_const() != Some(i64::from(width))
            || !la.checks(*tensor, indices)
        {
            return Ok(false);
        }
        let Some(vt) = self.fill_vector_type(value.dtype, width) else {
            return Ok(false);
        };
        let mut acc = vt.into_vector_type().get_poison();
        for l in 0..width {
            self.vars[var.0 as usize] = Some(self.i32(i64::from(l)));
            let v = self.expr(value)?;
            let v = self.to_mem(value.dtype, v)?;
            acc = self
                .b
                .build_insert_element(acc, v, self.i32(i64::from(l)), "")
                .map_err(llvm_err)?;
        }
        self.vars[var.0 as usize] = Some(self.i32(0));
        let p = self.address(*tensor, indices)?;
        self.vars[var.0 as usize] = None;
        let st = self.b.build_store(p, acc).map_err(llvm_err)?;
        st.set_alignment(width * value.dtype.size() as u32)
            .map_err(llvm_err)?;
        Ok(true)
    }
}
