/* The shared-memory store through the C API (sg_limiter_new_in_store,
 * sg_keyed_limiter_new_in_store): processes made with fork() on one region admit exactly the
 * burst between them (each opening the region itself, or using a limiter made before the
 * fork), where the memory store admits the burst in each; the store strings; the store
 * errors (mismatch, permission, unsupported, unavailable, corrupt), each leaving the
 * out-parameter alone; and every keyed call on a region. Regions live in a temporary
 * directory, removed at the end. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "check.h"
#include "regions.h"

#define WORKERS 4

static sg_quota *quota(const char *rate) {
  sg_quota *q = NULL;
  CHECK_OK(sg_quota_parse(rate, &q));
  return q;
}

/* ------------------------------------------------------------------ processes */

/* What one worker process saw. */
typedef struct {
  uint64_t admitted, denied, errors;
} tally;

typedef void (*work_fn)(const void *arg, tally *t);

static bool read_full(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, (char *)buf + got, len - got);
    if (n <= 0) return false;
    got += (size_t)n;
  }
  return true;
}

/* Forks `n` workers that wait at a gate, then run `work(arg)` all at once, each in its own
 * process, and send their tallies back through a pipe each. Sums them into `*sum`; false
 * if a worker could not be started, failed or did not report. */
static bool in_workers(int n, work_fn work, const void *arg, tally *sum) {
  int gate[2];
  pid_t pids[WORKERS];
  int from[WORKERS];
  if (n > WORKERS || pipe(gate) != 0) return false;
  fflush(stdout);
  fflush(stderr);
  int started = 0;
  for (; started < n; started++) {
    int p[2];
    if (pipe(p) != 0) break;
    pid_t pid = fork();
    if (pid < 0) {
      close(p[0]);
      close(p[1]);
      break;
    }
    if (pid == 0) {
      close(gate[1]);
      close(p[0]);
      char c;
      while (read(gate[0], &c, 1) > 0) {
      } /* end of file: the gate is open */
      tally t = {0, 0, 0};
      work(arg, &t);
      bool sent = write(p[1], &t, sizeof t) == (ssize_t)sizeof t;
      _exit(sent ? 0 : 1);
    }
    close(p[1]);
    pids[started] = pid;
    from[started] = p[0];
  }
  close(gate[0]);
  close(gate[1]); /* every worker starts now */
  bool ok = started == n;
  for (int i = 0; i < started; i++) {
    tally t = {0, 0, 0};
    bool got = read_full(from[i], &t, sizeof t);
    close(from[i]);
    int status = 0;
    bool exited = waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0;
    ok = ok && got && exited;
    sum->admitted += t.admitted;
    sum->denied += t.denied;
    sum->errors += t.errors;
  }
  return ok;
}

#define REQUESTS 50 /* per worker */

static void count(sg_result rc, const sg_decision *d, tally *t) {
  if (rc != SG_OK) t->errors++;
  else if (d->allowed) t->admitted++;
  else t->denied++;
}

/* A worker that opens the region itself (each nginx or gunicorn worker after the fork). */
static void keyed_worker(const void *store, tally *t) {
  sg_quota *q = NULL;
  sg_keyed_limiter *k = NULL;
  sg_decision d;
  if (sg_quota_parse("10/hour", &q) == SG_OK &&
      sg_keyed_limiter_new_in_store(q, store, 64, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k) ==
          SG_OK) {
    for (int i = 0; i < REQUESTS; i++)
      count(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"alice", 5, 1, &d), &d, t);
  } else {
    t->errors++;
  }
  sg_keyed_limiter_free(k);
  sg_quota_free(q);
}

/* A worker using a limiter its parent made before the fork. */
static void inherited_worker(const void *limiter, tally *t) {
  sg_decision d;
  for (int i = 0; i < REQUESTS; i++) count(sg_limiter_try_acquire(limiter, 1, &d), &d, t);
}

