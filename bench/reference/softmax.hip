#include "rocmc_hip.h"
// One kernel, one work-group of 256 threads per row: the row maximum and the
// sum of exponentials are combined through LDS and kept there.
__device__ static float block_reduce(float *lds, float a, int t, bool max) {
  lds[t] = a;
  sync_threads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) lds[t] = max ? __builtin_fmaxf(lds[t], lds[t + s]) : lds[t] + lds[t + s];
    sync_threads();
  }
  return lds[0];
}
extern "C" __global__ LAUNCH_BOUNDS(256) void softmax(const float *__restrict__ X, float *__restrict__ Y, int rows, int cols) {
  __shared__ float lds_m[256], lds_s[256], part[2];
  int r = BID_X, t = TID_X;
  const float *x = X + (long)r * cols;
  float a = -__builtin_inff();
  for (int c = t; c < cols; c += 256) a = __builtin_fmaxf(a, x[c]);
  float m = block_reduce(lds_m, a, t, true);
  if (t == 0) part[0] = m;
  sync_threads();
  m = part[0];
  float s = 0.0f;
  for (int c = t; c < cols; c += 256) s += __builtin_expf(x[c] - m);
  s = block_reduce(lds_s, s, t, false);
  if (t == 0) part[1] = s;
  sync_threads();
  s = part[1];
  for (int j = t; j < cols; j += 256) Y[(long)r * cols + j] = __builtin_expf(x[j] - m) / s;
}
