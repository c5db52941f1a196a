/* Real threads (pthreads) hammering one limiter through the C API, as core/tests/stress.rs
 * does in Rust. The bounds come from the clock readings the threads passed to the limiter,
 * never from timing assumptions:
 *   - admitted cost <= initial + k * (t_last - t_created) / P   (invariant 1: no over-admission)
 *   - when the bucket cannot fill during the run, every accrued token was admitted or is
 *     still in the bucket (within one token): a saturated limiter loses nothing.
 * Plus an exact case on a frozen manual clock: N threads admit exactly the burst. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "check.h"

typedef struct {
  const sg_limiter *limiter;
  uint64_t cost;
  atomic_bool *stop;
  uint64_t admitted, last; /* written by the thread, read after join */
  sg_result error;
} worker;

static void *hammer_thread(void *arg) {
  worker *w = arg;
  sg_decision d;
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    uint64_t now;
    sg_result rc = sg_limiter_now(w->limiter, &now);
    if (rc == SG_OK) rc = sg_limiter_try_acquire_at(w->limiter, now, w->cost, &d);
    if (rc != SG_OK) {
      w->error = rc;
      break;
    }
    if (d.allowed) w->admitted += w->cost;
    if (now > w->last) w->last = now;
  }
  return NULL;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Reading the default clock's process-wide timeline (every default-clock limiter shares it). */
static uint64_t timeline_now(const sg_limiter *any) {
  uint64_t now = 0;
  CHECK_OK(sg_limiter_now(any, &now));
  return now;
}

static void hammer(const char *rate, int threads, uint64_t cost, long run_ms) {
  sg_quota *q = NULL;
  sg_limiter *probe = NULL, *l = NULL;
  sg_quota_info info;
  CHECK_OK(sg_quota_parse(rate, &q));
  CHECK_OK(sg_quota_get_info(q, &info));
  CHECK_OK(sg_limiter_new(q, &probe));
  uint64_t t0_before = timeline_now(probe);
  CHECK_OK(sg_limiter_new(q, &l));
  uint64_t t0_after = timeline_now(probe);
  if (!l) return;

  atomic_bool stop = false;
  worker ws[8];
  pthread_t ts[8];
  for (int i = 0; i < threads; i++) {
    ws[i] = (worker){l, cost, &stop, 0, 0, SG_OK};
    CHECK(pthread_create(&ts[i], NULL, hammer_thread, &ws[i]) == 0);
  }
  sleep_ms(run_ms);
  atomic_store(&stop, true);
  uint64_t admitted = 0, t_last = t0_after;
  for (int i = 0; i < threads; i++) {
    pthread_join(ts[i], NULL);
    CHECK_RC(ws[i].error, SG_OK);
    admitted += ws[i].admitted;
    if (ws[i].last > t_last) t_last = ws[i].last;
  }
  /* k * dt stays far below 2^64 here: k <= 999 per ms, dt about a second. */
  uint64_t upper;
  if (info.refill == SG_REFILL_INTERVAL) {
    upper = info.initial + info.count * ((t_last - t0_before) / info.period_ns);
  } else {
    upper = info.initial + info.count * (t_last - t0_before) / info.period_ns;
  }
  printf("%s: %d threads, cost %" PRIu64 ", admitted %" PRIu64 ", bound %" PRIu64 "\n", rate,
         threads, cost, admitted, upper);
  CHECK(admitted <= upper);
  if (admitted > upper) fprintf(stderr, "%s: admitted %" PRIu64 " > %" PRIu64 "\n", rate, admitted, upper);

  /* Conservation, exact when the bucket never fills (no token overflowed). */
  sg_decision left;
  CHECK_OK(sg_limiter_try_acquire_at(l, t_last, 0, &left));
  if (info.refill == SG_REFILL_CONTINUOUS && info.initial + upper < info.burst) {
    uint64_t accrued_min = info.initial + info.count * (t_last - t0_after) / info.period_ns;
    CHECK(admitted + left.remaining + cost >= accrued_min);
  }
  sg_limiter_free(l);
  sg_limiter_free(probe);
  sg_quota_free(q);
}

typedef struct {
  const sg_limiter *limiter;
  uint64_t admitted;
} frozen_worker;

static void *frozen_thread(void *arg) {
  frozen_worker *w = arg;
  sg_decision d;
  for (int i = 0; i < 2000; i++) {
    if (sg_limiter_try_acquire(w->limiter, 1, &d) == SG_OK && d.allowed) w->admitted++;
  }
  return NULL;
}

/* No time passes on a frozen manual clock: 4 threads x 2000 requests admit exactly 1000. */
static void frozen_clock_exact(void) {
  sg_quota *q = NULL;
  sg_manual_clock *c = NULL;
  sg_limiter *l = NULL;
  CHECK_OK(sg_quota_parse("1/h; burst=1000", &q));
  CHECK_OK(sg_manual_clock_new(1, &c));
  CHECK_OK(sg_limiter_new_with_clock(q, c, &l));
  frozen_worker ws[4];
  pthread_t ts[4];
  for (int i = 0; i < 4; i++) {
    ws[i] = (frozen_worker){l, 0};
    CHECK(pthread_create(&ts[i], NULL, frozen_thread, &ws[i]) == 0);
  }
  uint64_t total = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(ts[i], NULL);
    total += ws[i].admitted;
  }
  CHECK_U64(total, 1000);
  sg_limiter_free(l);
  sg_manual_clock_free(c);
  sg_quota_free(q);
}

int main(void) {
  frozen_clock_exact();
  hammer("100000/s; burst=100", 2, 1, 200);
  hammer("100000/s; burst=1000000; initial=0", 2, 1, 200);
  hammer("200000/s; burst=5000000; initial=0", 4, 3, 200);
  hammer("999/ms; burst=50", 2, 1, 200);                  /* the 128-bit word */
  hammer("999/ms; burst=10000000; initial=0", 2, 1, 200); /* 128-bit, conservation exact */
  hammer("1000/10ms; burst=1000; initial=0; refill=interval", 3, 1, 200);
  TEST_MAIN_END("test_stress");
}
