// targets: gfx950
#include "mma_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(4 * WAVE) void gemm_bf8_ocp(const unsigned char *__restrict__ A, const unsigned char *__restrict__ B, float *__restrict__ C, int M, int N, int K) {
  gemm_tile<BF8, 64, 4>(A, B, M, N, K, [=](int r, int c, float v) { C[r * N + c] = v; });
}
