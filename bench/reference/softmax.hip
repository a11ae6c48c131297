#include "rocmc_hip.h"
// One work-group of 256 threads per row for the reductions, combined through LDS.
extern "C" __global__ LAUNCH_BOUNDS(256) void softmax_M(const float *__restrict__ X, float *__restrict__ M, int rows, int cols) {
  __shared__ float lds[256];
  int r = BID_X, t = TID_X;
  float a = -__builtin_inff();
  for (int c = t; c < cols; c += 256) a = __builtin_fmaxf(a, X[r * cols + c]);
  lds[t] = a;
  sync_threads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) lds[t] = __builtin_fmaxf(lds[t], lds[t + s]);
    sync_threads();
  }
  if (t == 0) M[r] = lds[0];
}
extern "C" __global__ LAUNCH_BOUNDS(256) void softmax_S(const float *__restrict__ X, const float *__restrict__ M, float *__restrict__ S, int rows, int cols) {
  __shared__ float lds[256];
  int r = BID_X, t = TID_X;
  float a = 0.0f, m = M[r];
  for (int c = t; c < cols; c += 256) a += __builtin_expf(X[r * cols + c] - m);
  lds[t] = a;
  sync_threads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) lds[t] = lds[t] + lds[t + s];
    sync_threads();
  }
  if (t == 0) S[r] = lds[0];
}
extern "C" __global__ LAUNCH_BOUNDS(256) void softmax_Y(const float *__restrict__ X, const float *__restrict__ M, const float *__restrict__ S, float *__restrict__ Y, int rows, int cols) {
  int r = BID_Y * 4 + TID_Y, j = BID_X * 64 + TID_X;
  if (r < rows && j < cols) Y[r * cols + j] = __builtin_expf(X[r * cols + j] - M[r]) / S[r];
}
