//! A sampled run of the reference interpreter: a few rows of each result,
//! each element computed from exactly the elements it depends on, so that
//! a kernel too large for [`run`](super::run) is still checked in seconds
//! (one row of a 4096 × 4096 GEMM reads one row of A and all of B, not
//! all of both 4096 times).
//!
//! Stage results are computed on demand and remembered ([`Lazy`]): a read
//! of a stage's element computes that element (a plain or reduction
//! stage), its row (a scan, top-k or attention) or the whole stage (a
//! scatter, whose every point may land anywhere). The values are those
//! [`run`](super::run) gives, bit for bit: the same code computes each.

use super::stages::{row_count, row_of, scatter_stage, stage_row, Entries};
use super::*;
use crate::rng::Rng;
use std::cell::RefCell;
use std::collections::HashMap;

/// Elements of one result of a kernel, computed alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// The tensor, as an index into the kernel's tensors.
    pub tensor: usize,
    /// Row-major offsets into it, ascending.
    pub offsets: Vec<usize>,
    /// The interpreter's value at each offset.
    pub values: Vec<Scalar>,
    /// The tensor's rows (all axes but the last) and how many the sample
    /// took.
    pub rows: i64,
    pub rows_sampled: usize,
}

/// Where a sampled run reads an input's elements: a whole [`Buffer`], or
/// a source that fetches only those the sample reads (a GPU's memory, a
/// page at a time), so that an input too large for the host is checked
/// all the same.
pub trait Elements {
    fn dtype(&self) -> DType;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element `off` (`off < len()`), or why it could not be read.
    fn get(&self, off: usize) -> Result<Scalar, String>;
}

impl Elements for Buffer {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn len(&self) -> usize {
        Buffer::len(self)
    }
    fn get(&self, off: usize) -> Result<Scalar, String> {
        Ok(Buffer::get(self, off))
    }
}

/// Runs `k` on `inputs` for a sample of each result's rows: the first,
/// the last and seeded random ones up to `rows`, and in each row the
/// first, the last and random elements up to `cols` (all of them where a
/// tensor has no more). A result is every stage tensor kept in memory.
pub fn run_sampled(
    k: &Kernel,
    sizes: &[i64],
    params: &[Scalar],
    inputs: &[Buffer],
    rows: usize,
    cols: usize,
    seed: u64,
) -> Result<Vec<Sampled>, InterpError> {
    let given: Vec<&dyn Elements> = inputs.iter().map(|b| b as &dyn Elements).collect();
    run_sampled_from(k, sizes, params, &given, rows, cols, seed)
}

/// [`run_sampled`] reading its inputs from any [`Elements`].
pub fn run_sampled_from(
    k: &Kernel,
    sizes: &[i64],
    params: &[Scalar],
    inputs: &[&dyn Elements],
    rows: usize,
    cols: usize,
    seed: u64,
) -> Result<Vec<Sampled>, InterpError> {
    let shapes = check_launch(k, sizes, params)?;
    let given: Vec<(DType, usize)> = inputs.iter().map(|b| (b.dtype(), b.len())).collect();
    check_given(k, &shapes, &given)?;
    let mut given = inputs.iter().copied();
    let lazy = Lazy {
        k,
        sizes,
        params,
        shapes: &shapes,
        inputs: k
            .tensors
            .iter()
            .map(|t| (t.kind == TensorKind::Input).then(|| given.next().expect("checked count")))
            .collect(),
        out_of_range: &RefCell::new(None),
        memo: RefCell::new(vec![HashMap::new(); k.tensors.len()]),
    };
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    for (i, _) in k.stored_results() {
        let ext = &shapes[i];
        let len = ext.last().copied().unwrap_or(1).max(0);
        let nrows = if ext.is_empty() {
            1
        } else {
            ext[..ext.len() - 1].iter().product::<i64>()
        };
        let picked_rows = pick(nrows, rows, &mut rng);
        let mut sample = Sampled {
            tensor: i,
            offsets: Vec::new(),
            values: Vec::new(),
            rows: nrows,
            rows_sampled: picked_rows.len(),
        };
        for r in picked_rows {
            for c in pick(len, cols, &mut rng) {
                let off = (r * len + c) as usize;
                sample.values.push(lazy.get(TensorId(i as u32), off)?);
                sample.offsets.push(off);
            }
        }
        out.push(sample);
    }
    Ok(out)
}

