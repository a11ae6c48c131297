#include "rocmc_hip.h"
extern "C" __global__ LAUNCH_BOUNDS(64) void softmax_M(const float *__restrict__ X, float *__restrict__ M, int rows, int cols) {
  int r = BID_X * 64 + TID_X;
  if (r >= rows) return;
  float m = -__builtin_inff();
  for (int c = 0; c < cols; ++c) m = __builtin_fmaxf(m, X[r * cols + c]);
  M[r] = m;
}
extern "C" __global__ LAUNCH_BOUNDS(64) void softmax_S(const float *__restrict__ X, const float *__restrict__ M, float *__restrict__ S, int rows, int cols) {
  int r = BID_X * 64 + TID_X;
  if (r >= rows) return;
  float s = 0.0f, m = M[r];
  for (int c = 0; c < cols; ++c) s += __builtin_expf(X[r * cols + c] - m);
  S[r] = s;
}
extern "C" __global__ LAUNCH_BOUNDS(256) void softmax_Y(const float *__restrict__ X, const float *__restrict__ M, const float *__restrict__ S, float *__restrict__ Y, int rows, int cols) {
  int r = BID_Y * 4 + TID_Y, j = BID_X * 64 + TID_X;
  if (r < rows && j < cols) Y[r * cols + j] = __builtin_expf(X[r * cols + j] - M[r]) / S[r];
}
