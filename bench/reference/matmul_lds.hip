#include "rocmc_hip.h"
// 64x64 outputs per block of 16x16 threads, 4x4 per thread in registers;
// 64x16 tiles of A and 16x64 tiles of B staged in LDS per step of k.
extern "C" __global__ LAUNCH_BOUNDS(256) void matmul_lds(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C, int M, int N, int K) {
  __shared__ float As[64][17];
  __shared__ float Bs[16][64];
  int tx = TID_X, ty = TID_Y, tid = ty * 16 + tx;
  int row0 = BID_Y * 64, col0 = BID_X * 64;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
    for (int it = 0; it < 4; ++it) {
      int e = it * 256 + tid;
      As[e / 16][e % 16] = A[imin(row0 + e / 16, M - 1) * K + imin(k0 + e % 16, K - 1)];
      Bs[e / 64][e % 64] = B[imin(k0 + e / 64, K - 1) * N + imin(col0 + e % 64, N - 1)];
    }
    sync_threads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      if (k0 + kk < K) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[r][c] += As[ty * 4 + r][kk] * Bs[kk][tx * 4 + c];
      }
    }
    sync_threads();
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (row0 + ty * 4 + r < M && col0 + tx * 4 + c < N) C[(row0 + ty * 4 + r) * N + col0 + tx * 4 + c] = acc[r][c];
}
