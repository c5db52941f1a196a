/* memlat: what one compare-exchange at a random slot costs, by working-set size, kind of
 * memory and width of the word, with nothing else in the loop (BENCHMARKS.md, "Shared-memory
 * store"). Slots are 32 bytes, as a region's are; each operation loads the slot's word and
 * compare-exchanges it (8 bytes: `lock cmpxchg`; 16 bytes: an AVX load and `lock cmpxchg16b`).
 *
 *   cc -O2 -mavx -mcx16 -o memlat benches/probes/memlat.c
 *   ./memlat MIB anon|shm|huge 8|16 0|1
 *
 * anon: private anonymous memory; shm: a shared mapping of a file in /dev/shm (as a region
 * is); huge: anonymous memory with MADV_HUGEPAGE. The last argument 1 makes each slot's index
 * depend on the previous operation's result (one at a time: the latency), 0 leaves the
 * operations independent (back to back: the CPU overlaps their misses). Prints the best of
 * five passes of 4 000 000 operations, in nanoseconds per operation. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t ZERO = 0;

static inline uint64_t mix(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static char *map(const char *kind, size_t bytes) {
  char *p;
  if (!strcmp(kind, "shm")) {
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/memlat-%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) { perror(path); exit(2); }
    p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    unlink(path);
  } else {
    p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && !strcmp(kind, "huge")) madvise(p, bytes, MADV_HUGEPAGE);
  }
  if (p == MAP_FAILED) { perror("mmap"); exit(2); }
  memset(p, 1, bytes);
  return p;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: memlat MIB anon|shm|huge 8|16 0|1\n");
    return 2;
  }
  size_t bytes = (size_t)atol(argv[1]) << 20, slots = bytes / 32;
  int wide = atoi(argv[3]) == 16, dep = atoi(argv[4]);
  if (slots == 0) return 2;
  char *p = map(argv[2], bytes);
  uint64_t z = ZERO, acc = 0, n = 4000000;
  double best = 1e18;
  for (int pass = 0; pass < 5; pass++) {
    double t0 = now_ns();
    uint64_t s = (uint64_t)pass * 7777;
    for (uint64_t i = 0; i < n; i++) {
      char *q = p + (mix(s + i + (dep ? (acc & z) : 0)) % slots) * 32;
      if (!wide) {
        uint64_t *w = (uint64_t *)q, e = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        __atomic_compare_exchange_n(w, &e, e + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        acc += e;
      } else {
        __m128i v = _mm_load_si128((__m128i *)q);
        uint64_t lo = (uint64_t)_mm_cvtsi128_si64(v), hi = (uint64_t)_mm_extract_epi64(v, 1);
        uint64_t nlo = lo + 1, nhi = hi + (nlo == 0);
        unsigned char ok;
        __asm__ volatile("lock cmpxchg16b %1; sete %0"
                         : "=q"(ok), "+m"(*(__int128 *)q), "+a"(lo), "+d"(hi)
                         : "b"(nlo), "c"(nhi)
                         : "memory", "cc");
        acc += lo + ok;
      }
    }
    double t = (now_ns() - t0) / (double)n;
    if (t < best) best = t;
  }
  printf("%s %s MiB, %s-byte CAS, %s: %.1f ns\n", argv[2], argv[1], argv[3],
         dep ? "one at a time" : "back to back", best);
  return acc == 42;
}
