// Reduction kernels of package allreduce/cuda (ringddp). `go generate
// ./allreduce/cuda/` compiles this file to reduce.ptx, which is committed
// and embedded in the Go binary; the driver JIT-compiles it for the GPU at
// hand (cuModuleLoadData).
//
// Every kernel computes out[i] = a[i] op b[i] for i < n, where a is the
// FIRST operand (the ring's local value) and b the second (the value
// received from the left neighbour), exactly as package allreduce's host
// kernels (combineElems in allreduce/op.go) do, so that a device
// collective ends bitwise identical to the host one, special values
// included:
//
//   - Sum, Prod, Avg (float): the GPU's add, mul and div are IEEE-754
//     round-to-nearest (no FMA: nothing here multiplies and adds one value;
//     no flush-to-zero: nvcc's default -ftz=false; IEEE division: nvcc's
//     default -prec-div=true), so non-NaN results match the host bit for
//     bit. NaN results do not: the GPU returns a canonical NaN, while the
//     host (amd64 SSE/AVX) returns the first NaN operand quieted, or the
//     second, or the "default NaN" 0xffc00000 (float32) /
//     0xfff8000000000000 (float64) for an invalid operation (Inf - Inf,
//     0 * Inf). fix() reproduces those rules.
//   - Max, Min: a select, as on the host: b wins when b > a (b < a) or b is
//     a NaN, otherwise a; no arithmetic, so a NaN keeps its payload (even a
//     signalling one) and of two equal zeros a (the first operand) wins.
//   - Avg: out = (a + b) / nranks, the two separately rounded operations
//     the host performs (ring reduce-scatter's last step, then the
//     division); kernels for float32 and float64 only.
//   - Integers: two's complement wrap-around (unsigned arithmetic, since
//     signed overflow is undefined in C++), as in Go.
//
// Every parameter is 8 bytes wide (pointers and unsigned long long), which
// is what gorgonia.org/cu's Function.Launch passes.

typedef unsigned long long u64;

// ---- NaN rules of the amd64 host ----

__device__ __forceinline__ bool isnan32(unsigned u) { return (u & 0x7fffffffu) > 0x7f800000u; }
__device__ __forceinline__ bool isnan64(u64 u) { return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }

__device__ __forceinline__ float fix(float a, float b, float r) {
	unsigned ua = __float_as_uint(a), ub = __float_as_uint(b);
	if (isnan32(ua)) return __uint_as_float(ua | 0x00400000u);
	if (isnan32(ub)) return __uint_as_float(ub | 0x00400000u);
	if (isnan32(__float_as_uint(r))) return __uint_as_float(0xffc00000u);
	return r;
}

__device__ __forceinline__ double fix(double a, double b, double r) {
	u64 ua = (u64)__double_as_longlong(a), ub = (u64)__double_as_longlong(b);
	if (isnan64(ua)) return __longlong_as_double((long long)(ua | 0x0008000000000000ull));
	if (isnan64(ub)) return __longlong_as_double((long long)(ub | 0x0008000000000000ull));
	if (isnan64((u64)__double_as_longlong(r))) return __longlong_as_double((long long)0xfff8000000000000ull);
	return r;
}

// ---- operators: T f(T a, T b, u64 nranks) ----

struct OpSum {
	__device__ __forceinline__ static float f(float a, float b, u64) { return fix(a, b, __fadd_rn(a, b)); }
	__device__ __forceinline__ static double f(double a, double b, u64) { return fix(a, b, __dadd_rn(a, b)); }
	__device__ __forceinline__ static int f(int a, int b, u64) { return (int)((unsigned)a + (unsigned)b); }
	__device__ __forceinline__ static long long f(long long a, long long b, u64) { return (long long)((u64)a + (u64)b); }
};

struct OpProd {
	__device__ __forceinline__ static float f(float a, float b, u64) { return fix(a, b, __fmul_rn(a, b)); }
	__device__ __forceinline__ static double f(double a, double b, u64) { return fix(a, b, __dmul_rn(a, b)); }
	__device__ __forceinline__ static int f(int a, int b, u64) { return (int)((unsigned)a * (unsigned)b); }
	__device__ __forceinline__ static long long f(long long a, long long b, u64) { return (long long)((u64)a * (u64)b); }
};

// Max and Min compare, then select: `b != b` is true for a NaN b only.
struct OpMax {
	template <typename T>
	__device__ __forceinline__ static T f(T a, T b, u64) { return (b > a || b != b) ? b : a; }
};

struct OpMin {
	template <typename T>
	__device__ __forceinline__ static T f(T a, T b, u64) { return (b < a || b != b) ? b : a; }
};

// Avg: the sum, then one IEEE division by the number of ranks (exact in
// float: nranks is small). A NaN sum stays as it is: the host's division
// returns its (already quiet) NaN operand.
struct OpAvg {
	__device__ __forceinline__ static float f(float a, float b, u64 nranks) {
		float s = OpSum::f(a, b, 0);
		return isnan32(__float_as_uint(s)) ? s : __fdiv_rn(s, (float)nranks);
	}
	__device__ __forceinline__ static double f(double a, double b, u64 nranks) {
		double s = OpSum::f(a, b, 0);
		return isnan64((u64)__double_as_longlong(s)) ? s : __ddiv_rn(s, (double)nranks);
	}
};

// ---- the element loop ----

// A 16-byte vector of K elements of T, loaded and stored as one access
// (ld.global.v4 / v2) when the three pointers are 16-byte aligned.
template <typename T, int K>
struct __align__(16) Vec {
	T v[K];
};

template <typename Op, typename T>
__device__ __forceinline__ void reduce(T* __restrict__ out, const T* a, const T* b, u64 n, u64 nranks) {
	// out may alias a (in place): no __restrict__ on a and b, and every
	// element is read before it is written by the same thread.
	const u64 stride = (u64)gridDim.x * blockDim.x;
	u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
	const int K = 16 / sizeof(T);
	if ((((u64)out | (u64)a | (u64)b) & 15) == 0) {
		typedef Vec<T, K> V;
		const u64 nv = n / K;
		V* vo = (V*)out;
		const V* va = (const V*)a;
		const V* vb = (const V*)b;
		for (u64 j = i; j < nv; j += stride) {
			V x = va[j], y = vb[j], z;
#pragma unroll
			for (int k = 0; k < K; k++) z.v[k] = Op::f(x.v[k], y.v[k], nranks);
			vo[j] = z;
		}
		for (u64 j = nv * K + i; j < n; j += stride) out[j] = Op::f(a[j], b[j], nranks);
		return;
	}
	for (u64 j = i; j < n; j += stride) out[j] = Op::f(a[j], b[j], nranks);
}

#define KERNEL(name, Op, T)                                                                          \
	extern "C" __global__ void ringddp_##name(T* out, const T* a, const T* b, u64 n, u64 nranks) { \
		reduce<Op, T>(out, a, b, n, nranks);                                                         \
	}

#define KERNELS(name, Op)           \
	KERNEL(name##_f32, Op, float)     \
	KERNEL(name##_f64, Op, double)    \
	KERNEL(name##_i32, Op, int)       \
	KERNEL(name##_i64, Op, long long)

KERNELS(sum, OpSum)
KERNELS(prod, OpProd)
KERNELS(max, OpMax)
KERNELS(min, OpMin)
KERNEL(avg_f32, OpAvg, float)
KERNEL(avg_f64, OpAvg, double)

// ringddp_nop does nothing: the cost of a bare kernel launch, against which
// scripts/gpu-check.sh reports small-message latency.
extern "C" __global__ void ringddp_nop(u64 unused) {}
