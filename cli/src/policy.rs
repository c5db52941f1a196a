//! Candidate policies and keys, as written on the command line.
//!
//! ```text
//! POLICY = [NAME "="] RULE ("|" RULE)*       per-route: the first rule whose route matches
//! RULE   = [ROUTE "=>"] LIMIT                no route: every request
//! LIMIT  = PART ("&" PART)*                  a composite: every part must admit
//! PART   = ["global"] RATE                   a bucket per key (default), or one for all
//! ROUTE  = [METHOD] PATTERN                  e.g. "POST /login", "/api/*", "/users/{id}"
//! ```
//!
//! Patterns match the whole path (its query string is ignored unless the pattern has a `?`):
//! `*` matches any text, `/` included; `{name}` matches one path segment (no `/`). After a
//! `?`, each `name=VALUE` matches the request's first parameter of that name, wherever it is
//! in the query string (`{name}` there takes the value, up to the next `&`).

use crate::engine::{Rate, MAX_PARTS};
use crate::error::CliError;

/// Whether a part has a bucket per key or one bucket for all requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    PerKey,
    Global,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub scope: Scope,
    pub rate: Rate,
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub route: Option<Route>,
    pub parts: Vec<Part>,
}

#[derive(Clone, Debug)]
pub struct PolicySpec {
    pub name: String,
    pub rules: Vec<Rule>,
}

/// The most `--policy` values one run takes: a request's rejections are a bit per policy
/// in a `u64` (the disagreement matrix).
pub const MAX_POLICIES: usize = 64;

/// Checks the `--policy` values as a set: at most [`MAX_POLICIES`], and distinct names
/// (outputs and the HTML report find a policy by its name).
pub fn check_policies(specs: &[PolicySpec]) -> Result<(), CliError> {
    if specs.len() > MAX_POLICIES {
        return Err(CliError::usage(
            "--policy",
            &specs[MAX_POLICIES].name,
            format!(
                "at most {MAX_POLICIES} policies can be compared in one run, not {}",
                specs.len()
            ),
        ));
    }
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|o| o.name == s.name) {
            return Err(CliError::usage(
                "--policy",
                &s.name,
                format!(
                    "two policies are named {:?}: name each one (NAME=...)",
                    s.name
                ),
            ));
        }
    }
    Ok(())
}

impl PolicySpec {
    /// Parses one `--policy` value.
    pub fn parse(text: &str) -> Result<PolicySpec, CliError> {
        let err = |reason: String| CliError::usage("--policy", text, reason);
        let (name, body) = split_name(text);
        if body.trim().is_empty() {
            return Err(err("no rate given".into()));
        }
        let mut rules = Vec::new();
        for rule in body.split('|') {
            let (route, limit) = match rule.split_once("=>") {
                Some((r, l)) => (Some(Route::parse(r.trim()).map_err(err)?), l),
                None => (None, rule),
            };
            let mut parts = Vec::new();
            for part in limit.split('&') {
                let p = part.trim();
                let (scope, rate) = match p.strip_prefix("global") {
                    Some(r) if r.starts_with(|c: char| c.is_whitespace() || c == ':') => {
                        (Scope::Global, r.trim_start_matches(':').trim())
                    }
                    _ => (Scope::PerKey, p),
                };
                if rate.is_empty() {
                    return Err(err(format!("empty rate in rule {:?}", rule.trim())));
                }
                let rate = Rate::parse(rate).map_err(err)?;
                parts.push(Part { scope, rate });
            }
            if parts.len() > MAX_PARTS {
                return Err(err(format!(
                    "a composite has at most {MAX_PARTS} parts, not {}",
                    parts.len()
                )));
            }
            rules.push(Rule { route, parts });
        }
        if rules.len() > 1 && rules.iter().any(|r| r.route.is_none()) {
            return Err(err(
                "with several rules every rule needs a route (use \"* => RATE\" for the rest)"
                    .into(),
            ));
        }
        let name = match name {
            Some(n) => n.to_string(),
            None if rules.len() == 1 && rules[0].parts.len() == 1 => {
                let p = &rules[0].parts[0];
                match p.scope {
                    Scope::PerKey => p.rate.to_string(),
                    Scope::Global => format!("global {}", p.rate),
                }
            }
            None => body.trim().to_string(),
        };
        Ok(PolicySpec { name, rules })
    }

