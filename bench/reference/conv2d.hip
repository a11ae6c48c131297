#include "rocmc_hip.h"
// One output pixel per thread, blocks of 64x4, n and k fused on z.
extern "C" __global__ LAUNCH_BOUNDS(256) void conv2d(const float *__restrict__ I, const float *__restrict__ F, float *__restrict__ O, int N, int C, int H, int W, int K) {
  int nk = BID_Z, n = nk / K, k = nk % K;
  int y = BID_Y * 4 + TID_Y, x = BID_X * 64 + TID_X;
  int OH = H - 2, OW = W - 2;
  if (y >= OH || x >= OW) return;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
      for (int s = 0; s < 3; ++s) acc += I[((n * C + c) * H + y + r) * W + x + s] * F[((k * C + c) * 3 + r) * 3 + s];
  O[((n * K + k) * OH + y) * OW + x] = acc;
}