static void test_workers_share_a_region(void) {
  char store[600];
  region(store, sizeof store, "workers");
  tally sum = {0, 0, 0};
  CHECK(in_workers(WORKERS, keyed_worker, store, &sum));
  /* 10/hour: the 200 requests of four processes for one key admit the burst, exactly. */
  CHECK_U64(sum.admitted, 10);
  CHECK_U64(sum.denied, WORKERS * REQUESTS - 10);
  CHECK_U64(sum.errors, 0);

  /* This process opens the same region (max_keys 0: the region's capacity) and sees it. */
  sg_quota *q = quota("10/hour");
  sg_keyed_limiter *k = NULL;
  sg_decision d;
  uint64_t n = 0;
  CHECK_OK(sg_keyed_limiter_new_in_store(q, store, 0, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k));
  CHECK_OK(sg_keyed_limiter_peek(k, (const uint8_t *)"alice", 5, &d));
  CHECK_U64(d.remaining, 0);
  CHECK_OK(sg_keyed_limiter_len(k, &n));
  CHECK_U64(n, 1);
  sg_keyed_limiter_free(k);
  sg_quota_free(q);
}

static void test_a_limiter_made_before_fork(void) {
  char store[600];
  sg_quota *q = quota("5/hour");
  sg_limiter *shared = NULL, *memory = NULL;
  sg_decision d;
  CHECK_OK(sg_limiter_new_in_store(q, region(store, sizeof store, "single"), NULL, &shared));
  CHECK_OK(sg_limiter_new_in_store(q, "memory", NULL, &memory));
  tally on_region = {0, 0, 0}, in_memory = {0, 0, 0};
  CHECK(in_workers(WORKERS, inherited_worker, shared, &on_region));
  CHECK(in_workers(WORKERS, inherited_worker, memory, &in_memory));
  /* The region's mapping is shared by the children: the burst in total. */
  CHECK_U64(on_region.admitted, 5);
  CHECK_U64(on_region.errors, 0);
  CHECK_OK(sg_limiter_peek(shared, &d));
  CHECK_U64(d.remaining, 0);
  /* The memory store is copied into each child: the burst in each. */
  CHECK_U64(in_memory.admitted, WORKERS * 5);
  CHECK_U64(in_memory.errors, 0);
  CHECK_OK(sg_limiter_peek(memory, &d));
  CHECK_U64(d.remaining, 5);
  sg_limiter_free(shared);
  sg_limiter_free(memory);
  sg_quota_free(q);
}

/* ------------------------------------------------------------------ store strings */

