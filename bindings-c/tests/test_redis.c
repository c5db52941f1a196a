/* The Redis store through the C API, against the redis-server that ci/check.d/40-c.sh starts
 * (its URL in $SG_REDIS_URL, its pid in $SG_REDIS_PID): decisions on the server, every call
 * blocking for one round trip and holding no lock (8 threads on one key admit exactly the
 * burst), composites, the counters, the error codes, each fail policy against a server that
 * is not there, and a paused server (SIGSTOP): a call returns SG_ERR_STORE_TIMEOUT within its
 * timeout. The published library refuses the test clock (`clock=test`).
 *
 * Without $SG_REDIS_URL it checks only what needs no server, and says so (40-c.sh always sets
 * it; under CI=true a missing server fails there). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static char url_buf[512];
static int next_prefix = 0;

/* "$SG_REDIS_URL?prefix=cN&OPTIONS": a key prefix of its own for every limiter, and a timeout
 * of 2 s unless OPTIONS names one (the default 50 ms is short for a first call, which loads
 * the scripts, under valgrind). */
static const char *at(const char *base, const char *options) {
  snprintf(url_buf, sizeof url_buf, "%s?prefix=c%d-%ld%s%s%s", base, next_prefix++,
           (long)getpid(), *options ? "&" : "", options,
           strstr(options, "timeout=") ? "" : "&timeout=2s");
  return url_buf;
}

static sg_quota *quota(const char *rate) {
  sg_quota *q = NULL;
  CHECK_OK(sg_quota_parse(rate, &q));
  return q;
}

static sg_keyed_limiter *keyed(const char *rate, const char *store) {
  sg_quota *q = quota(rate);
  sg_keyed_limiter *k = NULL;
  CHECK_OK(sg_keyed_limiter_new_in_store(q, store, 0, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k));
  sg_quota_free(q);
  return k;
}

static sg_limiter *single(const char *rate, const char *store) {
  sg_quota *q = quota(rate);
  sg_limiter *l = NULL;
  CHECK_OK(sg_limiter_new_in_store(q, store, NULL, &l));
  sg_quota_free(q);
  return l;
}

static sg_decision acquire(const sg_keyed_limiter *k, const char *key, uint64_t cost) {
  sg_decision d = {0};
  CHECK_OK(sg_keyed_limiter_try_acquire(k, (const uint8_t *)key, strlen(key), cost, &d));
  return d;
}

static double since_ms(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static void decisions(const char *base) {
  sg_keyed_limiter *k = keyed("3/minute", at(base, "on_error=error"));
  uint64_t remaining[] = {2, 1, 0};
  for (int i = 0; i < 3; i++) {
    sg_decision d = acquire(k, "alice", 1);
    CHECK(d.allowed);
    CHECK_U64(d.limit, 3);
    CHECK_U64(d.remaining, remaining[i]);
  }
  sg_decision d = acquire(k, "alice", 1);
  CHECK(!d.allowed);
  /* About 20 s (a token of 3/minute), less the time the calls took (slow under valgrind). */
  CHECK(d.retry_after_ns > 15000000000ULL && d.retry_after_ns <= 20000000000ULL);
  CHECK_U64(acquire(k, "bob", 1).remaining, 2); /* a bucket per key */
  CHECK_U64(acquire(k, "bob", 1).remaining, 1);
  CHECK_RC(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"bob", 3, 4, &d),
           SG_ERR_INSUFFICIENT_CAPACITY);
  /* (Not back to full: a full bucket's key expires at once, and `len` below counts keys.) */
  CHECK_OK(sg_keyed_limiter_refund(k, (const uint8_t *)"bob", 3, 1));
  CHECK_OK(sg_keyed_limiter_peek(k, (const uint8_t *)"bob", 3, &d));
  CHECK_U64(d.remaining, 2);
  bool existed = false;
  CHECK_OK(sg_keyed_limiter_remove(k, (const uint8_t *)"alice", 5, &existed));
  CHECK(existed);
  CHECK_U64(acquire(k, "alice", 1).remaining, 2); /* a fresh bucket */
  uint64_t len = 0;
  CHECK_OK(sg_keyed_limiter_len(k, &len));
  CHECK_U64(len, 2);
  CHECK_OK(sg_keyed_limiter_clear(k));
  CHECK_OK(sg_keyed_limiter_len(k, &len));
  CHECK_U64(len, 0);

  sg_redis_stats s;
  memset(&s, 0xff, sizeof s);
  CHECK_OK(sg_keyed_limiter_redis_stats(k, &s));
  CHECK(s.decided >= 7);
  CHECK_U64(s.failed_error, 0);
  CHECK(s.connects >= 1);
  CHECK_U64(s.redirects, 0); /* one server: nothing redirected (and the field is written) */
  CHECK_RC(sg_keyed_limiter_redis_stats(k, NULL), SG_ERR_NULL_ARGUMENT);
  sg_keyed_limiter_free(k);
}

