//! A small JSON value and writer: the CLI writes JSON (reports, `--format json`) and never
//! parses it, so no serialization framework is needed.

use std::fmt::Write as _;

#[derive(Clone, Debug)]
pub enum Jv {
    Null,
    Bool(bool),
    Int(i128),
    Num(f64),
    Str(String),
    Arr(Vec<Jv>),
    Obj(Vec<(String, Jv)>),
}

impl Jv {
    pub fn obj() -> Jv {
        Jv::Obj(Vec::new())
    }

    /// Adds a member (to an object).
    pub fn with(mut self, k: &str, v: impl Into<Jv>) -> Jv {
        if let Jv::Obj(m) = &mut self {
            m.push((k.to_string(), v.into()));
        }
        self
    }

    pub fn write(&self, out: &mut String) {
        match self {
            Jv::Null => out.push_str("null"),
            Jv::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Jv::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Jv::Num(x) if x.is_finite() => {
                let _ = write!(out, "{x}");
            }
            Jv::Num(_) => out.push_str("null"),
            Jv::Str(s) => escape(s, out),
            Jv::Arr(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out);
                }
                out.push(']');
            }
            Jv::Obj(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    escape(k, out);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }

    pub fn to_string_compact(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s
    }
}

fn escape(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Safe inside an HTML <script> element as well.
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            // Control characters (C0, DEL, C1), the line separators JavaScript reads as line
            // ends, and the bidirectional overrides and isolates: escaped, so that a log's
            // bytes shown raw by a viewer of the JSON cannot drive a terminal or make one key
            // read as another.
            c if c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl From<&str> for Jv {
    fn from(s: &str) -> Jv {
        Jv::Str(s.into())
    }
}
impl From<String> for Jv {
    fn from(s: String) -> Jv {
        Jv::Str(s)
    }
}
impl From<u64> for Jv {
    fn from(x: u64) -> Jv {
        Jv::Int(x.into())
    }
}
impl From<u32> for Jv {
    fn from(x: u32) -> Jv {
        Jv::Int(x.into())
    }
}
impl From<usize> for Jv {
    fn from(x: usize) -> Jv {
        Jv::Int(x as i128)
    }
}
impl From<f64> for Jv {
    fn from(x: f64) -> Jv {
        Jv::Num(x)
    }
}
impl From<bool> for Jv {
    fn from(x: bool) -> Jv {
        Jv::Bool(x)
    }
}
impl<T: Into<Jv>> From<Option<T>> for Jv {
    fn from(x: Option<T>) -> Jv {
        x.map_or(Jv::Null, Into::into)
    }
}
impl<T: Into<Jv>> From<Vec<T>> for Jv {
    fn from(v: Vec<T>) -> Jv {
        Jv::Arr(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes() {
        let v = Jv::obj()
            .with("a", 1u64)
            .with("s", "x\"<\n\u{1}")
            .with("n", Option::<u64>::None)
            .with("l", vec![1.5f64, f64::NAN]);
        assert_eq!(
            v.to_string_compact(),
            r#"{"a":1,"s":"x\"\u003c\n\u0001","n":null,"l":[1.5,null]}"#
        );
    }

    #[test]
    fn escapes_what_a_terminal_or_a_reader_would_act_on() {
        let v = Jv::from("a\u{7f}b\u{9b}c\u{202e}d\u{2066}e\u{2028}é");
        assert_eq!(
            v.to_string_compact(),
            r#""a\u007fb\u009bc\u202ed\u2066e\u2028é""#
        );
    }
}
