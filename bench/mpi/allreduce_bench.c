/*
 * allreduce_bench: the OpenMPI baseline for `go run ./cmd/bench -op allreduce`.
 *
 * Times MPI_Allreduce (MPI_FLOAT, MPI_SUM, in place) for sizes from -min to
 * -max bytes, multiplying by -factor, with the same method as cmd/bench:
 * every iteration starts with MPI_Barrier, each rank times the all-reduce
 * from its own exit of that barrier to its own return (MPI_Wtime), the
 * iteration's time is the maximum over ranks (MPI_Reduce with MPI_MAX of the
 * per-iteration times), and the reported time is the median over the timed
 * iterations. algbw = bytes / time (1e9 B/s), busbw = algbw * 2(N-1)/N.
 * After the timed iterations one more all-reduce on fresh inputs is checked
 * against the known sum (wrong elements, summed over ranks).
 *
 * Usage: allreduce_bench [-min BYTES] [-max BYTES] [-factor F] [-iters N] [-warmup N]
 * Sizes take K, M, G suffixes (binary). Defaults: 8, 64M, 2, 20, 5.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long parse_bytes(const char *s) {
	char *end;
	long v = strtol(s, &end, 10);
	switch (*end) {
	case 'k': case 'K': v <<= 10; break;
	case 'm': case 'M': v <<= 20; break;
	case 'g': case 'G': v <<= 30; break;
	case '\0': break;
	default:
		fprintf(stderr, "bad size %s\n", s);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return v;
}

static int cmp_double(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Rank r's input: small integers, so the sum is exact in float. */
static float input(int rank, long i) { return (float)((i * 7 + rank * 13) % 2001 - 1000); }

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);

	long minb = 8, maxb = 64L << 20, factor = 2;
	int iters = 20, warmup = 5;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-min")) minb = parse_bytes(argv[i + 1]);
		else if (!strcmp(argv[i], "-max")) maxb = parse_bytes(argv[i + 1]);
		else if (!strcmp(argv[i], "-factor")) factor = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "-iters")) iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-warmup")) warmup = atoi(argv[i + 1]);
		else {
			if (rank == 0) fprintf(stderr, "unknown flag %s\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (minb < 1 || minb > maxb || factor < 2 || iters < 1 || warmup < 0) {
		if (rank == 0) fprintf(stderr, "need 1 <= -min <= -max, -factor >= 2, -iters >= 1, -warmup >= 0\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	long maxcount = maxb / (long)sizeof(float);
	float *buf = malloc((maxcount > 0 ? maxcount : 1) * sizeof(float));
	double *t = malloc(iters * sizeof(double));
	double *tmax = malloc(iters * sizeof(double));
	if (!buf || !t || !tmax) MPI_Abort(MPI_COMM_WORLD, 3);
	for (long i = 0; i < maxcount; i++) buf[i] = input(rank, i);

	char lib[MPI_MAX_LIBRARY_VERSION_STRING];
	int liblen;
	MPI_Get_library_version(lib, &liblen);
	char *nl = strchr(lib, '\n');
	if (nl) *nl = '\0';
	if (rank == 0) {
		printf("# MPI_Allreduce baseline: %s\n", lib);
		printf("# ranks %d, dtype float32, redop sum, in place, iters %d, warmup %d\n", n, iters, warmup);
		printf("# time: median over iterations of the slowest rank; every iteration starts with MPI_Barrier and each\n");
		printf("#       rank times the collective from its own exit of that barrier to its own return\n");
		printf("# algbw = bytes / time; busbw = algbw * 2(N-1)/N\n#\n");
		printf("#%12s %12s %10s %8s %8s %7s\n", "size", "count", "time", "algbw", "busbw", "#wrong");
		printf("#%12s %12s %10s %8s %8s\n", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)");
	}

	long total_wrong = 0;
	for (long size = minb; size <= maxb; size *= factor) {
		int count = (int)(size / (long)sizeof(float));
		for (int i = 0; i < warmup + iters; i++) {
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			double dt = MPI_Wtime() - t0;
			if (i >= warmup) t[i - warmup] = dt * 1e6;
		}
		MPI_Reduce(t, tmax, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

		/* Checked iteration on fresh inputs. */
		for (long i = 0; i < count; i++) buf[i] = input(rank, i);
		MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		long wrong = 0, wrong_all = 0;
		for (long i = 0; i < count; i++) {
			float want = 0;
			for (int r = 0; r < n; r++) want += input(r, i);
			if (buf[i] != want) wrong++;
		}
		MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

		if (rank == 0) {
			qsort(tmax, iters, sizeof(double), cmp_double);
			double med = iters % 2 ? tmax[iters / 2] : (tmax[iters / 2 - 1] + tmax[iters / 2]) / 2;
			long bytes = (long)count * (long)sizeof(float);
			double algbw = med > 0 ? (double)bytes / (med * 1e-6) / 1e9 : 0;
			double busbw = algbw * 2.0 * (n - 1) / n;
			printf("%13ld %12d %10.2f %8.2f %8.2f %7ld\n", bytes, count, med, algbw, busbw, wrong_all);
			fflush(stdout);
			total_wrong += wrong_all;
		}
		if (size > maxb / factor) break;
	}
	if (rank == 0) printf("# wrong elements    : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");

	free(buf);
	free(t);
	free(tmax);
	MPI_Finalize();
	return total_wrong ? 1 : 0;
}
