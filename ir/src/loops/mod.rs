//! The loop IR: what lowering produces and every back end (LLVM codegen,
//! the host JIT, the interpreter's loop-IR mode) consumes.
//!
//! It is explicit about everything a back end must not guess: which
//! variables come from `blockIdx`/`threadIdx`, which loops remain (and
//! whether they are unrolled), where guards sit, the launch geometry, and
//! the kernel's argument list in order: the buffers the stage touches (in
//! tensor order), then every size (`i32`), then every parameter.
//!
//! Expressions are the tensor IR's [`Expr`](crate::kernel::Expr); which of
//! its variants may appear here (register and LDS reads, not the
//! `Reduced` placeholder) is enforced by [`verify`], run after every
//! lowering pass in debug builds and tests. Rewriters go through the one
//! exhaustive traversal in [`visit`], so a new statement kind fails to
//! compile until each of them says what it does with it.

use crate::index::{Index, SizeId, VarId};
use crate::kernel::{Expr, ParamId, StageId, TensorId};
use crate::schedule::{GpuAxis, Guard, LoopVar};

mod print;
pub mod verify;
pub mod version;
pub mod visit;

pub use print::Pretty;
pub use verify::{verify, VerifyError};

#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub kernels: Vec<GpuKernel>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// Read, combined with and written back atomically (a scatter's output).
    Update,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ArgKind {
    Buffer { tensor: TensorId, access: Access },
    Size(SizeId),
    Param(ParamId),
}

#[derive(Clone, Debug, PartialEq)]
pub struct KernelArg {
    pub name: String,
    pub kind: ArgKind,
}

/// How a kernel forms addresses. Chosen from the sizes' upper bounds
/// (`[kernel] max`, else `i32::MAX`) so that no index arithmetic overflows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Addressing {
    /// Every tensor is under 4 GiB: byte offsets are formed in 32 bits and
    /// zero-extended (the scalar base + 32-bit vector offset mode).
    Offset32,
    /// Element indices stay below 2^31 but byte offsets may not: the index is
    /// formed in 32 bits, the byte offset in 64.
    Index32,
    /// Element indices may reach 2^31 or more: flattening is done in 64 bits.
    Index64,
}

/// One GPU kernel: a stage with its launch geometry and loop body.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuKernel {
    /// Symbol name: the kernel's name, or `kernel_stage` when there are several stages.
    pub name: String,
    pub stage: StageId,
    pub args: Vec<KernelArg>,
    /// Work-group size (threads in x, y, z); a constant.
    pub block: [u32; 3],
    /// Work-groups in x, y, z; expressions of sizes.
    pub grid: [Index; 3],
    pub vars: Vec<LoopVar>,
    pub body: Vec<Stmt>,
    pub addressing: Addressing,
    /// Per-thread arrays (reduction accumulators), indexed by [`ExprKind::Local`].
    pub locals: Vec<Local>,
    /// LDS arrays shared by the work-group, indexed by [`ExprKind::Shared`].
    pub shared: Vec<Local>,
    /// Work-groups that must fit on one SM (CU) as far as registers go
    /// (`occupancy(blocks=N)`); back ends pass it to the register allocator.
    pub min_blocks: Option<u32>,
    /// LDS arrays sized at launch: (array, the elements the kernel uses at
    /// run time, an expression of sizes at most the array's `len`). A tile
    /// or part over loops of symbolic extent is declared at its bound and
    /// used only as far as the loops reach; back ends that can size shared
    /// memory at launch (AMDGPU, NVIDIA) give it only that much, after the
    /// static arrays ([`GpuKernel::dynamic_layout`]).
    pub dynamic_shared: Vec<(u32, Index)>,
    /// The tensors its [`Stmt::TensorCopy`]s read, each with the box one
    /// copy moves (`cache_read(..., tma=1)`). A target with the tensor
    /// memory accelerator takes one hidden argument after the others: the
    /// address of these maps, 128 bytes each in this order, which the
    /// runtime encodes at launch from the tensors' addresses and shapes.
    pub tensor_maps: Vec<TensorMap>,
    /// What a launch must satisfy ([`crate::plan::Requirement`]).
    pub requires: Vec<crate::plan::Requirement>,
}