static void composite(const char *base) {
  sg_limiter *per_user = single("2/minute", at(base, ""));
  sg_limiter *global = single("5/minute", at(base, ""));
  const sg_limiter *parts[] = {per_user, global};
  sg_decision d;
  CHECK_OK(sg_composite_try_acquire(parts, 2, 1, &d));
  CHECK(d.allowed && d.remaining == 1);
  CHECK_OK(sg_composite_try_acquire(parts, 2, 1, &d));
  CHECK(d.allowed && d.remaining == 0);
  CHECK_OK(sg_composite_try_acquire(parts, 2, 1, &d));
  CHECK(!d.allowed);
  CHECK_OK(sg_limiter_peek(global, &d));
  CHECK_U64(d.remaining, 3); /* all or nothing: the rejection took nothing from `global` */
  sg_redis_stats s;
  CHECK_OK(sg_limiter_redis_stats(per_user, &s));
  CHECK(s.decided >= 4);
  sg_limiter_free(per_user);
  sg_limiter_free(global);
}

typedef struct {
  const sg_keyed_limiter *k;
  int admitted;
  sg_result error;
} worker;

static void *hammer(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 50; i++) {
    sg_decision d;
    sg_result rc = sg_keyed_limiter_try_acquire(w->k, (const uint8_t *)"hot", 3, 1, &d);
    if (rc != SG_OK) {
      w->error = rc;
      return NULL;
    }
    w->admitted += d.allowed;
  }
  return NULL;
}

/* 8 threads, 400 requests on one key of a 100/hour limit: exactly 100 admitted. The calls
 * block concurrently (no lock is held while one waits), pipelined on one connection. */
static void threads(const char *base) {
  sg_keyed_limiter *k = keyed("100/hour", at(base, "on_error=error&negative_cache=off"));
  worker w[8];
  pthread_t t[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (worker){.k = k};
    CHECK(pthread_create(&t[i], NULL, hammer, &w[i]) == 0);
  }
  int admitted = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    CHECK_RC(w[i].error, SG_OK);
    admitted += w[i].admitted;
  }
  CHECK_U64(admitted, 100);
  sg_keyed_limiter_free(k);
}

/* Every policy against a port where no server listens: `error` returns the store's error,
 * the others decide (`open` admits, `closed` rejects for a second, `local` in process). */
