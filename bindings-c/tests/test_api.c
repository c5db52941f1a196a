/* The C API's behaviour: quotas (rate strings and parameters), limiters on a manual and on
 * the default clock, weighted cost, refund, peek, both refill modes, the 128-bit word, the
 * blocking acquire and its outcomes, and the text accessors. Figures are exact (docs/SEMANTICS.md). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>

#include "check.h"

#define MS 1000000ULL
#define S 1000000000ULL

static sg_quota *parse(const char *rate) {
  sg_quota *q = NULL;
  CHECK_OK(sg_quota_parse(rate, &q));
  return q;
}

static sg_limiter *manual_limiter(const char *rate, sg_manual_clock *clock) {
  sg_quota *q = parse(rate);
  sg_limiter *l = NULL;
  CHECK_OK(sg_limiter_new_with_clock(q, clock, &l));
  sg_quota_free(q); /* the limiter holds a copy */
  return l;
}

static void expect(const sg_decision *d, bool allowed, uint64_t limit, uint64_t remaining,
                   uint64_t retry_after_ns, uint64_t reset_after_ns) {
  CHECK(d->allowed == allowed);
  CHECK_U64(d->limit, limit);
  CHECK_U64(d->remaining, remaining);
  CHECK_U64(d->retry_after_ns, retry_after_ns);
  CHECK_U64(d->reset_after_ns, reset_after_ns);
}

static void test_quota_strings_and_parameters(void) {
  char buf[128];
  size_t n = 0;
  sg_quota *a = parse("10 per second; BURST = 50");
  CHECK_OK(sg_quota_to_string(a, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "10/s; burst=50") == 0);
  CHECK_U64(n, strlen("10/s; burst=50"));

  sg_quota *b = NULL;
  CHECK_OK(sg_quota_new(10, S, 50, &b));
  sg_quota_info info;
  CHECK_OK(sg_quota_get_info(b, &info));
  CHECK_U64(info.count, 10);
  CHECK_U64(info.period_ns, S);
  CHECK_U64(info.burst, 50);
  CHECK_U64(info.initial, 50);
  CHECK(info.refill == SG_REFILL_CONTINUOUS);
  CHECK_OK(sg_quota_to_string(b, buf, sizeof buf, NULL));
  CHECK(strcmp(buf, "10/s; burst=50") == 0);

  CHECK_OK(sg_quota_set_initial(b, 0));
  CHECK_OK(sg_quota_set_refill(b, SG_REFILL_INTERVAL));
  CHECK_OK(sg_quota_get_info(b, &info));
  CHECK_U64(info.initial, 0);
  CHECK(info.refill == SG_REFILL_INTERVAL);
  CHECK_OK(sg_quota_to_string(b, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "10/s; burst=50; initial=0; refill=interval") == 0);

  /* The canonical string parses back to an equal quota. */
  sg_quota *c = parse(buf);
  sg_quota_info info2;
  CHECK_OK(sg_quota_get_info(c, &info2));
  /* Field by field: the struct's padding bytes are not part of its value. */
  CHECK(info.count == info2.count && info.period_ns == info2.period_ns &&
        info.burst == info2.burst && info.initial == info2.initial &&
        info.refill == info2.refill);

  /* Other units and spellings from the grammar. */
  sg_quota *d = parse("5/2s");
  CHECK_OK(sg_quota_get_info(d, &info));
  CHECK_U64(info.count, 5);
  CHECK_U64(info.period_ns, 2 * S);
  sg_quota *e = parse("100/minute");
  CHECK_OK(sg_quota_get_info(e, &info));
  CHECK_U64(info.period_ns, 60 * S);
  CHECK_U64(info.burst, 100);

  sg_quota_free(a);
  sg_quota_free(b);
  sg_quota_free(c);
  sg_quota_free(d);
  sg_quota_free(e);
}

/* The README's example: 10/s with a burst of 2 on a manual clock. */
static void test_readme_example(void) {
  sg_manual_clock *clock = NULL;
  CHECK_OK(sg_manual_clock_new(0, &clock));
  sg_limiter *l = manual_limiter("10/s; burst=2", clock);
  sg_decision d;
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  expect(&d, true, 2, 1, 0, 100 * MS);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  expect(&d, true, 2, 0, 0, 200 * MS);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  expect(&d, false, 2, 0, 100 * MS, 200 * MS);
  CHECK_OK(sg_manual_clock_advance(clock, 100 * MS));
  uint64_t now = 0;
  CHECK_OK(sg_manual_clock_now(clock, &now));
  CHECK_U64(now, 100 * MS);
  CHECK_OK(sg_limiter_now(l, &now));
  CHECK_U64(now, 100 * MS);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  expect(&d, true, 2, 0, 0, 200 * MS);
  sg_limiter_free(l);
  sg_manual_clock_free(clock);
}

