//! Matrix instructions: which matrix-multiply instructions each target has
//! (MFMA on CDNA, WMMA on RDNA 3 and 4, `mma.sync` on NVIDIA sm_80+), with
//! their LLVM intrinsic, shape and types, and each one's per-lane register
//! layout: which lane holds which element of A, B and the accumulator.
//!
//! The layout is the instruction's meaning as much as its arithmetic: a
//! wave computes D = A·B + C only if every lane put the right elements in
//! its registers. [`execute`] runs an instruction from per-lane registers
//! through the layout, so a lowering that loads fragments in the wrong
//! places computes a wrong result on the CPU too.
//!
//! Where the facts come from, and how they are checked:
//! - which targets have which instruction, and its intrinsic's signature:
//!   LLVM 22 (`IntrinsicsAMDGPU.td`, `IntrinsicsNVVM.td`); the codegen
//!   crate's tests compile every instruction for every AMD processor and
//!   NVIDIA sm_80/sm_90 with `llc-22` and require LLVM to accept exactly
//!   the targets listed here;
//! - layouts: AMD's CDNA 3/4 and RDNA 3/4 ISA documents and the PTX ISA's
//!   "Matrix fragments for mma.m16n8k16 / m16n8k32". The `mma.sync`
//!   layouts are verified on a real H100 (`rocmc-gpu-check mma`); the AMD
//!   ones await an AMD GPU.

use std::fmt;

/// An element type of a matrix instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MType {
    F16,
    Bf16,
    I8,
    /// 8-bit float E4M3 (FNUZ on gfx942, OCP on gfx950 and gfx12).
    Fp8,
    /// 8-bit float E5M2 (FNUZ on gfx942, OCP on gfx950 and gfx12).
    Bf8,
    F32,
    I32,
}

impl MType {
    /// Bits per element.
    pub fn bits(self) -> u32 {
        match self {
            MType::F16 | MType::Bf16 => 16,
            MType::I8 | MType::Fp8 | MType::Bf8 => 8,
            MType::F32 | MType::I32 => 32,
        }
    }
}

impl fmt::Display for MType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MType::F16 => "f16",
            MType::Bf16 => "bf16",
            MType::I8 => "i8",
            MType::Fp8 => "fp8",
            MType::Bf8 => "bf8",
            MType::F32 => "f32",
            MType::I32 => "i32",
        })
    }
}

/// The instruction family, which fixes the layout rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// CDNA's matrix fused multiply-add (wave64).
    Mfma,
    /// RDNA 3's WMMA (gfx11): A and B rows replicated in the upper half-wave.
    WmmaGfx11,
    /// RDNA 4's WMMA (gfx12): A and B split over the half-waves.
    WmmaGfx12,
    /// NVIDIA's warp-level `mma.sync` (sm_80+), warp of 32.
    MmaSync,
    /// Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a only): four warps
    /// (128 lanes) together, A and B read from shared memory through
    /// descriptors, the accumulator in registers. A's and B's per-lane
    /// layouts here are rocmc's own, not the hardware's: they say which
    /// lane loads which element when the operands go through registers
    /// (the CPU's emulation, and the meaning a descriptor must match).
    Wgmma,
    /// `wgmma.mma_async` with A from registers ("RS"): B through a
    /// descriptor as [`Family::Wgmma`]'s, A in the hardware's register
    /// layout (per warp of the four, `mma.m16n8k16`'s A for its 16 rows).
    /// What attention's P·V needs: the weights never leave the registers.
    WgmmaRegA,
}

/// Which processors have an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// AMD processors by name.
    Amd(&'static [&'static str]),
    /// NVIDIA from this compute capability (`major * 10 + minor`) on.
    NvidiaFrom(u32),
    /// Exactly these NVIDIA processors (architecture-specific features:
    /// `wgmma` exists on `sm_90a` and on no later GPU).
    NvidiaOnly(&'static [&'static str]),
}

