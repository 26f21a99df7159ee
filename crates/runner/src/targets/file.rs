//! `--targets FILE`: one request per block, in the spirit of vegeta's target format.
//!
//! ```text
//! # comments and blank lines are ignored
//! GET https://workspace-{1..10}-domain-1.com/get/{1..100}
//! X-Trace: on
//!
//! POST http://127.0.0.1:8080/orders
//! Content-Type: application/json
//! @order.json
//! ```
//!
//! A block is a request line (`METHOD URL`, the URL may be a template), then optional
//! `Name: value` header lines, then an optional `@FILE` body (relative to the targets file).
//! A new request line also starts a new block.

use std::fmt;
use std::path::{Path, PathBuf};

/// A request as the file gives it, before the URL template is expanded (sent to agents as
/// is: they may not have the file).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileTarget {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    /// 1-based line of the request line.
    pub line: usize,
}

/// What is wrong with a targets file, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

fn fail(line: usize, column: usize, message: impl Into<String>) -> FileError {
    FileError {
        line,
        column,
        message: message.into(),
    }
}

/// An `@FILE` body that could not be read: which file, and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot read body file {}: {source}", .path.display())]
pub struct BodyFileError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Parses the text of a targets file; `dir` is where `@FILE` bodies are looked up.
pub fn parse(text: &str, dir: &Path) -> Result<Vec<FileTarget>, FileError> {
    parse_with(text, |file| {
        let path = dir.join(file);
        std::fs::read(&path).map_err(|source| BodyFileError { path, source })
    })
}

/// Parses the text of a targets file, reading each `@FILE` body with `read_body` (given the
/// name as written, trimmed; it answers the bytes or why not). [`parse`] reads them from disk;
/// a test or a fuzz target can hand them over without touching the file system.
pub fn parse_with<E: fmt::Display>(
    text: &str,
    mut read_body: impl FnMut(&str) -> Result<Vec<u8>, E>,
) -> Result<Vec<FileTarget>, FileError> {
    let mut out: Vec<FileTarget> = Vec::new();
    let mut open = false; // the last target may still take headers and a body
    for (idx, raw) in text.lines().enumerate() {
        let n = idx + 1;
        let line = raw.trim_end();
        let indent = line.len() - line.trim_start().len();
        let content = line.trim_start();
        if content.is_empty() {
            open = false;
            continue;
        }
        if content.starts_with('#') {
            continue;
        }
        if let Some((method, url)) = request_line(content) {
            if !url.contains("://") {
                return Err(fail(
                    n,
                    indent + method.len() + 2,
                    format!("'{url}' is not a full URL; write it like http://127.0.0.1:8080/path"),
                ));
            }
            out.push(FileTarget {
                method: method.to_string(),
                url: url.to_string(),
                headers: Vec::new(),
                body: None,
                line: n,
            });
            open = true;
            continue;
        }
        let Some(target) = out.last_mut().filter(|_| open) else {
            return Err(fail(
                n,
                indent + 1,
                "expected a request line such as 'GET http://127.0.0.1:8080/'",
            ));
        };
        if let Some(file) = content.strip_prefix('@') {
            if target.body.is_some() {
                return Err(fail(n, indent + 1, "this request already has a body"));
            }
            let body = read_body(file.trim()).map_err(|e| fail(n, indent + 2, e.to_string()))?;
            target.body = Some(body);
            continue;
        }
        if target.body.is_some() {
            return Err(fail(
                n,
                indent + 1,
                "headers must come before the @body line",
            ));
        }
        match content.split_once(':') {
            Some((name, value)) if !name.is_empty() && !name.contains(char::is_whitespace) => {
                target
                    .headers
                    .push((name.to_string(), value.trim().to_string()));
            }
            _ => {
                return Err(fail(
                    n,
                    indent + 1,
                    "expected a header 'Name: value', an @FILE body, or a blank line",
                ))
            }
        }
    }
    if out.is_empty() {
        return Err(fail(
            1,
            1,
            "the file holds no request; add a line such as 'GET http://127.0.0.1:8080/'",
        ));
    }
    Ok(out)
}

/// `METHOD URL` where METHOD is upper-case letters (or '-').
fn request_line(content: &str) -> Option<(&str, &str)> {
    let (method, url) = content.split_once(char::is_whitespace)?;
    let url = url.trim();
    let is_method =
        !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase() || b == b'-');
    (is_method && !url.is_empty() && !url.contains(char::is_whitespace)).then_some((method, url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_blocks_headers_and_bodies() {
        let dir = std::env::temp_dir().join(format!("mb-targets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b.json"), b"{\"a\":1}").unwrap();
        let text = "# two targets\nGET http://h/{1..3}\nX-A: 1\n\nPOST http://h/post\nContent-Type: application/json\n@b.json\nGET http://h/last\n";
        let t = parse(text, &dir).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            (t[0].method.as_str(), t[0].url.as_str(), t[0].line),
            ("GET", "http://h/{1..3}", 2)
        );
        assert_eq!(t[0].headers, [("X-A".to_string(), "1".to_string())]);
        assert_eq!(t[1].body.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(t[2].line, 8);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_give_line_and_column() {
        let dir = Path::new("/nonexistent");
        let cases = [
            ("X-A: 1\n", 1, 1, "request line"),
            ("GET http://h/\n\nX-A: 1\n", 3, 1, "request line"),
            ("GET http://h/\n  bogus line\n", 2, 3, "header"),
            ("GET /relative\n", 1, 5, "full URL"),
            ("GET http://h/\n@missing.bin\n", 2, 2, "cannot read"),
            ("# only a comment\n", 1, 1, "no request"),
        ];
        for (text, line, column, words) in cases {
            let e = parse(text, dir).unwrap_err();
            assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
            assert!(e.message.contains(words), "{text:?}: {e}");
        }
    }
}