static void test_weighted_refund_peek(void) {
  sg_manual_clock *clock = NULL;
  CHECK_OK(sg_manual_clock_new(5 * S, &clock));
  sg_limiter *l = manual_limiter("10/s; burst=50", clock);
  sg_manual_clock_free(clock); /* the limiter keeps its share of the clock */
  sg_decision d;
  CHECK_OK(sg_limiter_try_acquire(l, 10, &d));
  expect(&d, true, 50, 40, 0, 1 * S);
  CHECK_OK(sg_limiter_try_acquire(l, 40, &d));
  expect(&d, true, 50, 0, 0, 5 * S);
  CHECK_OK(sg_limiter_try_acquire(l, 3, &d));
  expect(&d, false, 50, 0, 300 * MS, 5 * S);
  /* A peek changes nothing, and reports the same state as a cost-0 request. */
  CHECK_OK(sg_limiter_peek(l, &d));
  expect(&d, true, 50, 0, 0, 5 * S);
  CHECK_OK(sg_limiter_try_acquire(l, 0, &d));
  expect(&d, true, 50, 0, 0, 5 * S);
  /* Refund 5 tokens, then more than the burst: capped. */
  CHECK_OK(sg_limiter_refund(l, 5));
  CHECK_OK(sg_limiter_peek(l, &d));
  expect(&d, true, 50, 5, 0, 4500 * MS);
  CHECK_OK(sg_limiter_refund(l, 1000));
  CHECK_OK(sg_limiter_peek(l, &d));
  expect(&d, true, 50, 50, 0, 0);
  /* Explicit readings: 50 tokens at t, then a reading 1 s later has 10 back. */
  uint64_t t = 0;
  CHECK_OK(sg_limiter_now(l, &t));
  CHECK_OK(sg_limiter_try_acquire_at(l, t, 50, &d));
  expect(&d, true, 50, 0, 0, 5 * S);
  CHECK_OK(sg_limiter_try_acquire_at(l, t + S, 0, &d));
  expect(&d, true, 50, 10, 0, 4 * S);
  /* A reading from the past sees the bucket as it stood: never more tokens. */
  CHECK_OK(sg_limiter_try_acquire_at(l, t - S, 1, &d));
  CHECK(!d.allowed);
  CHECK_OK(sg_limiter_refund_at(l, t + S, 10));
  CHECK_OK(sg_limiter_try_acquire_at(l, t + S, 0, &d));
  expect(&d, true, 50, 20, 0, 3 * S);
  sg_limiter_free(l);
}

static void test_interval_refill(void) {
  sg_manual_clock *clock = NULL;
  CHECK_OK(sg_manual_clock_new(0, &clock));
  sg_limiter *l = manual_limiter("1/s; burst=4; initial=1; refill=interval", clock);
  sg_decision d;
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  expect(&d, true, 4, 0, 0, 4 * S);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  expect(&d, false, 4, 0, 1 * S, 4 * S);
  /* 2.5 s later two whole periods have passed: 2 tokens, on the grid. */
  CHECK_OK(sg_manual_clock_set(clock, 2500 * MS));
  CHECK_OK(sg_limiter_try_acquire(l, 2, &d));
  expect(&d, true, 4, 0, 0, 3500 * MS);
  sg_limiter_free(l);
  sg_manual_clock_free(clock);
}

