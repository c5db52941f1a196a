/* Every error path returns its code, sets a detail, and leaves out-parameters untouched:
 * NULL handles, NULL out-pointers, handles of the wrong kind (and pointers that are no
 * handle at all), invalid quota strings and parameters, cost above the capacity, a clock
 * past the horizon, bad enum values, buffers too small. */
#include <stdlib.h>

#include "check.h"

#define S 1000000000ULL

/* A decision filled with a pattern: an error must leave every byte of it as it was. */
static sg_decision poisoned(void) {
  sg_decision d;
  memset(&d, 0xA5, sizeof d);
  return d;
}

static bool untouched(const sg_decision *d) {
  sg_decision p = poisoned();
  return memcmp(d, &p, sizeof p) == 0;
}

#define AS(type, ptr) ((type *)(void *)(ptr))

static void test_null_handles(void) {
  sg_decision d = poisoned();
  uint64_t now = 7;
  char buf[64];
  sg_quota_info info;
  CHECK_RC(sg_limiter_try_acquire(NULL, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("sg_limiter_try_acquire: `limiter` is NULL");
  CHECK_RC(sg_limiter_try_acquire_at(NULL, 0, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_peek(NULL, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_refund(NULL, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_refund_at(NULL, 0, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_acquire_timeout(NULL, 1, 0, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_now(NULL, &now), SG_ERR_NULL_ARGUMENT);
  CHECK(untouched(&d));
  CHECK_U64(now, 7);
  CHECK_RC(sg_manual_clock_set(NULL, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_manual_clock_advance(NULL, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_manual_clock_now(NULL, &now), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_quota_get_info(NULL, &info), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_quota_get_info(NULL, &info), SG_ERR_NULL_ARGUMENT);
  /* A text accessor leaves the last detail alone, even when it fails. */
  CHECK_RC(sg_quota_to_string(NULL, buf, sizeof buf, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("sg_quota_get_info: `quota` is NULL");
  CHECK_RC(sg_quota_set_initial(NULL, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_quota_set_refill(NULL, SG_REFILL_INTERVAL), SG_ERR_NULL_ARGUMENT);
  sg_limiter *l = (sg_limiter *)&now; /* must stay as it is */
  CHECK_RC(sg_limiter_new(NULL, &l), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`quota` is NULL");
  CHECK(l == (sg_limiter *)&now);
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  CHECK_RC(sg_limiter_new_with_clock(NULL, c, &l), SG_ERR_NULL_ARGUMENT);
  sg_quota *q = NULL;
  CHECK_OK(sg_quota_parse("1/s", &q));
  CHECK_RC(sg_limiter_new_with_clock(q, NULL, &l), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`clock` is NULL");
  CHECK(l == (sg_limiter *)&now);
  /* _free accepts NULL, as free() does. */
  sg_limiter_free(NULL);
  sg_quota_free(NULL);
  sg_manual_clock_free(NULL);
  sg_quota_free(q);
  sg_manual_clock_free(c);
}

static void test_null_out_pointers(void) {
  sg_quota *q = NULL;
  sg_manual_clock *c = NULL;
  sg_limiter *l = NULL;
  CHECK_RC(sg_quota_parse("1/s", NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`out` is NULL");
  CHECK_RC(sg_quota_parse(NULL, &q), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`rate` is NULL");
  CHECK(q == NULL);
  CHECK_RC(sg_quota_new(1, S, 1, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_manual_clock_new(0, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_OK(sg_quota_parse("2/s", &q));
  CHECK_OK(sg_manual_clock_new(0, &c));
  CHECK_RC(sg_limiter_new(q, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_new_with_clock(q, c, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_OK(sg_limiter_new_with_clock(q, c, &l));
  CHECK_RC(sg_limiter_try_acquire(l, 1, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`out` is NULL");
  CHECK_RC(sg_limiter_try_acquire_at(l, 0, 1, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_peek(l, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_acquire_timeout(l, 1, 0, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_now(l, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_manual_clock_now(c, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_quota_get_info(q, NULL), SG_ERR_NULL_ARGUMENT);
  /* A NULL out-pointer is checked before any work: no token was taken above. */
  sg_decision d;
  CHECK_OK(sg_limiter_peek(l, &d));
  CHECK_U64(d.remaining, 2);
  /* Text buffers: NULL with a length is an error; NULL with length 0 only measures. */
  CHECK_RC(sg_result_message(SG_OK, NULL, 10, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_last_error_message(NULL, 10, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_quota_to_string(q, NULL, 10, NULL), SG_ERR_NULL_ARGUMENT);
  sg_limiter_free(l);
  sg_manual_clock_free(c);
  sg_quota_free(q);
}

static void test_wrong_handle_kind(void) {
  sg_quota *q = NULL;
  sg_manual_clock *c = NULL;
  sg_limiter *l = NULL, *l2 = NULL;
  CHECK_OK(sg_quota_parse("5/s", &q));
  CHECK_OK(sg_manual_clock_new(0, &c));
  CHECK_OK(sg_limiter_new_with_clock(q, c, &l));
  sg_decision d = poisoned();
  uint64_t now = 7;
  char buf[64];
  sg_quota_info info;

  CHECK_RC(sg_limiter_try_acquire(AS(sg_limiter, q), 1, &d), SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("should be an sg_limiter, but is sg_quota");
  CHECK_RC(sg_limiter_try_acquire(AS(sg_limiter, c), 1, &d), SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("should be an sg_limiter, but is sg_manual_clock");
  CHECK_RC(sg_limiter_try_acquire_at(AS(sg_limiter, q), 0, 1, &d), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_peek(AS(sg_limiter, c), &d), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_refund(AS(sg_limiter, q), 1), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_refund_at(AS(sg_limiter, q), 0, 1), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_acquire_timeout(AS(sg_limiter, q), 1, 0, &d), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_now(AS(sg_limiter, c), &now), SG_ERR_WRONG_HANDLE);
  CHECK(untouched(&d));
  CHECK_U64(now, 7);
  CHECK_RC(sg_manual_clock_set(AS(sg_manual_clock, l), 5), SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("should be an sg_manual_clock, but is sg_limiter");
  CHECK_RC(sg_manual_clock_advance(AS(sg_manual_clock, q), 5), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_manual_clock_now(AS(sg_manual_clock, l), &now), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_quota_get_info(AS(sg_quota, l), &info), SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("should be an sg_quota, but is sg_limiter");
  CHECK_RC(sg_quota_to_string(AS(sg_quota, c), buf, sizeof buf, NULL), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_quota_set_initial(AS(sg_quota, c), 1), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_quota_set_refill(AS(sg_quota, l), 1), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_new(AS(sg_quota, l), &l2), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_new_with_clock(AS(sg_quota, c), c, &l2), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_new_with_clock(q, AS(sg_manual_clock, q), &l2), SG_ERR_WRONG_HANDLE);
  CHECK(l2 == NULL);

  /* A pointer to something that is no handle at all, and a misaligned one. */
  uint64_t *junk = malloc(4 * sizeof *junk);
  junk[0] = 42;
  CHECK_RC(sg_limiter_try_acquire(AS(sg_limiter, junk), 1, &d), SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("not a sluicegate handle");
  CHECK_RC(sg_limiter_try_acquire(AS(sg_limiter, (char *)junk + 1), 1, &d),
           SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("misaligned");
  CHECK(untouched(&d));
  free(junk);

  /* _free of the wrong kind leaves the handle alone (and says so). */
  sg_quota_free(AS(sg_quota, l));
  CHECK_DETAIL("sg_quota_free: `handle` should be an sg_quota, but is sg_limiter");
  sg_manual_clock_free(AS(sg_manual_clock, q));
  sg_limiter_free(AS(sg_limiter, c));
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d)); /* all three still alive */
  CHECK(d.allowed);
  CHECK_OK(sg_quota_get_info(q, &info));
  CHECK_OK(sg_manual_clock_now(c, &now));
  sg_limiter_free(l);
  sg_manual_clock_free(c);
  sg_quota_free(q);
}

static void test_invalid_quotas(void) {
  sg_quota *q = NULL;
  /* Parse errors: the detail quotes the text and points at the offending byte. */
  CHECK_RC(sg_quota_parse("", &q), SG_ERR_PARSE);
  CHECK_DETAIL("empty rate");
  CHECK_RC(sg_quota_parse("10/fortnight", &q), SG_ERR_PARSE);
  CHECK_DETAIL("at byte 3");
  CHECK_RC(sg_quota_parse("ten per second", &q), SG_ERR_PARSE);
  CHECK_RC(sg_quota_parse("10/s; burst=", &q), SG_ERR_PARSE);
  CHECK_RC(sg_quota_parse("10/s; bursts=5", &q), SG_ERR_PARSE);
  CHECK_DETAIL("unknown option");
  CHECK_RC(sg_quota_parse("1.5/s", &q), SG_ERR_PARSE);
  CHECK_RC(sg_quota_parse("10/s; refill=sometimes", &q), SG_ERR_PARSE);
  CHECK_RC(sg_quota_parse("10/s \xff", &q), SG_ERR_PARSE);
  CHECK_DETAIL("not UTF-8 at byte 5");
  /* It parses, but the numbers are out of their domain. */
  CHECK_RC(sg_quota_parse("0/s", &q), SG_ERR_INVALID_QUOTA);
  CHECK_DETAIL("invalid quota");
  CHECK_RC(sg_quota_parse("10/0s", &q), SG_ERR_INVALID_QUOTA);
  CHECK_RC(sg_quota_parse("10/s; burst=0", &q), SG_ERR_INVALID_QUOTA);
  CHECK_RC(sg_quota_parse("10/s; initial=11", &q), SG_ERR_INVALID_QUOTA);
  CHECK_DETAIL("initial tokens 11 exceed the burst 10");
  CHECK(q == NULL);
  /* The same from parameters. */
  CHECK_RC(sg_quota_new(0, S, 1, &q), SG_ERR_INVALID_QUOTA);
  CHECK_RC(sg_quota_new(1, 0, 1, &q), SG_ERR_INVALID_QUOTA);
  CHECK_RC(sg_quota_new(1, S, 0, &q), SG_ERR_INVALID_QUOTA);
  CHECK_RC(sg_quota_new(1, UINT64_MAX, UINT64_MAX, &q), SG_ERR_INVALID_QUOTA);
  CHECK_DETAIL("292 years");
  CHECK(q == NULL);
  /* Setters leave the quota unchanged on error. */
  CHECK_OK(sg_quota_new(10, S, 20, &q));
  CHECK_RC(sg_quota_set_initial(q, 21), SG_ERR_INVALID_QUOTA);
  CHECK_RC(sg_quota_set_refill(q, 7), SG_ERR_INVALID_OPTION);
  sg_quota_info info;
  CHECK_OK(sg_quota_get_info(q, &info));
  CHECK_U64(info.initial, 20);
  CHECK(info.refill == SG_REFILL_CONTINUOUS);
  sg_quota_free(q);
}

static void test_cost_above_capacity_and_horizon(void) {
  sg_quota *q = NULL;
  sg_manual_clock *c = NULL;
  sg_limiter *l = NULL;
  CHECK_OK(sg_quota_parse("1/s; burst=2", &q));
  CHECK_OK(sg_manual_clock_new(0, &c));
  CHECK_OK(sg_limiter_new_with_clock(q, c, &l));
  sg_decision d = poisoned();
  CHECK_RC(sg_limiter_try_acquire(l, 3, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK_DETAIL("cost 3 exceeds the capacity 2");
  CHECK_RC(sg_limiter_try_acquire_at(l, 0, 3, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK_RC(sg_limiter_acquire_timeout(l, 3, S, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK_RC(sg_limiter_try_acquire(l, UINT64_MAX, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK(untouched(&d));
  /* Nothing was taken by the failed calls. */
  CHECK_OK(sg_limiter_peek(l, &d));
  CHECK_U64(d.remaining, 2);
  /* A reading past the horizon (over a century after creation). */
  d = poisoned();
  CHECK_RC(sg_limiter_try_acquire_at(l, UINT64_MAX, 1, &d), SG_ERR_CLOCK_OUT_OF_RANGE);
  CHECK_DETAIL("past the limiter's horizon");
  CHECK(untouched(&d));
  CHECK_RC(sg_limiter_refund_at(l, UINT64_MAX, 1), SG_ERR_CLOCK_OUT_OF_RANGE);
  CHECK_OK(sg_manual_clock_set(c, UINT64_MAX));
  CHECK_RC(sg_limiter_try_acquire(l, 1, &d), SG_ERR_CLOCK_OUT_OF_RANGE);
  CHECK_RC(sg_limiter_peek(l, &d), SG_ERR_CLOCK_OUT_OF_RANGE);
  CHECK_RC(sg_limiter_refund(l, 1), SG_ERR_CLOCK_OUT_OF_RANGE);
  /* Creating a limiter on a clock past the horizon fails too. */
  sg_limiter *late = NULL;
  CHECK_RC(sg_limiter_new_with_clock(q, c, &late), SG_ERR_CLOCK_OUT_OF_RANGE);
  CHECK(late == NULL);
  CHECK(untouched(&d));
  sg_limiter_free(l);
  sg_manual_clock_free(c);
  sg_quota_free(q);
}

/* A value outside an option's enum is the core's invalid_option error (SG_ERR_INVALID_OPTION,
 * 105): the detail names the option as every language does, the value and the choices, and
 * nothing is made or changed. */
static void test_invalid_options(void) {
  CHECK_U64(SG_ERR_INVALID_OPTION, 105);
  CHECK(strcmp(sg_result_name(SG_ERR_INVALID_OPTION), "invalid_option") == 0);

  sg_quota *q = NULL;
  CHECK_OK(sg_quota_parse("10/s; burst=20", &q));
  CHECK_OK(sg_quota_set_refill(q, SG_REFILL_INTERVAL));
  CHECK_RC(sg_quota_set_refill(q, 2), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("refill must be SG_REFILL_CONTINUOUS (0) or SG_REFILL_INTERVAL (1), not \"2\"");
  CHECK_RC(sg_quota_set_refill(q, UINT32_MAX), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("not \"4294967295\"");
  sg_quota_info info;
  CHECK_OK(sg_quota_get_info(q, &info));
  CHECK(info.refill == SG_REFILL_INTERVAL);

  sg_keyed_limiter *k = NULL;
  CHECK_RC(sg_keyed_limiter_new(q, 10, 2, &k), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("on_full must be SG_ON_FULL_REJECT_NEW_KEYS (0) or SG_ON_FULL_EVICT_FULLEST (1)");
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  CHECK_RC(sg_keyed_limiter_new_with_clock(q, 10, UINT32_MAX, c, &k), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("on_full must be");
  CHECK(k == NULL);

  sg_decision d = {true, 2, 1, 0, S / 2, 1, false};
  char buf[64] = "untouched";
  size_t n = 123;
  CHECK_RC(sg_decision_headers(&d, 5, NULL, 0, buf, sizeof buf, &n), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("style must be one of SG_HEADERS_IETF (0)");
  CHECK(strcmp(buf, "untouched") == 0);
  CHECK_U64(n, 123);

  /* A message of its own; the other engine codes are unchanged. */
  CHECK_OK(sg_result_message(SG_ERR_INVALID_OPTION, buf, sizeof buf, &n));
  CHECK(strcmp(buf, "an option has a value outside its choices") == 0);
  CHECK_U64(SG_ERR_INVALID_ARGUMENT, 4);
  CHECK_U64(SG_ERR_KEY_STORE_FULL, 104);
  CHECK_U64(SG_ERR_OTHER, 199);
  sg_manual_clock_free(c);
  sg_quota_free(q);
}

int main(void) {
  test_null_handles();
  test_null_out_pointers();
  test_wrong_handle_kind();
  test_invalid_quotas();
  test_invalid_options();
  test_cost_above_capacity_and_horizon();
  TEST_MAIN_END("test_errors");
}
