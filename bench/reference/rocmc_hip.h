// The few HIP builtins the reference kernels use, declared by hand so that
// clang-22 compiles them with no ROCm installed (-nogpulib -nogpuinc).
#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __restrict__ __restrict
// The real block size, as rocmc gives it: __launch_bounds__(n).
#define LAUNCH_BOUNDS(n) __attribute__((amdgpu_flat_work_group_size(n, n)))
#define TID_X ((int)__builtin_amdgcn_workitem_id_x())
#define TID_Y ((int)__builtin_amdgcn_workitem_id_y())
#define BID_X ((int)__builtin_amdgcn_workgroup_id_x())
#define BID_Y ((int)__builtin_amdgcn_workgroup_id_y())
#define BID_Z ((int)__builtin_amdgcn_workgroup_id_z())
static __device__ inline int imin(int a, int b) { return a < b ? a : b; }
// __syncthreads(): workgroup fences around the barrier.
static __device__ inline void sync_threads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
// tanh without device libraries, as rocmc expands it.
static __device__ inline float tanh_(float x) {
  float ax = __builtin_fabsf(x);
  if (ax < 0.125f) {
    float x2 = x * x;
    return x * __builtin_fmaf(__builtin_fmaf(__builtin_fmaf(-17.0f / 315.0f, x2, 2.0f / 15.0f), x2, -1.0f / 3.0f), x2, 1.0f);
  }
  float e = __builtin_expf(-2.0f * ax);
  return __builtin_copysignf((1.0f - e) / (1.0f + e), x);
}