static void test_wide_word(void) {
  /* 999/ms reduces to k = 999 per 10^6 ns: the quota needs the 128-bit word. */
  sg_manual_clock *clock = NULL;
  CHECK_OK(sg_manual_clock_new(0, &clock));
  sg_limiter *l = manual_limiter("999/ms; burst=50", clock);
  sg_decision d;
  CHECK_OK(sg_limiter_try_acquire(l, 50, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  /* One token takes 10^6/999 = 1001.001 ns: ceil is 1002. */
  expect(&d, false, 50, 0, 1002, 50051);
  sg_limiter_free(l);
  sg_manual_clock_free(clock);
}

struct advancer {
  sg_manual_clock *clock;
  uint64_t after_ms, by_ns;
};

static void *advance_later(void *arg) {
  struct advancer *a = arg;
  struct timespec ts = {0, (long)(a->after_ms * MS)};
  nanosleep(&ts, NULL);
  sg_manual_clock_advance(a->clock, a->by_ns);
  return NULL;
}

static void test_acquire_timeout(void) {
  sg_decision d;
  /* Default clock: 1000/s with a burst of 1 admits the next token within about 1 ms. */
  sg_quota *q = parse("1000/s; burst=1");
  sg_limiter *fast = NULL;
  CHECK_OK(sg_limiter_new(q, &fast));
  CHECK_OK(sg_limiter_try_acquire(fast, 1, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_limiter_acquire_timeout(fast, 1, 5 * S, &d));
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 0);
  sg_limiter_free(fast);
  sg_quota_free(q);

  /* 1/minute: the wait (about a minute) exceeds a 10 ms timeout, so the rejection comes back
   * at once (a minute, not a second: under valgrind a second's figure moved too much). */
  q = parse("1/minute; burst=1");
  sg_limiter *slow = NULL;
  CHECK_OK(sg_limiter_new(q, &slow));
  CHECK_OK(sg_limiter_try_acquire(slow, 1, &d));
  CHECK(d.allowed);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(sg_limiter_acquire_timeout(slow, 1, 10 * MS, &d));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(!d.allowed);
  CHECK(d.retry_after_ns > 50 * S);
  CHECK(t1.tv_sec - t0.tv_sec < 30); /* no sleep of the wait */
  sg_limiter_free(slow);
  sg_quota_free(q);

  /* Manual clock: another thread advances it while this one waits. */
  sg_manual_clock *clock = NULL;
  CHECK_OK(sg_manual_clock_new(0, &clock));
  sg_limiter *l = manual_limiter("10/s; burst=1", clock);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_limiter_acquire_timeout(l, 1, 50 * MS, &d)); /* 100 ms wait > 50 ms */
  expect(&d, false, 1, 0, 100 * MS, 100 * MS);
  struct advancer a = {clock, 20, 100 * MS};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, advance_later, &a) == 0);
  CHECK_OK(sg_limiter_acquire_timeout(l, 1, 10 * S, &d));
  CHECK(d.allowed);
  pthread_join(th, NULL);
  /* A timeout of 0 is a plain try. */
  CHECK_OK(sg_limiter_acquire_timeout(l, 1, 0, &d));
  CHECK(!d.allowed);
  sg_limiter_free(l);
  sg_manual_clock_free(clock);
}

static uint64_t elapsed_ns(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (uint64_t)(t1.tv_sec - t0->tv_sec) * S + (uint64_t)t1.tv_nsec - (uint64_t)t0->tv_nsec;
}

/* The core's acquire policy, the same in every language: time running out is the rejection
 * (SG_OK with allowed == false), never an error; a leaky queue's slot is admitted after its
 * wait; a manual clock nobody advances gives the rejection instead of waiting forever. */
static void test_acquire_outcomes(void) {
  sg_manual_clock *clock = NULL;
  CHECK_OK(sg_manual_clock_new(0, &clock));
  sg_decision d;
  struct timespec t0;

  /* A frozen manual clock: one sleep of retry_after (10 ms, in real time), then the clock
   * has not moved, so the rejection is the outcome, long before the 10 s timeout. */
  sg_limiter *frozen = manual_limiter("100/s; burst=1", clock);
  CHECK_OK(sg_limiter_try_acquire(frozen, 1, &d));
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(sg_limiter_acquire_timeout(frozen, 1, 10 * S, &d));
  uint64_t took = elapsed_ns(&t0);
  expect(&d, false, 1, 0, 10 * MS, 10 * MS);
  CHECK(took >= 10 * MS);
  CHECK(took < 5 * S);
  /* No deadline at all (UINT64_MAX): the same outcome. */
  CHECK_OK(sg_limiter_acquire_timeout(frozen, 1, UINT64_MAX, &d));
  expect(&d, false, 1, 0, 10 * MS, 10 * MS);
  sg_limiter_free(frozen);

  /* A leaky queue: the second request's slot is 100 ms away. The call sleeps until it and
   * returns the admission, whose retry_after_ns is the wait it slept. */
  sg_limiter *queue = manual_limiter("10/s; algorithm=leaky_queue; max_delay=1s", clock);
  CHECK_OK(sg_limiter_acquire_timeout(queue, 1, S, &d));
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 0);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(sg_limiter_acquire_timeout(queue, 1, S, &d));
  took = elapsed_ns(&t0);
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 100 * MS);
  CHECK(took >= 100 * MS);
  /* The next slot (200 ms) is past a 150 ms timeout: the rejection at once, with the least
   * wait until it would fit, and nothing reserved. */
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(sg_limiter_acquire_timeout(queue, 1, 150 * MS, &d));
  took = elapsed_ns(&t0);
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, 50 * MS);
  CHECK(took < 150 * MS); /* never slept to the timeout */
  CHECK_OK(sg_limiter_reserve(queue, 1, UINT64_MAX, &d));
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 200 * MS);
  sg_limiter_free(queue);
  sg_manual_clock_free(clock);
}

static void test_default_clock(void) {
  sg_quota *q = parse("100/s; burst=3");
  sg_limiter *l = NULL;
  CHECK_OK(sg_limiter_new(q, &l));
  sg_decision d;
  int allowed = 0;
  for (int i = 0; i < 3; i++) {
    CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
    allowed += d.allowed;
  }
  CHECK(allowed == 3);
  uint64_t a = 0, b = 0;
  CHECK_OK(sg_limiter_now(l, &a));
  CHECK_OK(sg_limiter_now(l, &b));
  CHECK(b >= a);
  sg_limiter_free(l);
  sg_quota_free(q);
}