/// How the runtime describes one tensor to the tensor memory accelerator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMap {
    pub tensor: TensorId,
    /// Elements of the box per dimension, outermost first; the innermost
    /// is `swizzle` bytes, the span of the swizzle.
    pub boxed: Vec<u32>,
    /// The swizzle's span: 128, 64 or 32 bytes.
    pub swizzle: u32,
}

/// A per-thread array. With constant indices (unrolled loops) LLVM keeps it
/// in registers.
#[derive(Clone, Debug, PartialEq)]
pub struct Local {
    pub name: String,
    pub dtype: crate::DType,
    pub len: u32,
    /// The step that asked for it (a cache, a compute_at, a thread-bound
    /// reduction loop), for messages about its size.
    pub span: crate::Span,
}

impl Local {
    /// Bytes it occupies, rounded up to 4 as LLVM aligns LDS arrays.
    pub fn bytes(&self) -> u64 {
        (self.len as u64 * self.dtype.size() as u64).next_multiple_of(4)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `var` is the value of a hardware index.
    Bind { var: VarId, axis: GpuAxis },
    Loop {
        var: VarId,
        extent: Index,
        unroll: bool,
        body: Vec<Stmt>,
    },
    /// Runs `body` when every guard holds.
    If { guards: Vec<Guard>, body: Vec<Stmt> },
    /// `tensor[indices] op= value` as one atomic read-modify-write (a
    /// scatter, [`crate::kernel::Scatter`]): subscripts as a gather's, and
    /// an update whose subscripts leave the tensor is dropped. With
    /// `shared`, the update goes to that LDS array instead, a copy of the
    /// tensor laid out as it is (`privatize`), atomically within the
    /// work-group.
    Scatter {
        tensor: TensorId,
        indices: Vec<Expr>,
        op: crate::kernel::ReduceOp,
        value: Expr,
        shared: Option<u32>,
    },
    Store {
        tensor: TensorId,
        indices: Vec<Index>,
        value: Expr,
    },
    /// Runs `fast` when every guard holds, else `slow` (a vectorized loop:
    /// the fast path has no per-lane guards).
    Unswitch {
        guards: Vec<Guard>,
        fast: Vec<Stmt>,
        slow: Vec<Stmt>,
    },
    /// `shared[shared][index] = value`, in the work-group's LDS.
    SharedStore {
        shared: u32,
        index: Index,
        value: Expr,
    },
    /// Every thread of the work-group waits here, and LDS writes before it
    /// are visible to reads after it.
    Barrier,
    /// `locals[local][index] = value`
    LocalStore {
        local: u32,
        index: Index,
        value: Expr,
    },
    /// `width` consecutive values copied at once into `mem` array `array`
    /// at `index..index + width` (a multiple of `width`). `value` is either
    /// a tensor load `tensor[i.., c]`, whose lane `l` reads
    /// `tensor[i.., clamp(c + l)]` with the last index clamped into the
    /// tensor's last dimension (one vector access where every lane is inside
    /// the tensor and the address is aligned to the whole vector, clamped
    /// scalar loads elsewhere); or a register-array read `locals[r][j]`,
    /// whose lane `l` reads `locals[r][j + l]`. The other indices are in
    /// range. Made by `cache_read(..., vec=W)` and its prefetch.
    ///
    /// `asynchronous` (LDS fills from a tensor only): the vector path may
    /// complete later, any time before this thread's next
    /// [`Stmt::AsyncWait`] that leaves fewer groups pending than were
    /// committed after it (`cp.async`); a target without asynchronous
    /// copies, and the interpreter, copy at once, which is one of the
    /// orders allowed.
    ///
    /// `zero` (fills from a tensor only): a lane whose element lies outside
    /// the tensor reads zero instead of a clamped element, and the indices
    /// other than the last may then be out of range. A tile filled so
    /// holds zeros past the tensor, which lets matrix operands read from it
    /// without a select per element (AMD's k tails).
    Fill {
        mem: Mem,
        array: u32,
        index: Index,
        value: Expr,
        width: u32,
        asynchronous: bool,
        zero: bool,
    },
    /// Closes the group of this thread's asynchronous fills issued since
    /// the previous commit.
    AsyncCommit,
    /// Waits until at most `pending` of this thread's committed groups are
    /// still in flight. Other threads' copies become visible only after a
    /// following [`Stmt::Barrier`].
    AsyncWait { pending: u32 },
    /// `count` 8x8 matrices of 16-bit elements loaded from LDS array
    /// `shared` by every lane of a wave together (`ldmatrix`, transposed
    /// with `trans`): this lane supplies the element index `row` of one
    /// matrix row (lanes `8j..8j+8` the rows of matrix `j`) and receives two
    /// elements of each matrix. Its meaning is `stores`, the LDS reads into
    /// fragment registers it replaces; lowering made it only where they are
    /// exactly what the instruction delivers to every lane, and targets
    /// without the instruction run them. Never under a guard that differs
    /// between the lanes of a wave.
    MatrixLoad {
        shared: u32,
        row: Index,
        count: u32,
        trans: bool,
        stores: Vec<Stmt>,
    },
    /// One matrix instruction, executed by every lane of a wave together:
    /// D = A·B + C where this lane's elements of A, B and C/D are
    /// `locals[a.0][a.1 + e]`, `locals[b.0][b.1 + e]` and
    /// `locals[acc.0][acc.1 + e]` (D overwrites C), placed as the
    /// instruction's layout says (`a_at`, `b_at`, `acc_at`). Never under a
    /// guard that differs between the lanes of a wave.
    Matrix {
        instr: &'static rocmc_target::matrix::MatrixInstr,
        a: (u32, Index),
        b: (u32, Index),
        acc: (u32, Index),
        /// The lane within the wave (threadIdx.x) and the wave within the
        /// work-group: what the CPU's execution of the wave needs.
        lane: Index,
        wave: Index,
        /// For a warpgroup instruction, which reads B (and A, where
        /// [`MatrixInstr::a_in_shared`](rocmc_target::matrix::MatrixInstr::a_in_shared))
        /// from LDS: the registers holding their descriptors, set by
        /// [`Stmt::MatrixDesc`]; A's is `None` where A is in registers; the
        /// whole is `None` until pass `matrix_descs` proves them. `a` and
        /// `b` are then what the CPU runs.
        desc: Option<[Option<OperandDesc>; 2]>,
    },
    /// The shared-memory descriptor of one operand of a matrix instruction
    /// that reads A or B from LDS (`wgmma`): the operand's first row starts
    /// at element `start` of LDS array `shared`, laid out swizzled in rows
    /// of `row_bytes` (`cache_read(..., swizzle=128)`: rows of 128 bytes,
    /// 16-byte chunk `c` of row `r` at `c ^ r % 8`; 64 and 32 as
    /// [`crate::lower`]'s swizzle module says; the array 1024-byte
    /// aligned). The
    /// descriptor goes to `locals[local][index]`, an i64. Its meaning on
    /// every target that does not read operands through descriptors (the
    /// CPU, the interpreter) is `stores`, the fills of the operand's
    /// registers it replaces: pass `matrix_descs` made it only where they
    /// read exactly the elements the descriptor names.
    MatrixDesc {
        local: u32,
        index: Index,
        shared: u32,
        start: Index,
        /// `None`: the operand's rows run along m or n and its 128-byte
        /// rows along k ("K-major"). `Some(bytes)`: transposed ("MN-major",
        /// B stored `[K, N]`): the tile's rows run along k and its 128-byte
        /// column blocks along n, `bytes` apart.
        mn_block: Option<u32>,
        /// The swizzle's span: 128, 64 or 32 bytes a row.
        row_bytes: u32,
        stores: Vec<Stmt>,
    },
    /// `boxes` boxes of map `map` of the kernel's
    /// [`GpuKernel::tensor_maps`] copied into LDS array `shared` by the
    /// tensor memory accelerator (`cp.async.bulk.tensor`): box `b` starts
    /// at `tensor[coords..]` moved `b` boxes along the innermost dimension
    /// and lands at element `start + b * (the box's elements)` (1024-byte
    /// aligned), swizzled as `cache_read(..., swizzle=S)` lays its blocks
    /// out. Executed by the work-group together: the first
    /// thread issues it, and its bytes count towards mbarrier `bar` (an i64
    /// at `shared[bar.0][bar.1]`), which the readers wait on
    /// ([`Mbarrier::Wait`]). Its meaning elsewhere (the CPU, the
    /// interpreter) is `fills`, each thread's share of the same tile, run
    /// at once: like the accelerator, they write zeros past the tensor
    /// (so a matrix product's partial tile of k needs no tail).
    TensorCopy {
        tensor: TensorId,
        map: u32,
        coords: Vec<Index>,
        boxes: u32,
        shared: u32,
        start: Index,
        bar: (u32, Index),
        fills: Vec<Stmt>,
    },
    /// An operation on an LDS mbarrier (the completion of
    /// [`Stmt::TensorCopy`]s); a no-op where copies complete at once.
    Mbarrier(Mbarrier),
    /// Orders a warpgroup's asynchronous matrix instructions (`wgmma`); a
    /// no-op where matrix instructions complete at once (every other
    /// target, the CPU, the interpreter).
    MatrixAsync(MatrixAsync),
    /// `locals[local][index] = value` as lane `lane ^ mask` of this wave
    /// computed it (a butterfly exchange: `shfl.sync.bfly` on NVIDIA,
    /// `ds_bpermute` on AMD), executed by every lane of a wave together;
    /// `value` is an f32 of this lane's registers. `mask` is below the
    /// wave size. On the CPU (and in the interpreter of lowered kernels)
    /// it becomes an exchange through LDS between two barriers. Never
    /// under a guard that differs between the lanes of a wave.
    Shuffle {
        local: u32,
        index: Index,
        value: Expr,
        mask: u32,
        /// As [`Stmt::Matrix`]'s: the lane within the wave (threadIdx.x)
        /// and the wave within the work-group, and the wave's size.
        lane: Index,
        wave: Index,
        width: u32,
    },
}

impl Stmt {
    /// Rebuilds the statement with `f` applied to each statement list it
    /// holds (a loop's or an `If`'s body, both sides of an unswitch).
    pub fn map_bodies(self, f: &mut dyn FnMut(Vec<Stmt>) -> Vec<Stmt>) -> Stmt {
        match self {
            Stmt::Loop {
                var,
                extent,
                unroll,
                body,
            } => Stmt::Loop {
                var,
                extent,
                unroll,
                body: f(body),
            },
            Stmt::If { guards, body } => Stmt::If {
                guards,
                body: f(body),
            },
            Stmt::Unswitch { guards, fast, slow } => Stmt::Unswitch {
                guards,
                fast: f(fast),
                slow: f(slow),
            },
            Stmt::MatrixLoad {
                shared,
                row,
                count,
                trans,
                stores,
            } => Stmt::MatrixLoad {
                shared,
                row,
                count,
                trans,
                stores: f(stores),
            },
            Stmt::MatrixDesc {
                local,
                index,
                shared,
                start,
                mn_block,
                row_bytes,
                stores,
            } => Stmt::MatrixDesc {
                local,
                index,
                shared,
                start,
                mn_block,
                row_bytes,
                stores: f(stores),
            },
            Stmt::TensorCopy {
                tensor,
                map,
                coords,
                boxes,
                shared,
                start,
                bar,
                fills,
            } => Stmt::TensorCopy {
                tensor,
                map,
                coords,
                boxes,
                shared,
                start,
                bar,
                fills: f(fills),
            },
            // Listed, not `_`: a new statement kind with a body must be handled.
            s @ (Stmt::Bind { .. }
            | Stmt::Store { .. }
            | Stmt::Scatter { .. }
            | Stmt::SharedStore { .. }
            | Stmt::Fill { .. }
            | Stmt::AsyncCommit
            | Stmt::AsyncWait { .. }
            | Stmt::Barrier
            | Stmt::LocalStore { .. }
            | Stmt::Matrix { .. }
            | Stmt::MatrixAsync(_)
            | Stmt::Mbarrier(_)
            | Stmt::Shuffle { .. }) => s,
        }
    }
}

/// Where a warpgroup instruction finds one operand's descriptor
/// (`locals[local][index]`), and whether the operand is transposed
/// (MN-major, [`Stmt::MatrixDesc`]'s `mn_block`).
#[derive(Clone, Debug, PartialEq)]
pub struct OperandDesc {
    pub local: u32,
    pub index: Index,
    pub transposed: bool,
}

/// The ordering statements of asynchronous matrix instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixAsync {
    /// Before the first instruction of a group: the accumulators and the
    /// LDS operands written before it are what the instructions read
    /// (`wgmma.fence`).
    Fence,
    /// Closes the group of instructions issued since the last commit.
    Commit,
    /// Waits until at most `pending` groups are in flight; the accumulators
    /// of the others may then be read and their LDS operands overwritten.
    Wait(u32),
}

