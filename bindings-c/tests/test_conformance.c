/* The shared conformance vectors (conformance/vectors.json and conformance/algorithms.json,
 * format 1: see conformance/README.md) run through the C API: every quota-error case, every
 * single-bucket case, every keyed case and every composite case (sg_composite_*), every
 * step, all five decision fields.
 *
 * Usage: test_conformance path/to/vectors.json [path/to/algorithms.json]
 * (the second defaults to algorithms.json beside the first).
 *
 * The file is read by the small strict JSON reader below (objects, arrays, strings with
 * every escape, true/false/null, and non-negative integers, which is all the format uses:
 * anything else is an error, never silently skipped). */
#include <errno.h>
#include <stdlib.h>

#include "check.h"

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

/* ---------------------------------------------------------------- the runner */

static unsigned long cases_run, steps_run, quota_errors_run, keyed_run;

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

static void check_decision(const char *name, size_t i, const sg_decision *d, const jval *want) {
  static const char *fields[] = {"limit", "remaining", "retry_after_ns", "reset_after_ns"};
  const uint64_t got[] = {d->limit, d->remaining, d->retry_after_ns, d->reset_after_ns};
  const jval *allowed = need(want, "allowed", J_BOOL, name);
  bool ok = allowed && allowed->boolean == d->allowed;
  for (size_t f = 0; f < 4; f++) {
    const jval *w = need(want, fields[f], J_INT, name);
    ok = ok && w && w->integer == got[f];
  }
  if (ok) {
    sg_checks_passed++;
    return;
  }
  sg_checks_failed++;
  fprintf(stderr,
          "%s step %zu: got allowed=%d limit=%" PRIu64 " remaining=%" PRIu64
          " retry_after_ns=%" PRIu64 " reset_after_ns=%" PRIu64 "\n",
          name, i, d->allowed, d->limit, d->remaining, d->retry_after_ns, d->reset_after_ns);
}

/* One limiter (or keyed limiter) per case, on a manual clock created at start_ns. */
static void run_case(const jval *c, const char *name, bool is_keyed) {
  const jval *quota = need(c, "quota", J_STR, name);
  const jval *start = need(c, "start_ns", J_INT, name);
  const jval *steps = need(c, "steps", J_ARR, name);
  if (!quota || !start || !steps) return;
  sg_quota *q = NULL;
  sg_manual_clock *clock = NULL;
  sg_limiter *l = NULL;
  sg_keyed_limiter *k = NULL;
  CHECK_OK(sg_quota_parse(quota->str, &q));
  CHECK_OK(sg_manual_clock_new(start->integer, &clock));
  if (is_keyed) {
    CHECK_OK(sg_keyed_limiter_new_with_clock(q, SG_KEYED_DEFAULT_MAX_KEYS,
                                             SG_ON_FULL_REJECT_NEW_KEYS, clock, &k));
  } else {
    CHECK_OK(sg_limiter_new_with_clock(q, clock, &l));
  }
  for (size_t i = 0; (l || k) && i < steps->len; i++) {
    const jval *s = &steps->items[i];
    const jval *t = need(s, "t_ns", J_INT, name);
    const jval *op = need(s, "op", J_STR, name);
    const jval *cost = need(s, "cost", J_INT, name);
    const jval *key = is_keyed ? need(s, "key", J_STR, name) : NULL;
    if (!t || !op || !cost || (is_keyed && !key)) break;
    if (!is_keyed && get(s, "key")) {
      sg_checks_failed++;
      fprintf(stderr, "%s step %zu: a key in a case that is not keyed\n", name, i);
      break;
    }
    const uint8_t *kp = key ? (const uint8_t *)key->str : NULL;
    size_t kn = key ? strlen(key->str) : 0;
    CHECK_OK(sg_manual_clock_set(clock, t->integer));
    if (strcmp(op->str, "refund") == 0) {
      CHECK_OK(k ? sg_keyed_limiter_refund(k, kp, kn, cost->integer)
                 : sg_limiter_refund(l, cost->integer));
    } else if (strcmp(op->str, "acquire") == 0) {
      const jval *want = need(s, "expect", J_OBJ, name);
      if (!want) break;
      sg_decision d;
      sg_result rc = k ? sg_keyed_limiter_try_acquire(k, kp, kn, cost->integer, &d)
                       : sg_limiter_try_acquire(l, cost->integer, &d);
      const jval *err = get(want, "error");
      if (err) {
        bool ok = err->type == J_STR && strcmp(sg_result_name(rc), err->str) == 0;
        CHECK(ok);
        if (!ok) fprintf(stderr, "%s step %zu: returned %s\n", name, i, sg_result_name(rc));
      } else if (rc != SG_OK) {
        sg_checks_failed++;
        fprintf(stderr, "%s step %zu: returned %s\n", name, i, sg_result_name(rc));
      } else {
        check_decision(name, i, &d, want);
      }
    } else {
      sg_checks_failed++;
      fprintf(stderr, "%s: unknown op \"%s\"\n", name, op->str);
    }
    steps_run++;
  }
  sg_limiter_free(l);
  sg_keyed_limiter_free(k);
  sg_manual_clock_free(clock);
  sg_quota_free(q);
  if (is_keyed) keyed_run++;
  else cases_run++;
}

