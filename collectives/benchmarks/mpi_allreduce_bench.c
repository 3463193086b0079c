/* The Open MPI side of compare_openmpi.sh: MPI_Allreduce of floats (sum, out of
 * place) over a range of sizes, timed like collective_bench (warm-up, barrier,
 * timed iterations, the slowest rank's mean), with a correctness check, printing
 *   size_bytes time_us busbw_gbps wrong
 * per size on rank 0. busbw = size / time * 2 (n - 1) / n, as nccl-tests.
 * Usage: mpirun -np 2 mpi_allreduce_bench MIN_BYTES MAX_BYTES ITERS WARMUP */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 5) {
    if (rank == 0) fprintf(stderr, "usage: %s MIN_BYTES MAX_BYTES ITERS WARMUP\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const size_t min_bytes = strtoull(argv[1], NULL, 10), max_bytes = strtoull(argv[2], NULL, 10);
  const int iters = atoi(argv[3]), warmup = atoi(argv[4]);
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    if (count == 0) continue;
    float* in = malloc(count * sizeof(float));
    float* out = malloc(count * sizeof(float));
    /* The same small integers as collective_bench: sums are exact. */
    for (size_t i = 0; i < count; ++i) in[i] = (float)((long)((i * 7 + rank * 13) % 17) - 8);
    memset(out, 0, count * sizeof(float));
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double seconds = (MPI_Wtime() - start) / iters, slowest = 0;
    MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long wrong = 0, all_wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += (double)((long)((i * 7 + r * 13) % 17) - 8);
      if ((double)out[i] != want) ++wrong;
    }
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const double busbw = (double)bytes / slowest / 1e9 * 2.0 * (size - 1) / size;
      printf("%zu %.3f %.4f %ld\n", bytes, slowest * 1e6, busbw, all_wrong);
      fflush(stdout);
    }
    free(in);
    free(out);
  }
  MPI_Finalize();
  return 0;
}
