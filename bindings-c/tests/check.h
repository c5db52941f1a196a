/* A minimal test harness for the C tests: CHECK* record a failure (with file and line) and
 * go on; TEST_MAIN_END prints "<program>: N checks passed, M failed" and sets the exit
 * status. Header-only, C11, no dependency. */
#ifndef SG_TEST_CHECK_H
#define SG_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sluicegate.h"

static unsigned long sg_checks_passed = 0;
static unsigned long sg_checks_failed = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (cond) {                                                                \
      sg_checks_passed++;                                                      \
    } else {                                                                   \
      sg_checks_failed++;                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_U64(got, want)                                                   \
  do {                                                                         \
    uint64_t got_ = (uint64_t)(got), want_ = (uint64_t)(want);                 \
    if (got_ == want_) {                                                       \
      sg_checks_passed++;                                                      \
    } else {                                                                   \
      sg_checks_failed++;                                                      \
      fprintf(stderr, "%s:%d: %s == %" PRIu64 ", want %" PRIu64 "\n",          \
              __FILE__, __LINE__, #got, got_, want_);                          \
    }                                                                          \
  } while (0)

/* A call's sg_result, compared by name so a failure says which code came back. */
#define CHECK_RC(call, want)                                                   \
  do {                                                                         \
    sg_result rc_ = (call);                                                    \
    if (rc_ == (sg_result)(want)) {                                            \
      sg_checks_passed++;                                                      \
    } else {                                                                   \
      char detail_[512];                                                       \
      size_t n_ = 0;                                                           \
      sg_last_error_message(detail_, sizeof detail_, &n_);                     \
      sg_checks_failed++;                                                      \
      fprintf(stderr, "%s:%d: %s returned %s, want %s (last error: %s)\n",     \
              __FILE__, __LINE__, #call, sg_result_name(rc_),                  \
              sg_result_name((uint32_t)(want)), detail_);                      \
    }                                                                          \
  } while (0)

#define CHECK_OK(call) CHECK_RC(call, SG_OK)

/* The last error detail of this thread contains `needle`. */
#define CHECK_DETAIL(needle)                                                   \
  do {                                                                         \
    char d_[1024];                                                             \
    size_t n_ = 0;                                                             \
    sg_last_error_message(d_, sizeof d_, &n_);                                 \
    if (strstr(d_, (needle)) != NULL) {                                        \
      sg_checks_passed++;                                                      \
    } else {                                                                   \
      sg_checks_failed++;                                                      \
      fprintf(stderr, "%s:%d: last error \"%s\" lacks \"%s\"\n", __FILE__,     \
              __LINE__, d_, (needle));                                         \
    }                                                                          \
  } while (0)

#define TEST_MAIN_END(name)                                                    \
  do {                                                                         \
    printf("%s: %lu checks passed, %lu failed\n", (name), sg_checks_passed,    \
           sg_checks_failed);                                                  \
    return sg_checks_failed == 0 ? 0 : 1;                                      \
  } while (0)

#endif /* SG_TEST_CHECK_H */
