/* Reserve / cancel on a leaky queue, composite limits (all-or-nothing, clock kinds, error
 * paths), HTTP fields from a decision, and sg_quota_parse_len. */
#include <stdlib.h>

#include "check.h"

#define MS 1000000ULL
#define S 1000000000ULL

static sg_limiter *make(const char *rate, const sg_manual_clock *clock) {
  sg_quota *q = NULL;
  sg_limiter *l = NULL;
  CHECK_OK(sg_quota_parse(rate, &q));
  CHECK_OK(sg_limiter_new_with_clock(q, clock, &l));
  sg_quota_free(q);
  return l;
}

static void test_reserve_cancel(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_limiter *l = make("10/s; algorithm=leaky_queue; max_delay=250ms", c);
  sg_decision d;
  /* Waits 0, 100 ms, 200 ms: each admitted reservation carries its wait. */
  for (uint64_t i = 0; i < 3; i++) {
    CHECK_OK(sg_limiter_reserve(l, 1, UINT64_MAX, &d));
    CHECK(d.allowed);
    CHECK_U64(d.retry_after_ns, i * 100 * MS);
  }
  /* A 300 ms wait exceeds max_delay: rejected, nothing reserved. */
  CHECK_OK(sg_limiter_reserve(l, 1, UINT64_MAX, &d));
  CHECK(!d.allowed);
  /* Cancel gives the last slot back. */
  CHECK_OK(sg_limiter_cancel(l, 1));
  /* max_wait below the wait: rejected with the least wait until it fits. */
  CHECK_OK(sg_limiter_reserve(l, 1, 150 * MS, &d));
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, 50 * MS);
  CHECK_OK(sg_limiter_reserve(l, 1, 200 * MS, &d));
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 200 * MS);
  CHECK_U64(d.limit, 3); /* Q = 1 + floor(250 ms * 10/s) */
  /* A blocking acquire with no time to wait is rejected at once on a full queue. */
  CHECK_OK(sg_limiter_acquire_timeout(l, 1, 0, &d));
  CHECK(!d.allowed);
  CHECK_RC(sg_limiter_reserve(l, 4, UINT64_MAX, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK_RC(sg_limiter_reserve(NULL, 1, 0, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_reserve(l, 1, 0, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_cancel(NULL, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_cancel((const sg_limiter *)(const void *)c, 1), SG_ERR_WRONG_HANDLE);
  sg_limiter_free(l);

  /* Other algorithms never wait: reserve is try_acquire. */
  l = make("2/s", c);
  CHECK_OK(sg_limiter_reserve(l, 2, 0, &d));
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 0);
  CHECK_OK(sg_limiter_reserve(l, 1, UINT64_MAX, &d));
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, 500 * MS);
  CHECK_OK(sg_limiter_cancel(l, 1));
  CHECK_OK(sg_limiter_peek(l, &d));
  CHECK_U64(d.remaining, 1);
  sg_limiter_free(l);
  sg_manual_clock_free(c);
}

static void test_composite(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_limiter *user = make("2/s", c);
  sg_limiter *global = make("3/s; algorithm=fixed_window", c);
  const sg_limiter *both[] = {user, global};
  sg_decision d;
  CHECK_OK(sg_composite_try_acquire(both, 2, 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 1); /* the tighter of 1 and 2 */
  CHECK_U64(d.limit, 2);
  CHECK_OK(sg_composite_try_acquire(both, 2, 1, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_composite_try_acquire(both, 2, 1, &d));
  CHECK(!d.allowed); /* the user is empty: the global window is refunded */
  CHECK_OK(sg_limiter_peek(global, &d));
  CHECK_U64(d.remaining, 1);
  /* A cost above any part's capacity is an error and consumes nothing. */
  CHECK_RC(sg_composite_try_acquire(both, 2, 3, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  /* Refund all-or-nothing; at explicit times. */
  CHECK_OK(sg_composite_refund(both, 2, 1));
  CHECK_OK(sg_limiter_peek(global, &d));
  CHECK_U64(d.remaining, 2);
  CHECK_OK(sg_composite_try_acquire_at(both, 2, S, 2, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_composite_refund_at(both, 2, S, 2));
  CHECK_RC(sg_composite_refund_at(both, 2, UINT64_MAX, 1), SG_ERR_CLOCK_OUT_OF_RANGE);
  CHECK_RC(sg_composite_try_acquire_at(both, 2, UINT64_MAX, 1, &d), SG_ERR_CLOCK_OUT_OF_RANGE);

  /* More parts than the stack holds (8) take the heap path and behave the same. */
  sg_limiter *many[12];
  for (int i = 0; i < 12; i++) many[i] = make(i == 11 ? "1/s" : "5/s", c);
  CHECK_OK(sg_composite_try_acquire_at((const sg_limiter *const *)many, 12, 5 * S, 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 0);
  CHECK_OK(sg_composite_try_acquire_at((const sg_limiter *const *)many, 12, 5 * S, 1, &d));
  CHECK(!d.allowed);
  CHECK_OK(sg_limiter_try_acquire_at(many[0], 5 * S, 0, &d));
  CHECK_U64(d.remaining, 4);
  /* On the heap path a bad part is an error at that part: the parts are gathered as they are
   * read, never into room reserved for the count up front. */
  const sg_limiter *many_null[12];
  for (int i = 0; i < 12; i++) many_null[i] = i == 10 ? NULL : many[i];
  CHECK_RC(sg_composite_try_acquire_at(many_null, 12, 5 * S, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`limiters[10]` is NULL");
  CHECK_OK(sg_limiter_try_acquire_at(many[0], 5 * S, 0, &d));
  CHECK_U64(d.remaining, 4);

  /* Error paths. */
  const sg_limiter *with_null[] = {user, NULL};
  CHECK_RC(sg_composite_try_acquire(NULL, 1, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_composite_try_acquire(both, 0, 1, &d), SG_ERR_INVALID_ARGUMENT);
  CHECK_RC(sg_composite_try_acquire(both, 2, 1, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_composite_try_acquire(with_null, 2, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`limiters[1]` is NULL");
  const sg_limiter *wrong[] = {user, (const sg_limiter *)(const void *)c};
  CHECK_RC(sg_composite_try_acquire(wrong, 2, 1, &d), SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("`limiters[1]` should be an sg_limiter, but is sg_manual_clock");
  CHECK_RC(sg_composite_refund(wrong, 2, 1), SG_ERR_WRONG_HANDLE);
  /* Clocks of both kinds are refused. */
  sg_quota *q = NULL;
  sg_limiter *live = NULL;
  CHECK_OK(sg_quota_parse("5/s", &q));
  CHECK_OK(sg_limiter_new(q, &live));
  const sg_limiter *mixed[] = {user, live};
  CHECK_RC(sg_composite_try_acquire(mixed, 2, 1, &d), SG_ERR_INVALID_ARGUMENT);
  CHECK_DETAIL("different kinds of clock");
  const sg_limiter *live2[] = {live, live};
  CHECK_OK(sg_composite_try_acquire(live2, 2, 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 3); /* the same limiter twice is consumed twice */
  sg_quota_free(q);
  sg_limiter_free(live);
  for (int i = 0; i < 12; i++) sg_limiter_free(many[i]);
  sg_limiter_free(user);
  sg_limiter_free(global);
  sg_manual_clock_free(c);
}

static void test_headers(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_limiter *l = make("1/s; burst=2", c);
  sg_decision d;
  char buf[512];
  size_t n = 0;
  CHECK_OK(sg_limiter_try_acquire(l, 2, &d));
  CHECK_U64(d.window_s, 2);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK(!d.allowed);
  CHECK_OK(sg_decision_headers(&d, SG_HEADERS_IETF, (const uint8_t *)"default", 7, buf,
                               sizeof buf, &n));
  const char *want = "RateLimit-Policy: \"default\";q=2;w=2\r\n"
                     "RateLimit: \"default\";r=0;t=1\r\n"
                     "Retry-After: 1\r\n";
  CHECK(strcmp(buf, want) == 0);
  CHECK_U64(n, strlen(want));
  CHECK_OK(sg_decision_headers(&d, SG_HEADERS_DRAFT7, NULL, 0, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "RateLimit-Policy: 2;w=2\r\nRateLimit: limit=2, remaining=0, reset=1\r\n"
                    "Retry-After: 1\r\n") == 0);
  CHECK_OK(sg_decision_headers(&d, SG_HEADERS_LEGACY, NULL, 0, buf, sizeof buf, &n));
  CHECK(strstr(buf, "X-RateLimit-Remaining: 0\r\n") != NULL);
  CHECK_OK(sg_decision_headers(&d, SG_HEADERS_DRAFT6, NULL, 0, buf, sizeof buf, &n));
  CHECK(strstr(buf, "RateLimit-Reset: 1\r\n") != NULL);
  CHECK_OK(sg_decision_headers(&d, SG_HEADERS_NONE, NULL, 0, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "Retry-After: 1\r\n") == 0);
  /* The policy name is a Structured-Field string: quotes escaped, other bytes '_'. */
  CHECK_OK(sg_decision_headers(&d, SG_HEADERS_IETF, (const uint8_t *)"a\"b\xff\n", 5, buf,
                               sizeof buf, &n));
  CHECK(strstr(buf, "\"a\\\"b__\";q=2") != NULL);
  /* An allowed decision has no Retry-After. */
  CHECK_OK(sg_manual_clock_set(c, 10 * S));
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK_OK(sg_decision_headers(&d, SG_HEADERS_IETF, (const uint8_t *)"p", 1, buf, sizeof buf,
                               &n));
  CHECK(strcmp(buf, "RateLimit-Policy: \"p\";q=2;w=2\r\nRateLimit: \"p\";r=1;t=1\r\n") == 0);
  /* Errors. */
  CHECK_RC(sg_decision_headers(NULL, 0, NULL, 0, buf, sizeof buf, &n), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_decision_headers(&d, 5, NULL, 0, buf, sizeof buf, &n), SG_ERR_INVALID_OPTION);
  CHECK_RC(sg_decision_headers(&d, 0, NULL, 3, buf, sizeof buf, &n), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_decision_headers(&d, 0, NULL, 0, NULL, 10, &n), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_decision_headers(&d, 0, NULL, 0, buf, 10, &n), SG_ERR_BUFFER_TOO_SMALL);
  CHECK_DETAIL("sg_decision_headers: the text is");
  CHECK_U64(n, 9);
  CHECK_U64(strlen(buf), 9);
  /* A hand-made decision whose `allowed` byte is neither 0 nor 1 is read as true. */
  sg_decision odd = d;
  memset(&odd.allowed, 7, 1);
  CHECK_OK(sg_decision_headers(&odd, SG_HEADERS_NONE, NULL, 0, buf, sizeof buf, &n));
  CHECK_U64(n, 0);
  sg_limiter_free(l);
  sg_manual_clock_free(c);
}

static void test_parse_len(void) {
  sg_quota *q = NULL;
  char buf[64];
  CHECK_OK(sg_quota_parse_len((const uint8_t *)"10/sXXX", 4, &q));
  CHECK_OK(sg_quota_to_string(q, buf, sizeof buf, NULL));
  CHECK(strcmp(buf, "10/s") == 0);
  sg_quota_free(q);
  q = NULL;
  CHECK_RC(sg_quota_parse_len((const uint8_t *)"10/s\0; burst=5", 14, &q), SG_ERR_PARSE);
  CHECK(q == NULL);
  CHECK_RC(sg_quota_parse_len(NULL, 0, &q), SG_ERR_PARSE);
  CHECK_RC(sg_quota_parse_len(NULL, 1, &q), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_quota_parse_len((const uint8_t *)"1/s", 3, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_quota_parse_len((const uint8_t *)"1/s", SIZE_MAX, &q), SG_ERR_INVALID_ARGUMENT);
  CHECK_RC(sg_quota_parse_len((const uint8_t *)"1/\xff", 3, &q), SG_ERR_PARSE);
  CHECK_DETAIL("not UTF-8 at byte 2");
  CHECK(q == NULL);
}

int main(void) {
  test_reserve_cancel();
  test_composite();
  test_headers();
  test_parse_len();
  TEST_MAIN_END("test_reserve_composite");
}
