#include "rocmc_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(256) void saxpy(const float *__restrict__ x, const float *__restrict__ y, float *__restrict__ out, int n, float alpha) {
  int i = BID_X * 256 + TID_X;
  if (i < n) out[i] = alpha * x[i] + y[i];
}
