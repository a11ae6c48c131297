// The error of the instruction rocmc's `exp2_approx` emits on NVIDIA,
// `ex2.approx.ftz.f32`, over every f32 x in [-126, 128) (the results
// normal numbers), in ulps of the correctly rounded 2^x (computed in f64,
// whose error is far below an f32 ulp). Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 ex2_ulp.cu -o ex2_ulp && ./ex2_ulp
#include <cstdio>
#include <cstdint>
#include <cmath>
#include <cstring>

__device__ unsigned long long worst_bits;  // ulp error * 2^20, packed with x
__device__ unsigned long long counted;

__device__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__global__ void sweep(uint32_t first, uint32_t count) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long local = 0, n = 0;
  for (; i < count; i += gridDim.x * blockDim.x) {
    uint32_t bits = first + i;
    float x = __uint_as_float(bits);
    if (!(x >= -126.0f && x < 128.0f)) continue;
    double exact = exp2((double)x);
    float got = ex2(x);
    // One f32 ulp at the exact value's binade.
    int e;
    frexp(exact, &e);
    double ulp = ldexp(1.0, e - 24);
    double err = fabs((double)got - exact) / ulp;
    unsigned long long q = (unsigned long long)(err * 1048576.0);
    unsigned long long packed = (q << 32) | bits;
    if (packed > local) local = packed;
    n++;
  }
  atomicMax(&worst_bits, local);
  atomicAdd(&counted, n);
}

int main() {
  unsigned long long zero = 0, worst = 0, total = 0;
  // Positive x: bit patterns 0 .. 128.0; negative: 0x80000000 .. -126.0.
  uint32_t ranges[2][2] = {{0x00000000u, 0x43000000u}, {0x80000000u, 0xC2FC0001u}};
  double worst_ulp = 0; float worst_x = 0;
  for (auto &r : ranges) {
    cudaMemcpyToSymbol(worst_bits, &zero, 8);
    sweep<<<4096, 256>>>(r[0], r[1] - r[0]);
    cudaMemcpyFromSymbol(&worst, worst_bits, 8);
    unsigned long long c;
    cudaMemcpyFromSymbol(&c, counted, 8);
    total = c;
    double u = (double)(worst >> 32) / 1048576.0;
    uint32_t b = (uint32_t)worst;
    float x; memcpy(&x, &b, 4);
    if (u > worst_ulp) { worst_ulp = u; worst_x = x; }
  }
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { printf("CUDA error: %s\n", cudaGetErrorString(err)); return 1; }
  printf("ex2.approx.ftz.f32 over %llu inputs in [-126, 128): max %.3f ulp at x = %.9g\n",
         total, worst_ulp, worst_x);
  return 0;
}
