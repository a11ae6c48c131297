// targets: gfx942
#include "mma_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(4 * WAVE) void gemm_fp8(const unsigned char *__restrict__ A, const unsigned char *__restrict__ B, float *__restrict__ C, int M, int N, int K) {
  gemm_tile<FP8, 64, 4>(A, B, M, N, K, [=](int r, int c, float v) { C[r * N + c] = v; });
}
