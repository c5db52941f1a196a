/* Hostile inputs (issue 9), one check group each: every one gets a typed error or a correct
 * decision, never a crash, a hang or unbounded memory. Run plain, under ASan+UBSan and under
 * valgrind like the other tests.
 *
 * Double free: the API documents that `_free` erases the kind tag, so a second free is
 * caught only while the allocator has not reused the block; beyond that it is undefined
 * behaviour, as for free() itself, and ASan/valgrind rightly report it. So this file checks
 * what is defined: NULL frees, frees of the wrong kind and of pointers that are no handle
 * are refused (and the handle stays usable); it never frees a handle twice. */
#include <stdlib.h>

#include "check.h"

#define MS 1000000ULL
#define S 1000000000ULL
#define KEY(s) (const uint8_t *)(s), (sizeof(s) - 1)
#define AS(type, ptr) ((type *)(void *)(ptr))

static const char *const ALGORITHMS[] = {
    "5/s", "5/s; refill=interval", "5/s; algorithm=gcra", "5/s; algorithm=fixed_window",
    "5/s; algorithm=sliding_window", "5/s; algorithm=sliding_log",
    "5/s; algorithm=leaky_queue; max_delay=1s"};
#define N_ALGORITHMS (sizeof ALGORITHMS / sizeof *ALGORITHMS)
/* Whose state is a scaled instant, so that a reading near UINT64_MAX is past the horizon.
 * The window algorithms, the interval bucket and the log cover every u64 reading. */
static const bool HAS_HORIZON[N_ALGORITHMS] = {true, false, true, false, false, false, true};
/* KeyedLimiter takes every algorithm (the sliding log in a store of its own). */
static const bool KEYED_OK[N_ALGORITHMS] = {true, true, true, true, true, true, true};

static sg_limiter *limiter(const char *rate, const sg_manual_clock *c) {
  sg_quota *q = NULL;
  sg_limiter *l = NULL;
  CHECK_OK(sg_quota_parse(rate, &q));
  CHECK_OK(sg_limiter_new_with_clock(q, c, &l));
  sg_quota_free(q);
  return l;
}

static sg_keyed_limiter *keyed(const char *rate, const sg_manual_clock *c, uint64_t max_keys,
                               uint32_t on_full) {
  sg_quota *q = NULL;
  sg_keyed_limiter *k = NULL;
  CHECK_OK(sg_quota_parse(rate, &q));
  CHECK_OK(sg_keyed_limiter_new_with_clock(q, max_keys, on_full, c, &k));
  sg_quota_free(q);
  return k;
}

/* A result is one of the codes the header defines. */
static bool known(sg_result rc) { return strcmp(sg_result_name(rc), "unknown") != 0; }

