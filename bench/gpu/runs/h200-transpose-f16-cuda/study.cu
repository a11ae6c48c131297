// Which shape of an f16 rank-4 transpose reaches copy bandwidth on the H200?
// Hand-written CUDA (not rocmc): the designs rocmc's transpose rule could
// emit, at B=8 H=16 S=4096 D=128 (134 MB each way), each checked exactly
// against the host and timed by CUDA events.
//   t4:  O[b,h,d,s] = X[b,h,s,d]      p4: O[b,h,d,s] = X[b,s,h,d]
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <functional>
#include <cuda.h>
#include <string>
#include <fstream>
#include <sstream>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

union H8 { uint4 u; uint16_t h[8]; };
union H4 { uint2 u; uint16_t h[4]; };

struct Shape { int B, H, S, D; long sB, sH, sS; };  // input strides (halves); d contiguous

__device__ __forceinline__ long in_at(const Shape& g, int bh, int s, int d) {
  int b = bh / g.H, h = bh % g.H;
  return b * g.sB + h * g.sH + (long)s * g.sS + d;
}
__device__ __forceinline__ long out_at(const Shape& g, int bh, int d, int s) {
  return ((long)bh * g.D + d) * g.S + s;
}

// R: rocmc's default today: 32x32 tile, block (32,4), 8 rows a thread, 2-byte everything, pad 1.
__global__ void k_rocmc(const __half* __restrict__ X, __half* __restrict__ O, Shape g) {
  __shared__ __half t[32][33];
  int s0 = blockIdx.x * 32, d0 = blockIdx.y * 32, bh = blockIdx.z;
  for (int k = 0; k < 8; k++) { int s = threadIdx.y + 4 * k; t[s][threadIdx.x] = X[in_at(g, bh, s0 + s, d0 + threadIdx.x)]; }
  __syncthreads();
  for (int k = 0; k < 8; k++) { int d = threadIdx.y + 4 * k; O[out_at(g, bh, d0 + d, s0 + threadIdx.x)] = t[threadIdx.x][d]; }
}

// RG: rocmc's mapping exactly: thread ty stores rows 8ty..8ty+7, each store guarded.
__global__ void k_rocmc_map(const __half* __restrict__ X, __half* __restrict__ O, Shape g) {
  __shared__ __half t[32][33];
  int s0 = blockIdx.x * 32, d0 = blockIdx.y * 32, bh = blockIdx.z;
  for (int k = 0; k < 8; k++) { int s = threadIdx.y + 4 * k;
    t[s][threadIdx.x] = X[in_at(g, bh, min(s0 + s, g.S - 1), min(d0 + (int)threadIdx.x, g.D - 1))]; }
  __syncthreads();
  if (s0 + threadIdx.x < g.S)
    for (int k = 0; k < 8; k++) { int d = threadIdx.y * 8 + k;
      if (d0 + d < g.D) O[out_at(g, bh, d0 + d, s0 + threadIdx.x)] = t[threadIdx.x][d]; }
}

// R64: the same with a 64x64 tile and 256 threads (32,8), 8 rows a thread, 2-byte.
__global__ void k_r64(const __half* __restrict__ X, __half* __restrict__ O, Shape g) {
  __shared__ __half t[64][66];
  int s0 = blockIdx.x * 64, d0 = blockIdx.y * 64, bh = blockIdx.z;
  for (int k = 0; k < 8; k++) { int s = threadIdx.y + 8 * k;
    for (int c = 0; c < 2; c++) t[s][threadIdx.x + 32 * c] = X[in_at(g, bh, s0 + s, d0 + threadIdx.x + 32 * c)]; }
  __syncthreads();
  for (int k = 0; k < 8; k++) { int d = threadIdx.y + 8 * k;
    for (int c = 0; c < 2; c++) O[out_at(g, bh, d0 + d, s0 + threadIdx.x + 32 * c)] = t[threadIdx.x + 32 * c][d]; }
}

// P2: pairs. Tile 64 s x 64 d as 32-bit words; each thread moves 2x2 blocks, 4-byte
// global loads, 4-byte LDS writes and reads, two byte-permutes, 4-byte stores.
__global__ void k_pair(const __half* __restrict__ X, __half* __restrict__ O, Shape g) {
  __shared__ uint32_t t[64][33];
  int s0 = blockIdx.x * 64, d0 = blockIdx.y * 64, bh = blockIdx.z;
  for (int k = 0; k < 8; k++) { int s = threadIdx.y + 8 * k;
    t[s][threadIdx.x] = *(const uint32_t*)(X + in_at(g, bh, s0 + s, d0 + 2 * threadIdx.x)); }
  __syncthreads();
  for (int k = 0; k < 4; k++) { int p = threadIdx.y + 8 * k; int q = threadIdx.x;
    uint32_t a = t[2 * q][p], b = t[2 * q + 1][p];
    *(uint32_t*)(O + out_at(g, bh, d0 + 2 * p, s0 + 2 * q)) = __byte_perm(a, b, 0x5410);
    *(uint32_t*)(O + out_at(g, bh, d0 + 2 * p + 1, s0 + 2 * q)) = __byte_perm(a, b, 0x7632); }
}

