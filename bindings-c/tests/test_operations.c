/* Operating a limiter (docs/OPERATIONS.md): set_quota's carry rule, shadow mode, counters
 * (exact under threads), the rejection hook with its key, the Prometheus text, and the
 * refusal of set_quota on a shared-memory region. Every figure comes from a known sequence of
 * decisions on a manual clock. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>

#include "check.h"
#include "regions.h"

#define S 1000000000ULL
#define KEY(s) (const uint8_t *)(s), (sizeof(s) - 1)

static sg_quota *quota(const char *rate) {
  sg_quota *q = NULL;
  CHECK_OK(sg_quota_parse(rate, &q));
  return q;
}

static void test_set_quota_carries_tokens(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_quota *q = quota("10/min; burst=10");
  sg_observe o = {.metrics = true};
  sg_limiter *l = NULL;
  CHECK_OK(sg_limiter_new_observed(q, NULL, c, &o, &l));
  sg_decision d;
  for (int i = 0; i < 8; i++) CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  sg_quota *q2 = quota("20/min; burst=20");
  CHECK_OK(sg_limiter_set_quota(l, q2));
  /* The 2 tokens left are kept (not 4, a fraction of the new burst), and not refilled. */
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 1);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK_U64(d.remaining, 0);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK(!d.allowed);
  CHECK_U64(d.limit, 20);
  CHECK_U64(d.retry_after_ns, 3 * S); /* one token per 3 s at 20/min */
  CHECK_OK(sg_manual_clock_advance(c, 3 * S));
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK(d.allowed);
  sg_metrics m;
  bool counting = false;
  CHECK_OK(sg_limiter_metrics(l, &m, &counting));
  CHECK(counting);
  CHECK_U64(m.allowed, 11);
  CHECK_U64(m.rejected, 1);
  CHECK_U64(m.reconfigurations, 1);
  CHECK(!m.has_keys);
  /* Another algorithm is refused; the limiter is unchanged. */
  sg_quota *gcra = quota("10/s; algorithm=gcra");
  CHECK_RC(sg_limiter_set_quota(l, gcra), SG_ERR_INVALID_OPTION);
  CHECK_RC(sg_limiter_set_quota(l, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_set_quota((const sg_limiter *)(const void *)q, q2), SG_ERR_WRONG_HANDLE);
  /* Without counters: counting is false and the snapshot zeroed. */
  sg_limiter *plain = NULL;
  CHECK_OK(sg_limiter_new_observed(q, NULL, c, NULL, &plain));
  m.allowed = 7;
  CHECK_OK(sg_limiter_metrics(plain, &m, &counting));
  CHECK(!counting);
  CHECK_U64(m.allowed, 0);
  CHECK_RC(sg_limiter_metrics(plain, NULL, &counting), SG_ERR_NULL_ARGUMENT);
  sg_limiter_free(plain);
  sg_quota_free(gcra);
  sg_quota_free(q2);
  sg_quota_free(q);
  sg_limiter_free(l);
  sg_manual_clock_free(c);
}

/* The hook's record: every call's key and flags. */
struct seen {
  int calls;
  char keys[16][16];
  bool shadow[16];
};

static void record(void *user_data, const uint8_t *key, size_t key_len, uint64_t cost,
                   const sg_decision *d) {
  struct seen *s = user_data;
  if (s->calls < 16) {
    size_t n = key_len < 15 ? key_len : 15;
    if (key != NULL) memcpy(s->keys[s->calls], key, n);
    s->keys[s->calls][n] = 0;
    s->shadow[s->calls] = d->shadow_rejected && d->allowed && cost == 1;
  }
  s->calls++;
}