    /// Whether any rule has a route (requests must carry a path).
    pub fn has_routes(&self) -> bool {
        self.rules.iter().any(|r| r.route.is_some())
    }

    /// Whether any route names a method.
    pub fn needs_method(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.route.as_ref().is_some_and(|r| r.method.is_some()))
    }

    /// The index of the first rule that applies to a request.
    #[inline]
    pub fn rule_for(
        &self,
        method: &[u8],
        path: &[u8],
        caps: &mut Vec<(usize, usize)>,
    ) -> Option<usize> {
        self.rules.iter().position(|r| match &r.route {
            None => true,
            Some(route) => route.matches(method, path, caps),
        })
    }

    /// The largest capacity of any part (a cost above every part's capacity is never admitted).
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.rules {
            let route = r
                .route
                .as_ref()
                .map_or(String::new(), |r| format!("{} => ", r.text));
            let parts: Vec<String> = r
                .parts
                .iter()
                .map(|p| match p.scope {
                    Scope::PerKey => format!("per key {}", p.rate.describe()),
                    Scope::Global => format!("global {}", p.rate.describe()),
                })
                .collect();
            out.push(format!("{route}{}", parts.join(" & ")));
        }
        out
    }
}

/// `NAME=REST` when the text before the first `=` not starting `=>` is a name.
fn split_name(text: &str) -> (Option<&str>, &str) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(k) = text[i..].find('=') {
        let at = i + k;
        if bytes.get(at + 1) == Some(&b'>') {
            i = at + 2;
            continue;
        }
        let name = text[..at].trim();
        let ident = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        return if ident {
            (Some(name), &text[at + 1..])
        } else {
            (None, text)
        };
    }
    (None, text)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Lit(Vec<u8>),
    Star,
    /// `{name}` in the path: one path segment (no `/`).
    Seg,
    /// `{name}` in a query parameter: any text of the parameter's value (no `&`: the value is
    /// matched alone).
    Val,
}

/// One `&`-separated piece of a pattern's query string.
#[derive(Clone, Debug)]
enum Param {
    /// `name=VALUE`: the request's first parameter of that name, wherever it is in the query,
    /// its value matched by VALUE's tokens.
    Named(Vec<u8>, Vec<Tok>),
    /// Any other piece (`*`, a name alone, a name with a wildcard): some parameter of the
    /// request matched whole.
    Whole(Vec<Tok>),
}

/// A route: an optional method and a path pattern.
#[derive(Clone, Debug)]
pub struct Route {
    pub text: String,
    pub method: Option<Vec<u8>>,
    /// The pattern's path (before its `?`).
    toks: Vec<Tok>,
    /// The pattern's query parameters, if it has a `?`.
    query: Option<Vec<Param>>,
}

/// The tokens of a pattern's text; `capture` is what a `{name}` becomes.
fn tokens(t: &str, pat: &[u8], capture: &Tok) -> Result<Vec<Tok>, String> {
    let mut toks = Vec::new();
    let mut lit = Vec::new();
    let mut rest = pat;
    while let Some((&c, tail)) = rest.split_first() {
        match c {
            b'*' => {
                if !lit.is_empty() {
                    toks.push(Tok::Lit(std::mem::take(&mut lit)));
                }
                if toks.last() != Some(&Tok::Star) {
                    toks.push(Tok::Star);
                }
                rest = tail;
            }
            b'{' => {
                let end = tail
                    .iter()
                    .position(|&b| b == b'}')
                    .ok_or_else(|| format!("route {t:?}: '{{' without '}}'"))?;
                let name = &tail[..end];
                if name.is_empty() || name.contains(&b'/') {
                    return Err(format!("route {t:?}: a capture needs a name, e.g. {{id}}"));
                }
                if !lit.is_empty() {
                    toks.push(Tok::Lit(std::mem::take(&mut lit)));
                }
                toks.push(capture.clone());
                rest = &tail[end + 1..];
            }
            _ => {
                lit.push(c);
                rest = tail;
            }
        }
    }
    if !lit.is_empty() {
        toks.push(Tok::Lit(lit));
    }
    Ok(toks)
}