static void test_text(void) {
  char buf[256];
  size_t n = 0;
  CHECK(strcmp(sg_version(), "0.1.0") == 0);
  CHECK(strcmp(sg_result_name(SG_OK), "ok") == 0);
  CHECK(strcmp(sg_result_name(SG_ERR_PARSE), "parse_error") == 0);
  CHECK(strcmp(sg_result_name(SG_ERR_INVALID_QUOTA), "invalid_quota") == 0);
  CHECK(strcmp(sg_result_name(SG_ERR_INSUFFICIENT_CAPACITY), "insufficient_capacity") == 0);
  CHECK(strcmp(sg_result_name(SG_ERR_CLOCK_OUT_OF_RANGE), "clock_out_of_range") == 0);
  CHECK(strcmp(sg_result_name(SG_ERR_KEY_STORE_FULL), "key_store_full") == 0);
  CHECK(strcmp(sg_result_name(SG_ERR_INVALID_OPTION), "invalid_option") == 0);
  CHECK(strcmp(sg_result_name(SG_ERR_WRONG_HANDLE), "wrong_handle") == 0);
  CHECK(strcmp(sg_result_name(12345), "unknown") == 0);
  /* The values are part of the ABI: never renumbered. */
  CHECK_U64(SG_ERR_NULL_ARGUMENT, 1);
  CHECK_U64(SG_ERR_WRONG_HANDLE, 2);
  CHECK_U64(SG_ERR_PANIC, 3);
  CHECK_U64(SG_ERR_INVALID_ARGUMENT, 4);
  CHECK_U64(SG_ERR_BUFFER_TOO_SMALL, 5);
  CHECK_U64(SG_ERR_INVALID_QUOTA, 100);
  CHECK_U64(SG_ERR_PARSE, 101);
  CHECK_U64(SG_ERR_INSUFFICIENT_CAPACITY, 102);
  CHECK_U64(SG_ERR_CLOCK_OUT_OF_RANGE, 103);
  CHECK_U64(SG_ERR_KEY_STORE_FULL, 104);
  CHECK_U64(SG_ERR_INVALID_OPTION, 105);
  CHECK_U64(SG_ERR_OTHER, 199);

  /* Every code has a message that fits in 128 bytes. */
  const uint32_t codes[] = {0, 1, 2, 3, 4, 5, 100, 101, 102, 103, 104, 105, 199};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    char small[128];
    CHECK_OK(sg_result_message(codes[i], small, sizeof small, &n));
    CHECK(n > 0 && n == strlen(small));
  }
  CHECK_OK(sg_result_message(SG_ERR_PARSE, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "the rate string could not be parsed") == 0);
  CHECK_OK(sg_result_message(777, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "unknown sg_result 777") == 0);

  /* Truncation: NUL-terminated, reported, and the length says what was written. */
  char tiny[8];
  CHECK_RC(sg_result_message(SG_ERR_PARSE, tiny, sizeof tiny, &n), SG_ERR_BUFFER_TOO_SMALL);
  CHECK(strcmp(tiny, "the rat") == 0);
  CHECK_U64(n, 7);
  CHECK_RC(sg_result_message(SG_OK, NULL, 0, &n), SG_ERR_BUFFER_TOO_SMALL);
  CHECK_U64(n, 0);

  /* The last-error detail quotes the core's text, and the accessors do not clobber it. */
  sg_quota *q = NULL;
  CHECK_RC(sg_quota_parse("10/fortnight", &q), SG_ERR_PARSE);
  CHECK(q == NULL);
  CHECK_RC(sg_last_error_message(tiny, sizeof tiny, &n), SG_ERR_BUFFER_TOO_SMALL);
  CHECK_OK(sg_last_error_message(buf, sizeof buf, &n));
  CHECK(strstr(buf, "invalid rate \"10/fortnight\"") != NULL);
  CHECK(strstr(buf, "unknown time unit") != NULL);
  CHECK(strstr(buf, "at byte 3") != NULL);
  CHECK_DETAIL("\"fortnight\"");
  /* Successful calls leave it alone. */
  sg_quota *ok = parse("1/s");
  CHECK_DETAIL("fortnight");
  sg_quota_free(ok);
}

int main(void) {
  test_quota_strings_and_parameters();
  test_readme_example();
  test_weighted_refund_peek();
  test_interval_refill();
  test_wide_word();
  test_acquire_timeout();
  test_acquire_outcomes();
  test_default_clock();
  test_text();
  TEST_MAIN_END("test_api");
}
