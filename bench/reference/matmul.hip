#include "rocmc_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(256) void matmul(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C, int M, int N, int K) {
  int i = BID_Y * 16 + TID_Y, j = BID_X * 16 + TID_X;
  if (i >= M || j >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
  C[i * N + j] = acc;
}
