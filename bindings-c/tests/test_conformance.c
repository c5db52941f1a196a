/* The shared conformance vectors (conformance/vectors.json and conformance/algorithms.json,
 * format 1: see conformance/README.md) run through the C API: every quota-error case, every
 * single-bucket case, every keyed case and every composite case (sg_composite_*), every
 * step, all five decision fields. Every case with a limiter runs twice: in memory, and on
 * a fresh shared-memory region of its own (sg_*_new_in_store, on the same manual clock),
 * where every step must again give the file's outcome, so the two runs decide identically.
 * A region refuses what it cannot keep exactly with SG_ERR_STORE_UNSUPPORTED: the sliding log,
 * and a state outgrowing 95 bits (one extreme sliding window in the vectors); any other
 * refusal fails, and every case a region runs must give the file's outcome at every step.
 *
 * With $SG_TEST_CLOCK_REDIS_URL (a redis-server's URL, set by ci/check.d/40-c.sh for the
 * program linked with the test-clock library, `make test-clock`) every case with a limiter
 * runs a third time on Redis, `?clock=test` (the scripts read the manual clock instead of the
 * server's TIME), each bucket under a key prefix of its own, a single bucket made at start_ns
 * by a request of cost 0: every step must give the file's outcome, no difference tolerated.
 *
 * Usage: test_conformance path/to/vectors.json [path/to/algorithms.json]
 * (the second defaults to algorithms.json beside the first).
 *
 * The file is read by the small strict JSON reader below (objects, arrays, strings with
 * every escape, true/false/null, and non-negative integers, which is all the format uses:
 * anything else is an error, never silently skipped). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "regions.h"

/* ---------------------------------------------------------------- a minimal JSON reader */

typedef enum { J_NULL, J_BOOL, J_INT, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
  jtype type;
  bool boolean;
  uint64_t integer;
  char *str;          /* J_STR: NUL-terminated UTF-8 */
  struct jval *items; /* J_ARR / J_OBJ: len values */
  char **keys;        /* J_OBJ: len keys */
  size_t len;
} jval;

typedef struct {
  const char *p, *end;
  const char *error;
} jparser;

static void jfree(jval *v) {
  for (size_t i = 0; i < v->len; i++) {
    jfree(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
}

static void skip_ws(jparser *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
    j->p++;
}

static bool fail_at(jparser *j, const char *what) {
  if (!j->error) j->error = what;
  return false;
}

static bool put_utf8(char **out, size_t *n, uint32_t cp) {
  char *o = *out + *n;
  if (cp < 0x80) {
    o[0] = (char)cp;
    *n += 1;
  } else if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    *n += 2;
  } else if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    *n += 3;
  } else {
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    *n += 4;
  }
  return true;
}

static bool hex4(jparser *j, uint32_t *out) {
  if (j->end - j->p < 4) return fail_at(j, "short \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char c = *j->p++;
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return fail_at(j, "bad hex digit in \\u escape");
  }
  *out = v;
  return true;
}

/* After the opening quote. The decoded text is never longer than the encoded one. */
static bool parse_string(jparser *j, char **out) {
  const char *start = j->p;
  size_t cap = 1;
  while (j->p < j->end && *j->p != '"') {
    if (*j->p == '\\') j->p++;
    j->p++;
    cap++;
  }
  if (j->p >= j->end) return fail_at(j, "unterminated string");
  j->p = start;
  char *s = malloc(cap * 4);
  size_t n = 0;
  while (*j->p != '"') {
    unsigned char c = (unsigned char)*j->p++;
    if (c < 0x20) {
      free(s);
      return fail_at(j, "control character in string");
    }
    if (c != '\\') {
      s[n++] = (char)c;
      continue;
    }
    char e = *j->p++;
    uint32_t cp;
    switch (e) {
      case '"': s[n++] = '"'; break;
      case '\\': s[n++] = '\\'; break;
      case '/': s[n++] = '/'; break;
      case 'b': s[n++] = '\b'; break;
      case 'f': s[n++] = '\f'; break;
      case 'n': s[n++] = '\n'; break;
      case 'r': s[n++] = '\r'; break;
      case 't': s[n++] = '\t'; break;
      case 'u':
        if (!hex4(j, &cp)) {
          free(s);
          return false;
        }
        if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
          uint32_t lo;
          if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u') {
            free(s);
            return fail_at(j, "lone high surrogate");
          }
          j->p += 2;
          if (!hex4(j, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
            free(s);
            return fail_at(j, "bad low surrogate");
          }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        put_utf8(&s, &n, cp);
        break;
      default:
        free(s);
        return fail_at(j, "unknown escape");
    }
  }
  j->p++; /* the closing quote */
  s[n] = '\0';
  *out = s;
  return true;
}

