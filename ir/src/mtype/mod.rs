//! What the IR knows of a target's matrix instructions: the operand
//! types they take, their names in `mma(instr=...)`, and the target's
//! [`MatrixUnit`]. Shared by the default-schedule rules and lowering.

use crate::DType;
use rocmc_target::matrix::{MType, MatrixInstr};

pub use rocmc_target::matrix::MatrixUnit;

pub mod rows;

/// The matrix-operand type of a dtype, if matrix instructions take it.
pub fn mtype(t: DType) -> Option<MType> {
    Some(match t {
        DType::F16 => MType::F16,
        DType::BF16 => MType::Bf16,
        DType::I8 => MType::I8,
        DType::F32 => MType::F32,
        DType::I32 => MType::I32,
        DType::F8E4M3FN | DType::F8E4M3FNUZ => MType::Fp8,
        DType::F8E5M2 | DType::F8E5M2FNUZ => MType::Bf8,
        _ => return None,
    })
}

/// Mixed operands `[a, b, acc]` (f16 activations by i8 weights, as a
/// weight-only quantised layer is written: `sum(f32(X[i, k]) *
/// f32(W[k, j]), k)`), which no matrix instruction takes, as the
/// instruction of the 16-bit float operand's type takes them: the 8-bit
/// integer or float operand converted to it, which keeps every value
/// ([`DType::holds_exactly`]); the product of two such values is exact in
/// f32, so the sum is the one written. `None` where neither operand
/// converts so.
pub fn widened([a, b, acc]: [DType; 3]) -> Option<[DType; 3]> {
    let wide = |t: DType| matches!(t, DType::F16 | DType::BF16);
    let narrow = |t: DType| t.size() == 1 && t != DType::Bool;
    match () {
        _ if wide(a) && narrow(b) && a.holds_exactly(b) => Some([a, a, acc]),
        _ if wide(b) && narrow(a) && b.holds_exactly(a) => Some([b, b, acc]),
        _ => None,
    }
}

/// The 8-bit float types a unit's matrix instructions read: gfx942
/// the FNUZ encodings, gfx950 and gfx12 the OCP ones (LLVM's intrinsics
/// are the same; the hardware differs).
pub fn f8_types(unit: &MatrixUnit) -> [DType; 2] {
    if unit.fnuz_f8() {
        [DType::F8E4M3FNUZ, DType::F8E5M2FNUZ]
    } else {
        [DType::F8E4M3FN, DType::F8E5M2]
    }
}

/// The name an `instr=` argument uses: the ISA's on AMD, `mma_m16n8k16_f16`
/// for NVIDIA's `mma.sync` and `wgmma_m64n256k16_f16` for `wgmma` (whose
/// PTX names have dots).
pub fn instr_id(i: &MatrixInstr) -> String {
    if i.name.starts_with("mma.sync") {
        format!("mma_m{}n{}k{}_{}", i.m, i.n, i.k, i.a)
    } else if i.warpgroup() && !i.a_in_shared() {
        format!("wgmma_m{}n{}k{}_{}_rs", i.m, i.n, i.k, i.a)
    } else if i.name.starts_with("wgmma") {
        format!("wgmma_m{}n{}k{}_{}", i.m, i.n, i.k, i.a)
    } else {
        i.name.to_string()
    }
}
