/* sg_keyed_limiter: byte-string keys (NUL bytes included, the empty key), integer keys as
 * their digits, independent buckets, the key bound under both policies, sweep / remove /
 * clear, peek and refund of absent keys, the blocking acquire and its outcomes, every error
 * path, and threads sharing keys. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "check.h"

#define S 1000000000ULL
#define MS 1000000ULL
#define KEY(s) (const uint8_t *)(s), (sizeof(s) - 1)

#define AS(type, ptr) ((type *)(void *)(ptr))

static sg_keyed_limiter *keyed(const char *rate, sg_manual_clock *clock, uint64_t max_keys,
                               uint32_t on_full) {
  sg_quota *q = NULL;
  sg_keyed_limiter *k = NULL;
  CHECK_OK(sg_quota_parse(rate, &q));
  CHECK_OK(sg_keyed_limiter_new_with_clock(q, max_keys, on_full, clock, &k));
  sg_quota_free(q);
  return k;
}

static void test_keys_are_independent(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(5 * S, &c));
  sg_keyed_limiter *k = keyed("2/s; burst=3", c, SG_KEYED_DEFAULT_MAX_KEYS,
                              SG_ON_FULL_REJECT_NEW_KEYS);
  sg_decision d;
  for (int i = 0; i < 3; i++) CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("alice"), 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 0);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("alice"), 1, &d));
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, S / 2);
  /* Keys are bytes compared in full: a NUL inside, a prefix, the empty key all differ. */
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("alice\0x"), 3, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("alic"), 3, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, NULL, 0, 2, &d)); /* the empty key */
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"", 0, 1, &d)); /* same key */
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 0);
  uint64_t n = 0;
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 4);
  /* Binary keys: every byte value. */
  uint8_t bin[256];
  for (int i = 0; i < 256; i++) bin[i] = (uint8_t)i;
  CHECK_OK(sg_keyed_limiter_try_acquire(k, bin, sizeof bin, 3, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, bin, sizeof bin, 1, &d));
  CHECK(!d.allowed);

  /* Cost above the capacity is an error and never creates the key. */
  CHECK_RC(sg_keyed_limiter_try_acquire(k, KEY("carol"), 4, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 5);
  /* Peek of an absent key reports a fresh bucket and creates nothing. */
  CHECK_OK(sg_keyed_limiter_peek(k, KEY("dave"), &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 3);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 5);
  /* Refund: capped, and an absent key stays absent. */
  CHECK_OK(sg_keyed_limiter_refund(k, KEY("alice"), 1));
  CHECK_OK(sg_keyed_limiter_peek(k, KEY("alice"), &d));
  CHECK_U64(d.remaining, 1);
  CHECK_OK(sg_keyed_limiter_refund(k, KEY("erin"), 1));
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 5);
  /* Explicit readings. */
  uint64_t now = 0;
  CHECK_OK(sg_keyed_limiter_now(k, &now));
  CHECK_U64(now, 5 * S);
  CHECK_OK(sg_keyed_limiter_try_acquire_at(k, KEY("alice"), now + S, 3, &d));
  CHECK(d.allowed); /* 1 + 2 tokens a second later */
  CHECK_OK(sg_keyed_limiter_refund_at(k, KEY("alice"), now + S, 3));

  /* remove, sweep, clear. */
  bool removed = false;
  CHECK_OK(sg_keyed_limiter_remove(k, KEY("alic"), &removed));
  CHECK(removed);
  CHECK_OK(sg_keyed_limiter_remove(k, KEY("alic"), &removed));
  CHECK(!removed);
  CHECK_OK(sg_keyed_limiter_remove(k, KEY("nobody"), NULL));
  CHECK_OK(sg_manual_clock_advance(c, 10 * S)); /* every bucket is full again */
  uint64_t evicted = 0;
  CHECK_OK(sg_keyed_limiter_sweep(k, &evicted));
  CHECK_U64(evicted, 4);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 0);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("alice"), 1, &d));
  CHECK_OK(sg_keyed_limiter_sweep(k, NULL));
  CHECK_OK(sg_keyed_limiter_clear(k));
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 0);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

static void test_key_bound(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_decision d;
  uint64_t n = 0;
  char key[16];
  /* Reject new keys at the bound, untouched existing keys. */
  sg_keyed_limiter *k = keyed("1/h; burst=2", c, 3, SG_ON_FULL_REJECT_NEW_KEYS);
  for (int i = 0; i < 3; i++) {
    int len = snprintf(key, sizeof key, "k%d", i);
    CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)key, (size_t)len, 1, &d));
  }
  sg_decision before;
  memset(&before, 0xA5, sizeof before);
  d = before;
  CHECK_RC(sg_keyed_limiter_try_acquire(k, KEY("k3"), 1, &d), SG_ERR_KEY_STORE_FULL);
  CHECK_DETAIL("key store full: 3 keys");
  CHECK(memcmp(&d, &before, sizeof d) == 0);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("k0"), 1, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 3);
  sg_keyed_limiter_free(k);

  /* Evict the fullest instead: memory stays bounded, new keys get in. */
  k = keyed("1/h; burst=2", c, 3, SG_ON_FULL_EVICT_FULLEST);
  for (int i = 0; i < 10; i++) {
    int len = snprintf(key, sizeof key, "k%d", i);
    CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)key, (size_t)len, 1, &d));
    CHECK(d.allowed);
  }
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK(n <= 3);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