/// Up to `want` of `0..n`, ascending: the first, the last, then seeded
/// random others; all of them where `n <= want`.
fn pick(n: i64, want: usize, rng: &mut Rng) -> Vec<i64> {
    if n <= 0 || n as u64 <= want as u64 {
        return (0..n).collect();
    }
    let mut chosen = std::collections::BTreeSet::new();
    chosen.insert(0);
    if want > 1 {
        chosen.insert(n - 1);
    }
    while chosen.len() < want {
        chosen.insert(rng.below(n as usize) as i64);
    }
    chosen.into_iter().collect()
}

/// The inputs, and every stage element computed so far.
pub(super) struct Lazy<'a> {
    k: &'a Kernel,
    sizes: &'a [i64],
    params: &'a [Scalar],
    shapes: &'a [Vec<i64>],
    /// Per tensor: the elements given for an input, `None` for a stage's.
    inputs: Vec<Option<&'a dyn Elements>>,
    out_of_range: &'a RefCell<Option<OutOfRange>>,
    memo: RefCell<Vec<HashMap<usize, Scalar>>>,
}

impl Lazy<'_> {
    /// Element `off` of tensor `t`: given, remembered, or computed now
    /// with what it depends on.
    pub(super) fn get(&self, t: TensorId, off: usize) -> Result<Scalar, InterpError> {
        if let Some(b) = self.inputs[t.0 as usize] {
            return b.get(off).map_err(|e| {
                InterpError::BadInput(format!("input `{}`: {e}", self.k.tensor(t).name))
            });
        }
        if let Some(v) = self.memo.borrow()[t.0 as usize].get(&off) {
            return Ok(*v);
        }
        let TensorKind::Stage(s) = self.k.tensor(t).kind else {
            unreachable!("every input is given")
        };
        let st = self.k.stage(s);
        let env = Env {
            races: Default::default(),
            out_of_range: self.out_of_range,
            k: self.k,
            sizes: self.sizes,
            params: self.params,
            shapes: self.shapes,
            stage: &st.name,
            lazy: Some(self),
            bound: Default::default(),
        };
        let entries = self.compute(&env, st, t, off)?;
        let mut memo = self.memo.borrow_mut();
        for (tt, o, v) in entries {
            memo[tt.0 as usize].insert(o, v);
        }
        memo[t.0 as usize].get(&off).copied().ok_or_else(|| {
            InterpError::BadInput(format!(
                "internal: stage `{}` did not compute element {off} of `{}`",
                st.name,
                self.k.tensor(t).name
            ))
        })
    }

    /// What stage `st` computes together with element `off` of its result
    /// `t`: that element (and a tuple's others at the same point), its
    /// row, or for a scatter everything.
    fn compute(
        &self,
        env: &Env,
        st: &Stage,
        t: TensorId,
        off: usize,
    ) -> Result<Entries, InterpError> {
        let mut entries = Vec::new();
        if let Some(sc) = st.scatter() {
            let o = st.output;
            let n = self.shapes[o.0 as usize].iter().product::<i64>() as usize;
            let mut out = Buffer::zeros(self.k.tensor(o).dtype, n);
            scatter_stage(env, st, sc, &[], &mut out)?;
            entries.extend((0..n).map(|i| (o, i, out.get(i))));
        } else if row_count(env, st).is_some() {
            stage_row(env, st, row_of(env, st, t, off), &[], &mut entries)?;
        } else {
            let ext = &self.shapes[st.output.0 as usize];
            let nred = st.reduce().map_or(0, |r| r.axes.len());
            let mut point = vec![0i64; ext.len() + nred];
            unflatten(off as i64, ext, &mut point[..ext.len()]);
            let mut extra = Vec::new();
            let v = env.point_value(st, &mut point, ext.len(), &[], &mut extra)?;
            entries.push((st.output, off, v));
            entries.extend(extra.into_iter().map(|(o, x)| (o, off, x)));
        }
        Ok(entries)
    }
}
