/* ns per sg_*_try_acquire from C: allow and reject, one bucket, one key, 100 000 keys.
 * Each figure is the best of 5 runs of N calls (clock_gettime around the loop); every
 * decision is read in full (all five fields are summed), as a C caller would.
 * bench/bench_rust.rs measures the same calls in Rust; bench/run.sh prints both. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sluicegate.h"

#define N 4000000
#define RUNS 5
#define KEYS 100000

static volatile uint64_t sink;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(sg_result rc) {
  char buf[512];
  sg_last_error_message(buf, sizeof buf, NULL);
  fprintf(stderr, "bench: %s: %s\n", sg_result_name(rc), buf);
  exit(1);
}

#define TRY(call)                  \
  do {                             \
    sg_result rc_ = (call);        \
    if (rc_ != SG_OK) die(rc_);    \
  } while (0)

static sg_quota *quota(const char *rate) {
  sg_quota *q = NULL;
  TRY(sg_quota_parse(rate, &q));
  return q;
}

static uint64_t fold(const sg_decision *d) {
  return (uint64_t)d->allowed + d->limit + d->remaining + d->retry_after_ns + d->reset_after_ns;
}

static double single(const sg_limiter *l) {
  double best = 1e30;
  sg_decision d;
  for (int r = 0; r < RUNS; r++) {
    uint64_t acc = 0, t0 = now_ns();
    for (int i = 0; i < N; i++) {
      TRY(sg_limiter_try_acquire(l, 1, &d));
      acc += fold(&d);
    }
    double ns = (double)(now_ns() - t0) / N;
    sink += acc;
    if (ns < best) best = ns;
  }
  return best;
}

static double keyed(const sg_keyed_limiter *k, char **keys, size_t *lens, int nkeys) {
  double best = 1e30;
  sg_decision d;
  for (int r = 0; r < RUNS; r++) {
    uint64_t acc = 0, t0 = now_ns();
    for (int i = 0, j = 0; i < N; i++) {
      TRY(sg_keyed_limiter_try_acquire(k, (const uint8_t *)keys[j], lens[j], 1, &d));
      acc += fold(&d);
      if (++j == nkeys) j = 0;
    }
    double ns = (double)(now_ns() - t0) / N;
    sink += acc;
    if (ns < best) best = ns;
  }
  return best;
}

int main(void) {
  /* Allow: a rate far above the call rate. Reject: one token an hour, already spent. */
  const char *allow_rate = "1000000000/s; burst=1000000000";
  const char *reject_rate = "1/h; burst=1";
  sg_quota *qa = quota(allow_rate), *qr = quota(reject_rate);
  sg_limiter *la = NULL, *lr = NULL;
  sg_decision d;
  TRY(sg_limiter_new(qa, &la));
  TRY(sg_limiter_new(qr, &lr));
  TRY(sg_limiter_try_acquire(lr, 1, &d));
  printf("limiter allow %.2f\n", single(la));
  printf("limiter reject %.2f\n", single(lr));

  char **keys = malloc(KEYS * sizeof *keys);
  size_t *lens = malloc(KEYS * sizeof *lens);
  for (int i = 0; i < KEYS; i++) {
    keys[i] = malloc(24);
    lens[i] = (size_t)snprintf(keys[i], 24, "client-%06d", i);
  }
  sg_keyed_limiter *ka = NULL, *kr = NULL;
  TRY(sg_keyed_limiter_new(qa, SG_KEYED_DEFAULT_MAX_KEYS, SG_ON_FULL_REJECT_NEW_KEYS, &ka));
  TRY(sg_keyed_limiter_new(qr, SG_KEYED_DEFAULT_MAX_KEYS, SG_ON_FULL_REJECT_NEW_KEYS, &kr));
  for (int i = 0; i < KEYS; i++) {
    TRY(sg_keyed_limiter_try_acquire(ka, (const uint8_t *)keys[i], lens[i], 1, &d));
    TRY(sg_keyed_limiter_try_acquire(kr, (const uint8_t *)keys[i], lens[i], 1, &d));
  }
  printf("keyed-1 allow %.2f\n", keyed(ka, keys, lens, 1));
  printf("keyed-1 reject %.2f\n", keyed(kr, keys, lens, 1));
  printf("keyed-100k allow %.2f\n", keyed(ka, keys, lens, KEYS));
  printf("keyed-100k reject %.2f\n", keyed(kr, keys, lens, KEYS));

  for (int i = 0; i < KEYS; i++) free(keys[i]);
  free(keys);
  free(lens);
  sg_keyed_limiter_free(ka);
  sg_keyed_limiter_free(kr);
  sg_limiter_free(la);
  sg_limiter_free(lr);
  sg_quota_free(qa);
  sg_quota_free(qr);
  return 0;
}