static void zero_and_huge_rates(void) {
  sg_quota *q = NULL;
  CHECK_RC(sg_quota_new(0, S, 1, &q), SG_ERR_INVALID_QUOTA);
  CHECK_RC(sg_quota_new(1, 0, 1, &q), SG_ERR_INVALID_QUOTA);
  CHECK_RC(sg_quota_new(1, S, 0, &q), SG_ERR_INVALID_QUOTA);
  CHECK(q == NULL);
  /* Extreme parameters: either a valid quota that then decides, or INVALID_QUOTA. */
  const uint64_t big[][3] = {{UINT64_MAX, 1, UINT64_MAX}, {1, UINT64_MAX, 1},
                             {1, UINT64_MAX, UINT64_MAX}, {UINT64_MAX, UINT64_MAX, 1},
                             {1, 1, UINT64_MAX}, {UINT64_MAX, 1, 1}};
  for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
    sg_result rc = sg_quota_new(big[i][0], big[i][1], big[i][2], &q);
    CHECK(rc == SG_OK || rc == SG_ERR_INVALID_QUOTA);
    if (rc != SG_OK) continue;
    sg_manual_clock *c = NULL;
    sg_limiter *l = NULL;
    sg_decision d;
    CHECK_OK(sg_manual_clock_new(0, &c));
    rc = sg_limiter_new_with_clock(q, c, &l);
    CHECK(rc == SG_OK || rc == SG_ERR_INVALID_QUOTA);
    if (rc == SG_OK) {
      CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
      CHECK(d.allowed);
      CHECK_U64(d.limit, big[i][2]);
    }
    sg_limiter_free(l);
    sg_manual_clock_free(c);
    sg_quota_free(q);
    q = NULL;
  }
  /* Rates as text: zero, negative, NaN, infinite, fractional, overflowing. */
  const char *bad[] = {"0/s", "-1/s", "NaN/s", "inf/s", "1.5/s", "1/0s", "1/-1s",
                       "99999999999999999999999/s", "1/99999999999999999999999s",
                       "1/s; burst=0", "1/s; burst=-1", "1/s; burst=99999999999999999999999",
                       "1/s; initial=2", "1/s; algorithm=sliding_log; burst=2",
                       "2000000/s; algorithm=sliding_log", "1/s; max_delay=1s",
                       "1/s; algorithm=leaky_queue; max_delay=99999999999999999999d"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sg_result rc = sg_quota_parse(bad[i], &q);
    CHECK(rc == SG_ERR_PARSE || rc == SG_ERR_INVALID_QUOTA);
    if (rc == SG_OK) fprintf(stderr, "accepted \"%s\"\n", bad[i]);
    CHECK(q == NULL);
  }
  /* The largest numbers the grammar reads: a quota that decides exactly, or INVALID_QUOTA. */
  sg_manual_clock *c = NULL;
  sg_limiter *l = NULL;
  sg_decision d;
  CHECK_OK(sg_manual_clock_new(0, &c));
  CHECK_RC(sg_quota_parse("18446744073709551615/ns", &q), SG_ERR_INVALID_QUOTA);
  CHECK_OK(sg_quota_parse("18446744073709551615/d; burst=1", &q));
  CHECK_OK(sg_limiter_new_with_clock(q, c, &l));
  if (l) {
    CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
    CHECK(d.allowed);
    CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
    CHECK(!d.allowed);
    CHECK_U64(d.retry_after_ns, 1); /* 86400 s / 2^64 - 1 tokens, rounded up */
  }
  sg_limiter_free(l);
  sg_quota_free(q);
  l = NULL;
  q = NULL;
  /* One token per 2^64 - 1 ns (584 years): typed, whichever way the engine takes it. */
  sg_result rc = sg_quota_parse("1/18446744073709551615ns", &q);
  CHECK(rc == SG_OK || rc == SG_ERR_INVALID_QUOTA || rc == SG_ERR_PARSE);
  if (q) {
    rc = sg_limiter_new_with_clock(q, c, &l);
    CHECK(rc == SG_OK || rc == SG_ERR_INVALID_QUOTA);
  }
  if (l) {
    CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
    CHECK(d.allowed);
    CHECK_U64(d.remaining, 0);
    CHECK_RC(sg_limiter_try_acquire(l, UINT64_MAX, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  }
  sg_limiter_free(l);
  sg_manual_clock_free(c);
  sg_quota_free(q);
}

static void uint64_max_costs(void) {
  sg_manual_clock *c = NULL;
  sg_decision d;
  CHECK_OK(sg_manual_clock_new(0, &c));
  for (size_t i = 0; i < N_ALGORITHMS; i++) {
    sg_limiter *l = limiter(ALGORITHMS[i], c);
    memset(&d, 0xA5, sizeof d);
    sg_decision before = d;
    CHECK_RC(sg_limiter_try_acquire(l, UINT64_MAX, &d), SG_ERR_INSUFFICIENT_CAPACITY);
    CHECK_RC(sg_limiter_try_acquire_at(l, 0, UINT64_MAX, &d), SG_ERR_INSUFFICIENT_CAPACITY);
    CHECK_RC(sg_limiter_reserve(l, UINT64_MAX, UINT64_MAX, &d), SG_ERR_INSUFFICIENT_CAPACITY);
    CHECK_RC(sg_limiter_acquire_timeout(l, UINT64_MAX, UINT64_MAX, &d),
             SG_ERR_INSUFFICIENT_CAPACITY);
    CHECK(memcmp(&d, &before, sizeof d) == 0);
    /* A refund or cancel of UINT64_MAX is capped at the capacity. */
    CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
    CHECK_OK(sg_limiter_refund(l, UINT64_MAX));
    CHECK_OK(sg_limiter_cancel(l, UINT64_MAX));
    CHECK_OK(sg_limiter_peek(l, &d));
    CHECK(d.allowed);
    CHECK_U64(d.remaining, d.limit);
    /* Cost 0 is a peek, whatever the algorithm. */
    CHECK_OK(sg_limiter_try_acquire(l, 0, &d));
    CHECK(d.allowed);
    const sg_limiter *parts[] = {l, l};
    CHECK_RC(sg_composite_try_acquire(parts, 2, UINT64_MAX, &d), SG_ERR_INSUFFICIENT_CAPACITY);
    CHECK_OK(sg_composite_refund(parts, 2, UINT64_MAX));
    sg_limiter_free(l);
  }
  sg_keyed_limiter *k = keyed("5/s", c, 10, SG_ON_FULL_REJECT_NEW_KEYS);
  uint64_t n = 9;
  CHECK_RC(sg_keyed_limiter_try_acquire(k, KEY("a"), UINT64_MAX, &d),
           SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 0); /* an impossible request creates no bucket */
  CHECK_OK(sg_keyed_limiter_refund(k, KEY("a"), UINT64_MAX));
  sg_keyed_limiter_free(k);
  /* HTTP fields of the largest figures render without overflow. */
  sg_decision big = {false, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, false};
  char buf[512];
  size_t w = 0;
  CHECK_OK(sg_decision_headers(&big, SG_HEADERS_IETF, KEY("p"), buf, sizeof buf, &w));
  CHECK(strstr(buf, "Retry-After: 18446744074\r\n") != NULL);
  sg_manual_clock_free(c);
}

static void empty_and_huge_keys(void) {
  sg_manual_clock *c = NULL;
  sg_decision d;
  uint64_t n = 0;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_keyed_limiter *k = keyed("1/s; burst=2", c, 100, SG_ON_FULL_REJECT_NEW_KEYS);
  /* The empty key is one key, whether its pointer is NULL or not. */
  CHECK_OK(sg_keyed_limiter_try_acquire(k, NULL, 0, 1, &d));
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"ignored", 0, 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 0);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 1);
  /* 1 MiB keys: held in full, compared in full (they differ only in the last byte). */
  size_t big = (size_t)1 << 20;
  uint8_t *key = malloc(big);
  CHECK(key != NULL);
  if (key) {
    memset(key, 'k', big);
    CHECK_OK(sg_keyed_limiter_try_acquire(k, key, big, 2, &d));
    CHECK(d.allowed);
    CHECK_OK(sg_keyed_limiter_try_acquire(k, key, big, 1, &d));
    CHECK(!d.allowed);
    key[big - 1] = 'x';
    CHECK_OK(sg_keyed_limiter_try_acquire(k, key, big, 1, &d));
    CHECK(d.allowed);
    CHECK_OK(sg_keyed_limiter_try_acquire(k, key, big - 1, 1, &d)); /* a prefix is a key */
    CHECK(d.allowed);
    CHECK_OK(sg_keyed_limiter_len(k, &n));
    CHECK_U64(n, 4);
    bool removed = false;
    CHECK_OK(sg_keyed_limiter_remove(k, key, big, &removed));
    CHECK(removed);
    free(key);
  }
  /* A length larger than any object is refused before the pointer is read. */
  CHECK_RC(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"x", SIZE_MAX, 1, &d),
           SG_ERR_INVALID_ARGUMENT);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