static void fail_policies(void) {
  const char *dead = "redis://127.0.0.1:1/0";
  sg_decision d;
  sg_keyed_limiter *error = keyed("2/minute", at(dead, "on_error=error&timeout=20ms"));
  CHECK_RC(sg_keyed_limiter_try_acquire(error, (const uint8_t *)"a", 1, 1, &d),
           SG_ERR_STORE_UNAVAILABLE);
  CHECK_DETAIL("redis://127.0.0.1:1/0");
  /* The count of a store that cannot be asked is an error, not 0 keys. */
  uint64_t len = 7;
  CHECK_RC(sg_keyed_limiter_len(error, &len), SG_ERR_STORE_UNAVAILABLE);
  CHECK_U64(len, 7);
  sg_keyed_limiter *open = keyed("2/minute", at(dead, "on_error=open&timeout=20ms"));
  for (int i = 0; i < 3; i++) CHECK(acquire(open, "a", 1).allowed);
  sg_keyed_limiter *closed = keyed("2/minute", at(dead, "on_error=closed&timeout=20ms"));
  d = acquire(closed, "a", 1);
  CHECK(!d.allowed);
  CHECK_U64(d.retry_after_ns, 1000000000);
  sg_keyed_limiter *local = keyed("2/minute", at(dead, "on_error=local&timeout=20ms"));
  CHECK(acquire(local, "a", 1).allowed);
  CHECK(acquire(local, "a", 1).allowed);
  CHECK(!acquire(local, "a", 1).allowed);
  sg_redis_stats s;
  CHECK_OK(sg_keyed_limiter_redis_stats(error, &s));
  CHECK(s.failed_error >= 1);
  CHECK(s.failed_open >= 3 && s.failed_closed >= 1 && s.failed_local >= 3);
  sg_keyed_limiter_free(error);
  sg_keyed_limiter_free(open);
  sg_keyed_limiter_free(closed);
  sg_keyed_limiter_free(local);
}

/* SIGSTOP: the call in flight returns SG_ERR_STORE_TIMEOUT after about the timeout, never
 * hangs; after SIGCONT the server decides again (bounded retries over the reconnection). */
static void paused(const char *base, pid_t pid) {
  sg_keyed_limiter *k = keyed("100/s", at(base, "on_error=error&timeout=500ms"));
  CHECK(acquire(k, "warm", 1).allowed);
  CHECK(kill(pid, SIGSTOP) == 0);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  sg_decision d;
  CHECK_RC(sg_keyed_limiter_try_acquire(k, (const uint8_t *)"x", 1, 1, &d), SG_ERR_STORE_TIMEOUT);
  double waited = since_ms(&t0);
  CHECK(waited >= 450 && waited < 5000);
  CHECK(kill(pid, SIGCONT) == 0);
  sg_result rc = SG_ERR_STORE_UNAVAILABLE;
  for (int i = 0; i < 200 && rc != SG_OK; i++) {
    struct timespec ms50 = {0, 50000000L};
    nanosleep(&ms50, NULL);
    rc = sg_keyed_limiter_try_acquire(k, (const uint8_t *)"after", 5, 1, &d);
  }
  CHECK_RC(rc, SG_OK);
  sg_redis_stats s;
  CHECK_OK(sg_keyed_limiter_redis_stats(k, &s));
  CHECK(s.timeouts >= 1 && s.connects >= 2);
  sg_keyed_limiter_free(k);
}

/* What needs no server: bad strings, the test clock refused, stats of other stores. */
static void offline(void) {
  sg_quota *q = quota("1/s");
  sg_keyed_limiter *k = NULL;
  sg_limiter *l = NULL;
  const char *bad[] = {"redis://127.0.0.1:6379/0?bogus=1", "redis://127.0.0.1:6379/0?on_error=x",
                       "redis://", "postgres://127.0.0.1/0"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_RC(sg_keyed_limiter_new_in_store(q, bad[i], 0, SG_ON_FULL_REJECT_NEW_KEYS, NULL, &k),
             SG_ERR_INVALID_OPTION);
    CHECK_RC(sg_limiter_new_in_store(q, bad[i], NULL, &l), SG_ERR_INVALID_OPTION);
  }
  CHECK(k == NULL && l == NULL);
  /* rediss:// is built in (rustls): the store is made; nothing listens on port 1. */
  sg_keyed_limiter *tls = keyed("1/s", "rediss://127.0.0.1:1/0?on_error=error&timeout=20ms");
  sg_decision d;
  CHECK_RC(sg_keyed_limiter_try_acquire(tls, (const uint8_t *)"a", 1, 1, &d),
           SG_ERR_STORE_UNAVAILABLE);
  sg_keyed_limiter_free(tls);
  /* The published library never sends client timestamps. */
  CHECK_RC(sg_limiter_new_in_store(q, "redis://127.0.0.1:1/0?clock=test", NULL, &l),
           SG_ERR_STORE_UNSUPPORTED);
  sg_redis_stats s;
  CHECK_OK(sg_limiter_new(q, &l));
  CHECK_RC(sg_limiter_redis_stats(l, &s), SG_ERR_STORE_UNSUPPORTED);
  CHECK_RC(sg_limiter_redis_stats(NULL, &s), SG_ERR_NULL_ARGUMENT);
  CHECK_RC(sg_keyed_limiter_redis_stats((const sg_keyed_limiter *)l, &s), SG_ERR_WRONG_HANDLE);
  sg_limiter_free(l);
  sg_quota_free(q);
}