/// One matrix instruction for one wave size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixInstr {
    /// The ISA's name (`v_mfma_f32_16x16x16_f16`, `mma.sync.m16n8k16.f32.f16`).
    pub name: &'static str,
    /// The LLVM intrinsic, mangled as LLVM 22 names it.
    pub intrinsic: &'static str,
    pub family: Family,
    /// Rows of A and D.
    pub m: u32,
    /// Columns of B and D.
    pub n: u32,
    /// The reduction length of one instruction.
    pub k: u32,
    /// Element type of A.
    pub a: MType,
    /// Element type of B.
    pub b: MType,
    /// Element type of C and D.
    pub acc: MType,
    /// Lanes executing it together.
    pub wave: u32,
    /// LLVM types of A, B, C: (type, how many operands of it).
    pub llvm_a: (&'static str, u32),
    pub llvm_b: (&'static str, u32),
    pub llvm_c: (&'static str, u32),
    /// Where it exists.
    pub available: Availability,
    /// A view of the instruction with its operands swapped: it computes
    /// `D^T = B^T·A^T`, so its A is the hardware's B transposed, its B the
    /// hardware's A, and a lane's accumulator element `e` is the hardware's
    /// element `e` transposed. Codegen issues the hardware instruction with
    /// the two operands exchanged ([`MatrixInstr::hardware`]). What
    /// attention's scores need on MFMA: a query row then spans 2 or 4
    /// lanes instead of 16 or 32. Only [`MatrixInstr::transposed_view`]
    /// makes one.
    pub transposed: bool,
}

// gfx9-4-generic (code for gfx942 and gfx950 alike) has what both have,
// except fp8/bf8: gfx942 encodes them FNUZ and gfx950 OCP.
const GFX908: &[&str] = &["gfx908", "gfx90a", "gfx942", "gfx950", "gfx9-4-generic"];
const GFX908_90A: &[&str] = &["gfx908", "gfx90a"];
const GFX90A: &[&str] = &["gfx90a", "gfx942", "gfx950", "gfx9-4-generic"];
const GFX942: &[&str] = &["gfx942", "gfx950", "gfx9-4-generic"];
const GFX942_FP8: &[&str] = &["gfx942", "gfx950"];
const GFX950: &[&str] = &["gfx950"];
const GFX11: &[&str] = &[
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1103",
    "gfx1150",
    "gfx1151",
    "gfx1152",
    "gfx1153",
    "gfx11-generic",
];
const GFX12: &[&str] = &["gfx1200", "gfx1201", "gfx12-generic"];

macro_rules! mi {
    ($name:expr, $intr:expr, $fam:ident, $m:expr, $n:expr, $k:expr, $a:ident, $b:ident, $acc:ident, $wave:expr,
     $la:expr, $lb:expr, $lc:expr, $avail:expr) => {
        MatrixInstr {
            name: $name,
            intrinsic: $intr,
            family: Family::$fam,
            m: $m,
            n: $n,
            k: $k,
            a: MType::$a,
            b: MType::$b,
            acc: MType::$acc,
            wave: $wave,
            llvm_a: $la,
            llvm_b: $lb,
            llvm_c: $lc,
            available: $avail,
            transposed: false,
        }
    };
}

use Availability::{Amd, NvidiaFrom, NvidiaOnly};

const SM90A: &[&str] = &["sm_90a"];

/// Every matrix instruction rocmc knows, per wave size.
#[rustfmt::skip]
pub const INSTRUCTIONS: &[MatrixInstr] = &[
    // CDNA 1-4: f16 and i8 since gfx908, bf16 ("_1k") since gfx90a.
    mi!("v_mfma_f32_32x32x8_f16", "llvm.amdgcn.mfma.f32.32x32x8f16", Mfma, 32, 32, 8, F16, F16, F32, 64, ("<4 x half>", 1), ("<4 x half>", 1), ("<16 x float>", 1), Amd(GFX908)),
    mi!("v_mfma_f32_16x16x16_f16", "llvm.amdgcn.mfma.f32.16x16x16f16", Mfma, 16, 16, 16, F16, F16, F32, 64, ("<4 x half>", 1), ("<4 x half>", 1), ("<4 x float>", 1), Amd(GFX908)),
    mi!("v_mfma_f32_32x32x8_bf16", "llvm.amdgcn.mfma.f32.32x32x8bf16.1k", Mfma, 32, 32, 8, Bf16, Bf16, F32, 64, ("<4 x i16>", 1), ("<4 x i16>", 1), ("<16 x float>", 1), Amd(GFX90A)),
    mi!("v_mfma_f32_16x16x16_bf16", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k", Mfma, 16, 16, 16, Bf16, Bf16, F32, 64, ("<4 x i16>", 1), ("<4 x i16>", 1), ("<4 x float>", 1), Amd(GFX90A)),
    mi!("v_mfma_i32_32x32x8_i8", "llvm.amdgcn.mfma.i32.32x32x8i8", Mfma, 32, 32, 8, I8, I8, I32, 64, ("i32", 1), ("i32", 1), ("<16 x i32>", 1), Amd(GFX908_90A)),
    mi!("v_mfma_i32_16x16x16_i8", "llvm.amdgcn.mfma.i32.16x16x16i8", Mfma, 16, 16, 16, I8, I8, I32, 64, ("i32", 1), ("i32", 1), ("<4 x i32>", 1), Amd(GFX908_90A)),
    // CDNA 3: i8 with twice the k, fp8/bf8.
    mi!("v_mfma_i32_32x32x16_i8", "llvm.amdgcn.mfma.i32.32x32x16.i8", Mfma, 32, 32, 16, I8, I8, I32, 64, ("i64", 1), ("i64", 1), ("<16 x i32>", 1), Amd(GFX942)),
    mi!("v_mfma_i32_16x16x32_i8", "llvm.amdgcn.mfma.i32.16x16x32.i8", Mfma, 16, 16, 32, I8, I8, I32, 64, ("i64", 1), ("i64", 1), ("<4 x i32>", 1), Amd(GFX942)),
    mi!("v_mfma_f32_16x16x32_fp8_fp8", "llvm.amdgcn.mfma.f32.16x16x32.fp8.fp8", Mfma, 16, 16, 32, Fp8, Fp8, F32, 64, ("i64", 1), ("i64", 1), ("<4 x float>", 1), Amd(GFX942_FP8)),
    mi!("v_mfma_f32_32x32x16_fp8_fp8", "llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8", Mfma, 32, 32, 16, Fp8, Fp8, F32, 64, ("i64", 1), ("i64", 1), ("<16 x float>", 1), Amd(GFX942_FP8)),
    mi!("v_mfma_f32_16x16x32_bf8_bf8", "llvm.amdgcn.mfma.f32.16x16x32.bf8.bf8", Mfma, 16, 16, 32, Bf8, Bf8, F32, 64, ("i64", 1), ("i64", 1), ("<4 x float>", 1), Amd(GFX942_FP8)),
    mi!("v_mfma_f32_32x32x16_bf8_bf8", "llvm.amdgcn.mfma.f32.32x32x16.bf8.bf8", Mfma, 32, 32, 16, Bf8, Bf8, F32, 64, ("i64", 1), ("i64", 1), ("<16 x float>", 1), Amd(GFX942_FP8)),
    // CDNA 4: f16/bf16 and i8 with twice the k again.
    mi!("v_mfma_f32_16x16x32_f16", "llvm.amdgcn.mfma.f32.16x16x32.f16", Mfma, 16, 16, 32, F16, F16, F32, 64, ("<8 x half>", 1), ("<8 x half>", 1), ("<4 x float>", 1), Amd(GFX950)),
    mi!("v_mfma_f32_32x32x16_f16", "llvm.amdgcn.mfma.f32.32x32x16.f16", Mfma, 32, 32, 16, F16, F16, F32, 64, ("<8 x half>", 1), ("<8 x half>", 1), ("<16 x float>", 1), Amd(GFX950)),
    mi!("v_mfma_f32_16x16x32_bf16", "llvm.amdgcn.mfma.f32.16x16x32.bf16", Mfma, 16, 16, 32, Bf16, Bf16, F32, 64, ("<8 x bfloat>", 1), ("<8 x bfloat>", 1), ("<4 x float>", 1), Amd(GFX950)),
    mi!("v_mfma_f32_32x32x16_bf16", "llvm.amdgcn.mfma.f32.32x32x16.bf16", Mfma, 32, 32, 16, Bf16, Bf16, F32, 64, ("<8 x bfloat>", 1), ("<8 x bfloat>", 1), ("<16 x float>", 1), Amd(GFX950)),
    mi!("v_mfma_i32_16x16x64_i8", "llvm.amdgcn.mfma.i32.16x16x64.i8", Mfma, 16, 16, 64, I8, I8, I32, 64, ("<4 x i32>", 1), ("<4 x i32>", 1), ("<4 x i32>", 1), Amd(GFX950)),
    mi!("v_mfma_i32_32x32x32_i8", "llvm.amdgcn.mfma.i32.32x32x32.i8", Mfma, 32, 32, 32, I8, I8, I32, 64, ("<4 x i32>", 1), ("<4 x i32>", 1), ("<16 x i32>", 1), Amd(GFX950)),
    // CDNA 4's 8-bit floats at twice gfx942's rate: one instruction for
    // fp8, bf8, fp6 and fp4 (the operand formats are immediates), reached
    // through the block-scaled intrinsic with scales 0, which LLVM selects
    // as the unscaled instruction. The lane layout is CDNA's (32 contiguous
    // k of a row per lane).
    mi!("v_mfma_f32_16x16x128_f8f6f4", "llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.v8i32.v8i32", Mfma, 16, 16, 128, Fp8, Fp8, F32, 64, ("<8 x i32>", 1), ("<8 x i32>", 1), ("<4 x float>", 1), Amd(GFX950)),
    mi!("v_mfma_f32_32x32x64_f8f6f4", "llvm.amdgcn.mfma.scale.f32.32x32x64.f8f6f4.v8i32.v8i32", Mfma, 32, 32, 64, Fp8, Fp8, F32, 64, ("<8 x i32>", 1), ("<8 x i32>", 1), ("<16 x float>", 1), Amd(GFX950)),
    mi!("v_mfma_f32_16x16x128_f8f6f4", "llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.v8i32.v8i32", Mfma, 16, 16, 128, Bf8, Bf8, F32, 64, ("<8 x i32>", 1), ("<8 x i32>", 1), ("<4 x float>", 1), Amd(GFX950)),
    mi!("v_mfma_f32_32x32x64_f8f6f4", "llvm.amdgcn.mfma.scale.f32.32x32x64.f8f6f4.v8i32.v8i32", Mfma, 32, 32, 64, Bf8, Bf8, F32, 64, ("<8 x i32>", 1), ("<8 x i32>", 1), ("<16 x float>", 1), Amd(GFX950)),
    // RDNA 3, wave32 and wave64.
    mi!("v_wmma_f32_16x16x16_f16", "llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v16f16", WmmaGfx11, 16, 16, 16, F16, F16, F32, 32, ("<16 x half>", 1), ("<16 x half>", 1), ("<8 x float>", 1), Amd(GFX11)),
    mi!("v_wmma_f32_16x16x16_f16", "llvm.amdgcn.wmma.f32.16x16x16.f16.v4f32.v16f16", WmmaGfx11, 16, 16, 16, F16, F16, F32, 64, ("<16 x half>", 1), ("<16 x half>", 1), ("<4 x float>", 1), Amd(GFX11)),
    mi!("v_wmma_f32_16x16x16_bf16", "llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v16i16", WmmaGfx11, 16, 16, 16, Bf16, Bf16, F32, 32, ("<16 x i16>", 1), ("<16 x i16>", 1), ("<8 x float>", 1), Amd(GFX11)),
    mi!("v_wmma_f32_16x16x16_bf16", "llvm.amdgcn.wmma.f32.16x16x16.bf16.v4f32.v16i16", WmmaGfx11, 16, 16, 16, Bf16, Bf16, F32, 64, ("<16 x i16>", 1), ("<16 x i16>", 1), ("<4 x float>", 1), Amd(GFX11)),
    mi!("v_wmma_i32_16x16x16_iu8", "llvm.amdgcn.wmma.i32.16x16x16.iu8.v8i32.v4i32", WmmaGfx11, 16, 16, 16, I8, I8, I32, 32, ("<4 x i32>", 1), ("<4 x i32>", 1), ("<8 x i32>", 1), Amd(GFX11)),
    mi!("v_wmma_i32_16x16x16_iu8", "llvm.amdgcn.wmma.i32.16x16x16.iu8.v4i32.v4i32", WmmaGfx11, 16, 16, 16, I8, I8, I32, 64, ("<4 x i32>", 1), ("<4 x i32>", 1), ("<4 x i32>", 1), Amd(GFX11)),
    // RDNA 4, wave32 and wave64.
    mi!("v_wmma_f32_16x16x16_f16", "llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v8f16", WmmaGfx12, 16, 16, 16, F16, F16, F32, 32, ("<8 x half>", 1), ("<8 x half>", 1), ("<8 x float>", 1), Amd(GFX12)),
    mi!("v_wmma_f32_16x16x16_f16", "llvm.amdgcn.wmma.f32.16x16x16.f16.v4f32.v4f16", WmmaGfx12, 16, 16, 16, F16, F16, F32, 64, ("<4 x half>", 1), ("<4 x half>", 1), ("<4 x float>", 1), Amd(GFX12)),
    mi!("v_wmma_f32_16x16x16_bf16", "llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v8i16", WmmaGfx12, 16, 16, 16, Bf16, Bf16, F32, 32, ("<8 x i16>", 1), ("<8 x i16>", 1), ("<8 x float>", 1), Amd(GFX12)),
    mi!("v_wmma_i32_16x16x16_iu8", "llvm.amdgcn.wmma.i32.16x16x16.iu8.v8i32.v2i32", WmmaGfx12, 16, 16, 16, I8, I8, I32, 32, ("<2 x i32>", 1), ("<2 x i32>", 1), ("<8 x i32>", 1), Amd(GFX12)),
    mi!("v_wmma_f32_16x16x16_fp8_fp8", "llvm.amdgcn.wmma.f32.16x16x16.fp8.fp8.v8f32.v2i32", WmmaGfx12, 16, 16, 16, Fp8, Fp8, F32, 32, ("<2 x i32>", 1), ("<2 x i32>", 1), ("<8 x float>", 1), Amd(GFX12)),
    mi!("v_wmma_f32_16x16x16_bf8_bf8", "llvm.amdgcn.wmma.f32.16x16x16.bf8.bf8.v8f32.v2i32", WmmaGfx12, 16, 16, 16, Bf8, Bf8, F32, 32, ("<2 x i32>", 1), ("<2 x i32>", 1), ("<8 x float>", 1), Amd(GFX12)),
    // NVIDIA, a warp of 32: registers of packed pairs (f16, bf16) or quads (s8).
    mi!("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "llvm.nvvm.mma.m16n8k16.row.col.f32.f32", MmaSync, 16, 8, 16, F16, F16, F32, 32, ("<2 x half>", 4), ("<2 x half>", 2), ("float", 4), NvidiaFrom(80)),
    mi!("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "llvm.nvvm.mma.m16n8k16.row.col.bf16", MmaSync, 16, 8, 16, Bf16, Bf16, F32, 32, ("i32", 4), ("i32", 2), ("float", 4), NvidiaFrom(80)),
    mi!("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", "llvm.nvvm.mma.m16n8k32.row.col.s8", MmaSync, 16, 8, 32, I8, I8, I32, 32, ("i32", 4), ("i32", 2), ("i32", 4), NvidiaFrom(80)),
    // Hopper's warpgroup MMA: no LLVM intrinsic (inline PTX); A and B are
    // shared-memory descriptors, so their "LLVM types" are the 64-bit descriptors.
    mi!("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", "", Wgmma, 64, 64, 16, F16, F16, F32, 128, ("<8 x i16>", 1), ("<8 x i16>", 1), ("float", 32), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "", Wgmma, 64, 128, 16, F16, F16, F32, 128, ("<8 x i16>", 1), ("<16 x i16>", 1), ("float", 64), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "", Wgmma, 64, 256, 16, F16, F16, F32, 128, ("<8 x i16>", 1), ("<32 x i16>", 1), ("float", 128), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "", Wgmma, 64, 64, 16, Bf16, Bf16, F32, 128, ("<8 x i16>", 1), ("<8 x i16>", 1), ("float", 32), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "", Wgmma, 64, 128, 16, Bf16, Bf16, F32, 128, ("<8 x i16>", 1), ("<16 x i16>", 1), ("float", 64), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "", Wgmma, 64, 256, 16, Bf16, Bf16, F32, 128, ("<8 x i16>", 1), ("<32 x i16>", 1), ("float", 128), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8", "", Wgmma, 64, 64, 32, I8, I8, I32, 128, ("<4 x i32>", 1), ("<4 x i32>", 1), ("i32", 32), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8", "", Wgmma, 64, 128, 32, I8, I8, I32, 128, ("<4 x i32>", 1), ("<8 x i32>", 1), ("i32", 64), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8", "", Wgmma, 64, 256, 32, I8, I8, I32, 128, ("<4 x i32>", 1), ("<16 x i32>", 1), ("i32", 128), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", "", Wgmma, 64, 64, 32, Fp8, Fp8, F32, 128, ("<4 x i32>", 1), ("<4 x i32>", 1), ("float", 32), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "", Wgmma, 64, 128, 32, Fp8, Fp8, F32, 128, ("<4 x i32>", 1), ("<8 x i32>", 1), ("float", 64), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3", "", Wgmma, 64, 256, 32, Fp8, Fp8, F32, 128, ("<4 x i32>", 1), ("<16 x i32>", 1), ("float", 128), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e5m2", "", Wgmma, 64, 64, 32, Bf8, Bf8, F32, 128, ("<4 x i32>", 1), ("<4 x i32>", 1), ("float", 32), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e5m2", "", Wgmma, 64, 128, 32, Bf8, Bf8, F32, 128, ("<4 x i32>", 1), ("<8 x i32>", 1), ("float", 64), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e5m2", "", Wgmma, 64, 256, 32, Bf8, Bf8, F32, 128, ("<4 x i32>", 1), ("<16 x i32>", 1), ("float", 128), NvidiaOnly(SM90A)),
    // The same with A from registers (f16 and bf16: what P·V takes).
    mi!("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", "", WgmmaRegA, 64, 64, 16, F16, F16, F32, 128, ("i32", 4), ("<8 x i16>", 1), ("float", 32), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", "", WgmmaRegA, 64, 128, 16, F16, F16, F32, 128, ("i32", 4), ("<16 x i16>", 1), ("float", 64), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "", WgmmaRegA, 64, 64, 16, Bf16, Bf16, F32, 128, ("i32", 4), ("<8 x i16>", 1), ("float", 32), NvidiaOnly(SM90A)),
    mi!("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "", WgmmaRegA, 64, 128, 16, Bf16, Bf16, F32, 128, ("i32", 4), ("<16 x i16>", 1), ("float", 64), NvidiaOnly(SM90A)),
];

/// Every instruction of [`INSTRUCTIONS`] as its transposed view, at the same index.
static TRANSPOSED: [MatrixInstr; INSTRUCTIONS.len()] = {
    let mut out = [INSTRUCTIONS[0]; INSTRUCTIONS.len()];
    let mut i = 0;
    while i < INSTRUCTIONS.len() {
        out[i] = INSTRUCTIONS[i].swapped();
        i += 1;
    }
    out
};

impl MatrixInstr {
    /// m and n, A and B exchanged, and `transposed` flipped.
    const fn swapped(self) -> MatrixInstr {
        MatrixInstr {
            m: self.n,
            n: self.m,
            a: self.b,
            b: self.a,
            llvm_a: self.llvm_b,
            llvm_b: self.llvm_a,
            transposed: !self.transposed,
            ..self
        }
    }

    /// The instruction with its operands swapped (see
    /// [`transposed`](Self::transposed)), or the original of a transposed
    /// view. Only for instructions of one lane's registers (MFMA, WMMA,
    /// `mma.sync`): a warpgroup's operands are not symmetric.
    pub fn transposed_view(&'static self) -> Option<&'static MatrixInstr> {
        if self.warpgroup() {
            return None;
        }
        let (from, to) = match self.transposed {
            false => (INSTRUCTIONS, &TRANSPOSED[..]),
            true => (&TRANSPOSED[..], INSTRUCTIONS),
        };
        from.iter().position(|i| i == self).map(|p| &to[p])
    }

    /// What the hardware executes: the instruction itself, or for a
    /// transposed view the original, whose A is the view's B and whose B
    /// is the view's A.
    pub fn hardware(&self) -> MatrixInstr {
        match self.transposed {
            false => *self,
            true => self.swapped(),
        }
    }

    /// Whether `processor` (an AMD name or `sm_NN`) has it.
    pub fn available_on(&self, processor: &str) -> bool {
        match self.available {
            Availability::Amd(list) => list.contains(&processor),
            Availability::NvidiaFrom(cc) => processor
                .strip_prefix("sm_")
                .and_then(|v| v.trim_end_matches(['a', 'f']).parse::<u32>().ok())
                .is_some_and(|v| v >= cc),
            Availability::NvidiaOnly(list) => list.contains(&processor),
        }
    }

    /// Whether an AMD processor runs it (MFMA or WMMA).
    pub fn is_amd(&self) -> bool {
        matches!(self.available, Availability::Amd(_))
    }

    /// Whether a warpgroup (four warps) executes it together, B read from
    /// shared memory through a descriptor (`wgmma`).
    pub fn warpgroup(&self) -> bool {
        matches!(self.family, Family::Wgmma | Family::WgmmaRegA)
    }

    /// Whether A too is read through a descriptor rather than from each
    /// lane's registers.
    pub fn a_in_shared(&self) -> bool {
        self.family == Family::Wgmma
    }

    /// The immediate operands an MFMA intrinsic takes after A, B and C:
    /// the three broadcast controls (cbsz, abid, blgp), all 0; for CDNA
    /// 4's `f8f6f4` instructions (the block-scaled intrinsic) the format
    /// codes of A and B (0 fp8 E4M3, 1 bf8 E5M2), then each scale's byte
    /// select and value, 0 (LLVM then selects the unscaled instruction).
    pub fn mfma_immediates(&self) -> Vec<u32> {
        if !self.intrinsic.starts_with("llvm.amdgcn.mfma.scale.") {
            return vec![0; 3];
        }
        let code = |t: MType| match t {
            MType::Bf8 => 1,
            _ => 0,
        };
        vec![code(self.a), code(self.b), 0, 0, 0, 0]
    }

    /// Elements of A each lane holds.
    pub fn a_per_lane(&self) -> u32 {
        if self.transposed {
            return self.hardware().b_per_lane();
        }
        match self.family {
            // Each lane holds a whole row (gfx11 replicates rows in the upper half-wave).
            Family::WmmaGfx11 => self.k,
            _ => self.m * self.k / self.wave,
        }
    }

    /// Elements of B each lane holds.
    pub fn b_per_lane(&self) -> u32 {
        if self.transposed {
            return self.hardware().a_per_lane();
        }
        match self.family {
            Family::WmmaGfx11 => self.k,
            _ => self.k * self.n / self.wave,
        }
    }

    /// Elements of C and D each lane holds.
    pub fn acc_per_lane(&self) -> u32 {
        self.m * self.n / self.wave
    }

    /// (row, k) of A held by `lane` as its element `e`.
    pub fn a_at(&self, lane: u32, e: u32) -> (u32, u32) {
        let (r, k) = self.a_coord(e);
        (r.at(lane), k.at(lane))
    }

    /// (k, column) of B held by `lane` as its element `e`.
    pub fn b_at(&self, lane: u32, e: u32) -> (u32, u32) {
        let (k, c) = self.b_coord(e);
        (k.at(lane), c.at(lane))
    }

    /// (row, column) of C and D held by `lane` as its element `e`.
    pub fn acc_at(&self, lane: u32, e: u32) -> (u32, u32) {
        let (r, c) = self.acc_coord(e);
        (r.at(lane), c.at(lane))
    }

    /// [`a_at`](Self::a_at) as functions of the lane, for lowering: the
    /// (row, k) of A that element `e` of every lane holds.
    pub fn a_coord(&self, e: u32) -> (LaneCoord, LaneCoord) {
        if self.transposed {
            let (k, c) = self.hardware().b_coord(e);
            return (c, k);
        }
        let per = self.a_per_lane();
        match self.family {
            Family::Mfma => (
                LaneCoord::lane(1, self.m, 1),
                LaneCoord::lane(self.m, self.wave / self.m, per).plus(e),
            ),
            // Each lane holds a whole row (gfx11 replicates rows in the upper half-wave).
            Family::WmmaGfx11 => (LaneCoord::lane(1, 16, 1), LaneCoord::constant(e)),
            Family::WmmaGfx12 => (
                LaneCoord::lane(1, 16, 1),
                LaneCoord::lane(16, self.wave / 16, per).plus(e),
            ),
            Family::MmaSync => {
                // Group g = lane / 4, thread t = lane % 4; registers a0..a3
                // cover (rows g, g+8) x (k low half, k high half).
                let per_reg = 32 / self.a.bits();
                let reg = e / per_reg;
                (
                    LaneCoord::lane(4, 8, 1).plus(8 * (reg % 2)),
                    LaneCoord::lane(1, 4, per_reg).plus(e % per_reg + (self.k / 2) * (reg / 2)),
                )
            }
            // PTX ISA, "wgmma .m64nNk16 register fragment A": warp w holds
            // rows 16w..16w+16 as mma.m16n8k16's A.
            Family::WgmmaRegA => {
                let reg = e / 2;
                let mut row = LaneCoord::lane(4, 8, 1).plus(8 * (reg % 2));
                row.terms.push(LaneTerm {
                    div: 32,
                    modulo: 4,
                    scale: 16,
                });
                (
                    row,
                    LaneCoord::lane(1, 4, 2).plus(e % 2 + (self.k / 2) * (reg / 2)),
                )
            }
            // rocmc's own: lane l loads row l / 2, half (l % 2) of its k.
            Family::Wgmma => (
                LaneCoord::lane(2, self.m, 1),
                LaneCoord::lane(1, 2, per).plus(e),
            ),
        }
    }

    /// [`b_at`](Self::b_at) as functions of the lane.
    pub fn b_coord(&self, e: u32) -> (LaneCoord, LaneCoord) {
        if self.transposed {
            let (r, k) = self.hardware().a_coord(e);
            return (k, r);
        }
        let per = self.b_per_lane();
        match self.family {
            Family::Mfma => (
                LaneCoord::lane(self.n, self.wave / self.n, per).plus(e),
                LaneCoord::lane(1, self.n, 1),
            ),
            Family::WmmaGfx11 => (LaneCoord::constant(e), LaneCoord::lane(1, 16, 1)),
            Family::WmmaGfx12 => (
                LaneCoord::lane(16, self.wave / 16, per).plus(e),
                LaneCoord::lane(1, 16, 1),
            ),
            Family::MmaSync => {
                let per_reg = 32 / self.b.bits();
                let reg = e / per_reg;
                (
                    LaneCoord::lane(1, 4, per_reg).plus(e % per_reg + (self.k / 2) * reg),
                    LaneCoord::lane(4, 8, 1),
                )
            }
            // rocmc's own: lane l loads k = l % 16, `per` columns from (l / 16) * per.
            Family::Wgmma | Family::WgmmaRegA => (
                LaneCoord::lane(1, self.k, 1),
                LaneCoord::lane(self.k, self.wave / self.k, per).plus(e),
            ),
        }
    }

    /// [`acc_at`](Self::acc_at) as functions of the lane.
    pub fn acc_coord(&self, e: u32) -> (LaneCoord, LaneCoord) {
        if self.transposed {
            let (r, c) = self.hardware().acc_coord(e);
            return (c, r);
        }
        match self.family {
            Family::Mfma => {
                // Blocks of 4 rows; the lanes' groups of `n` take turns down the rows.
                let groups = self.wave / self.n;
                (
                    LaneCoord::lane(self.n, groups, 4).plus((e / 4) * 4 * groups + e % 4),
                    LaneCoord::lane(1, self.n, 1),
                )
            }
            Family::WmmaGfx11 => {
                // Even rows in lanes 0-15, odd in 16-31; wave64's upper half takes rows 8-15.
                let mut row = LaneCoord::lane(16, 2, 1).plus(2 * e);
                if self.wave == 64 {
                    row.terms.push(LaneTerm {
                        div: 32,
                        modulo: 2,
                        scale: 8,
                    });
                }
                (row, LaneCoord::lane(1, 16, 1))
            }
            Family::WmmaGfx12 => (
                LaneCoord::lane(16, self.wave / 16, self.acc_per_lane()).plus(e),
                LaneCoord::lane(1, 16, 1),
            ),
            Family::MmaSync => (
                LaneCoord::lane(4, 8, 1).plus(8 * (e / 2)),
                LaneCoord::lane(1, 4, 2).plus(e % 2),
            ),
            // PTX ISA, "wgmma .m64nNk16 register fragment D": warp w holds
            // rows 16w..16w+16 as mma.m16n8's C, once per 8 columns.
            Family::Wgmma | Family::WgmmaRegA => (
                LaneCoord {
                    base: 8 * ((e / 2) % 2),
                    terms: vec![
                        LaneTerm {
                            div: 32,
                            modulo: 4,
                            scale: 16,
                        },
                        LaneTerm {
                            div: 4,
                            modulo: 8,
                            scale: 1,
                        },
                    ],
                },
                LaneCoord::lane(1, 4, 2).plus(8 * (e / 4) + e % 2),
            ),
        }
    }
}

/// One part of a lane coordinate: `scale * ((lane / div) % modulo)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneTerm {
    pub div: u32,
    pub modulo: u32,
    pub scale: u32,
}

/// A row, column or k index as a function of the lane: `base + Σ terms`.
/// Every layout is of this form (divisions and remainders by powers of
/// two), so lowering can write it as an index expression of the lane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneCoord {
    pub base: u32,
    pub terms: Vec<LaneTerm>,
}

impl LaneCoord {
    fn constant(base: u32) -> LaneCoord {
        LaneCoord {
            base,
            terms: Vec::new(),
        }
    }

    fn lane(div: u32, modulo: u32, scale: u32) -> LaneCoord {
        LaneCoord {
            base: 0,
            terms: vec![LaneTerm { div, modulo, scale }],
        }
    }

    fn plus(mut self, c: u32) -> LaneCoord {
        self.base += c;
        self
    }

    /// The coordinate for one lane.
    pub fn at(&self, lane: u32) -> u32 {
        self.base
            + self
                .terms
                .iter()
                .map(|t| t.scale * ((lane / t.div) % t.modulo))
                .sum::<u32>()
    }
}

/// The matrix instructions a kernel's `mma` steps are lowered for: a GPU
/// target's own, or, on the CPU, those of the GPU it emulates (run through
/// their lane layouts). Built from a parsed [`Target`]; lowering asks it
/// rather than looking anything up by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixUnit {
    gpu: crate::Target,
    /// The CPU target running `gpu`'s instructions, when emulating.
    host: Option<crate::Target>,
}

impl MatrixUnit {
    /// The matrix unit of a GPU target; none for the CPU, which has
    /// matrix instructions only when told to emulate a GPU's ([`MatrixUnit::emulated`]).
    pub fn of(target: &crate::Target) -> Option<MatrixUnit> {
        (target.vendor() != crate::Vendor::Cpu).then(|| MatrixUnit {
            gpu: target.clone(),
            host: None,
        })
    }

    /// `gpu`'s matrix unit as the CPU target `host` runs it; none when
    /// `gpu` is not a GPU target.
    pub fn emulated(host: &crate::Target, gpu: &crate::Target) -> Option<MatrixUnit> {
        MatrixUnit::of(gpu).map(|u| MatrixUnit {
            host: Some(host.clone()),
            ..u
        })
    }

    /// The GPU target whose instructions these are.
    pub fn gpu(&self) -> &crate::Target {
        &self.gpu
    }

    /// Lanes per wave (warp).
    pub fn wave(&self) -> u32 {
        self.gpu.wave_size()
    }

    /// The instructions the unit has for its wave.
    pub fn instructions(&self) -> Vec<&'static MatrixInstr> {
        instructions_for(self.gpu.processor(), self.wave())
    }

    /// The instructions several waves execute together (Hopper's
    /// warpgroup MMA on sm_90a); an `mma` step names one or takes its shape.
    pub fn group_instructions(&self) -> Vec<&'static MatrixInstr> {
        INSTRUCTIONS
            .iter()
            .filter(|i| i.a_in_shared() && i.available_on(self.gpu.processor()))
            .collect()
    }

    /// The warpgroup instructions taking A from registers (for products
    /// whose A a lowering computes, as attention's weights).
    pub fn group_register_a_instructions(&self) -> Vec<&'static MatrixInstr> {
        INSTRUCTIONS
            .iter()
            .filter(|i| i.family == Family::WgmmaRegA && i.available_on(self.gpu.processor()))
            .collect()
    }

    /// Whether its 8-bit float instructions read the FNUZ encodings
    /// (gfx942) rather than the OCP ones (gfx950, gfx12, NVIDIA).
    pub fn fnuz_f8(&self) -> bool {
        self.gpu.processor().starts_with("gfx942")
    }

    /// Asynchronous global-to-LDS copies (`cp.async`, sm_80 and later).
    pub fn has_async_copy(&self) -> bool {
        self.gpu
            .nvidia()
            .is_some_and(|t| t.compute_capability() >= (8, 0))
    }

    /// The tensor memory accelerator (`cp.async.bulk.tensor` with tensor
    /// maps and mbarriers): NVIDIA from Hopper (sm_90) on, in PTX 8.0 and
    /// later (which rocmc writes for sm_90a; sm_90's 7.8 lacks it).
    pub fn has_tensor_copies(&self) -> bool {
        self.gpu
            .nvidia()
            .is_some_and(|t| t.compute_capability() >= (9, 0) && t.ptx_version >= 80)
    }

    /// Whether the wave can load 8x8 matrices of 16-bit elements from
    /// shared memory in one instruction (`ldmatrix`, sm_75 and later).
    pub fn has_ldmatrix(&self) -> bool {
        self.gpu
            .nvidia()
            .is_some_and(|t| t.compute_capability() >= (7, 5))
    }

    /// Whether a tile of k wholly in range is worth an unswitched copy of
    /// its operand loads without their zeroing selects. Measured: on NVIDIA
    /// it is what lets `ldmatrix` and the straight-line bodies apply; on AMD
    /// it only duplicated the step (gfx942's gemm_f16: 92 -> 105 VGPRs, one
    /// occupancy step lost).
    pub fn unswitches_full_k_tiles(&self) -> bool {
        self.gpu.vendor() == crate::Vendor::Nvidia
    }

    /// Whether operand tiles staged at a k loop are filled with zeros past
    /// the tensor, so that the fragment reads need no select per element
    /// for k's tail. On AMD, where there is no unswitch ([`Self::unswitches_full_k_tiles`]):
    /// gfx942's default GEMM loop lost its 64 `v_cndmask` and their
    /// compares, and its A reads became whole `ds_read_b64`s.
    pub fn zero_fills_k_tiles(&self) -> bool {
        self.gpu.vendor() == crate::Vendor::Amd
    }

    /// The lanes a cooperative reduction combines by lane exchanges
    /// (`ds_bpermute`, `shfl.sync.bfly`) before the rest goes through LDS:
    /// the wave. A 256-thread row reduction had eight LDS steps, each
    /// behind a work-group barrier; this leaves one barrier. On NVIDIA only
    /// for a plain combiner (a sum, a maximum): on an H200 the exchanges
    /// made layernorm 1.10x and softmax 1.02x faster, but the tuple
    /// combiners (cross_entropy, Welford's layernorm, an `exp` in each
    /// combination, which every lane then runs) 0.97x
    /// (bench/gpu/runs/h200-lanes-1).
    pub fn lane_reduction(&self, tuple: bool) -> Option<u32> {
        match self.gpu.vendor() {
            crate::Vendor::Amd => Some(self.wave()),
            // `shfl.sync` is PTX 6.0's (sm_52's PTX is older).
            crate::Vendor::Nvidia if !tuple && self.gpu.nvidia()?.ptx_version >= 60 => {
                Some(self.wave())
            }
            _ => None,
        }
    }
}

impl fmt::Display for MatrixUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Some(h) => write!(f, "{h} emulating {}", self.gpu),
            None => write!(f, "{}", self.gpu),
        }
    }
}

