#include "rocmc_hip.h"
// 32x32 tile through LDS, rows padded by one to avoid bank conflicts.
extern "C" __global__ LAUNCH_BOUNDS(1024) void transpose(const float *__restrict__ A, float *__restrict__ B, int rows, int cols) {
  __shared__ float tile[32][33];
  int tx = TID_X, ty = TID_Y;
  int i = BID_X * 32 + ty, j = BID_Y * 32 + tx;
  tile[ty][tx] = A[imin(i, rows - 1) * cols + imin(j, cols - 1)];
  sync_threads();
  int oi = BID_X * 32 + tx, oj = BID_Y * 32 + ty;
  if (oj < cols && oi < rows) B[oj * rows + oi] = tile[tx][ty];
}
