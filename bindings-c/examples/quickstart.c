/* The README's C quickstart: one allowed and one denied call, on a manual clock so the
 * figures are exact. Build: cc -std=c11 quickstart.c $(pkg-config --cflags --libs sluicegate) */
#include <inttypes.h>
#include <stdio.h>

#include "sluicegate.h"

int main(void) {
  sg_quota *quota = NULL;
  sg_manual_clock *clock = NULL;
  sg_limiter *limiter = NULL;
  sg_decision d;
  char why[256];

  /* A bad rate string is an error with a detail that points at the offending text. */
  if (sg_quota_parse("10/fortnight", &quota) == SG_ERR_PARSE) {
    sg_last_error_message(why, sizeof why, NULL);
    printf("rejected: %s\n", why);
  }

  if (sg_quota_parse("10/s; burst=2", &quota) != SG_OK ||
      sg_manual_clock_new(0, &clock) != SG_OK ||
      sg_limiter_new_with_clock(quota, clock, &limiter) != SG_OK) {
    sg_last_error_message(why, sizeof why, NULL);
    fprintf(stderr, "setup failed: %s\n", why);
    return 1;
  }

  for (int i = 1; i <= 3; i++) {
    sg_result rc = sg_limiter_try_acquire(limiter, 1, &d); /* cost 1 */
    if (rc != SG_OK) {
      fprintf(stderr, "error: %s\n", sg_result_name(rc));
      return 1;
    }
    printf("request %d: %s, remaining %" PRIu64 ", retry after %" PRIu64 " ns\n", i,
           d.allowed ? "allowed" : "denied", d.remaining, d.retry_after_ns);
  }

  sg_manual_clock_advance(clock, d.retry_after_ns); /* wait exactly as long as told */
  sg_limiter_try_acquire(limiter, 1, &d);
  printf("after the wait: %s\n", d.allowed ? "allowed" : "denied");

  sg_limiter_free(limiter);
  sg_manual_clock_free(clock);
  sg_quota_free(quota);
  return d.allowed ? 0 : 1;
}