impl Route {
    pub fn parse(text: &str) -> Result<Route, String> {
        let t = text.trim();
        let (method, pat) = match t.split_once(char::is_whitespace) {
            Some((m, p)) if m.bytes().all(|b| b.is_ascii_alphabetic()) => {
                (Some(m.to_ascii_uppercase().into_bytes()), p.trim())
            }
            _ => (None, t),
        };
        if !(pat.starts_with('/') || pat.starts_with('*')) {
            return Err(format!(
                "route {t:?}: a path pattern starts with '/' or '*' (e.g. \"/api/*\", \"POST /login\")"
            ));
        }
        let (path_pat, query_pat) = match pat.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (pat, None),
        };
        let toks = tokens(t, path_pat.as_bytes(), &Tok::Seg)?;
        let query = match query_pat {
            None => None,
            Some(q) => {
                let mut params = Vec::new();
                for piece in q.split('&').filter(|p| !p.is_empty()) {
                    params.push(match piece.split_once('=') {
                        Some((name, value)) if !name.is_empty() && !name.contains(['*', '{']) => {
                            let value = tokens(t, value.as_bytes(), &Tok::Val)?;
                            Param::Named(name.as_bytes().to_vec(), value)
                        }
                        _ => Param::Whole(tokens(t, piece.as_bytes(), &Tok::Val)?),
                    });
                }
                Some(params)
            }
        };
        Ok(Route {
            text: t.to_string(),
            method,
            toks,
            query,
        })
    }

    /// Whether the request matches; `caps` receives the `{name}` captures' byte ranges in
    /// `path`: the path's first, then the query parameters' in the pattern's order.
    ///
    /// A pattern without a `?` matches the path cut at its `?`. With one, the path before
    /// the `?` is matched as usual, and each of the pattern's `name=VALUE` parameters
    /// matches the request's first parameter of that name, wherever it is in the query
    /// string (`/search?q={q}` matches `/search?page=2&q=abc`, `{q}` capturing `abc`: a
    /// capture in a parameter takes its value, up to the next `&`); the request's other
    /// parameters are ignored.
    #[inline]
    pub fn matches(&self, method: &[u8], path: &[u8], caps: &mut Vec<(usize, usize)>) -> bool {
        if let Some(m) = &self.method {
            if !m.eq_ignore_ascii_case(method) {
                return false;
            }
        }
        caps.clear();
        let (p, query) = match memchr::memchr(b'?', path) {
            Some(q) => (&path[..q], Some(q + 1)),
            None => (path, None),
        };
        if !match_toks(&self.toks, p, caps) {
            return false;
        }
        let Some(params) = &self.query else {
            return true;
        };
        // The request's parameters: their ranges in `path` (no allocation: this runs for
        // every line of a log).
        let q = query.unwrap_or(path.len());
        let args = || {
            path[q..]
                .split(|&b| b == b'&')
                .scan(q, |at, piece| {
                    let s = *at;
                    *at += piece.len() + 1;
                    Some((s, s + piece.len()))
                })
                .filter(|&(s, e)| s < e)
        };
        // `toks` against `path[s..e]`, its captures appended to `caps` as ranges in `path`
        // (`caps` as it was when they do not match).
        let at = |toks: &[Tok], s: usize, e: usize, caps: &mut Vec<(usize, usize)>| {
            let n = caps.len();
            if !match_toks(toks, &path[s..e], caps) {
                caps.truncate(n);
                return false;
            }
            for c in &mut caps[n..] {
                *c = (c.0 + s, c.1 + s);
            }
            true
        };
        for param in params {
            let ok = match param {
                Param::Named(name, value) => args()
                    .find_map(|(s, e)| {
                        let arg = &path[s..e];
                        let (n, v) = match memchr::memchr(b'=', arg) {
                            Some(k) => (&arg[..k], s + k + 1),
                            None => (arg, e),
                        };
                        (n == name.as_slice()).then_some((v, e))
                    })
                    .is_some_and(|(v, e)| at(value, v, e, caps)),
                Param::Whole(toks) => {
                    args().any(|(s, e)| at(toks, s, e, caps))
                        // An empty query string (`/search?`): `*` matches it, as it did
                        // when the query was matched as text.
                        || (query.is_some() && args().next().is_none() && at(toks, q, q, caps))
                }
            };
            if !ok {
                return false;
            }
        }
        true
    }
}

