// shim.h: what reduce.cu needs from CUDA, for a host C++ compiler, so that
// the kernels' arithmetic can be compiled and tested on a machine without
// a GPU (allreduce/cuda's TestKernelSourceOnHost). One "thread" runs each
// kernel: gridDim = blockDim = 1, so the kernel's loop covers every
// element. The intrinsics are the IEEE round-to-nearest operations they
// name; the host compiler must not contract (-ffp-contract=off) or flush
// denormals (no -ffast-math), as nvcc's defaults for reduce.ptx do not.
#pragma once
#include <cstring>

#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __align__(n) alignas(n)

struct rd_dim3 { unsigned long long x; };
static rd_dim3 gridDim = {1}, blockDim = {1}, blockIdx = {0}, threadIdx = {0};

static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