// V8: no LDS. Each thread loads an 8x8 block (8 rows of 16 bytes), transposes it in
// registers, stores 8 rows of 16 bytes. Lane map: SL lanes along s, 32/SL along d.
template <int SL>
__global__ void k_reg8(const __half* __restrict__ X, __half* __restrict__ O, Shape g) {
  constexpr int DL = 32 / SL;
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;     // 8 warps
  int dchunks = g.D / 8;                                   // 16 at D=128
  int wd = dchunks / DL;                                   // warps along d
  int ws = 8 / wd;                                         // warps along s
  int dc = (w % wd) * DL + lane / SL, sb = (w / wd) * SL + lane % SL;
  int bh = blockIdx.y, s0 = blockIdx.x * (ws * SL * 8) + sb * 8, d0 = dc * 8;
  H8 v[8];
  for (int r = 0; r < 8; r++) v[r].u = *(const uint4*)(X + in_at(g, bh, s0 + r, d0));
  for (int c = 0; c < 8; c++) {
    H8 o;
    for (int r = 0; r < 8; r++) o.h[r] = v[r].h[c];
    *(uint4*)(O + out_at(g, bh, d0 + c, s0)) = o.u;
  }
}

// V4: the same with 4x4 blocks of 8 bytes.
__global__ void k_reg4(const __half* __restrict__ X, __half* __restrict__ O, Shape g) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int dchunks = g.D / 4;  // 32
  int dc = (w % 4) * 8 + lane / 4;  // 4 warps x 8 lanes = 32 chunks
  int sb = (w / 4) * 4 + lane % 4;  // 2 warps x 4 lanes = 8 s-blocks of 4
  (void)dchunks;
  int bh = blockIdx.y, s0 = blockIdx.x * 32 + sb * 4, d0 = dc * 4;
  H4 v[4];
  for (int r = 0; r < 4; r++) v[r].u = *(const uint2*)(X + in_at(g, bh, s0 + r, d0));
  for (int c = 0; c < 4; c++) {
    H4 o;
    for (int r = 0; r < 4; r++) o.h[r] = v[r].h[c];
    *(uint2*)(O + out_at(g, bh, d0 + c, s0)) = o.u;
  }
}

// L8: LDS tile 64 s x 128 d, 16-byte writes; each thread reads 8 rows of 16 bytes
// from LDS and transposes in registers (for inner axes too short to load whole).
__global__ void k_lds8(const __half* __restrict__ X, __half* __restrict__ O, Shape g) {
  __shared__ uint4 t[64][17];  // 64 rows of 128 halves (16 chunks), +1 chunk pad
  int bh = blockIdx.y, s0 = blockIdx.x * 64, tid = threadIdx.x;
  for (int k = 0; k < 4; k++) { int i = tid + 256 * k; int s = i / 16, c = i % 16;
    t[s][c] = *(const uint4*)(X + in_at(g, bh, s0 + s, c * 8)); }
  __syncthreads();
  for (int k = 0; k < 1; k++) {
    int sb = tid % 8, dc = tid / 8;  // 8 s-blocks x 16 d-chunks = 128 threads... use 2 halves
    if (dc >= 16) { dc -= 16; }
    int half_ = tid / 128;
    H8 v[4];
    for (int r = 0; r < 4; r++) v[r].u = t[sb * 8 + half_ * 4 + r][dc];
    for (int c = 0; c < 8; c++) {
      H4 o;
      for (int r = 0; r < 4; r++) o.h[r] = v[r].h[c];
      *(uint2*)(O + out_at(g, bh, dc * 8 + c, s0 + sb * 8 + half_ * 4)) = o.u;
    }
  }
}

__global__ void k_copy(const uint4* __restrict__ X, uint4* __restrict__ O, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) O[i] = X[i];
}

