/* Pre-forked workers that share one limit: the parent forks 4 workers, each opens the same
 * shared-memory region and handles its share of 200 requests from one client under
 * 10/minute. The host admits 10 in total (in memory, each worker would admit 10).
 * Run: ./prefork [shm:/api-limits | redis://HOST:6379/0?prefix=api]   (default: a region
 * in a temporary directory, removed). Each worker opens the store after fork(); a limiter
 * opened before it would work as well (a region is shared, Redis connections reopened).
 * Build: cc -std=c11 prefork.c $(pkg-config --cflags --libs sluicegate) */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluicegate.h"

#define WORKERS 4
#define REQUESTS 200

static int report(const char *what) {
  char why[256];
  sg_last_error_message(why, sizeof why, NULL);
  fprintf(stderr, "%s: %s\n", what, why);
  return -1;
}

/* One worker: its own handle on the host's region, and every WORKERS-th request. Returns
 * how many it admitted. */
static int worker(int w, const char *store) {
  const uint8_t *client = (const uint8_t *)"192.0.2.1";
  size_t client_len = 9;
  sg_quota *quota = NULL;
  sg_decision d;
  int admitted = 0;
  if (sg_quota_parse("10/minute", &quota) != SG_OK) return report("sg_quota_parse");
  sg_keyed_limiter *per_client = NULL;
  if (sg_keyed_limiter_new_in_store(quota, store, 100000, SG_ON_FULL_REJECT_NEW_KEYS, NULL,
                                    &per_client) != SG_OK)
    return report("sg_keyed_limiter_new_in_store"); /* e.g. store_mismatch: another quota */
  for (int i = w; i < REQUESTS; i += WORKERS) {
    if (sg_keyed_limiter_try_acquire(per_client, client, client_len, 1, &d) != SG_OK)
      return report("sg_keyed_limiter_try_acquire");
    admitted += d.allowed; /* a real server answers 429 with Retry-After otherwise */
  }
  sg_keyed_limiter_free(per_client);
  sg_quota_free(quota);
  return admitted;
}

int main(int argc, char **argv) {
  char dir[] = "/tmp/sluicegate-prefork-XXXXXX", temporary[64];
  const char *store = argc > 1 ? argv[1] : NULL;
  if (store == NULL) {
    if (mkdtemp(dir) == NULL) return perror("mkdtemp"), 1;
    snprintf(temporary, sizeof temporary, "shm:%s/limits", dir);
    store = temporary;
  }

  pid_t pids[WORKERS];
  fflush(stdout);
  for (int w = 0; w < WORKERS; w++) {
    pids[w] = fork();
    if (pids[w] == 0) _exit(worker(w, store) & 0xff); /* the worker's count, as its status */
    if (pids[w] < 0) return perror("fork"), 1;
  }
  int total = 0, failed = 0;
  for (int w = 0; w < WORKERS; w++) {
    int status = 0;
    waitpid(pids[w], &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) <= REQUESTS / WORKERS)
      total += WEXITSTATUS(status);
    else
      failed++;
  }
  printf("%d workers on %s: %d of %d requests admitted\n", WORKERS, store, total, REQUESTS);

  if (store == temporary) {
    unlink(temporary + 4);
    rmdir(dir);
  }
  return failed == 0 && total == 10 ? 0 : 1;
}