/// What a [`Stmt::Mbarrier`] does to the mbarrier at `shared[bar.0][bar.1]`
/// (an i64). Executed by the work-group together.
#[derive(Clone, Debug, PartialEq)]
pub enum Mbarrier {
    /// The first thread initialises it for one arrival per phase; a
    /// [`Stmt::Barrier`] must follow before any other use.
    Init { bar: (u32, Index) },
    /// The first thread arrives, expecting `bytes` of copies to complete
    /// the current phase.
    Expect { bar: (u32, Index), bytes: u32 },
    /// Every thread waits until the phase of parity `parity` (0 or 1) has
    /// completed: the copies counted towards it are visible.
    Wait { bar: (u32, Index), parity: Index },
    /// The first thread invalidates it, after a [`Stmt::Barrier`] that
    /// follows its last use, so that it may be initialised again.
    Inval { bar: (u32, Index) },
}

impl Mbarrier {
    pub fn bar(&self) -> &(u32, Index) {
        match self {
            Mbarrier::Init { bar }
            | Mbarrier::Inval { bar }
            | Mbarrier::Expect { bar, .. }
            | Mbarrier::Wait { bar, .. } => bar,
        }
    }
}

/// Where a [`Stmt::Fill`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mem {
    /// An LDS array (`GpuKernel::shared`).
    Shared,
    /// A register array (`GpuKernel::locals`).
    Local,
}