/* A child made by fork() after its parent opened a Redis store: an inherited limiter opens
 * connections of its own at its first call there, and decides on the server's buckets as the
 * parent does (the parent's "P" stays spent; a pooled connection shared with the parent would
 * read the parent's replies, a rejection taken for an admission); a new Redis limiter opens
 * too. It hung before (waiting for the parent's Redis thread, which the child does not have),
 * and then was refused. The parent's limiter goes on deciding, and sees the child's "C". */
static void forked_child(const char *base) {
  sg_keyed_limiter *k = keyed("1/minute", at(base, "on_error=error&connections=1"));
  CHECK(acquire(k, "P", 1).allowed);
  int result[2];
  CHECK(pipe(result) == 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    /* The verdict goes through the pipe: under valgrind the child's exit status is valgrind's
     * (the parent's Redis thread, absent here, held memory it now reports lost). */
    close(result[0]);
    alarm(10); /* a hang is a failure, not a stuck suite */
    sg_decision d = {0};
    int bad = sg_keyed_limiter_try_acquire(k, (const uint8_t *)"P", 1, 1, &d) != SG_OK || d.allowed;
    bad |= sg_keyed_limiter_try_acquire(k, (const uint8_t *)"C", 1, 1, &d) != SG_OK || !d.allowed;
    bad |= sg_keyed_limiter_try_acquire(k, (const uint8_t *)"C", 1, 1, &d) != SG_OK || d.allowed;
    sg_quota *q = NULL;
    sg_keyed_limiter *fresh = NULL;
    bad |= sg_quota_parse("1/minute", &q) != SG_OK;
    bad |= sg_keyed_limiter_new_in_store(q, at(base, "on_error=error"), 0, SG_ON_FULL_REJECT_NEW_KEYS, NULL,
                                         &fresh) != SG_OK;
    if (fresh != NULL) {
      /* (its own prefix: at() gives each limiter one) */
      bad |= sg_keyed_limiter_try_acquire(fresh, (const uint8_t *)"F", 1, 1, &d) != SG_OK || !d.allowed;
      bad |= sg_keyed_limiter_try_acquire(fresh, (const uint8_t *)"F", 1, 1, &d) != SG_OK || d.allowed;
    }
    const char *verdict = bad ? "bad" : "ok";
    _exit(write(result[1], verdict, strlen(verdict)) == (ssize_t)strlen(verdict) ? 0 : 1);
  }
  close(result[1]);
  CHECK(pid > 0);
  char got[8] = {0};
  ssize_t r = read(result[0], got, sizeof got - 1);
  close(result[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(r == 2 && strcmp(got, "ok") == 0); /* "bad", or nothing from a child killed by its alarm */
  CHECK(!acquire(k, "P", 1).allowed);
  CHECK(!acquire(k, "C", 1).allowed);
  CHECK(acquire(k, "Q", 1).allowed);
  sg_keyed_limiter_free(k);
}

int main(void) {
  const char *base = getenv("SG_REDIS_URL");
  const char *pid = getenv("SG_REDIS_PID");
  offline();
  if (base == NULL || *base == '\0') {
    printf("test_redis: no $SG_REDIS_URL: only the checks that need no server ran\n");
  } else {
    decisions(base);
    composite(base);
    threads(base);
    fail_policies();
    forked_child(base);
    if (pid != NULL && *pid != '\0') paused(base, (pid_t)atol(pid));
  }
  TEST_MAIN_END("test_redis");
}
