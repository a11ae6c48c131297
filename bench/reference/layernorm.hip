#include "rocmc_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(64) void layernorm_mean(const float *__restrict__ X, float *__restrict__ mean, int rows, int cols, float eps) {
  int r = BID_X * 64 + TID_X;
  if (r >= rows) return;
  float s = 0.0f;
  for (int c = 0; c < cols; ++c) s += X[r * cols + c];
  mean[r] = s / (float)cols;
}
extern "C" __global__ LAUNCH_BOUNDS(64) void layernorm_rstd(const float *__restrict__ X, const float *__restrict__ mean, float *__restrict__ rstd, int rows, int cols, float eps) {
  int r = BID_X * 64 + TID_X;
  if (r >= rows) return;
  float s = 0.0f, m = mean[r];
  for (int c = 0; c < cols; ++c) { float d = X[r * cols + c] - m; s += d * d; }
  rstd[r] = 1.0f / __builtin_sqrtf(s / (float)cols + eps);
}
extern "C" __global__ LAUNCH_BOUNDS(256) void layernorm_Y(const float *__restrict__ X, const float *__restrict__ gamma, const float *__restrict__ beta, const float *__restrict__ mean, const float *__restrict__ rstd, float *__restrict__ Y, int rows, int cols, float eps) {
  int r = BID_Y * 4 + TID_Y, j = BID_X * 64 + TID_X;
  if (r < rows && j < cols) Y[r * cols + j] = (X[r * cols + j] - mean[r]) * rstd[r] * gamma[j] + beta[j];
}
