// Matrix-core fragments for the hand-written GEMM references (gemm_f16,
// gemm_bf16_gelu, gemm_i8, gemm_fp8, gemm_bf8_ocp), through clang's own builtins: MFMA on CDNA
// (wave64), WMMA on RDNA 3 (wave32). The per-lane layouts are AMD's, as the
// CDNA 3 and RDNA 3 ISA documents give them; rocmc's tiling is mirrored: a
// 64x64 block tile, 2x2 waves of 2x2 16x16 fragments, A and B staged in
// padded LDS tiles, fragments loaded from LDS with the k tail zeroed.
#pragma once
#include "rocmc_hip.h"
#define TID_Z ((int)__builtin_amdgcn_workitem_id_z())

typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef float f32x8 __attribute__((ext_vector_type(8)));
typedef int i32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 f16x16 __attribute__((ext_vector_type(16)));
typedef short s16x4 __attribute__((ext_vector_type(4)));
typedef short s16x16 __attribute__((ext_vector_type(16)));
typedef signed char i8x8 __attribute__((ext_vector_type(8)));
typedef unsigned char u8x8 __attribute__((ext_vector_type(8)));

// One instruction: the stored element type T, the fragment vector F and
// the accumulator Acc of a lane, its depth KI, and which k a lane's element
// e holds (its row or column is lane % 16 for A and B alike).
#if defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__)
#define WAVE 32
// WMMA 16x16x16: A element e of a lane is (lane % 16, e); lanes 16..31
// repeat lanes 0..15. D element e is row 2e + lane / 16.
#define ACC_ELEMS 8
#define D_ROW(lane, e) (2 * (e) + (lane) / 16)
struct F16 {
  typedef _Float16 T; typedef f16x16 F; typedef f32x8 Acc;
  static constexpr int KI = 16, ELEMS = 16;
  static __device__ int k_of(int lane, int e) { return e; }
  static __device__ Acc mma(F a, F b, Acc c) { return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c); }
};
struct BF16 {
  typedef short T; typedef s16x16 F; typedef f32x8 Acc;
  static constexpr int KI = 16, ELEMS = 16;
  static __device__ int k_of(int lane, int e) { return e; }
  static __device__ Acc mma(F a, F b, Acc c) { return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c); }
};
#else
#define WAVE 64
// MFMA 16x16xK: A element e of a lane is (lane % 16, (K / 4) * (lane / 16) + e);
// D element e is row 4 * (lane / 16) + e.
#define ACC_ELEMS 4
#define D_ROW(lane, e) (4 * ((lane) / 16) + (e))
struct F16 {
  typedef _Float16 T; typedef f16x4 F; typedef f32x4 Acc;
  static constexpr int KI = 16, ELEMS = 4;
  static __device__ int k_of(int lane, int e) { return 4 * (lane / 16) + e; }
  static __device__ Acc mma(F a, F b, Acc c) { return __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0); }
};
struct BF16 {
  typedef short T; typedef s16x4 F; typedef f32x4 Acc;
  static constexpr int KI = 16, ELEMS = 4;
  static __device__ int k_of(int lane, int e) { return 4 * (lane / 16) + e; }
  static __device__ Acc mma(F a, F b, Acc c) { return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0); }
};
#if defined(__gfx942__) || defined(__gfx950__)
struct I8 {
  typedef signed char T; typedef i8x8 F; typedef i32x4 Acc;
  static constexpr int KI = 32, ELEMS = 8;
  static __device__ int k_of(int lane, int e) { return 8 * (lane / 16) + e; }
  static __device__ Acc mma(F a, F b, Acc c) { return __builtin_amdgcn_mfma_i32_16x16x32_i8(__builtin_bit_cast(long, a), __builtin_bit_cast(long, b), c, 0, 0, 0); }
};
// 8-bit floats as their bytes, in the layout of i8 (k = 8 * (lane / 16) + e);
// the instruction decodes them by the target's format.
struct FP8 {
  typedef unsigned char T; typedef u8x8 F; typedef f32x4 Acc;
  static constexpr int KI = 32, ELEMS = 8;
  static __device__ int k_of(int lane, int e) { return 8 * (lane / 16) + e; }
  static __device__ Acc mma(F a, F b, Acc c) { return __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(__builtin_bit_cast(long, a), __builtin_bit_cast(long, b), c, 0, 0, 0); }
};
struct BF8 {
  typedef unsigned char T; typedef u8x8 F; typedef f32x4 Acc;
  static constexpr int KI = 32, ELEMS = 8;
  static __device__ int k_of(int lane, int e) { return 8 * (lane / 16) + e; }
  static __device__ Acc mma(F a, F b, Acc c) { return __builtin_amdgcn_mfma_f32_16x16x32_bf8_bf8(__builtin_bit_cast(long, a), __builtin_bit_cast(long, b), c, 0, 0, 0); }
};
#endif
#endif

// One 64x64 block tile of C = A x B over k steps of KT, LDS rows padded by
// PAD elements; the epilogue gets (row, column, accumulator) for every
// in-range element.
template <typename I, int KT, int PAD, typename Epilogue>
static __device__ inline void gemm_tile(const typename I::T *__restrict__ A, const typename I::T *__restrict__ B, int M, int N, int K, Epilogue epilogue) {
  typedef typename I::T T;
  constexpr int AW = KT + PAD, BW = 64 + PAD;
  __shared__ T As[64 * AW];
  __shared__ T Bs[KT * BW];
  int lane = TID_X, wj = TID_Y, wi = TID_Z, tid = (wi * 2 + wj) * WAVE + lane;
  int row0 = BID_Y * 64, col0 = BID_X * 64;
  typename I::Acc acc[2][2] = {};
  for (int k0 = 0; k0 < K; k0 += KT) {
#pragma unroll
    for (int it = 0; it < 64 * KT / (4 * WAVE); ++it) {
      int e = it * 4 * WAVE + tid;
      Bs[(e / 64) * BW + e % 64] = B[imin(k0 + e / 64, K - 1) * N + imin(col0 + e % 64, N - 1)];
      As[(e / KT) * AW + e % KT] = A[imin(row0 + e / KT, M - 1) * K + imin(k0 + e % KT, K - 1)];
    }
    sync_threads();
#pragma unroll
    for (int km = 0; km < KT; km += I::KI) {
      typename I::F a[2], b[2];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int e = 0; e < I::ELEMS; ++e) {
          int k = km + I::k_of(lane, e);
          a[m][e] = k0 + k < K ? As[(wi * 32 + m * 16 + lane % 16) * AW + k] : T(0);
          b[m][e] = k0 + k < K ? Bs[k * BW + wj * 32 + m * 16 + lane % 16] : T(0);
        }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int mj = 0; mj < 2; ++mj) acc[mi][mj] = I::mma(a[mi], b[mj], acc[mi][mj]);
    }
    sync_threads();
  }
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int mj = 0; mj < 2; ++mj)
#pragma unroll
      for (int e = 0; e < ACC_ELEMS; ++e) {
        int r = row0 + wi * 32 + mi * 16 + D_ROW(lane, e), c = col0 + wj * 32 + mj * 16 + lane % 16;
        if (r < M && c < N) epilogue(r, c, acc[mi][mj][e]);
      }
}