/// Whether `toks` match all of `s`, `caps` receiving the captures of the first match in this
/// order: a `{name}` capture shortest first ("{id}.json" leaves ".json" to the literal), a
/// `*` from its earliest start. A search that tried every choice anew at every wildcard took
/// O(len^wildcards) steps on a path the log's writer chose (`/*/*/*/x` against 8 KB of
/// slashes); this one tries each wildcard at each position at most once (see [`Walk`]).
fn match_toks(toks: &[Tok], s: &[u8], caps: &mut Vec<(usize, usize)>) -> bool {
    let mut small = [NEVER_FAILED; 16];
    let mut large = Vec::new();
    let failed = if toks.len() <= small.len() {
        &mut small[..toks.len()]
    } else {
        large.resize(toks.len(), NEVER_FAILED);
        &mut large[..]
    };
    Walk {
        toks,
        s,
        failed,
        steps: 0,
    }
    .walk(0, 0, caps)
}

const NEVER_FAILED: (usize, usize) = (usize::MAX, usize::MAX);

/// The match's search. `failed[i] = (from, reach)`: after the wildcard `toks[i]`, nothing
/// matches from any end in `from..=reach`, `reach` being how far the wildcard may extend (the
/// end of `s` for a `*`, the end of its path segment for a capture). From a later position
/// within the same reach its candidate ends are among those, so it fails at once, and from an
/// earlier one only the ends before `from` are new: every (token, end) is tried at most once,
/// O(tokens x len) steps. Whether `toks[i..]` match `s[at..]` depends on
/// `(i, at)` alone, so skipping a candidate known to fail never changes the first match.
struct Walk<'a> {
    toks: &'a [Tok],
    s: &'a [u8],
    failed: &'a mut [(usize, usize)],
    /// Positions tried (for the tests' bound).
    steps: usize,
}

impl Walk<'_> {
    fn walk(&mut self, i: usize, at: usize, caps: &mut Vec<(usize, usize)>) -> bool {
        let s = self.s;
        let Some(t) = self.toks.get(i) else {
            return at == s.len();
        };
        match t {
            Tok::Lit(l) => s[at..].starts_with(l) && self.walk(i + 1, at + l.len(), caps),
            Tok::Seg | Tok::Star | Tok::Val => {
                let star = matches!(t, Tok::Star);
                if star && i + 1 == self.toks.len() {
                    return true;
                }
                let reach = if matches!(t, Tok::Seg) {
                    memchr::memchr(b'/', &s[at..]).map_or(s.len(), |k| at + k)
                } else {
                    s.len()
                };
                // A capture takes at least one byte; a `*` may take none.
                let first = if star { at } else { at + 1 };
                // Candidates from `from` on in this reach are known to fail.
                let (from, known) = self.failed[i];
                let stop = if known == reach { from } else { reach + 1 };
                let n = caps.len();
                for end in first..stop {
                    self.steps += 1;
                    caps.truncate(n);
                    if !star {
                        caps.push((at, end));
                    }
                    if self.walk(i + 1, end, caps) {
                        return true;
                    }
                }
                caps.truncate(n);
                self.failed[i] = (first.min(stop), reach);
                false
            }
        }
    }
}

