// targets: gfx90a gfx942 gfx1100
#include "mma_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(4 * WAVE) void gemm_f16(const _Float16 *__restrict__ A, const _Float16 *__restrict__ B, float *__restrict__ C, int M, int N, int K) {
  gemm_tile<F16, 32, 8>(A, B, M, N, K, [=](int r, int c, float v) { C[r * N + c] = v; });
}
