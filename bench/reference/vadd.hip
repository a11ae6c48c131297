#include "rocmc_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(64) void vadd(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C, int n) {
  int i = BID_X * 64 + TID_X;
  if (i < n) C[i] = A[i] + B[i];
}