/// Lane `l` of a [`Stmt::Fill`]'s value: a load with its last index plus
/// `l` clamped into `0..extent` of the tensor's last dimension, or the
/// register `l` places further (converted, under a cast); for a `zero` fill, that load where every
/// index lies inside the tensor and zero elsewhere (each index clamped,
/// so that the load itself stays in range). The one definition of a fill's
/// lanes, for the interpreter and the scalar path of code generation alike.
pub fn fill_lane(k: &crate::kernel::Kernel, value: &Expr, l: u32, zero: bool) -> Expr {
    use crate::index::IOp;
    use crate::kernel::{BinOp, ExprKind};
    let ExprKind::Load { tensor, indices } = &value.kind else {
        // Registers converted on their way into a tile (`dtype=`).
        if let ExprKind::Cast(inner) = &value.kind {
            if matches!(inner.kind, ExprKind::Local { .. }) {
                return Expr {
                    kind: ExprKind::Cast(Box::new(fill_lane(k, inner, l, false))),
                    dtype: value.dtype,
                };
            }
        }
        if let ExprKind::Local { local, index } = &value.kind {
            return Expr {
                kind: ExprKind::Local {
                    local: *local,
                    index: index.clone() + Index::c(i64::from(l)),
                },
                dtype: value.dtype,
            };
        }
        return value.clone();
    };
    let shape = &k.tensor(*tensor).shape;
    let mut raw = indices.clone();
    if let Some(last) = raw.last_mut() {
        *last = last.clone() + Index::c(i64::from(l));
    }
    let clamp = |i: &Index, ext: &Index| {
        Index::bin(
            IOp::Max,
            Index::bin(IOp::Min, i.clone(), ext.clone() - Index::c(1)),
            Index::c(0),
        )
    };
    let n = raw.len();
    let clamped: Vec<Index> = raw
        .iter()
        .zip(shape)
        .enumerate()
        .map(|(d, (i, ext))| {
            if zero || d + 1 == n {
                clamp(i, ext)
            } else {
                i.clone()
            }
        })
        .collect();
    let load = Expr {
        kind: ExprKind::Load {
            tensor: *tensor,
            indices: clamped,
        },
        dtype: value.dtype,
    };
    if !zero {
        return load;
    }
    let int = |ix: Index| Expr {
        kind: ExprKind::Index(ix),
        dtype: crate::DType::I32,
    };
    let cmp = |op: BinOp, a: Index, b: Index| Expr {
        kind: ExprKind::Binary(op, Box::new(int(a)), Box::new(int(b))),
        dtype: crate::DType::Bool,
    };
    let inside = raw
        .iter()
        .zip(shape)
        .flat_map(|(i, ext)| {
            [
                cmp(BinOp::Le, Index::c(0), i.clone()),
                cmp(BinOp::Lt, i.clone(), ext.clone()),
            ]
        })
        .reduce(|a, b| Expr {
            kind: ExprKind::Binary(BinOp::And, Box::new(a), Box::new(b)),
            dtype: crate::DType::Bool,
        });
    match inside {
        Some(c) => Expr {
            kind: ExprKind::Select(
                Box::new(c),
                Box::new(load),
                Box::new(crate::kernel::ReduceOp::Sum.identity(value.dtype)),
            ),
            dtype: value.dtype,
        },
        None => load,
    }
}