static void test_shadow_and_the_hook(void) {
  sg_manual_clock *c = NULL;
  CHECK_OK(sg_manual_clock_new(0, &c));
  sg_quota *q = quota("3/s; burst=3");
  struct seen seen = {0};
  sg_observe enforce = {.metrics = true, .on_reject = record, .user_data = &seen};
  sg_observe shadow = {.metrics = true, .shadow = true};
  sg_keyed_limiter *e = NULL, *s = NULL;
  CHECK_OK(sg_keyed_limiter_new_observed(q, NULL, 0, SG_ON_FULL_REJECT_NEW_KEYS, c, &enforce, &e));
  CHECK_OK(sg_keyed_limiter_new_observed(q, "memory", 16, SG_ON_FULL_REJECT_NEW_KEYS, c, &shadow, &s));
  bool on = false;
  CHECK_OK(sg_keyed_limiter_is_shadow(s, &on));
  CHECK(on);
  const uint64_t costs[] = {1, 2, 1, 1, 3, 1, 2, 1, 1, 1, 3, 1};
  int rejected = 0;
  for (int i = 0; i < 12; i++) {
    if (i % 4 == 3) CHECK_OK(sg_manual_clock_advance(c, S / 3));
    sg_decision de, ds;
    CHECK_OK(sg_keyed_limiter_try_acquire(e, KEY("k"), costs[i], &de));
    CHECK_OK(sg_keyed_limiter_try_acquire(s, KEY("k"), costs[i], &ds));
    CHECK(ds.allowed);
    CHECK(ds.shadow_rejected == !de.allowed);
    CHECK(!de.shadow_rejected);
    CHECK_U64(ds.remaining, de.remaining);
    CHECK_U64(ds.retry_after_ns, de.retry_after_ns);
    rejected += !de.allowed;
  }
  CHECK(rejected > 0);
  CHECK(seen.calls == rejected); /* once per rejection, with the key */
  CHECK(strcmp(seen.keys[0], "k") == 0);
  sg_metrics me, ms;
  bool counting;
  CHECK_OK(sg_keyed_limiter_metrics(e, &me, &counting));
  CHECK_OK(sg_keyed_limiter_metrics(s, &ms, &counting));
  CHECK_U64(me.rejected, (uint64_t)rejected);
  CHECK_U64(ms.allowed, me.allowed);
  CHECK_U64(ms.rejected, 0);
  CHECK_U64(ms.shadow_rejected, me.rejected);
  CHECK(ms.shadow && !me.shadow && ms.has_keys);
  CHECK_U64(ms.keys, 1);
  /* Shadow mode switched on at runtime: the hook sees the would-be rejection. */
  CHECK_OK(sg_keyed_limiter_set_shadow(e, true));
  sg_decision d;
  int before = seen.calls;
  CHECK_OK(sg_keyed_limiter_try_acquire(e, KEY("zz"), 3, &d));
  CHECK_OK(sg_keyed_limiter_try_acquire(e, KEY("zz"), 1, &d));
  CHECK(d.allowed && d.shadow_rejected);
  CHECK(seen.calls == before + 1);
  CHECK(strcmp(seen.keys[before], "zz") == 0 && seen.shadow[before]);
  /* A single bucket's hook gets no key. */
  struct seen one = {0};
  sg_observe hooked = {.on_reject = record, .user_data = &one};
  sg_limiter *l = NULL;
  sg_quota *q1 = quota("1/s; burst=1");
  CHECK_OK(sg_limiter_new_observed(q1, NULL, c, &hooked, &l));
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK(one.calls == 1 && one.keys[0][0] == 0);
  sg_limiter_free(l);
  sg_quota_free(q1);
  sg_keyed_limiter_free(e);
  sg_keyed_limiter_free(s);
  sg_quota_free(q);
  sg_manual_clock_free(c);
}

static sg_limiter *shared;

static void *hammer(void *arg) {
  (void)arg;
  sg_decision d;
  for (int i = 0; i < 500; i++) {
    if (sg_limiter_try_acquire(shared, 1, &d) != SG_OK) abort();
  }
  return NULL;
}

static void test_counters_are_exact_under_threads(void) {
  sg_quota *q = quota("1000/h; burst=1000");
  sg_observe o = {.metrics = true};
  CHECK_OK(sg_limiter_new_observed(q, NULL, NULL, &o, &shared));
  pthread_t t[8];
  for (int i = 0; i < 8; i++) CHECK(pthread_create(&t[i], NULL, hammer, NULL) == 0);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  sg_metrics m;
  bool counting;
  CHECK_OK(sg_limiter_metrics(shared, &m, &counting));
  CHECK_U64(m.allowed, 1000);
  CHECK_U64(m.rejected, 8 * 500 - 1000);
  sg_limiter_free(shared);
  sg_quota_free(q);
}