static bool parse_value(jparser *j, jval *v, int depth);

static bool parse_container(jparser *j, jval *v, int depth, bool object) {
  char close = object ? '}' : ']';
  size_t cap = 0;
  skip_ws(j);
  if (j->p < j->end && *j->p == close) {
    j->p++;
    return true;
  }
  for (;;) {
    if (v->len == cap) {
      cap = cap ? cap * 2 : 8;
      v->items = realloc(v->items, cap * sizeof *v->items);
      if (object) v->keys = realloc(v->keys, cap * sizeof *v->keys);
    }
    jval *item = &v->items[v->len];
    memset(item, 0, sizeof *item);
    if (object) {
      skip_ws(j);
      if (j->p >= j->end || *j->p != '"') return fail_at(j, "expected a key");
      j->p++;
      if (!parse_string(j, &v->keys[v->len])) return false;
      skip_ws(j);
      if (j->p >= j->end || *j->p != ':') {
        free(v->keys[v->len]);
        return fail_at(j, "expected ':'");
      }
      j->p++;
    }
    v->len++;
    if (!parse_value(j, item, depth + 1)) return false;
    skip_ws(j);
    if (j->p < j->end && *j->p == ',') {
      j->p++;
      continue;
    }
    if (j->p < j->end && *j->p == close) {
      j->p++;
      return true;
    }
    return fail_at(j, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static bool literal(jparser *j, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return fail_at(j, "bad literal");
  j->p += n;
  return true;
}

static bool parse_value(jparser *j, jval *v, int depth) {
  if (depth > 64) return fail_at(j, "nested too deeply");
  skip_ws(j);
  if (j->p >= j->end) return fail_at(j, "unexpected end of input");
  char c = *j->p;
  if (c == '{' || c == '[') {
    j->p++;
    v->type = c == '{' ? J_OBJ : J_ARR;
    return parse_container(j, v, depth, c == '{');
  }
  if (c == '"') {
    j->p++;
    v->type = J_STR;
    return parse_string(j, &v->str);
  }
  if (c == 't' || c == 'f') {
    v->type = J_BOOL;
    v->boolean = c == 't';
    return literal(j, c == 't' ? "true" : "false");
  }
  if (c == 'n') {
    v->type = J_NULL;
    return literal(j, "null");
  }
  if (c >= '0' && c <= '9') {
    uint64_t n = 0;
    if (c == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
      return fail_at(j, "leading zero");
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
      uint64_t d = (uint64_t)(*j->p++ - '0');
      if (n > (UINT64_MAX - d) / 10) return fail_at(j, "integer above 2^64-1");
      n = n * 10 + d;
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
      return fail_at(j, "not an integer (the vector format has only integers)");
    v->type = J_INT;
    v->integer = n;
    return true;
  }
  return fail_at(j, c == '-' ? "negative number (the format has none)" : "unexpected character");
}

static const jval *get(const jval *obj, const char *key) {
  if (obj->type != J_OBJ) return NULL;
  for (size_t i = 0; i < obj->len; i++)
    if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
  return NULL;
}

/* Field access that fails the test loudly when the file does not have the promised shape. */
static bool shape_ok = true;

static const jval *need(const jval *obj, const char *key, jtype type, const char *where) {
  const jval *v = get(obj, key);
  if (!v || v->type != type) {
    fprintf(stderr, "%s: field \"%s\" missing or of the wrong type\n", where, key);
    shape_ok = false;
    return NULL;
  }
  return v;
}

/* Whether `d` is the decision `want` describes (all five fields). */
static bool same_decision(const sg_decision *d, const jval *want, const char *name) {
  static const char *fields[] = {"limit", "remaining", "retry_after_ns", "reset_after_ns"};
  const uint64_t got[] = {d->limit, d->remaining, d->retry_after_ns, d->reset_after_ns};
  const jval *allowed = need(want, "allowed", J_BOOL, name);
  bool ok = allowed && allowed->boolean == d->allowed;
  for (size_t f = 0; f < 4; f++) {
    const jval *w = need(want, fields[f], J_INT, name);
    ok = ok && w && w->integer == got[f];
  }
  return ok;
}

/* ---------------------------------------------------------------- shared-memory regions */

/* The runs on a region: cases tried, refused (SG_ERR_STORE_UNSUPPORTED), run with every
 * outcome the file's (so the memory run's), and their steps. */
static unsigned long region_cases, region_refused, region_identical, region_steps;
/* The names of the cases refused, for the summary. */
static char region_refused_names[4096];
/* A region's keys: the vectors use at most a few keys a case. */
#define REGION_KEYS 16
static void note(char *names, size_t len, const char *name, const char *why) {
  size_t n = strlen(names);
  snprintf(names + n, len - n, "%s%s%s", n ? ", " : "", name, why);
}

/* Counts a region's answer to making a case's limiter; true when the case runs. */
static bool region_made(sg_result made, const char *name, const char *rate) {
  region_cases++;
  if (made == SG_ERR_STORE_UNSUPPORTED) {
    /* What a region cannot keep exactly: a log of timestamps, or two 48-bit window counts
     * beside a window index in 95 bits. */
    CHECK(strstr(rate, "sliding_log") != NULL ||
          strcmp(rate, "281474976710655/s; algorithm=sliding_window") == 0);
    region_refused++;
    note(region_refused_names, sizeof region_refused_names, name, "");
    return false;
  }
  CHECK_RC(made, SG_OK);
  return made == SG_OK;
}

/* ---------------------------------------------------------------- Redis (test clock) */

/* Where a case runs. */
enum { IN_MEMORY, ON_REGION, ON_REDIS };
/* $SG_TEST_CLOCK_REDIS_URL, or NULL: no Redis run. */
static const char *redis_url;
static unsigned long redis_cases, redis_steps, redis_next;

/* The store of a case's limiter (or part) `part`: a region, or a fresh prefix on Redis. */
static const char *store_for(char *buf, size_t len, const char *part, int where) {
  if (where != ON_REDIS) return region(buf, len, part);
  snprintf(buf, len, "%s?clock=test&negative_cache=off&on_error=error&timeout=2s&prefix=conf%ld-%lu-%s",
           redis_url, (long)getpid(), redis_next++, part);
  return buf;
}

/* A single bucket on Redis is made at its first request: make it now, at start_ns. */
static void made_at_start(sg_limiter *l, int where) {
  sg_decision d;
  if (where == ON_REDIS && l != NULL) CHECK_OK(sg_limiter_try_acquire(l, 0, &d));
}

/* ---------------------------------------------------------------- the runner */

static unsigned long cases_run, steps_run, quota_errors_run, keyed_run, composite_run;

static void run_quota_error(const jval *c, const char *name) {
  const jval *quota = need(c, "quota", J_STR, name);
  const jval *want = need(c, "quota_error", J_STR, name);
  if (!quota || !want) return;
  sg_quota *q = NULL;
  sg_result rc = sg_quota_parse(quota->str, &q);
  if (strcmp(sg_result_name(rc), want->str) == 0 && q == NULL) {
    sg_checks_passed++;
  } else {
    sg_checks_failed++;
    fprintf(stderr, "%s: sg_quota_parse(\"%s\") returned %s, want %s\n", name, quota->str,
            sg_result_name(rc), want->str);
  }
  sg_quota_free(q);
  quota_errors_run++;
}

/* What a case runs on (one of l, k, parts), and how a region run went. */
typedef struct {
  sg_limiter *l;
  sg_keyed_limiter *k;
  sg_limiter **parts;
  size_t n_parts;
  sg_manual_clock *clock;
  bool on_region, on_redis;
  unsigned long failed;
} target;

/* Plays every step of case `name` on `t`, on its manual clock created at start_ns; every
 * outcome must be the file's. */
static void play(const jval *c, const char *name, target *t) {
  const jval *start = need(c, "start_ns", J_INT, name);
  const jval *steps = need(c, "steps", J_ARR, name);
  const char *where = t->on_region ? " (on a region)" : t->on_redis ? " (on Redis)" : "";
  for (size_t i = 0; start && steps && i < steps->len; i++) {
    const jval *s = &steps->items[i];
    const jval *tn = need(s, "t_ns", J_INT, name);
    const jval *op = need(s, "op", J_STR, name);
    const jval *cost = need(s, "cost", J_INT, name);
    const jval *key = t->k ? need(s, "key", J_STR, name) : NULL;
    if (!tn || !op || !cost || (t->k && !key)) break;
    if (!t->k && get(s, "key")) {
      sg_checks_failed++;
      fprintf(stderr, "%s step %zu: a key in a case that is not keyed\n", name, i);
      break;
    }
    const uint8_t *kp = key ? (const uint8_t *)key->str : NULL;
    size_t kn = key ? strlen(key->str) : 0;
    const sg_limiter *const *ls = (const sg_limiter *const *)t->parts;
    CHECK_OK(sg_manual_clock_set(t->clock, tn->integer));
    sg_decision d;
    sg_result rc;
    bool ok;
    const jval *want = NULL, *err = NULL;
    if (strcmp(op->str, "refund") == 0) {
      rc = t->k       ? sg_keyed_limiter_refund(t->k, kp, kn, cost->integer)
           : t->parts ? sg_composite_refund(ls, t->n_parts, cost->integer)
                      : sg_limiter_refund(t->l, cost->integer);
      ok = rc == SG_OK;
    } else if (strcmp(op->str, "acquire") == 0) {
      want = need(s, "expect", J_OBJ, name);
      if (!want) break;
      rc = t->k       ? sg_keyed_limiter_try_acquire(t->k, kp, kn, cost->integer, &d)
           : t->parts ? sg_composite_try_acquire(ls, t->n_parts, cost->integer, &d)
                      : sg_limiter_try_acquire(t->l, cost->integer, &d);
      err = get(want, "error");
      ok = err ? err->type == J_STR && strcmp(sg_result_name(rc), err->str) == 0
               : rc == SG_OK && same_decision(&d, want, name);
    } else {
      sg_checks_failed++;
      fprintf(stderr, "%s: unknown op \"%s\"\n", name, op->str);
      break;
    }
    if (t->on_region) region_steps++;
    else if (t->on_redis) redis_steps++;
    else steps_run++;
    if (ok) {
      sg_checks_passed++;
    } else {
      sg_checks_failed++;
      t->failed++;
      if (rc != SG_OK || !want || err)
        fprintf(stderr, "%s%s step %zu: returned %s\n", name, where, i, sg_result_name(rc));
      else
        fprintf(stderr,
                "%s%s step %zu: got allowed=%d limit=%" PRIu64 " remaining=%" PRIu64
                " retry_after_ns=%" PRIu64 " reset_after_ns=%" PRIu64 "\n",
                name, where, i, d.allowed, d.limit, d.remaining, d.retry_after_ns,
                d.reset_after_ns);
    }
  }
  if (t->on_region && t->failed == 0) region_identical++;
}

/* One limiter (or keyed limiter) per case, on a manual clock created at start_ns: in memory,
 * on a fresh region of its own (removed afterwards), or on Redis (`where`). */
static void run_case(const jval *c, const char *name, bool is_keyed, int where) {
  bool on_region = where == ON_REGION, in_store = where != IN_MEMORY;
  const jval *quota = need(c, "quota", J_STR, name);
  const jval *start = need(c, "start_ns", J_INT, name);
  const jval *steps = need(c, "steps", J_ARR, name);
  if (!quota || !start || !steps) return;
  target t = {.on_region = on_region, .on_redis = where == ON_REDIS};
  sg_quota *q = NULL;
  char store[1200];
  store_for(store, sizeof store, "case", where);
  CHECK_OK(sg_quota_parse(quota->str, &q));
  CHECK_OK(sg_manual_clock_new(start->integer, &t.clock));
  sg_result made;
  if (is_keyed) {
    made = in_store ? sg_keyed_limiter_new_in_store(q, store, REGION_KEYS,
                                                     SG_ON_FULL_REJECT_NEW_KEYS, t.clock, &t.k)
                     : sg_keyed_limiter_new_with_clock(q, SG_KEYED_DEFAULT_MAX_KEYS,
                                                       SG_ON_FULL_REJECT_NEW_KEYS, t.clock, &t.k);
  } else {
    made = in_store ? sg_limiter_new_in_store(q, store, t.clock, &t.l)
                    : sg_limiter_new_with_clock(q, t.clock, &t.l);
    made_at_start(t.l, where);
  }
  if (on_region ? region_made(made, name, quota->str) : made == SG_OK) play(c, name, &t);
  else CHECK(on_region);
  sg_limiter_free(t.l);
  sg_keyed_limiter_free(t.k);
  sg_manual_clock_free(t.clock);
  sg_quota_free(q);
  if (on_region) unlink(store + 4);
  else if (in_store) redis_cases++;
  else if (is_keyed) keyed_run++;
  else cases_run++;
}

/* A composite case: one limiter per rate string, all on one manual clock, consumed
 * all-or-nothing by sg_composite_try_acquire / sg_composite_refund; each part in memory, on a
 * fresh region of its own, or on Redis (`where`). */
static void run_composite_case(const jval *c, const char *name, int where) {
  bool on_region = where == ON_REGION, in_store = where != IN_MEMORY;
  const jval *quotas = need(c, "quotas", J_ARR, name);
  const jval *start = need(c, "start_ns", J_INT, name);
  const jval *steps = need(c, "steps", J_ARR, name);
  if (!quotas || !start || !steps || quotas->len == 0) {
    shape_ok = false;
    return;
  }
  target t = {.on_region = on_region, .on_redis = where == ON_REDIS, .n_parts = quotas->len};
  CHECK_OK(sg_manual_clock_new(start->integer, &t.clock));
  t.parts = calloc(quotas->len, sizeof *t.parts);
  bool made = t.parts != NULL;
  sg_result rc = SG_OK;
  const char *last_rate = "";
  char store[1200], part[32];
  for (size_t i = 0; made && i < quotas->len; i++) {
    const jval *rate = &quotas->items[i];
    if (rate->type == J_STR) last_rate = rate->str;
    sg_quota *q = NULL;
    snprintf(part, sizeof part, "part-%zu", i);
    made = rate->type == J_STR && sg_quota_parse(rate->str, &q) == SG_OK;
    if (made) {
      rc = in_store ? sg_limiter_new_in_store(q, store_for(store, sizeof store, part, where),
                                              t.clock, &t.parts[i])
                    : sg_limiter_new_with_clock(q, t.clock, &t.parts[i]);
      made = rc == SG_OK;
      if (made) made_at_start(t.parts[i], where);
    }
    sg_quota_free(q);
  }
  if (on_region) made = region_made(rc, name, last_rate) && made;
  else CHECK(made);
  if (made) play(c, name, &t);
  for (size_t i = 0; t.parts && i < quotas->len; i++) {
    sg_limiter_free(t.parts[i]);
    snprintf(part, sizeof part, "part-%zu", i);
    if (on_region) unlink(region(store, sizeof store, part) + 4);
  }
  free(t.parts);
  sg_manual_clock_free(t.clock);
  if (where == ON_REDIS) redis_cases++;
  else if (!on_region) composite_run++;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  size_t got;
  while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  *len = n;
  return buf;
}

/* Plays every case of one file; returns the number of cases it holds (0 on a bad file). */
static size_t run_file(const char *path) {
  size_t len = 0;
  char *text = read_file(path, &len);
  if (!text) {
    fprintf(stderr, "test_conformance: cannot read %s: %s\n", path, strerror(errno));
    sg_checks_failed++;
    return 0;
  }
  jparser j = {text, text + len, NULL};
  jval doc;
  memset(&doc, 0, sizeof doc);
  bool parsed = parse_value(&j, &doc, 0);
  skip_ws(&j);
  if (!parsed || j.p != j.end) {
    fprintf(stderr, "test_conformance: %s: invalid JSON at byte %ld: %s\n", path,
            (long)(j.p - text), j.error ? j.error : "trailing data");
    jfree(&doc);
    free(text);
    sg_checks_failed++;
    return 0;
  }
  const jval *format = need(&doc, "format", J_INT, path);
  const jval *cases = need(&doc, "cases", J_ARR, path);
  const jval *composite = get(&doc, "composite_cases");
  size_t total = 0;
  if (!format || format->integer != 1 || !cases || (composite && composite->type != J_ARR)) {
    fprintf(stderr, "test_conformance: %s: unknown vector format\n", path);
    sg_checks_failed++;
  } else {
    for (size_t i = 0; i < cases->len; i++) {
      const jval *c = &cases->items[i];
      const jval *name = need(c, "name", J_STR, "case");
      if (!name) continue;
      if (get(c, "quota_error")) {
        run_quota_error(c, name->str);
        continue;
      }
      const jval *keyed = need(c, "keyed", J_BOOL, name->str);
      if (!keyed) continue;
      run_case(c, name->str, keyed->boolean, IN_MEMORY);
      run_case(c, name->str, keyed->boolean, ON_REGION);
      if (redis_url) run_case(c, name->str, keyed->boolean, ON_REDIS);
    }
    for (size_t i = 0; composite && i < composite->len; i++) {
      const jval *c = &composite->items[i];
      const jval *name = need(c, "name", J_STR, "composite case");
      if (!name) continue;
      run_composite_case(c, name->str, IN_MEMORY);
      run_composite_case(c, name->str, ON_REGION);
      if (redis_url) run_composite_case(c, name->str, ON_REDIS);
    }
    total = cases->len + (composite ? composite->len : 0);
  }
  jfree(&doc);
  free(text);
  return total;
}

int main(int argc, char **argv) {
  const char *vectors = argc > 1 ? argv[1] : "../conformance/vectors.json";
  char algorithms[4096];
  if (argc > 2) {
    snprintf(algorithms, sizeof algorithms, "%s", argv[2]);
  } else {
    const char *slash = strrchr(vectors, '/');
    int dir = slash ? (int)(slash - vectors + 1) : 0;
    snprintf(algorithms, sizeof algorithms, "%.*salgorithms.json", dir, vectors);
  }
  redis_url = getenv("SG_TEST_CLOCK_REDIS_URL");
  if (redis_url && !*redis_url) redis_url = NULL;
  if (!regions_open()) {
    sg_checks_failed++;
    TEST_MAIN_END("test_conformance");
  }
  size_t total = run_file(vectors) + run_file(algorithms);
  regions_close();
  CHECK(shape_ok);
  CHECK(cases_run >= 80);
  CHECK(quota_errors_run >= 10);
  CHECK(keyed_run >= 5);
  CHECK(composite_run >= 10);
  /* Every case in both files was run: none skipped. */
  CHECK_U64(cases_run + keyed_run + quota_errors_run + composite_run, total);
  /* On regions: every case with a limiter was tried, and every case run decided as the file
   * says (region_made checks what a region refused). */
  unsigned long region_run = region_cases - region_refused;
  CHECK_U64(region_cases, cases_run + keyed_run + composite_run);
  CHECK(region_run * 100 > region_cases * 85);
  CHECK_U64(region_identical, region_run);
  printf("test_conformance: %lu single-bucket, %lu keyed and %lu composite cases (%lu steps), "
         "%lu quota-error cases\n",
         cases_run, keyed_run, composite_run, steps_run, quota_errors_run);
  printf("test_conformance: on a shared-memory region %lu of %lu cases run (%lu steps), %lu "
         "refused as unsupported; of those run, %lu decide identically\n",
         region_run, region_cases, region_steps, region_refused, region_identical);
  printf("  refused: %s\n", region_refused_names);
  if (redis_url) {
    /* On Redis: every case with a limiter ran, every step the file's outcome. */
    CHECK_U64(redis_cases, cases_run + keyed_run + composite_run);
    CHECK(redis_steps >= 2600);
    printf("test_conformance: on Redis (test clock) %lu cases run (%lu steps), all identical\n",
           redis_cases, redis_steps);
  }
  TEST_MAIN_END("test_conformance");
}
