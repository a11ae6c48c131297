#include "rocmc_hip.h"
// One work-group of 256 threads per row for the statistics, combined through LDS.
extern "C" __global__ LAUNCH_BOUNDS(256) void layernorm_mean(const float *__restrict__ X, float *__restrict__ mean, int rows, int cols, float eps) {
  __shared__ float lds[256];
  int r = BID_X, t = TID_X;
  float a = 0.0f;
  for (int c = t; c < cols; c += 256) a += X[r * cols + c];
  lds[t] = a;
  sync_threads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) lds[t] = lds[t] + lds[t + s];
    sync_threads();
  }
  if (t == 0) mean[r] = lds[0] / (float)cols;
}
extern "C" __global__ LAUNCH_BOUNDS(256) void layernorm_rstd(const float *__restrict__ X, const float *__restrict__ mean, float *__restrict__ rstd, int rows, int cols, float eps) {
  __shared__ float lds[256];
  int r = BID_X, t = TID_X;
  float a = 0.0f, m = mean[r];
  for (int c = t; c < cols; c += 256) { float d = X[r * cols + c] - m; a += d * d; }
  lds[t] = a;
  sync_threads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) lds[t] = lds[t] + lds[t + s];
    sync_threads();
  }
  if (t == 0) rstd[r] = 1.0f / __builtin_sqrtf(lds[0] / (float)cols + eps);
}
extern "C" __global__ LAUNCH_BOUNDS(256) void layernorm_Y(const float *__restrict__ X, const float *__restrict__ gamma, const float *__restrict__ beta, const float *__restrict__ mean, const float *__restrict__ rstd, float *__restrict__ Y, int rows, int cols, float eps) {
  int r = BID_Y * 4 + TID_Y, j = BID_X * 64 + TID_X;
  if (r < rows && j < cols) Y[r * cols + j] = (X[r * cols + j] - mean[r]) * rstd[r] * gamma[j] + beta[j];
}