static void test_store_strings(void) {
  sg_quota *q = quota("2/s");
  sg_manual_clock *clock = NULL;
  CHECK_OK(sg_manual_clock_new(0, &clock));
  sg_limiter *l = NULL;
  sg_keyed_limiter *k = NULL;
  sg_decision d;

  /* "memory" is the in-process store of sg_limiter_new (any case, spaces around it). */
  CHECK_OK(sg_limiter_new_in_store(q, "memory", clock, &l));
  CHECK_OK(sg_limiter_try_acquire(l, 2, &d));
  CHECK(d.allowed);
  sg_limiter_free(l);
  l = NULL;
  CHECK_OK(sg_keyed_limiter_new_in_store(q, " Memory ", 0, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k));
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"a", 1, 1, &d));
  CHECK(d.allowed);
  sg_keyed_limiter_free(k);
  k = NULL;

  static const char *bad[] = {"",        "redis",           "shm:",
                              "shm:?capacity=3", "shm:/x?capacity=0", "shm:/x?cap=3",
                              "shm:/x?capacity=1&capacity=2",  "\xff\xfememory"};
  sg_limiter *sentinel = (sg_limiter *)&bad; /* any non-NULL value: it must stay */
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    l = sentinel;
    CHECK_RC(sg_limiter_new_in_store(q, bad[i], NULL, &l), SG_ERR_INVALID_OPTION);
    CHECK_DETAIL("store");
    CHECK(l == sentinel);
    CHECK_RC(sg_keyed_limiter_new_in_store(q, bad[i], 8, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k),
             SG_ERR_INVALID_OPTION);
    CHECK(k == NULL);
  }
  CHECK_RC(sg_limiter_new_in_store(q, "redis", NULL, &l), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("\"memory\", \"shm:NAME[?capacity=N]\" or a Redis URL");
  CHECK_RC(sg_limiter_new_in_store(q, "\xff", NULL, &l), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("not UTF-8");
  CHECK(strcmp(sg_result_name(SG_ERR_INVALID_OPTION), "invalid_option") == 0);

  /* NULL and wrong-kind arguments, in the order quota, clock, out, store. */
  l = sentinel;
  CHECK_RC(sg_limiter_new_in_store(q, NULL, NULL, &l), SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("sg_limiter_new_in_store: `store` is NULL");
  CHECK_RC(sg_limiter_new_in_store(NULL, "memory", NULL, &l), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_new_in_store(q, "memory", NULL, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_limiter_new_in_store(q, "memory", (const sg_manual_clock *)(const void *)q, &l),
           SG_ERR_WRONG_HANDLE);
  CHECK_RC(sg_limiter_new_in_store((const sg_quota *)(const void *)clock, "memory", NULL, &l),
           SG_ERR_WRONG_HANDLE);
  CHECK(l == sentinel);
  CHECK_RC(sg_keyed_limiter_new_in_store(q, NULL, 8, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k),
           SG_ERR_NULL_ARGUMENT);
  CHECK_DETAIL("sg_keyed_limiter_new_in_store: `store` is NULL");
  CHECK_RC(sg_keyed_limiter_new_in_store(q, "memory", 8, 7, NULL, &k), SG_ERR_INVALID_OPTION);
  CHECK_DETAIL("on_full");
  CHECK_RC(sg_keyed_limiter_new_in_store(NULL, "memory", 8, 0, NULL, &k), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_new_in_store(q, "memory", 8, 0, NULL, NULL), SG_ERR_NULL_ARGUMENT);
  CHECK(k == NULL);

  sg_manual_clock_free(clock);
  sg_quota_free(q);
}

/* ------------------------------------------------------------------ store errors */

static bool exists(const char *store) {
  struct stat st;
  return lstat(store + 4, &st) == 0;
}

static void test_store_errors(void) {
  char store[600], other[600];
  sg_quota *q10 = quota("10/hour"), *q20 = quota("20/hour");
  sg_keyed_limiter *made = NULL, *k = NULL;
  sg_limiter *l = NULL;
  sg_keyed_limiter *sentinel = (sg_keyed_limiter *)&made;
  region(store, sizeof store, "errors");
  CHECK_OK(sg_keyed_limiter_new_in_store(q10, store, 3, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &made));

  /* Another quota, another capacity, a single limiter on a keyed region: mismatch, naming
   * both sides. */
  k = sentinel;
  CHECK_RC(sg_keyed_limiter_new_in_store(q20, store, 0, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k),
           SG_ERR_STORE_MISMATCH);
  CHECK_DETAIL("10/h");
  CHECK_DETAIL("20/h");
  CHECK(k == sentinel);
  CHECK_RC(sg_keyed_limiter_new_in_store(q10, store, 7, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k),
           SG_ERR_STORE_MISMATCH);
  CHECK(k == sentinel);
  CHECK_RC(sg_limiter_new_in_store(q10, store, NULL, &l), SG_ERR_STORE_MISMATCH);
  CHECK_DETAIL("what a single-bucket limiter asks for");
  CHECK(l == NULL);
  CHECK(strcmp(sg_result_name(SG_ERR_STORE_MISMATCH), "store_mismatch") == 0);

  /* max_keys 0 takes the region's capacity (3), and so does the region's own bound. */
  k = NULL;
  CHECK_OK(sg_keyed_limiter_new_in_store(q10, store, 0, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k));
  sg_decision d;
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"a", 1, 1, &d));
  CHECK_OK(sg_keyed_limiter_try_acquire(made, (const uint8_t *)"b", 1, 1, &d));
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"c", 1, 1, &d));
  sg_decision kept = d;
  CHECK_RC(sg_keyed_limiter_try_acquire(made, (const uint8_t *)"d", 1, 1, &d),
           SG_ERR_KEY_STORE_FULL);
  CHECK(d.allowed == kept.allowed && d.remaining == kept.remaining &&
        d.retry_after_ns == kept.retry_after_ns); /* left alone */
  sg_keyed_limiter_free(k);

  /* A region open to other users (0644) is refused; at 0600 again it opens. */
  CHECK(chmod(store + 4, 0644) == 0);
  k = sentinel;
  CHECK_RC(sg_keyed_limiter_new_in_store(q10, store, 3, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k),
           SG_ERR_STORE_PERMISSION);
  CHECK_DETAIL("600");
  CHECK(k == sentinel);
  CHECK(chmod(store + 4, 0600) == 0);
  k = NULL;
  CHECK_OK(sg_keyed_limiter_new_in_store(q10, store, 3, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k));
  sg_keyed_limiter_free(k);
  k = sentinel;
  /* A symbolic link to it is refused too. */
  region(other, sizeof other, "link");
  CHECK(symlink(store + 4, other + 4) == 0);
  CHECK_RC(sg_keyed_limiter_new_in_store(q10, other, 3, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k),
           SG_ERR_STORE_PERMISSION);
  CHECK(k == sentinel);
  unlink(other + 4);
  CHECK(strcmp(sg_result_name(SG_ERR_STORE_PERMISSION), "store_permission") == 0);

  /* A sliding log is not kept in a region (nor is a quota whose exact state outgrows a
   * slot's 96 bits within a century): unsupported, and nothing is created. */
  sg_quota *log = quota("10/s; algorithm=sliding_log"),
           *odd = quota("281474976710655/s; algorithm=sliding_window");
  region(other, sizeof other, "unsupported");
  CHECK_RC(sg_keyed_limiter_new_in_store(log, other, 8, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k),
           SG_ERR_STORE_UNSUPPORTED);
  CHECK_DETAIL("sliding");
  CHECK_RC(sg_limiter_new_in_store(log, other, NULL, &l), SG_ERR_STORE_UNSUPPORTED);
  CHECK_RC(sg_limiter_new_in_store(odd, other, NULL, &l), SG_ERR_STORE_UNSUPPORTED);
  CHECK(k == sentinel && l == NULL);
  CHECK(!exists(other));
  CHECK(strcmp(sg_result_name(SG_ERR_STORE_UNSUPPORTED), "store_unsupported") == 0);
  /* In memory both are fine. */
  CHECK_OK(sg_limiter_new_in_store(log, "memory", NULL, &l));
  sg_limiter_free(l);
  l = NULL;
  sg_quota_free(log);
  sg_quota_free(odd);

  /* A directory that does not exist: unavailable. */
  snprintf(other, sizeof other, "shm:%s/no-such-directory/region", sg_regions_dir);
  CHECK_RC(sg_limiter_new_in_store(q10, other, NULL, &l), SG_ERR_STORE_UNAVAILABLE);
  CHECK(l == NULL);

  /* A region whose header was overwritten (its magic number, the first 8 bytes): corrupt. */
  sg_quota *q5 = quota("5/s");
  region(other, sizeof other, "overwritten");
  CHECK_OK(sg_limiter_new_in_store(q5, other, NULL, &l));
  sg_limiter_free(l);
  l = NULL;
  int fd = open(other + 4, O_WRONLY);
  CHECK(fd >= 0);
  if (fd >= 0) {
    CHECK(write(fd, "garbage!", 8) == 8);
    close(fd);
  }
  CHECK_RC(sg_limiter_new_in_store(q5, other, NULL, &l), SG_ERR_STORE_CORRUPT);
  CHECK_DETAIL("magic");
  CHECK(l == NULL);
  CHECK(strcmp(sg_result_name(SG_ERR_STORE_CORRUPT), "store_corrupt") == 0);
  unlink(other + 4);
  sg_quota_free(q5);

  sg_keyed_limiter_free(made);
  unlink(store + 4);
  sg_quota_free(q10);
  sg_quota_free(q20);
}

