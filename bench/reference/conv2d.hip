#include "rocmc_hip.h"
// Implicit GEMM as examples/conv2d.toml: a block of 16x16 threads computes
// 64 output channels x 4 rows x 64 pixels, each thread 4 x 4 x 4 in
// registers; per step of 4 input channels, the input's 6 x 66 halo tile
// and the filters' 64 x 4 x 3 x 3 are staged in LDS.
extern "C" __global__ LAUNCH_BOUNDS(256) void conv2d(const float *__restrict__ I, const float *__restrict__ F, float *__restrict__ O, int N, int C, int H, int W, int K) {
  __shared__ float Is[4][6][66];
  __shared__ float Fs[64][4][3][3];
  int tx = TID_X, ty = TID_Y, tid = ty * 16 + tx;
  int kb = (BID_Z % ((K + 63) / 64)) * 64, n = BID_Z / ((K + 63) / 64);
  int y0 = BID_Y * 4, x0 = BID_X * 64;
  int OH = H - 2, OW = W - 2;
  float acc[4][4][4] = {};
  for (int c0 = 0; c0 < C; c0 += 4) {
    for (int e = tid; e < 4 * 6 * 66; e += 256) {
      int c = e / 396, r = e / 66 % 6, s = e % 66;
      Is[c][r][s] = I[((n * C + imin(c0 + c, C - 1)) * H + imin(y0 + r, H - 1)) * W + imin(x0 + s, W - 1)];
    }
    for (int e = tid; e < 64 * 36; e += 256) {
      int k = e / 36, c = e / 9 % 4, rs = e % 9;
      Fs[k][c][rs / 3][rs % 3] = F[((imin(kb + k, K - 1) * C + imin(c0 + c, C - 1)) * 3 + rs / 3) * 3 + rs % 3];
    }
    sync_threads();
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (c0 + c < C) {
#pragma unroll
        for (int r = 0; r < 3; ++r)
#pragma unroll
          for (int s = 0; s < 3; ++s)
#pragma unroll
            for (int yy = 0; yy < 4; ++yy)
#pragma unroll
              for (int kk = 0; kk < 4; ++kk)
#pragma unroll
                for (int xx = 0; xx < 4; ++xx) acc[kk][yy][xx] += Is[c][yy + r][tx * 4 + xx + s] * Fs[ty * 4 + kk][c][r][s];
      }
    }
    sync_threads();
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int yy = 0; yy < 4; ++yy)
#pragma unroll
      for (int xx = 0; xx < 4; ++xx) {
        int k = kb + ty * 4 + kk, y = y0 + yy, x = x0 + tx * 4 + xx;
        if (k < K && y < OH && x < OW) O[((n * K + k) * OH + y) * OW + x] = acc[kk][yy][xx];
      }
}
