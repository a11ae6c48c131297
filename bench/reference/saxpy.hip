#include "rocmc_hip.h"
// 4 consecutive elements per thread: unguarded (vectorizable) when all are in range.
extern "C" __global__ LAUNCH_BOUNDS(256) void saxpy(const float *__restrict__ x, const float *__restrict__ y, float *__restrict__ out, int n, float alpha) {
  int i0 = BID_X * 1024 + TID_X * 4;
  if (i0 + 3 < n) {
#pragma unroll
    for (int v = 0; v < 4; ++v) out[i0 + v] = alpha * x[i0 + v] + y[i0 + v];
  } else {
#pragma unroll
    for (int v = 0; v < 4; ++v)
      if (i0 + v < n) out[i0 + v] = alpha * x[i0 + v] + y[i0 + v];
  }
}