static void non_utf8_keys(void) {
  sg_manual_clock *c = NULL;
  sg_decision d;
  uint64_t n = 0;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_keyed_limiter *k = keyed("1/s", c, 100, SG_ON_FULL_REJECT_NEW_KEYS);
  const uint8_t keys[][4] = {{0xff, 0xfe, 0, 0}, {0xff, 0xfe, 0, 1}, {0xc3, 0x28, 0, 0},
                             {0xed, 0xa0, 0x80, 0}, {0, 0, 0, 0}};
  for (size_t i = 0; i < 5; i++) {
    CHECK_OK(sg_keyed_limiter_try_acquire(k, keys[i], 4, 1, &d));
    CHECK(d.allowed);
    CHECK_OK(sg_keyed_limiter_try_acquire(k, keys[i], 4, 1, &d));
    CHECK(!d.allowed); /* the same bytes are the same bucket */
  }
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 5);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

static void null_keys(void) {
  sg_manual_clock *c = NULL;
  sg_decision d;
  memset(&d, 0x5A, sizeof d);
  sg_decision before = d;
  bool removed = true;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_keyed_limiter *k = keyed("1/s", c, 100, SG_ON_FULL_REJECT_NEW_KEYS);
  CHECK_RC(sg_keyed_limiter_try_acquire(k, NULL, 1, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`key` is NULL but `key_len` is 1");
  CHECK_RC(sg_keyed_limiter_try_acquire_at(k, NULL, SIZE_MAX, 0, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_peek(k, NULL, 7, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_refund(k, NULL, 7, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_remove(k, NULL, 7, &removed), SG_ERR_NULL_ARGUMENT);
  CHECK(memcmp(&d, &before, sizeof d) == 0);
  CHECK(removed);
  CHECK_OK(sg_keyed_limiter_peek(k, NULL, 0, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_remove(k, NULL, 0, &removed));
  CHECK(!removed);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

static void junk_rate_strings(void) {
  sg_quota *q = NULL;
  const char *junk[] = {"", " ", ";", "/", "10/", "/s", "10/s;", "10/s;;burst=1", "10\x01/s",
                        "10/s\x7f", "10/s; burst=5\n; x", "\t10/s\r", "10/s; burst=5; burst=6",
                        "10/s; algorithm=token_bucket; algorithm=gcra", "10/s; =", "10/s; burst",
                        "10/s; burst==5", "10/s; refill=sometimes", "10/s; algorithm=magic",
                        "10/s\xff", "\xc3\x28/s", "10/\xe2\x82", "10 per per s", "10/1e3s"};
  for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
    sg_result rc = sg_quota_parse(junk[i], &q);
    /* Whitespace is free, so some of these may parse: then they round-trip. */
    CHECK(rc == SG_OK || rc == SG_ERR_PARSE || rc == SG_ERR_INVALID_QUOTA);
    if (rc == SG_OK) {
      char buf[128];
      sg_quota *again = NULL;
      CHECK_OK(sg_quota_to_string(q, buf, sizeof buf, NULL));
      CHECK_OK(sg_quota_parse(buf, &again));
      sg_quota_free(again);
      sg_quota_free(q);
      q = NULL;
    }
    CHECK(q == NULL);
  }
  /* Every control character, alone and inside a valid string. */
  for (int ch = 1; ch < 32; ch++) {
    char s[16];
    snprintf(s, sizeof s, "10/s%c", ch);
    sg_result rc = sg_quota_parse(s, &q);
    CHECK(known(rc) && (rc == SG_OK || rc == SG_ERR_PARSE));
    sg_quota_free(q);
    q = NULL;
    uint8_t b[] = {'1', (uint8_t)ch, '/', 's'};
    rc = sg_quota_parse_len(b, sizeof b, &q);
    CHECK(rc == SG_OK || rc == SG_ERR_PARSE);
    sg_quota_free(q);
    q = NULL;
  }
  /* 100 KiB strings: junk, a huge count, and whitespace around a valid rate. */
  size_t big = 100 * 1024;
  char *s = malloc(big + 1);
  CHECK(s != NULL);
  if (s) {
    memset(s, 'x', big);
    s[big] = 0;
    CHECK_RC(sg_quota_parse(s, &q), SG_ERR_PARSE);
    CHECK_RC(sg_quota_parse_len((const uint8_t *)s, big, &q), SG_ERR_PARSE);
    /* The detail quotes the input; a small buffer gets a truncated, terminated text. */
    char small[32];
    size_t w = 0;
    CHECK_RC(sg_last_error_message(small, sizeof small, &w), SG_ERR_BUFFER_TOO_SMALL);
    CHECK_U64(w, sizeof small - 1);
    CHECK_U64(strlen(small), sizeof small - 1);
    memset(s, '9', big);
    s[big - 2] = '/';
    s[big - 1] = 's';
    CHECK_RC(sg_quota_parse(s, &q), SG_ERR_PARSE);
    memset(s, ' ', big);
    memcpy(s + big / 2, "10/s", 4);
    CHECK_OK(sg_quota_parse(s, &q));
    sg_quota_free(q);
    q = NULL;
    free(s);
  }
  /* An embedded NUL through the explicit length is junk; sg_quota_parse stops at it. */
  CHECK_RC(sg_quota_parse_len((const uint8_t *)"10/s\0; burst=1", 14, &q), SG_ERR_PARSE);
  CHECK_RC(sg_quota_parse_len((const uint8_t *)"1\0/s", 4, &q), SG_ERR_PARSE);
  CHECK_OK(sg_quota_parse("10/s\0; burst=1", &q));
  sg_quota_info info;
  CHECK_OK(sg_quota_get_info(q, &info));
  CHECK_U64(info.burst, 10);
  sg_quota_free(q);
}

/* Keys are 8-byte counters: 10^6 distinct keys against a store bounded at 1000. */
#define FLOOD 1000000u
#define BOUND 1000u

static void key_flood(void) {
  sg_manual_clock *c = NULL;
  sg_decision d;
  uint64_t n = 0;
  CHECK_OK(sg_manual_clock_new(0, &c));
  /* Evict-fullest: every new key is admitted, the store never exceeds its bound. */
  sg_keyed_limiter *k = keyed("1/s; burst=5", c, BOUND, SG_ON_FULL_EVICT_FULLEST);
  unsigned long allowed = 0, errors = 0, over = 0;
  for (uint64_t i = 0; i < FLOOD; i++) {
    if (sg_keyed_limiter_try_acquire(k, (const uint8_t *)&i, sizeof i, 1, &d) != SG_OK)
      errors++;
    else if (d.allowed)
      allowed++;
    if (i % 4096 == 0) {
      CHECK_OK(sg_keyed_limiter_len(k, &n));
      if (n > BOUND) over++;
    }
  }
  CHECK_U64(errors, 0);
  CHECK_U64(allowed, FLOOD);
  CHECK_U64(over, 0);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK(n <= BOUND && n > 0);
  sg_keyed_limiter_free(k);
  /* Reject-new-keys: the first BOUND keys get buckets, the rest KEY_STORE_FULL. */
  k = keyed("1/s; burst=5", c, BOUND, SG_ON_FULL_REJECT_NEW_KEYS);
  unsigned long full = 0;
  allowed = errors = 0;
  for (uint64_t i = 0; i < FLOOD; i++) {
    sg_result rc = sg_keyed_limiter_try_acquire(k, (const uint8_t *)&i, sizeof i, 1, &d);
    if (rc == SG_ERR_KEY_STORE_FULL) full++;
    else if (rc == SG_OK && d.allowed) allowed++;
    else errors++;
  }
  CHECK_U64(errors, 0);
  CHECK_U64(allowed, BOUND);
  CHECK_U64(full, FLOOD - BOUND);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, BOUND);
  /* Once the buckets are full again they are evicted for new keys. */
  CHECK_OK(sg_manual_clock_set(c, 10 * S));
  uint64_t fresh = FLOOD + 1;
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)&fresh, sizeof fresh, 1, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK(n <= BOUND);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

/* A call at the end of time: CLOCK_OUT_OF_RANGE where the algorithm has a horizon, else a
 * decision. */
#define CHECK_END(i, call)                                                     \
  CHECK_RC(call, HAS_HORIZON[i] ? SG_ERR_CLOCK_OUT_OF_RANGE : SG_OK)

static void clock_extremes(void) {
  sg_manual_clock *c = NULL;
  sg_decision d;
  uint64_t now = 0;
  CHECK_OK(sg_manual_clock_new(10 * S, &c));
  for (size_t i = 0; i < N_ALGORITHMS; i++) {
    CHECK_OK(sg_manual_clock_set(c, 10 * S));
    sg_limiter *l = limiter(ALGORITHMS[i], c);
    sg_keyed_limiter *k = NULL;
    if (KEYED_OK[i]) {
      k = keyed(ALGORITHMS[i], c, 10, SG_ON_FULL_REJECT_NEW_KEYS);
    } else {
      sg_quota *q = NULL;
      CHECK_OK(sg_quota_parse(ALGORITHMS[i], &q));
      CHECK_RC(sg_keyed_limiter_new_with_clock(q, 10, 0, c, &k), SG_ERR_INVALID_QUOTA);
      CHECK(k == NULL);
      sg_quota_free(q);
    }
    unsigned long admitted = 0;
    /* Drain, then go back in time: a backwards clock never admits more. */
    for (int j = 0; j < 20; j++) {
      CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
      admitted += d.allowed;
    }
    for (uint64_t t = 10 * S; t > 0; t /= 2) {
      CHECK_OK(sg_manual_clock_set(c, t));
      CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
      admitted += d.allowed;
      if (k) CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("k"), 1, &d));
    }
    CHECK_OK(sg_limiter_try_acquire_at(l, 0, 1, &d));
    admitted += d.allowed;
    CHECK(admitted <= 5 + 1); /* the burst (the leaky queue: 1 now + its queue of 5) */
    /* Far forwards, to UINT64_MAX: past the horizon is CLOCK_OUT_OF_RANGE and changes
     * nothing; algorithms without one decide. */
    CHECK_OK(sg_manual_clock_set(c, UINT64_MAX));
    CHECK_OK(sg_manual_clock_now(c, &now));
    CHECK_U64(now, UINT64_MAX);
    CHECK_END(i, sg_limiter_peek(l, &d));
    CHECK_END(i, sg_limiter_try_acquire(l, 1, &d));
    CHECK_END(i, sg_limiter_refund(l, 1));
    CHECK_END(i, sg_limiter_reserve(l, 1, 0, &d));
    CHECK_END(i, sg_limiter_cancel(l, 1));
    CHECK_END(i, sg_limiter_acquire_timeout(l, 1, 0, &d));
    CHECK_END(i, sg_limiter_try_acquire_at(l, UINT64_MAX, 1, &d));
    const sg_limiter *parts[] = {l};
    CHECK_END(i, sg_composite_try_acquire(parts, 1, 1, &d));
    CHECK_END(i, sg_composite_refund(parts, 1, 1));
    /* The keyed store reserves the last reading (u64::MAX) for itself: a typed error. */
    if (k) {
      CHECK_RC(sg_keyed_limiter_try_acquire(k, KEY("k"), 1, &d), SG_ERR_CLOCK_OUT_OF_RANGE);
      CHECK_RC(sg_keyed_limiter_try_acquire(k, KEY("new"), 1, &d), SG_ERR_CLOCK_OUT_OF_RANGE);
      CHECK_END(i, sg_keyed_limiter_try_acquire_at(k, KEY("new"), UINT64_MAX - 1, 1, &d));
    }
    if (HAS_HORIZON[i]) CHECK_DETAIL("past the limiter's horizon");
    /* advance saturates; where there is a horizon, no limiter can be made past it. */
    CHECK_OK(sg_manual_clock_advance(c, UINT64_MAX));
    CHECK_OK(sg_manual_clock_now(c, &now));
    CHECK_U64(now, UINT64_MAX);
    sg_quota *q = NULL;
    sg_limiter *late = NULL;
    CHECK_OK(sg_quota_parse(ALGORITHMS[i], &q));
    CHECK_END(i, sg_limiter_new_with_clock(q, c, &late));
    CHECK(HAS_HORIZON[i] == (late == NULL));
    sg_limiter_free(late);
    sg_quota_free(q);
    /* Back to the present: a limiter the end of time did not touch admits again. */
    CHECK_OK(sg_manual_clock_set(c, 100 * S));
    CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
    CHECK(d.allowed || !HAS_HORIZON[i]);
    sg_keyed_limiter_free(k);
    sg_limiter_free(l);
  }
  sg_manual_clock_free(c);
}

static void wrong_handle_kinds(void) {
  sg_quota *q = NULL;
  sg_manual_clock *c = NULL;
  sg_limiter *l = NULL;
  sg_keyed_limiter *k = NULL;
  sg_decision d;
  uint64_t n = 0;
  CHECK_OK(sg_quota_parse("5/s", &q));
  CHECK_OK(sg_manual_clock_new(0, &c));
  CHECK_OK(sg_limiter_new_with_clock(q, c, &l));
  CHECK_OK(sg_keyed_limiter_new_with_clock(q, 10, SG_ON_FULL_REJECT_NEW_KEYS, c, &k));
  /* Every kind where every other kind belongs. */
  void *handles[] = {q, c, l, k};
  for (int i = 0; i < 4; i++) {
    void *h = handles[i];
    if (h != l) {
      CHECK_RC(sg_limiter_try_acquire(AS(const sg_limiter, h), 1, &d), SG_ERR_WRONG_HANDLE);
      CHECK_RC(sg_limiter_reserve(AS(const sg_limiter, h), 1, 0, &d), SG_ERR_WRONG_HANDLE);
      const sg_limiter *parts[] = {l, AS(const sg_limiter, h)};
      CHECK_RC(sg_composite_try_acquire(parts, 2, 1, &d), SG_ERR_WRONG_HANDLE);
    }
    if (h != k)
      CHECK_RC(sg_keyed_limiter_len(AS(const sg_keyed_limiter, h), &n), SG_ERR_WRONG_HANDLE);
    if (h != c) CHECK_RC(sg_manual_clock_set(AS(const sg_manual_clock, h), 1), SG_ERR_WRONG_HANDLE);
    if (h != q) CHECK_RC(sg_quota_set_initial(AS(sg_quota, h), 1), SG_ERR_WRONG_HANDLE);
  }
  /* Memory that is no handle at all (aligned garbage), and a misaligned pointer. */
  uint64_t garbage[8];
  memset(garbage, 0x3C, sizeof garbage);
  CHECK_RC(sg_limiter_try_acquire(AS(const sg_limiter, garbage), 1, &d), SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("not a sluicegate handle");
  CHECK_RC(sg_limiter_try_acquire(AS(const sg_limiter, (char *)garbage + 1), 1, &d),
           SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("misaligned");
  /* Frees: NULL is a no-op; the wrong kind or a non-handle is refused and left alone. */
  sg_limiter_free(NULL);
  sg_keyed_limiter_free(NULL);
  sg_quota_free(NULL);
  sg_manual_clock_free(NULL);
  sg_limiter_free(AS(sg_limiter, q));
  CHECK_DETAIL("sg_limiter_free: `handle` should be an sg_limiter, but is sg_quota");
  sg_quota_free(AS(sg_quota, l));
  sg_keyed_limiter_free(AS(sg_keyed_limiter, c));
  sg_manual_clock_free(AS(sg_manual_clock, k));
  sg_limiter_free(AS(sg_limiter, garbage));
  sg_limiter_free(AS(sg_limiter, (char *)garbage + 1));
  /* ...and every handle still works. */
  sg_quota_info info;
  CHECK_OK(sg_quota_get_info(q, &info));
  CHECK_OK(sg_manual_clock_set(c, 0));
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("a"), 1, &d));
  sg_keyed_limiter_free(k);
  sg_limiter_free(l);
  sg_manual_clock_free(c);
  sg_quota_free(q);
}

int main(void) {
  zero_and_huge_rates();
  uint64_max_costs();
  empty_and_huge_keys();
  non_utf8_keys();
  null_keys();
  junk_rate_strings();
  key_flood();
  clock_extremes();
  wrong_handle_kinds();
  TEST_MAIN_END("test_hostile");
}