impl GpuKernel {
    /// The bytes LDS array `i` must be aligned to: its element's size, the
    /// widest vector a [`Stmt::Fill`] stores into it, 16 where a
    /// [`Stmt::MatrixLoad`] reads it, 1024 where a [`Stmt::MatrixDesc`]
    /// describes it.
    pub fn shared_align(&self, i: u32) -> u32 {
        let size = self
            .shared
            .get(i as usize)
            .map_or(1, |l| l.dtype.size() as u32);
        let mut align = size;
        visit::walk(&self.body, &mut |s| {
            match s {
                Stmt::Fill {
                    mem: Mem::Shared,
                    array,
                    width,
                    ..
                } if *array == i => align = align.max(size * width),
                // Each row ldmatrix reads is 16 aligned bytes.
                Stmt::MatrixLoad { shared, .. } if *shared == i => align = align.max(16),
                // The swizzle is of address bits 4-9: the array starts on 1024.
                Stmt::MatrixDesc { shared, .. } | Stmt::TensorCopy { shared, .. }
                    if *shared == i =>
                {
                    align = align.max(1024)
                }
                Stmt::Mbarrier(m) if m.bar().0 == i => align = align.max(8),
                _ => {}
            }
        });
        align
    }

    /// The elements LDS array `i` uses at run time, if it is sized at launch.
    pub fn dynamic_len(&self, i: u32) -> Option<&Index> {
        self.dynamic_shared
            .iter()
            .find(|(a, _)| *a == i)
            .map(|(_, n)| n)
    }

