#include "rocmc_hip.h"
// One kernel, one work-group of 256 threads per row: the mean and the
// reciprocal standard deviation are combined through LDS and kept there.
__device__ static float block_sum(float *lds, float a, int t) {
  lds[t] = a;
  sync_threads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) lds[t] = lds[t] + lds[t + s];
    sync_threads();
  }
  return lds[0];
}
extern "C" __global__ LAUNCH_BOUNDS(256) void layernorm(const float *__restrict__ X, const float *__restrict__ gamma, const float *__restrict__ beta, float *__restrict__ Y, int rows, int cols, float eps) {
  __shared__ float lds_m[256], lds_v[256], part[2];
  int r = BID_X, t = TID_X;
  const float *x = X + (long)r * cols;
  float a = 0.0f;
  for (int c = t; c < cols; c += 256) a += x[c];
  a = block_sum(lds_m, a, t);
  if (t == 0) part[0] = a / (float)cols;
  sync_threads();
  float mean = part[0];
  float v = 0.0f;
  for (int c = t; c < cols; c += 256) { float d = x[c] - mean; v += d * d; }
  v = block_sum(lds_v, v, t);
  if (t == 0) part[1] = 1.0f / __builtin_sqrtf(v / (float)cols + eps);
  sync_threads();
  float rstd = part[1];
  for (int j = t; j < cols; j += 256) Y[(long)r * cols + j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
}
