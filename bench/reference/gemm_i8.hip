// targets: gfx942
#include "mma_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(4 * WAVE) void gemm_i8(const signed char *__restrict__ A, const signed char *__restrict__ B, int *__restrict__ C, int M, int N, int K) {
  gemm_tile<I8, 64, 4>(A, B, M, N, K, [=](int r, int c, int v) { C[r * N + c] = v; });
}
