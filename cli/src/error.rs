//! The CLI's errors, each with the exit code scripts can rely on (documented in `--help`):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | an output could not be written (a closed pipe is not an error) |
//! | 2 | usage: an unknown option, or a value that does not parse (rate, policy, key, duration) |
//! | 3 | input: a file cannot be opened, read or decompressed |
//! | 4 | data: no line could be used, a line is malformed under `--strict`, the fields cannot be found, or the key bound is reached |

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::io;

/// Exit codes.
pub mod exit {
    pub const OK: u8 = 0;
    pub const OUTPUT: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const INPUT: u8 = 3;
    pub const DATA: u8 = 4;
}

#[derive(Debug)]
pub enum CliError {
    /// A command-line value that does not parse: which option, the text, why.
    Usage {
        what: String,
        input: String,
        reason: String,
    },
    /// An input file could not be opened or read.
    Io { path: String, source: io::Error },
    /// A line that could not be used, under `--strict`, or a field setup that cannot work.
    Data {
        path: String,
        line: u64,
        text: String,
        reason: String,
    },
    /// Writing an output failed.
    Output { path: String, source: io::Error },
}

impl CliError {
    pub fn usage(what: &str, input: &str, reason: impl Into<String>) -> Self {
        CliError::Usage {
            what: what.into(),
            input: input.into(),
            reason: reason.into(),
        }
    }

    pub fn data(path: &str, line: u64, text: &[u8], reason: impl Into<String>) -> Self {
        CliError::Data {
            path: path.into(),
            line,
            text: clip(text),
            reason: reason.into(),
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage { .. } => exit::USAGE,
            CliError::Io { .. } => exit::INPUT,
            CliError::Data { .. } => exit::DATA,
            CliError::Output { .. } => exit::OUTPUT,
        }
    }
}

/// Text for a terminal: control characters (C0, DEL, C1) written as escapes (`\t`, `\n`,
/// `\r`, `\x1b`, `\u{9b}`), and so are the bidirectional overrides and isolates (U+202A to
/// U+202E, U+2066 to U+2069), others as they are. Logs hold text that clients chose (paths,
/// headers): printed raw, an escape sequence in it could retitle the terminal, clear the
/// screen or rewrite what was printed before, and a bidi override could make one key read as
/// another. (JSON output escapes on its own.)
pub fn printable(s: &str) -> Cow<'_, str> {
    let hostile = |c: char| c.is_control() || is_bidi_control(c);
    if !s.chars().any(hostile) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c < ' ' || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || is_bidi_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The bidirectional embeddings, overrides and isolates (U+202A to U+202E, U+2066 to U+2069).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A line quoted in an error: at most 200 characters, lossy UTF-8 (raw: see [`printable`]
/// for a terminal).
pub fn clip(text: &[u8]) -> String {
    let s = String::from_utf8_lossy(text);
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.into_owned(),
    }
}

/// Messages go to a terminal: what they quote from the logs and the command line is
/// [`printable`].
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |s: &str| printable(s).into_owned();
        match self {
            CliError::Usage {
                what,
                input,
                reason,
            } if input.is_empty() && what == "input" => write!(f, "{}", p(reason)),
            CliError::Usage {
                what,
                input,
                reason,
            } => write!(f, "invalid {what} {input:?}: {}", p(reason)),
            CliError::Io { path, source } => write!(f, "cannot read {}: {source}", p(path)),
            CliError::Data {
                path,
                line,
                text,
                reason,
            } => {
                let (path, reason) = (p(path), p(reason));
                if *line == 0 {
                    write!(f, "{path}: {reason}")
                } else {
                    write!(f, "{path}:{line}: {reason}\n  line: {}", p(text))
                }
            }
            CliError::Output { path, source } => {
                write!(f, "cannot write {}: {source}", p(path))
            }
        }
    }
}

impl std::error::Error for CliError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_for_terminals() {
        assert!(matches!(
            printable("Mozilla/5.0 (X11) é ü"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            printable("\x1b]0;pwned\x07\x1b[2J\t\r\n\x7f\u{9b}2J\u{85}\u{a0}ok"),
            "\\x1b]0;pwned\\x07\\x1b[2J\\t\\r\\n\\x7f\\u{9b}2J\\u{85}\u{a0}ok"
        );
        // A bidi override would show "/admin\u{202e}nimda/" reversed on a terminal.
        assert_eq!(
            printable("user\u{202e}nimda\u{2066}x\u{2069}"),
            "user\\u{202e}nimda\\u{2066}x\\u{2069}"
        );
        let e = CliError::data(
            "a.log",
            3,
            b"\x1b[2Jtext",
            "timestamp \"\x1b\" not understood",
        );
        assert_eq!(
            e.to_string(),
            "a.log:3: timestamp \"\\x1b\" not understood\n  line: \\x1b[2Jtext"
        );
        // No input at all: the reason alone (it said `invalid input "": ...`); an empty value
        // given elsewhere is still quoted.
        let e = CliError::usage("input", "", "no log given: name files");
        assert_eq!(e.to_string(), "no log given: name files");
        let e = CliError::usage("--policy", "", "empty");
        assert_eq!(e.to_string(), "invalid --policy \"\": empty");
    }
}