int main(int argc, char** argv) {
  const int B = 8, H = 16, S = 4096, D = 128;
  const long n = (long)B * H * S * D;
  std::vector<__half> hx(n), ho(n);
  for (long i = 0; i < n; i++) hx[i] = __float2half((float)((i * 2654435761u) % 2048) - 1024.f);
  __half *X, *O; CK(cudaMalloc(&X, n * 2)); CK(cudaMalloc(&O, n * 2));
  CK(cudaMemcpy(X, hx.data(), n * 2, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto time = [&](auto launch) { launch(); CK(cudaDeviceSynchronize());
    float best = 1e9; for (int rep = 0; rep < 5; rep++) { cudaEventRecord(e0); for (int i = 0; i < 20; i++) launch();
      cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); best = fminf(best, ms / 20); }
    CK(cudaGetLastError()); return best; };
  float copy_ms = time([&] { cudaMemcpyAsync(O, X, n * 2, cudaMemcpyDeviceToDevice); });
  float kcopy_ms = time([&] { k_copy<<<132 * 16, 256>>>((const uint4*)X, (uint4*)O, n / 8); });
  printf("device-to-device copy %.3f ms (%.0f GB/s); uint4 copy kernel %.3f ms (%.0f%%)\n", copy_ms,
         2.0 * n * 2 / copy_ms / 1e6, kcopy_ms, 100 * copy_ms / kcopy_ms);
  printf("| layout | design | ms | %% of copy | check |\n|---|---|---|---|---|\n");
  for (int lay = 0; lay < 2; lay++) {
    Shape g{B, H, S, D, 0, 0, 0};
    if (lay == 0) { g.sS = D; g.sH = (long)S * D; g.sB = (long)H * S * D; }
    else { g.sS = (long)H * D; g.sH = D; g.sB = (long)S * H * D; }
    const char* ln = lay == 0 ? "t4 X[b,h,s,d]" : "p4 X[b,s,h,d]";
    auto run = [&](const char* name, auto launch, float scale = 1.f) {
      CK(cudaMemset(O, 0, n * 2));
      float ms = time(launch);
      CK(cudaMemcpy(ho.data(), O, n * 2, cudaMemcpyDeviceToHost));
      long bad = 0;
      for (int bh = 0; bh < B * H; bh++) for (int d = 0; d < D; d++) for (int s = 0; s < S; s++) {
        int b = bh / H, h = bh % H;
        long src = b * g.sB + h * g.sH + (long)s * g.sS + d;
        long dst = ((long)bh * D + d) * S + s;
        bad += __half2float(ho[dst]) != __half2float(hx[src]) * scale;
      }
      printf("| %s | %s | %.3f | %.0f %% | %s |\n", ln, name, ms, 100 * copy_ms / ms, bad ? "WRONG" : "ok");
    };
    run("rocmc today: 32x32, 128 thr, 2-byte", [&] { k_rocmc<<<dim3(S / 32, D / 32, B * H), dim3(32, 4)>>>(X, O, g); });
    run("rocmc's mapping and guards, by hand", [&] { k_rocmc_map<<<dim3(S / 32, D / 32, B * H), dim3(32, 4)>>>(X, O, g); });
    // rocmc's own PTX: argv entries LAYOUT:FILE:ENTRY:gx,gy,gz:bx,by,bz (args X, O, then the sizes in file order)
    for (int a = 1; a < argc; a++) {
      std::string spec = argv[a]; std::vector<std::string> f; std::stringstream ss(spec); std::string part;
      while (std::getline(ss, part, ':')) f.push_back(part);
      if (f.size() != 5 || f[0] != (lay == 0 ? "t4" : "p4")) continue;
      std::ifstream in(f[1]); std::stringstream text; text << in.rdbuf();
      CUmodule mod; CUfunction fn;
      if (cuModuleLoadData(&mod, text.str().c_str()) || cuModuleGetFunction(&fn, mod, f[2].c_str())) { printf("cannot load %s\n", f[1].c_str()); continue; }
      unsigned gd[3], bd[3];
      sscanf(f[3].c_str(), "%u,%u,%u", &gd[0], &gd[1], &gd[2]); sscanf(f[4].c_str(), "%u,%u,%u", &bd[0], &bd[1], &bd[2]);
      int sz[4] = {B, lay == 0 ? H : S, lay == 0 ? S : H, D};
      void* args[] = {&X, &O, &sz[0], &sz[1], &sz[2], &sz[3]};
      std::string label = "rocmc PTX " + f[1].substr(f[1].rfind('/') + 1);
      // transpose4d_fallback scales by 0.5 (its kernel file's `* 0.5`)
      run(label.c_str(), [&] { cuLaunchKernel(fn, gd[0], gd[1], gd[2], bd[0], bd[1], bd[2], 0, 0, args, nullptr); }, lay == 0 ? 0.5f : 1.f);
    }
    run("64x64, 256 thr, 2-byte", [&] { k_r64<<<dim3(S / 64, D / 64, B * H), dim3(32, 8)>>>(X, O, g); });
    run("64x64 pairs, 4-byte LDS + prmt", [&] { k_pair<<<dim3(S / 64, D / 64, B * H), dim3(32, 8)>>>(X, O, g); });
    run("regs 8x8, 16-byte, s-lanes 8", [&] { k_reg8<8><<<dim3(S / 128, B * H), 256>>>(X, O, g); });
    run("regs 8x8, 16-byte, s-lanes 2", [&] { k_reg8<2><<<dim3(S / 128, B * H), 256>>>(X, O, g); });
    run("regs 8x8, 16-byte, s-lanes 4", [&] { k_reg8<4><<<dim3(S / 128, B * H), 256>>>(X, O, g); });
    run("regs 4x4, 8-byte", [&] { k_reg4<<<dim3(S / 32, B * H), 256>>>(X, O, g); });
    run("LDS 64x128 16-byte, 4x8 regs", [&] { k_lds8<<<dim3(S / 64, B * H), 256>>>(X, O, g); });
  }
}