static void test_render_prometheus(void) {
  sg_metrics api = {.allowed = 2, .shadow_rejected = 3, .shadow = true};
  sg_metrics users = {.allowed = 2, .rejected = 3, .keys = 2, .has_keys = true};
  sg_label a[] = {{"limiter", "api"}};
  sg_label u[] = {{"limiter", "users"}};
  sg_series series[] = {{a, 1, api}, {u, 1, users}};
  char buf[4096];
  size_t n = 0;
  CHECK_OK(sg_render_prometheus(series, 2, buf, sizeof buf, &n));
  CHECK(n == strlen(buf));
  CHECK(strstr(buf, "# TYPE sluicegate_decisions_total counter\n") != NULL);
  CHECK(strstr(buf, "sluicegate_decisions_total{limiter=\"api\",outcome=\"shadow_rejected\"} 3\n") != NULL);
  CHECK(strstr(buf, "sluicegate_keys{limiter=\"users\"} 2\n") != NULL);
  CHECK(strstr(buf, "sluicegate_keys{limiter=\"api\"}") == NULL);
  CHECK(strstr(buf, "sluicegate_shadow_mode{limiter=\"api\"} 1\n") != NULL);
  char small[64];
  CHECK_RC(sg_render_prometheus(series, 2, small, sizeof small, &n), SG_ERR_BUFFER_TOO_SMALL);
  CHECK_DETAIL("sg_render_prometheus: the text is"); /* not a previous call's detail */
  CHECK_RC(sg_render_prometheus(series, 2, NULL, 100, &n), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("sg_render_prometheus");
  sg_label bad[] = {{"outcome", "x"}};
  sg_series wrong[] = {{bad, 1, api}};
  CHECK_RC(sg_render_prometheus(wrong, 1, buf, sizeof buf, &n), SG_ERR_INVALID_OPTION);
  sg_series twice[] = {{a, 1, api}, {a, 1, users}};
  CHECK_RC(sg_render_prometheus(twice, 2, buf, sizeof buf, &n), SG_ERR_INVALID_OPTION);
  sg_label null_value[] = {{"limiter", NULL}};
  sg_series nulls[] = {{null_value, 1, api}};
  CHECK_RC(sg_render_prometheus(nulls, 1, buf, sizeof buf, &n), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_render_prometheus(NULL, 1, buf, sizeof buf, &n), SG_ERR_NULL_ARGUMENT);
  CHECK_OK(sg_render_prometheus(NULL, 0, buf, sizeof buf, &n));
  /* Counts no array can have: an error, never an allocation that aborts (nothing past the
     first element is read before the count is checked). */
  CHECK_RC(sg_render_prometheus(series, SIZE_MAX, buf, sizeof buf, &n), SG_ERR_INVALID_ARGUMENT);
  sg_series huge_labels[] = {{a, SIZE_MAX / 2, api}};
  CHECK_RC(sg_render_prometheus(huge_labels, 1, buf, sizeof buf, &n), SG_ERR_INVALID_ARGUMENT);
}

static void test_regions_refuse_set_quota(void) {
  char store[600];
  sg_quota *q = quota("10/s");
  sg_quota *q2 = quota("20/s");
  sg_keyed_limiter *k = NULL;
  CHECK_OK(sg_keyed_limiter_new_observed(q, region(store, sizeof store, "ops"), 16,
                                         SG_ON_FULL_REJECT_NEW_KEYS, NULL, NULL, &k));
  CHECK_RC(sg_keyed_limiter_set_quota(k, q2), SG_ERR_STORE_UNSUPPORTED);
  CHECK_RC(sg_keyed_limiter_set_quota_at(k, q2, 0), SG_ERR_STORE_UNSUPPORTED);
  sg_keyed_limiter_free(k);
  sg_limiter *l = NULL;
  CHECK_OK(sg_limiter_new_observed(q, region(store, sizeof store, "ops1"), NULL, NULL, &l));
  CHECK_RC(sg_limiter_set_quota(l, q2), SG_ERR_STORE_UNSUPPORTED);
  sg_limiter_free(l);
  sg_quota_free(q2);
  sg_quota_free(q);
}

int main(void) {
  if (!regions_open()) return 1;
  test_set_quota_carries_tokens();
  test_shadow_and_the_hook();
  test_counters_are_exact_under_threads();
  test_render_prometheus();
  test_regions_refuse_set_quota();
  regions_close();
  TEST_MAIN_END("test_operations");
}