static void test_keyed_errors(void) {
  sg_quota *q = NULL;
  sg_manual_clock *c = NULL;
  sg_keyed_limiter *k = NULL;
  sg_limiter *l = NULL;
  CHECK_OK(sg_quota_parse("5/s", &q));
  CHECK_OK(sg_manual_clock_new(0, &c));
  CHECK_RC(sg_keyed_limiter_new(q, 0, SG_ON_FULL_REJECT_NEW_KEYS, &k), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("max_keys must be at least 1");
  CHECK_RC(sg_keyed_limiter_new(q, 10, 2, &k), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("on_full must be");
  CHECK_RC(sg_keyed_limiter_new(NULL, 10, 0, &k), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_new(q, 10, 0, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_new_with_clock(q, 10, 0, NULL, &k), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_new_with_clock(q, 10, 0, AS(sg_manual_clock, q), &k),
           SG_ERR_WRONG_HANDLE);
  CHECK(k == NULL);
  CHECK_OK(sg_keyed_limiter_new(q, 10, 0, &k)); /* the default clock */
  CHECK_OK(sg_limiter_new_with_clock(q, c, &l));

  sg_decision d;
  memset(&d, 0xA5, sizeof d);
  sg_decision poison = d;
  uint64_t n = 7;
  bool removed = true;
  /* NULL handles. */
  CHECK_RC(sg_keyed_limiter_try_acquire(NULL, KEY("a"), 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_try_acquire_at(NULL, KEY("a"), 0, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_peek(NULL, KEY("a"), &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_refund(NULL, KEY("a"), 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_refund_at(NULL, KEY("a"), 0, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_acquire_timeout(NULL, KEY("a"), 1, 0, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_remove(NULL, KEY("a"), &removed), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_sweep(NULL, &n), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_clear(NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_len(NULL, &n), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_now(NULL, &n), SG_ERR_NULL_ARGUMENT);
  /* NULL key with a non-zero length. */
  CHECK_RC(sg_keyed_limiter_try_acquire(k, NULL, 3, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("`key` is NULL but `key_len` is 3");
  CHECK_RC(sg_keyed_limiter_try_acquire_at(k, NULL, 1, 0, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_peek(k, NULL, 1, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_refund(k, NULL, 1, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_refund_at(k, NULL, 1, 0, 1), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_acquire_timeout(k, NULL, 1, 1, 0, &d), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_remove(k, NULL, 1, &removed), SG_ERR_NULL_ARGUMENT);
  /* NULL out-pointers (checked before any work: no key gets created). */
  CHECK_RC(sg_keyed_limiter_try_acquire(k, KEY("a"), 1, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_try_acquire_at(k, KEY("a"), 0, 1, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_peek(k, KEY("a"), NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_acquire_timeout(k, KEY("a"), 1, 0, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_len(k, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_now(k, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 0);
  /* The wrong kind, both ways. */
  CHECK_RC(sg_keyed_limiter_try_acquire(AS(sg_keyed_limiter, l), KEY("a"), 1, &d),
           SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("should be an sg_keyed_limiter, but is sg_limiter");
  CHECK_RC(sg_keyed_limiter_peek(AS(sg_keyed_limiter, q), KEY("a"), &d), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_keyed_limiter_len(AS(sg_keyed_limiter, c), &n), SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_try_acquire(AS(sg_limiter, k), 1, &d), SG_ERR_WRONG_HANDLE);
  CHECK_DETAIL("should be an sg_limiter, but is sg_keyed_limiter");
  CHECK_RC(sg_quota_get_info(AS(sg_quota, k), NULL), SG_ERR_WRONG_HANDLE);
  sg_limiter_free(AS(sg_limiter, k)); /* left alone */
  sg_keyed_limiter_free(AS(sg_keyed_limiter, l));
  /* Cost above the capacity, a clock past the horizon. */
  CHECK_RC(sg_keyed_limiter_try_acquire(k, KEY("a"), 6, &d), SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK_RC(sg_keyed_limiter_acquire_timeout(k, KEY("a"), 6, S, &d),
           SG_ERR_INSUFFICIENT_CAPACITY);
  CHECK_RC(sg_keyed_limiter_try_acquire_at(k, KEY("a"), UINT64_MAX, 1, &d),
           SG_ERR_CLOCK_OUT_OF_RANGE);
  CHECK(memcmp(&d, &poison, sizeof d) == 0);
  CHECK_U64(n, 0);
  CHECK(removed);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("a"), 1, &d)); /* both still alive */
  CHECK(d.allowed);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK(d.allowed);
  sg_keyed_limiter_free(k);
  sg_limiter_free(l);
  sg_manual_clock_free(c);
  sg_quota_free(q);
}

static void test_keyed_acquire_timeout(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_keyed_limiter *k = keyed("10/s; burst=1", c, 100, SG_ON_FULL_REJECT_NEW_KEYS);
  sg_decision d;
  CHECK_OK(sg_keyed_limiter_acquire_timeout(k, KEY("a"), 1, 0, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_acquire_timeout(k, KEY("a"), 1, 50 * MS, &d));
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, 100 * MS);
  /* Another key is not affected. */
  CHECK_OK(sg_keyed_limiter_acquire_timeout(k, KEY("b"), 1, 50 * MS, &d));
  CHECK(d.allowed);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

/* The blocking acquire follows the core's policy for a key too: a frozen manual clock gives
 * the rejection, a leaky queue's slot is admitted after its wait (already slept), and a slot
 * past the timeout is the rejection at once, reserving nothing. */
static void test_keyed_acquire_outcomes(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_decision d;
  sg_keyed_limiter *k = keyed("100/s; burst=1", c, 100, SG_ON_FULL_REJECT_NEW_KEYS);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("a"), 1, &d));
  CHECK_OK(sg_keyed_limiter_acquire_timeout(k, KEY("a"), 1, 10 * S, &d));
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, 10 * MS);
  sg_keyed_limiter_free(k);

  k = keyed("10/s; algorithm=leaky_queue; max_delay=1s", c, 100, SG_ON_FULL_REJECT_NEW_KEYS);
  CHECK_OK(sg_keyed_limiter_acquire_timeout(k, KEY("q"), 1, S, &d));
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 0);
  CHECK_OK(sg_keyed_limiter_acquire_timeout(k, KEY("q"), 1, S, &d));
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 100 * MS);
  CHECK_OK(sg_keyed_limiter_acquire_timeout(k, KEY("q"), 1, 150 * MS, &d));
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, 50 * MS);
  /* Nothing was reserved: the next slot is still 200 ms away. */
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("q"), 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.retry_after_ns, 200 * MS);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

/* The key rule every language shares: an integer key is its decimal digits, so the id 42
 * rendered with printf and the text "42" (Python's 42 and "42", Node's 42 and "42") are one
 * bucket, and one key against max_keys. */
static void test_integer_keys_are_their_digits(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_keyed_limiter *k = keyed("1/h; burst=2", c, 100, SG_ON_FULL_REJECT_NEW_KEYS);
  sg_decision d;
  char key[24];
  int len = snprintf(key, sizeof key, "%" PRId64, (int64_t)42);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)key, (size_t)len, 1, &d));
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("42"), 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 0);
  uint64_t n = 0;
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 1);
  len = snprintf(key, sizeof key, "%" PRId64, (int64_t)-7);
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)key, (size_t)len, 2, &d));
  CHECK_OK(sg_keyed_limiter_try_acquire(k, KEY("-7"), 1, &d));
  CHECK(!d.allowed);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 2);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

typedef struct {
  const sg_keyed_limiter *k;
  int id;
  uint64_t admitted;
} worker;

/* Every thread asks for the same 8 shared keys and 100 keys of its own, round-robin. */
static void *hammer(void *arg) {
  worker *w = arg;
  sg_decision d;
  char key[32];
  for (int i = 0; i < 4000; i++) {
    int len = (i % 2) ? snprintf(key, sizeof key, "shared-%d", (i / 2) % 8)
                      : snprintf(key, sizeof key, "own-%d-%d", w->id, (i / 2) % 100);
    if (sg_keyed_limiter_try_acquire(w->k, (const uint8_t *)key, (size_t)len, 1, &d) == SG_OK &&
        d.allowed && (i % 2))
      w->admitted++;
  }
  return NULL;
}

/* Frozen clock: the 8 shared keys admit exactly 8 x burst between all threads. */
static void test_threads_share_keys_exactly(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_keyed_limiter *k = keyed("1/h; burst=50", c, 10000, SG_ON_FULL_REJECT_NEW_KEYS);
  worker ws[4];
  pthread_t ts[4];
  for (int i = 0; i < 4; i++) {
    ws[i] = (worker){k, i, 0};
    CHECK(pthread_create(&ts[i], NULL, hammer, &ws[i]) == 0);
  }
  uint64_t total = 0, n = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(ts[i], NULL);
    total += ws[i].admitted;
  }
  CHECK_U64(total, 8 * 50);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 8 + 4 * 100);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(c);
}

int main(void) {
  test_keys_are_independent();
  test_key_bound();
  test_keyed_errors();
  test_keyed_acquire_timeout();
  test_keyed_acquire_outcomes();
  test_integer_keys_are_their_digits();
  test_threads_share_keys_exactly();
  TEST_MAIN_END("test_keyed");
}
