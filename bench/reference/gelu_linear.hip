#include "rocmc_hip.h"
// 64x64 outputs per block of 16x16 threads, 4x4 per thread in registers.
extern "C" __global__ LAUNCH_BOUNDS(256) void gelu_linear(const float *__restrict__ A, const float *__restrict__ B, const float *__restrict__ bias, float *__restrict__ C, int M, int N, int K) {
  int row0 = BID_Y * 64 + TID_Y * 4, col0 = BID_X * 64 + TID_X * 4;
  float acc[4][4] = {};
  for (int k = 0; k < K; ++k) {
    float a[4], b[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = A[imin(row0 + r, M - 1) * K + k];
#pragma unroll
    for (int c = 0; c < 4; ++c) b[c] = B[k * N + imin(col0 + c, N - 1)];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][c] += a[r] * b[c];
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (row0 + r < M && col0 + c < N) { float x = acc[r][c] + bias[col0 + c]; C[(row0 + r) * N + col0 + c] = 0.5f * x * (1.0f + tanh_(0.7978845608f * (x + 0.044715f * x * x * x))); }
}