/// The instructions `processor` has for a wave of `wave` lanes.
pub fn instructions_for(processor: &str, wave: u32) -> Vec<&'static MatrixInstr> {
    INSTRUCTIONS
        .iter()
        .filter(|i| i.wave == wave && i.available_on(processor))
        .collect()
}

/// Runs `instr` as one wave does: `a[lane][e]`, `b[lane][e]`, `c[lane][e]`
/// are each lane's registers (element values, in the layout's order); the
/// result is each lane's D registers. Values are exact in `f64` for every
/// input type (products of 8/16-bit values, sums well inside 2^53); the
/// caller rounds to the accumulator's type.
///
/// Replicated elements (gfx11's upper half-wave) are read from the lane
/// the layout names first; a lowering that fills replicas differently
/// fails the caller's comparison of the replicas, not this function.
pub fn execute(
    instr: &MatrixInstr,
    a: &[Vec<f64>],
    b: &[Vec<f64>],
    c: &[Vec<f64>],
) -> Vec<Vec<f64>> {
    let (m, n, k) = (instr.m as usize, instr.n as usize, instr.k as usize);
    let mut am = vec![vec![f64::NAN; k]; m];
    let mut bm = vec![vec![f64::NAN; n]; k];
    let mut cm = vec![vec![f64::NAN; n]; m];
    for lane in (0..instr.wave).rev() {
        for e in 0..instr.a_per_lane() {
            let (r, kk) = instr.a_at(lane, e);
            am[r as usize][kk as usize] = a[lane as usize][e as usize];
        }
        for e in 0..instr.b_per_lane() {
            let (kk, col) = instr.b_at(lane, e);
            bm[kk as usize][col as usize] = b[lane as usize][e as usize];
        }
        for e in 0..instr.acc_per_lane() {
            let (r, col) = instr.acc_at(lane, e);
            cm[r as usize][col as usize] = c[lane as usize][e as usize];
        }
    }
    (0..instr.wave)
        .map(|lane| {
            (0..instr.acc_per_lane())
                .map(|e| {
                    let (r, col) = instr.acc_at(lane, e);
                    let (r, col) = (r as usize, col as usize);
                    cm[r][col] + (0..k).map(|kk| am[r][kk] * bm[kk][col]).sum::<f64>()
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every layout is a cover: each element of A, B and D is held by some
    /// lane, D by exactly one (A and B by exactly one except gfx11's replicas).
    #[test]
    fn layouts_cover_each_matrix() {
        for i in INSTRUCTIONS {
            let mut a = HashSet::new();
            let mut b = HashSet::new();
            let mut d = HashSet::new();
            for lane in 0..i.wave {
                for e in 0..i.a_per_lane() {
                    let (r, k) = i.a_at(lane, e);
                    assert!(r < i.m && k < i.k, "{} A lane {lane} e {e}", i.name);
                    let fresh = a.insert((r, k));
                    assert!(fresh || i.family == Family::WmmaGfx11, "{} A twice", i.name);
                }
                for e in 0..i.b_per_lane() {
                    let (k, c) = i.b_at(lane, e);
                    assert!(k < i.k && c < i.n, "{} B lane {lane} e {e}", i.name);
                    let fresh = b.insert((k, c));
                    assert!(fresh || i.family == Family::WmmaGfx11, "{} B twice", i.name);
                }
                for e in 0..i.acc_per_lane() {
                    let (r, c) = i.acc_at(lane, e);
                    assert!(r < i.m && c < i.n, "{} D lane {lane} e {e}", i.name);
                    assert!(d.insert((r, c)), "{} D ({r}, {c}) twice", i.name);
                }
            }
            assert_eq!(a.len() as u32, i.m * i.k, "{}", i.name);
            assert_eq!(b.len() as u32, i.k * i.n, "{}", i.name);
            assert_eq!(d.len() as u32, i.m * i.n, "{}", i.name);
            // The LLVM operand types hold exactly a lane's elements.
            let bits = |(t, count): (&str, u32)| -> u32 {
                let lanes: u32 = t
                    .strip_prefix('<')
                    .and_then(|s| s.split(" x ").next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1);
                let elem = t.rsplit(' ').next().unwrap_or(t).trim_end_matches('>');
                let w = match elem {
                    "half" | "bfloat" | "i16" => 16,
                    "float" | "i32" => 32,
                    "i64" => 64,
                    other => panic!("{other}"),
                };
                lanes * w * count
            };
            assert_eq!(bits(i.llvm_a), i.a_per_lane() * i.a.bits(), "{} A", i.name);
            assert_eq!(bits(i.llvm_b), i.b_per_lane() * i.b.bits(), "{} B", i.name);
            assert_eq!(
                bits(i.llvm_c),
                i.acc_per_lane() * i.acc.bits(),
                "{} C",
                i.name
            );
        }
    }

    /// Documented cases, element by element, from the vendors' tables.
    #[test]
    fn layouts_match_the_documented_examples() {
        let find = |name: &str, wave: u32| {
            INSTRUCTIONS
                .iter()
                .find(|i| i.name == name && i.wave == wave)
                .unwrap()
        };
        // CDNA3 ISA, v_mfma_f32_32x32x8_f16: lane 40 holds A[8][4..8], D rows 4-7 of column 8, then 12-15...
        let i = find("v_mfma_f32_32x32x8_f16", 64);
        assert_eq!(i.a_at(40, 0), (8, 4));
        assert_eq!(i.acc_at(40, 0), (4, 8));
        assert_eq!(i.acc_at(40, 4), (12, 8));
        assert_eq!(i.acc_at(0, 15), (27, 0));
        // PTX ISA, mma.m16n8k16 f16: lane 5 is group 1, thread 1: a0,a1 = A[1][2..4], a2 = A[9][2], a4 = A[1][10].
        let i = find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 32);
        assert_eq!(i.a_at(5, 0), (1, 2));
        assert_eq!(i.a_at(5, 1), (1, 3));
        assert_eq!(i.a_at(5, 2), (9, 2));
        assert_eq!(i.a_at(5, 4), (1, 10));
        assert_eq!(i.b_at(5, 2), (10, 1));
        assert_eq!(i.acc_at(5, 3), (9, 3));
        // PTX ISA, m16n8k32 s8: a0..a3 = A[g][4t..4t+4], a4..7 = A[g+8][..], a8..11 = A[g][16+4t..].
        let i = find("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 32);
        assert_eq!(i.a_at(6, 0), (1, 8));
        assert_eq!(i.a_at(6, 4), (9, 8));
        assert_eq!(i.a_at(6, 8), (1, 24));
        assert_eq!(i.b_at(6, 4), (24, 1));
    }

    /// Each lane's registers of one operand.
    type Regs = Vec<Vec<f64>>;

    /// Fills each lane's A, B and C registers as `i`'s layout places a
    /// fixed pattern of matrices, runs `run(a, b, c)`, and checks every
    /// lane's D against the matrix product.
    fn is_the_product(i: &MatrixInstr, run: &dyn Fn(&Regs, &Regs, &Regs) -> Regs, what: &str) {
        let av = |r: u32, c: u32| f64::from((r * 7 + c * 3) % 11) - 5.0;
        let bv = |r: u32, c: u32| f64::from((r * 5 + c * 2) % 13) - 6.0;
        let cv = |r: u32, c: u32| f64::from(r * 100 + c);
        let regs = |per: u32, at: &dyn Fn(u32, u32) -> (u32, u32), v: &dyn Fn(u32, u32) -> f64| {
            (0..i.wave)
                .map(|l| {
                    (0..per)
                        .map(|e| {
                            let (x, y) = at(l, e);
                            v(x, y)
                        })
                        .collect()
                })
                .collect::<Regs>()
        };
        let a = regs(i.a_per_lane(), &|l, e| i.a_at(l, e), &av);
        let b = regs(i.b_per_lane(), &|l, e| i.b_at(l, e), &bv);
        let c = regs(i.acc_per_lane(), &|l, e| i.acc_at(l, e), &cv);
        let d = run(&a, &b, &c);
        let (m, n, k) = (i.m, i.n, i.k);
        for lane in 0..i.wave {
            for e in 0..i.acc_per_lane() {
                let (r, col) = i.acc_at(lane, e);
                let want = cv(r, col) + (0..k).map(|kk| av(r, kk) * bv(kk, col)).sum::<f64>();
                assert_eq!(d[lane as usize][e as usize], want, "{what} {m}x{n}x{k}");
            }
        }
    }

    #[test]
    fn execute_is_a_matrix_product_through_the_layout() {
        for i in INSTRUCTIONS {
            is_the_product(i, &|a, b, c| execute(i, a, b, c), i.name);
        }
    }

    /// A transposed view's meaning is what codegen issues for it: the
    /// hardware instruction with the view's B as its A and the view's A
    /// as its B, each lane's registers unchanged.
    #[test]
    fn a_transposed_view_is_the_hardware_with_operands_swapped() {
        for i in INSTRUCTIONS.iter().filter(|i| !i.warpgroup()) {
            let t = i.transposed_view().expect("a lane's registers");
            assert!(t.transposed && t.transposed_view() == Some(i));
            assert_eq!((t.m, t.n, t.k, t.hardware()), (i.n, i.m, i.k, *i));
            let what = format!("{} transposed", i.name);
            is_the_product(t, &|a, b, c| execute(i, b, a, c), &what);
        }
        assert!(INSTRUCTIONS
            .iter()
            .filter(|i| i.warpgroup())
            .all(|i| i.transposed_view().is_none()));
    }

    #[test]
    fn availability_by_processor() {
        let names = |p: &str, w: u32| {
            instructions_for(p, w)
                .iter()
                .map(|i| i.name)
                .collect::<Vec<_>>()
        };
        assert!(names("gfx906", 64).is_empty());
        assert!(names("gfx1030", 32).is_empty());
        assert!(names("gfx942", 64).contains(&"v_mfma_f32_16x16x32_fp8_fp8"));
        assert!(!names("gfx942", 64).contains(&"v_mfma_i32_16x16x16_i8"));
        assert!(names("gfx1100", 32).contains(&"v_wmma_f32_16x16x16_f16"));
        assert_eq!(names("sm_75", 32).len(), 0);
        assert_eq!(names("sm_90a", 32).len(), 3);
        assert_eq!(names("sm_90a", 128).len(), 19);
        assert!(names("sm_90", 128).is_empty() && names("sm_100a", 128).is_empty());
        // Only warpgroup instructions: gfx11's wave64 WMMA is not one for wave32.
        let group = |p: &str| {
            let t = crate::Target::parse(p, None, 5).unwrap();
            MatrixUnit::of(&t).unwrap().group_instructions().len()
        };
        assert_eq!(
            (group("sm_90a"), group("gfx1100"), group("sm_90")),
            (15, 0, 0)
        );
    }

    /// PTX ISA, wgmma's D fragment: lane 37 (warp 1, group 1, thread 1)
    /// holds D[17][2..4] then D[25][2..4], then the next 8 columns.
    #[test]
    fn warpgroup_accumulators_follow_the_ptx_layout() {
        let i = INSTRUCTIONS
            .iter()
            .find(|i| i.family == Family::Wgmma && i.n == 64)
            .unwrap();
        assert_eq!(i.acc_per_lane(), 32);
        assert_eq!(i.acc_at(37, 0), (17, 2));
        assert_eq!(i.acc_at(37, 1), (17, 3));
        assert_eq!(i.acc_at(37, 2), (25, 2));
        assert_eq!(i.acc_at(37, 4), (17, 10));
        assert_eq!(i.acc_at(127, 31), (63, 63));
        // A from registers: lane 37 holds A[17][2..4], A[25][2..4], then k + 8.
        let r = INSTRUCTIONS
            .iter()
            .find(|i| i.family == Family::WgmmaRegA && i.n == 64)
            .unwrap();
        assert_eq!(r.a_per_lane(), 8);
        assert_eq!(r.a_at(37, 0), (17, 2));
        assert_eq!(r.a_at(37, 1), (17, 3));
        assert_eq!(r.a_at(37, 2), (25, 2));
        assert_eq!(r.a_at(37, 4), (17, 10));
        assert_eq!(r.a_at(127, 7), (63, 15));
    }
}