/// One component of a request's key (`--key`, repeatable: the key is all of them).
#[derive(Clone, Debug)]
pub enum KeyPart {
    /// The client address, by prefix.
    Ip,
    /// A request header (nginx's `http_NAME` fields in JSON and CSV logs).
    Header(String),
    /// A field of the log line.
    Field(String),
    /// The path without its query string.
    Path,
    /// The path pattern's captures, or the pattern itself if it has none; requests whose path
    /// does not match have no key.
    PathPattern(Route),
    /// The request method.
    Method,
    /// One key for every request.
    All,
}

impl KeyPart {
    pub fn parse(text: &str) -> Result<KeyPart, CliError> {
        let err = |r: &str| CliError::usage("--key", text, r);
        let (kind, arg) = match text.split_once(':') {
            Some((k, a)) => (k.trim().to_ascii_lowercase(), Some(a.trim())),
            None => (text.trim().to_ascii_lowercase(), None),
        };
        let need = |a: Option<&str>| -> Result<String, CliError> {
            match a {
                Some(a) if !a.is_empty() => Ok(a.to_string()),
                _ => Err(err("needs a name after ':'")),
            }
        };
        Ok(match (kind.as_str(), arg) {
            ("ip", None) => KeyPart::Ip,
            ("header", a) => KeyPart::Header(need(a)?),
            ("field", a) => KeyPart::Field(need(a)?),
            ("path", None) => KeyPart::Path,
            ("path", Some(p)) => KeyPart::PathPattern(Route::parse(p).map_err(|e| err(&e))?),
            ("method", None) => KeyPart::Method,
            ("all", None) => KeyPart::All,
            _ => {
                return Err(err(
                    "expected ip, header:NAME, field:NAME, path, path:PATTERN, method or all",
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(route: &str, method: &str, path: &str) -> Option<Vec<String>> {
        let r = Route::parse(route).unwrap();
        let mut caps = Vec::new();
        r.matches(method.as_bytes(), path.as_bytes(), &mut caps)
            .then(|| caps.iter().map(|&(a, b)| path[a..b].to_string()).collect())
    }

    /// The plain search, every choice tried anew (exponential in the wildcards): the
    /// reference the matcher must agree with, match and captures.
    fn plain(toks: &[Tok], s: &[u8], at: usize, caps: &mut Vec<(usize, usize)>) -> bool {
        let Some((t, rest)) = toks.split_first() else {
            return at == s.len();
        };
        match t {
            Tok::Lit(l) => s[at..].starts_with(l) && plain(rest, s, at + l.len(), caps),
            Tok::Seg | Tok::Val => {
                let seg_end = match t {
                    Tok::Seg => memchr::memchr(b'/', &s[at..]).map_or(s.len(), |k| at + k),
                    _ => s.len(),
                };
                let n = caps.len();
                for end in at + 1..=seg_end {
                    caps.truncate(n);
                    caps.push((at, end));
                    if plain(rest, s, end, caps) {
                        return true;
                    }
                }
                caps.truncate(n);
                false
            }
            Tok::Star => {
                let n = caps.len();
                for start in at..=s.len() {
                    caps.truncate(n);
                    if plain(rest, s, start, caps) {
                        return true;
                    }
                }
                false
            }
        }
    }

    /// The matcher's answer and how many candidate ends it tried.
    fn walked(toks: &[Tok], s: &[u8]) -> (bool, Vec<(usize, usize)>, usize) {
        let mut failed = vec![NEVER_FAILED; toks.len()];
        let mut w = Walk {
            toks,
            s,
            failed: &mut failed,
            steps: 0,
        };
        let mut caps = Vec::new();
        let ok = w.walk(0, 0, &mut caps);
        (ok, if ok { caps } else { Vec::new() }, w.steps)
    }

    #[test]
    fn the_matcher_agrees_with_the_plain_search() {
        // Every pattern of up to 6 pieces over {"/", "a", "ab", *, {x}} against random paths
        // over {'/', 'a', 'b'} (a fixed-seed generator: the same cases every run).
        let pieces = ["/", "a", "ab", "*", "{x}"];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((seed >> 33) % n) as usize
        };
        let (mut cases, mut matched) = (0, 0);
        for _ in 0..20_000 {
            let mut pat = String::from("/");
            for _ in 0..next(6) + 1 {
                pat.push_str(pieces[next(pieces.len() as u64)]);
            }
            let Ok(r) = Route::parse(&pat) else { continue };
            let path: Vec<u8> = (0..next(12)).map(|_| [b'/', b'a', b'b'][next(3)]).collect();
            let path = [b"/".as_slice(), &path].concat();
            let mut want = Vec::new();
            let ok = plain(&r.toks, &path, 0, &mut want);
            let (got, caps, _) = walked(&r.toks, &path);
            assert_eq!(
                (got, caps),
                (ok, if ok { want } else { Vec::new() }),
                "{pat} on {:?}",
                String::from_utf8_lossy(&path)
            );
            cases += 1;
            matched += usize::from(ok);
        }
        assert!(
            cases > 15_000 && matched > 1_000,
            "{cases} cases, {matched} matched"
        );
    }

    #[test]
    fn a_hostile_path_costs_tokens_times_length() {
        // Each of these took O(len^wildcards) steps in the plain search (at 8 KB: beyond any
        // log's patience); the matcher tries each wildcard's ends at most once.
        let slashes = "/".repeat(8192);
        let a = format!("/{}", "a".repeat(8191));
        let cases = [
            ("/*/*/*/*/x", slashes.as_str()),
            ("/*a*a*a*a*b", a.as_str()),
            ("*{x}a{y}a{z}b", a.as_str()),
            ("/{a}*{b}*{c}*x", a.as_str()),
        ];
        for (pat, path) in cases {
            let r = Route::parse(pat).unwrap();
            let (ok, _, steps) = walked(&r.toks, path.as_bytes());
            assert!(!ok, "{pat}");
            let bound = r.toks.len() * (path.len() + 1);
            assert!(steps <= bound, "{pat}: {steps} steps, more than {bound}");
        }
    }

    #[test]
    fn routes() {
        assert_eq!(m("/api/*", "GET", "/api/users/1"), Some(vec![]));
        assert_eq!(m("/api/*", "GET", "/apix"), None);
        assert_eq!(m("*", "GET", "/"), Some(vec![]));
        assert_eq!(m("/login", "POST", "/login?next=/"), Some(vec![]));
        assert_eq!(m("POST /login", "GET", "/login"), None);
        assert_eq!(m("post /login", "POST", "/login"), Some(vec![]));
        assert_eq!(
            m("/users/{id}/posts/*", "GET", "/users/42/posts/7/x"),
            Some(vec!["42".into()])
        );
        assert_eq!(m("/users/{id}", "GET", "/users/42/posts"), None);
        assert_eq!(m("/users/{id}", "GET", "/users/"), None);
        assert_eq!(
            m("/f/{name}.json", "GET", "/f/a.b.json"),
            Some(vec!["a.b".into()])
        );
        assert_eq!(m("/*/{t}/x", "GET", "/a/b/c/x"), Some(vec!["c".into()]));
        assert_eq!(m("/s?q=*", "GET", "/s?q=1"), Some(vec![]));
        assert_eq!(m("/s?q=*", "GET", "/s"), None);
        assert_eq!(m("/s?q=*", "GET", "/s?p=1"), None);
    }

    /// A capture in a query parameter takes that parameter's value, up to the next `&`,
    /// wherever the parameter is in the query string.
    #[test]
    fn query_parameters_match_by_name() {
        let q = "/search?q={q}";
        assert_eq!(m(q, "GET", "/search?q=abc"), Some(vec!["abc".into()]));
        assert_eq!(
            m(q, "GET", "/search?q=abc&page=2"),
            Some(vec!["abc".into()])
        );
        assert_eq!(
            m(q, "GET", "/search?page=2&q=abc"),
            Some(vec!["abc".into()])
        );
        assert_eq!(m(q, "GET", "/search?q=a/b"), Some(vec!["a/b".into()]));
        assert_eq!(m(q, "GET", "/search?query=abc"), None);
        assert_eq!(m(q, "GET", "/search?q="), None);
        assert_eq!(m(q, "GET", "/search"), None);
        assert_eq!(m(q, "GET", "/searchx?q=abc"), None);
        // The first parameter of the name; several parameters, in the pattern's order.
        assert_eq!(m(q, "GET", "/search?q=a&q=b"), Some(vec!["a".into()]));
        assert_eq!(
            m("/t/{t}/s?b={b}&a={a}", "GET", "/t/x/s?a=1&c=3&b=2"),
            Some(vec!["x".into(), "2".into(), "1".into()])
        );
        assert_eq!(m("/s?v=1", "GET", "/s?x=0&v=1"), Some(vec![]));
        assert_eq!(m("/s?v=1", "GET", "/s?v=12"), None);
        assert_eq!(
            m("/s?id={id}.json", "GET", "/s?id=7.json"),
            Some(vec!["7".into()])
        );
        // `?*`: any query, an empty one included (it matched as text before), but a `?`.
        assert_eq!(m("/search?*", "GET", "/search?"), Some(vec![]));
        assert_eq!(m("/search?*", "GET", "/search?a=1"), Some(vec![]));
        assert_eq!(m("/search?*", "GET", "/search"), None);
        assert_eq!(m("/search?x", "GET", "/search?"), None);
        assert!(Route::parse("api").is_err());
        assert!(Route::parse("/a/{").is_err());
    }

    #[test]
    fn policies() {
        let p = PolicySpec::parse("10/s; burst=50").unwrap();
        assert_eq!(p.name, "10/s; burst=50");
        assert_eq!(p.rules.len(), 1);
        let p = PolicySpec::parse("strict = 5/s; burst=10").unwrap();
        assert_eq!(p.name, "strict");
        assert_eq!(p.rules[0].parts[0].rate.burst(), 10);
        let p = PolicySpec::parse("both=10/s & global 100/s").unwrap();
        assert_eq!(p.rules[0].parts.len(), 2);
        assert_eq!(p.rules[0].parts[1].scope, Scope::Global);
        let p = PolicySpec::parse("/search* => 2/s | POST /login => 5/m | * => 50/s").unwrap();
        assert_eq!(p.rules.len(), 3);
        assert_eq!(p.name, "/search* => 2/s | POST /login => 5/m | * => 50/s");
        let mut caps = Vec::new();
        assert_eq!(p.rule_for(b"GET", b"/search?q=x", &mut caps), Some(0));
        assert_eq!(p.rule_for(b"GET", b"/login", &mut caps), Some(2));
        assert_eq!(p.rule_for(b"POST", b"/login", &mut caps), Some(1));
        let p = PolicySpec::parse("r=/api/* => 1/s").unwrap();
        assert_eq!(p.rule_for(b"GET", b"/", &mut caps), None);
        assert_eq!(PolicySpec::parse("global 9/s").unwrap().name, "global 9/s");
        assert!(PolicySpec::parse("10/fortnight")
            .unwrap_err()
            .to_string()
            .contains("fortnight"));
        assert!(PolicySpec::parse("x=").is_err());
        assert!(PolicySpec::parse("/a => 1/s | 2/s").is_err());
        assert!(PolicySpec::parse("1/s & ").is_err());
        assert!(PolicySpec::parse("1/s; algorithm=gcra & 2/s; algorithm=sliding_log").is_ok());
    }

    #[test]
    fn keys() {
        assert!(matches!(KeyPart::parse("ip").unwrap(), KeyPart::Ip));
        assert!(
            matches!(KeyPart::parse("header:X-Api-Key").unwrap(), KeyPart::Header(h) if h == "X-Api-Key")
        );
        assert!(matches!(
            KeyPart::parse("path:/t/{tenant}/*").unwrap(),
            KeyPart::PathPattern(_)
        ));
        assert!(KeyPart::parse("header:").is_err());
        assert!(KeyPart::parse("cookie").is_err());
    }
}