/* A composite case: one limiter per rate string, all on one manual clock, consumed
 * all-or-nothing by sg_composite_try_acquire / sg_composite_refund. */
static unsigned long composite_run;

static void run_composite_case(const jval *c, const char *name) {
  const jval *quotas = need(c, "quotas", J_ARR, name);
  const jval *start = need(c, "start_ns", J_INT, name);
  const jval *steps = need(c, "steps", J_ARR, name);
  if (!quotas || !start || !steps || quotas->len == 0) {
    shape_ok = false;
    return;
  }
  sg_manual_clock *clock = NULL;
  CHECK_OK(sg_manual_clock_new(start->integer, &clock));
  sg_limiter **parts = calloc(quotas->len, sizeof *parts);
  bool made = parts != NULL;
  for (size_t i = 0; made && i < quotas->len; i++) {
    const jval *rate = &quotas->items[i];
    sg_quota *q = NULL;
    made = rate->type == J_STR && sg_quota_parse(rate->str, &q) == SG_OK &&
           sg_limiter_new_with_clock(q, clock, &parts[i]) == SG_OK;
    sg_quota_free(q);
  }
  CHECK(made);
  const sg_limiter *const *ls = (const sg_limiter *const *)parts;
  for (size_t i = 0; made && i < steps->len; i++) {
    const jval *s = &steps->items[i];
    const jval *t = need(s, "t_ns", J_INT, name);
    const jval *op = need(s, "op", J_STR, name);
    const jval *cost = need(s, "cost", J_INT, name);
    if (!t || !op || !cost) break;
    CHECK_OK(sg_manual_clock_set(clock, t->integer));
    if (strcmp(op->str, "refund") == 0) {
      CHECK_OK(sg_composite_refund(ls, quotas->len, cost->integer));
    } else if (strcmp(op->str, "acquire") == 0) {
      const jval *want = need(s, "expect", J_OBJ, name);
      if (!want) break;
      sg_decision d;
      sg_result rc = sg_composite_try_acquire(ls, quotas->len, cost->integer, &d);
      const jval *err = get(want, "error");
      if (err) {
        bool ok = err->type == J_STR && strcmp(sg_result_name(rc), err->str) == 0;
        CHECK(ok);
        if (!ok) fprintf(stderr, "%s step %zu: returned %s\n", name, i, sg_result_name(rc));
      } else if (rc != SG_OK) {
        sg_checks_failed++;
        fprintf(stderr, "%s step %zu: returned %s\n", name, i, sg_result_name(rc));
      } else {
        check_decision(name, i, &d, want);
      }
    } else {
      sg_checks_failed++;
      fprintf(stderr, "%s: unknown op \"%s\"\n", name, op->str);
    }
    steps_run++;
  }
  for (size_t i = 0; parts && i < quotas->len; i++) sg_limiter_free(parts[i]);
  free(parts);
  sg_manual_clock_free(clock);
  composite_run++;
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
      if (keyed) run_case(c, name->str, keyed->boolean);
    }
    for (size_t i = 0; composite && i < composite->len; i++) {
      const jval *c = &composite->items[i];
      const jval *name = need(c, "name", J_STR, "composite case");
      if (name) run_composite_case(c, name->str);
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
  size_t total = run_file(vectors) + run_file(algorithms);
  CHECK(shape_ok);
  CHECK(cases_run >= 80);
  CHECK(quota_errors_run >= 10);
  CHECK(keyed_run >= 5);
  CHECK(composite_run >= 10);
  /* Every case in both files was run: none skipped. */
  CHECK_U64(cases_run + keyed_run + quota_errors_run + composite_run, total);
  printf("test_conformance: %lu single-bucket, %lu keyed and %lu composite cases (%lu steps), "
         "%lu quota-error cases\n",
         cases_run, keyed_run, composite_run, steps_run, quota_errors_run);
  TEST_MAIN_END("test_conformance");
}
