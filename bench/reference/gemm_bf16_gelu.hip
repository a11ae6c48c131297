// targets: gfx90a gfx942 gfx1100
#include "mma_hip.h"
// bf16 is carried as its 16 bits (the MFMA/WMMA builtins take i16 vectors).
extern "C" __global__ LAUNCH_BOUNDS(4 * WAVE) void gemm_bf16_gelu(const short *__restrict__ X, const short *__restrict__ W, const float *__restrict__ b, __bf16 *__restrict__ Y, int M, int N, int K) {
  gemm_tile<BF16, 32, 8>(X, W, M, N, K, [=](int r, int c, float v) {
    float x = v + b[c];
    Y[r * N + c] = (__bf16)(0.5f * x * (1.0f + tanh_(0.7978845608f * (x + 0.044715f * x * x * x))));
  });
}
