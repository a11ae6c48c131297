#include "rocmc_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(256) void bias2d(const float *__restrict__ X, const float *__restrict__ bias, float *__restrict__ Y, int rows, int cols, float scale) {
  int r = BID_Y * 16 + TID_Y, c = BID_X * 16 + TID_X;
  if (r < rows && c < cols) Y[r * cols + c] = X[r * cols + c] * scale + bias[c];
}