    /// Where each LDS array starts when those sized at launch follow the
    /// others: static arrays at their [`GpuKernel::shared_layout`] offsets
    /// among themselves; each array sized at launch at an expression of
    /// sizes, from `start` (16-aligned) on, 16-aligned; and the end of the
    /// last, the bytes the launch needs from `start`. `None` when no array
    /// is sized at launch.
    pub fn dynamic_layout(&self, start: u64) -> Option<(Vec<Index>, Index)> {
        if self.dynamic_shared.is_empty() {
            return None;
        }
        let mut offsets = vec![Index::c(0); self.shared.len()];
        let mut end = 0u64;
        for (i, l) in self.shared.iter().enumerate() {
            if self.dynamic_len(i as u32).is_some() {
                continue;
            }
            let align = u64::from(self.shared_align(i as u32));
            let at = end.div_ceil(align) * align;
            offsets[i] = Index::c(at as i64);
            end = at + l.bytes();
        }
        let mut at = Index::c(start.div_ceil(16) as i64 * 16);
        for (i, l) in self.shared.iter().enumerate() {
            let Some(n) = self.dynamic_len(i as u32) else {
                continue;
            };
            offsets[i] = at.clone();
            let bytes = n.clone() * Index::c(l.dtype.size() as i64);
            at = at + bytes.ceil_div(Index::c(16)) * Index::c(16);
        }
        Some((offsets, at))
    }

    /// The bytes of LDS the static arrays take (those sized at launch left out).
    pub fn static_shared_bytes(&self) -> u64 {
        let mut end = 0u64;
        for (i, l) in self.shared.iter().enumerate() {
            if self.dynamic_len(i as u32).is_some() {
                continue;
            }
            let align = u64::from(self.shared_align(i as u32));
            end = end.div_ceil(align) * align + l.bytes();
        }
        end
    }

    /// Where each LDS array starts when all of them are laid out in one
    /// block of shared memory, in declaration order, each at its
    /// [`GpuKernel::shared_align`]; and the bytes the block needs.
    pub fn shared_layout(&self) -> (Vec<u64>, u64) {
        let mut offsets = Vec::with_capacity(self.shared.len());
        let mut end = 0u64;
        for (i, l) in self.shared.iter().enumerate() {
            let align = u64::from(self.shared_align(i as u32));
            let at = end.div_ceil(align) * align;
            offsets.push(at);
            end = at + l.bytes();
        }
        (offsets, end)
    }

    pub fn threads(&self) -> u32 {
        self.block.iter().product()
    }
}