/* ------------------------------------------------------------------ every call on a region */

#define S 1000000000ULL
#define KEY(s) (const uint8_t *)(s), (sizeof(s) - 1)

static void test_keyed_calls_on_a_region(void) {
  char store[600];
  region(store, sizeof store, "calls");
  sg_quota *q = quota("2/s");
  sg_manual_clock *clock = NULL;
  sg_keyed_limiter *a = NULL, *b = NULL;
  sg_decision d;
  uint64_t n = 0, now = 0;
  bool removed = false;
  CHECK_OK(sg_manual_clock_new(5 * S, &clock));
  CHECK_OK(sg_keyed_limiter_new_in_store(q, store, 16, SG_ON_FULL_REJECT_NEW_KEYS, clock, &a));
  CHECK_OK(sg_keyed_limiter_new_in_store(q, store, 16, SG_ON_FULL_REJECT_NEW_KEYS, clock, &b));

  /* Two handles on one region share its buckets. */
  CHECK_OK(sg_keyed_limiter_try_acquire(a, KEY("alice"), 2, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_keyed_limiter_try_acquire(b, KEY("alice"), 1, &d));
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, S / 2);
  CHECK_OK(sg_keyed_limiter_acquire_timeout(b, KEY("alice"), 1, 0, &d));
  CHECK(!d.allowed);
  CHECK_OK(sg_keyed_limiter_refund(b, KEY("alice"), 1));
  CHECK_OK(sg_keyed_limiter_peek(a, KEY("alice"), &d));
  CHECK_U64(d.remaining, 1);
  CHECK_OK(sg_keyed_limiter_now(a, &now));
  CHECK_U64(now, 5 * S);
  CHECK_OK(sg_keyed_limiter_try_acquire_at(a, KEY("alice"), now, 1, &d));
  CHECK(d.allowed);
  CHECK_U64(d.remaining, 0);
  CHECK_OK(sg_keyed_limiter_refund_at(b, KEY("alice"), now, 1));

  /* The key rule: the id 42 is the bytes "42" in every process and language. */
  char id[24];
  int len = snprintf(id, sizeof id, "%" PRId64, (int64_t)42);
  CHECK_OK(sg_keyed_limiter_try_acquire(a, (const uint8_t *)id, (size_t)len, 2, &d));
  CHECK_OK(sg_keyed_limiter_peek(b, KEY("42"), &d));
  CHECK_U64(d.remaining, 0);
  CHECK_OK(sg_keyed_limiter_len(b, &n));
  CHECK_U64(n, 2);

  CHECK_OK(sg_keyed_limiter_remove(b, KEY("42"), &removed));
  CHECK(removed);
  CHECK_OK(sg_keyed_limiter_remove(a, KEY("42"), &removed));
  CHECK(!removed);
  CHECK_OK(sg_keyed_limiter_try_acquire(a, KEY("bob"), 1, &d));
  CHECK_OK(sg_keyed_limiter_sweep(b, &n));
  CHECK_U64(n, 0);
  CHECK_OK(sg_manual_clock_advance(clock, S));
  CHECK_OK(sg_keyed_limiter_sweep(b, &n)); /* every bucket is full again */
  CHECK_U64(n, 2);
  CHECK_OK(sg_keyed_limiter_try_acquire(a, KEY("carol"), 1, &d));
  CHECK_OK(sg_keyed_limiter_clear(b));
  CHECK_OK(sg_keyed_limiter_len(a, &n));
  CHECK_U64(n, 0);

  /* A single limiter on a region: the same calls as in memory. (Not yet sg_limiter_reserve
   * and sg_limiter_acquire_timeout: the core's Limiter::reserve_within_at does not reach a
   * region's bucket, and panics, which the panic guard returns as SG_ERR_PANIC.) */
  sg_limiter *l = NULL;
  region(store, sizeof store, "calls-single");
  CHECK_OK(sg_limiter_new_in_store(q, store, clock, &l));
  CHECK_OK(sg_limiter_try_acquire(l, 2, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_limiter_try_acquire(l, 1, &d));
  CHECK(!d.allowed);
  CHECK_OK(sg_limiter_cancel(l, 1));
  CHECK_OK(sg_limiter_peek(l, &d));
  CHECK_U64(d.remaining, 1);
  const sg_limiter *parts[] = {l};
  CHECK_OK(sg_composite_try_acquire(parts, 1, 1, &d));
  CHECK(d.allowed);
  CHECK_OK(sg_composite_refund(parts, 1, 1));
  CHECK_OK(sg_limiter_now(l, &now));
  CHECK_U64(now, 6 * S);
  sg_limiter_free(l);

  sg_keyed_limiter_free(a);
  sg_keyed_limiter_free(b);
  sg_manual_clock_free(clock);
  sg_quota_free(q);
}

int main(void) {
  if (!regions_open()) {
    sg_checks_failed++;
    TEST_MAIN_END("test_shm");
  }
  test_store_strings();
  test_store_errors();
  test_keyed_calls_on_a_region();
  test_workers_share_a_region();
  test_a_limiter_made_before_fork();
  regions_close();
  TEST_MAIN_END("test_shm");
}
