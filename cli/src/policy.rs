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
//! `*` matches any text, `/` included; `{name}` matches one path segment (no `/`).

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
    Seg,
}

/// A route: an optional method and a path pattern.
#[derive(Clone, Debug)]
pub struct Route {
    pub text: String,
    pub method: Option<Vec<u8>>,
    toks: Vec<Tok>,
    with_query: bool,
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
        let mut toks = Vec::new();
        let mut lit = Vec::new();
        let mut rest = pat.as_bytes();
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
                    toks.push(Tok::Seg);
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
        Ok(Route {
            text: t.to_string(),
            method,
            with_query: pat.contains('?'),
            toks,
        })
    }

    /// Whether the request matches; `caps` receives the `{name}` captures' byte ranges in
    /// `path`.
    #[inline]
    pub fn matches(&self, method: &[u8], path: &[u8], caps: &mut Vec<(usize, usize)>) -> bool {
        if let Some(m) = &self.method {
            if !m.eq_ignore_ascii_case(method) {
                return false;
            }
        }
        let path = self.subject(path);
        caps.clear();
        match_toks(&self.toks, path, 0, caps)
    }

    /// The text `matches` matches against, and its captures index: the path with its query
    /// string when the pattern has a `?`, else the path cut at `?`.
    #[inline]
    pub fn subject<'a>(&self, path: &'a [u8]) -> &'a [u8] {
        if self.with_query {
            path
        } else {
            memchr::memchr(b'?', path).map_or(path, |q| &path[..q])
        }
    }
}

fn match_toks(toks: &[Tok], s: &[u8], at: usize, caps: &mut Vec<(usize, usize)>) -> bool {
    let Some((t, rest)) = toks.split_first() else {
        return at == s.len();
    };
    match t {
        Tok::Lit(l) => s[at..].starts_with(l) && match_toks(rest, s, at + l.len(), caps),
        Tok::Seg => {
            let seg_end = memchr::memchr(b'/', &s[at..]).map_or(s.len(), |k| at + k);
            let n = caps.len();
            // Shortest first: "{id}.json" must leave ".json" to the literal.
            for end in at + 1..=seg_end {
                caps.truncate(n);
                caps.push((at, end));
                if match_toks(rest, s, end, caps) {
                    return true;
                }
            }
            caps.truncate(n);
            false
        }
        Tok::Star => {
            if rest.is_empty() {
                return true;
            }
            let n = caps.len();
            for start in at..=s.len() {
                caps.truncate(n);
                if match_toks(rest, s, start, caps) {
                    return true;
                }
            }
            false
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
