// main.cc: runs one kernel of reduce.cu on the host (shim.h).
//
//   reduce-host KERNEL N NRANKS SHIFT A B OUT
//
// reads N elements from each of the files A and B, computes
// out = a op b with kernel KERNEL (ringddp_sum_f32, ...) on buffers
// 16-byte aligned plus SHIFT elements (SHIFT 0: the vector path; 1: the
// scalar one), and writes the N results to the file OUT.
#include "shim.h"
#include "../reduce.cu"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

typedef void (*kernel_fn)(void*, const void*, const void*, u64, u64);

#define ENTRY(name, T) {#name, sizeof(T), (kernel_fn)(void (*)(T*, const T*, const T*, u64, u64))name}
static const struct { const char* name; size_t size; kernel_fn fn; } kernels[] = {
	ENTRY(ringddp_sum_f32, float), ENTRY(ringddp_sum_f64, double), ENTRY(ringddp_sum_i32, int), ENTRY(ringddp_sum_i64, long long),
	ENTRY(ringddp_prod_f32, float), ENTRY(ringddp_prod_f64, double), ENTRY(ringddp_prod_i32, int), ENTRY(ringddp_prod_i64, long long),
	ENTRY(ringddp_max_f32, float), ENTRY(ringddp_max_f64, double), ENTRY(ringddp_max_i32, int), ENTRY(ringddp_max_i64, long long),
	ENTRY(ringddp_min_f32, float), ENTRY(ringddp_min_f64, double), ENTRY(ringddp_min_i32, int), ENTRY(ringddp_min_i64, long long),
	ENTRY(ringddp_avg_f32, float), ENTRY(ringddp_avg_f64, double),
};

static void* load(const char* path, size_t bytes, size_t shift) {
	char* p = (char*)aligned_alloc(16, bytes + shift + 16);
	FILE* f = fopen(path, "rb");
	if (!f || fread(p + shift, 1, bytes, f) != bytes) { fprintf(stderr, "reading %s\n", path); exit(2); }
	fclose(f);
	return p + shift;
}

int main(int argc, char** argv) {
	if (argc != 8) { fprintf(stderr, "usage: reduce-host KERNEL N NRANKS SHIFT A B OUT\n"); return 2; }
	u64 n = strtoull(argv[2], 0, 10), nranks = strtoull(argv[3], 0, 10), shift = strtoull(argv[4], 0, 10);
	for (const auto& k : kernels) {
		if (std::string(k.name) != argv[1]) continue;
		size_t bytes = n * k.size, sh = shift * k.size;
		void* a = load(argv[5], bytes, sh);
		void* b = load(argv[6], bytes, sh);
		char* out = (char*)aligned_alloc(16, bytes + sh + 16) + sh;
		k.fn(out, a, b, n, nranks);
		FILE* f = fopen(argv[7], "wb");
		if (!f || fwrite(out, 1, bytes, f) != bytes) { fprintf(stderr, "writing %s\n", argv[7]); return 2; }
		fclose(f);
		return 0;
	}
	fprintf(stderr, "no kernel %s\n", argv[1]);
	return 2;
}
