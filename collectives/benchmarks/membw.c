/* Memory bandwidth of this machine as the all-reduce bound uses it: P processes
 * (default 2, one per rank) each copy a 256 MiB buffer into another, at the same
 * time; prints the total bytes moved (read + written) per second, in GB/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int procs = argc > 1 ? atoi(argv[1]) : 2;
  const size_t bytes = (size_t)256 << 20;
  const int reps = 10;
  double* times = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  volatile int* go = (volatile int*)(times + 256);
  for (int p = 0; p < procs; ++p) {
    if (fork() == 0) {
      char* a = malloc(bytes);
      char* b = malloc(bytes);
      memset(a, 1, bytes);
      memset(b, 2, bytes);
      __atomic_add_fetch(go, 1, __ATOMIC_SEQ_CST);
      while (__atomic_load_n(go, __ATOMIC_SEQ_CST) < procs) {}
      const double start = Now();
      for (int r = 0; r < reps; ++r) memcpy(r % 2 ? a : b, r % 2 ? b : a, bytes);
      times[p] = Now() - start;
      _exit(a[12345] + b[54321] == 0);
    }
  }
  for (int p = 0; p < procs; ++p) wait(NULL);
  double slowest = 0;
  for (int p = 0; p < procs; ++p) slowest = times[p] > slowest ? times[p] : slowest;
  printf("%.2f\n", 2.0 * bytes * reps * procs / slowest / 1e9);
  return 0;
}
