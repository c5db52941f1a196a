//! The CLI's errors, each with the exit code scripts can rely on (documented in `--help`):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | an output could not be written (a closed pipe is not an error) |
//! | 2 | usage: an unknown option, or a value that does not parse (rate, policy, key, duration) |
//! | 3 | input: a file cannot be opened, read or decompressed |
//! | 4 | data: no line could be used, a line is malformed under `--strict`, the fields cannot be found, or the key bound is reached |

use std::fmt;
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

/// A line quoted in an error: at most 200 characters, lossy UTF-8.
pub fn clip(text: &[u8]) -> String {
    let s = String::from_utf8_lossy(text);
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.into_owned(),
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage {
                what,
                input,
                reason,
            } => write!(f, "invalid {what} {input:?}: {reason}"),
            CliError::Io { path, source } => write!(f, "cannot read {path}: {source}"),
            CliError::Data {
                path,
                line,
                text,
                reason,
            } => {
                if *line == 0 {
                    write!(f, "{path}: {reason}")
                } else {
                    write!(f, "{path}:{line}: {reason}\n  line: {text}")
                }
            }
            CliError::Output { path, source } => write!(f, "cannot write {path}: {source}"),
        }
    }
}

impl std::error::Error for CliError {}
