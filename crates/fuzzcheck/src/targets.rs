//! `url_template` and `targets_file`: the runner's URL templates and targets files on any text.
//! Parsing must answer `Ok` or an error that points inside the text, never panic; a parsed
//! template stands for 1 to `MAX_EXPANSION` URLs and renders any of them, none longer than the
//! template itself (a group never renders longer than it is written).
//!
//! Both take the input as text (invalid UTF-8 replaced), as the runner reads it. A targets
//! file's `@FILE` bodies are served from memory: `@body.json` exists, every other name does not.

use meshbench_runner::targets::file::{self, FileTarget};
use meshbench_runner::targets::template::{Template, MAX_EXPANSION};

/// The check of one template text.
pub fn url_template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    template(&text);
}

/// Parses `text` as a template and renders a few of its URLs; returns how many it stands for.
fn template(text: &str) -> Option<u64> {
    let t = match Template::parse(text) {
        Ok(t) => t,
        Err(e) => {
            let columns = text.chars().count() + 1;
            assert!(
                (1..=columns).contains(&e.column),
                "column {} outside 1..={columns}: {e}",
                e.column
            );
            assert!(!e.message.is_empty());
            return None;
        }
    };
    let len = t.len();
    assert!((1..=MAX_EXPANSION).contains(&len), "{len} URLs");
    assert!(!t.is_empty());
    let render = |n: u64| {
        let url = t.nth(n);
        assert!(
            url.len() <= text.len(),
            "URL {n} ({} bytes) longer than its template ({} bytes)",
            url.len(),
            text.len()
        );
        url
    };
    for n in [0, len / 2, len - 1] {
        render(n);
    }
    if !text.contains(['{', '}']) {
        assert_eq!(len, 1);
        assert_eq!(render(0), text, "a template without groups is its own URL");
    }
    if len <= 64 {
        assert_eq!(t.iter().count() as u64, len);
    }
    Some(len)
}

/// The check of one targets file.
pub fn targets_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines = text.lines().count().max(1);
    let read_body = |name: &str| match name {
        "body.json" => Ok(b"{\"id\":1}".to_vec()),
        other => Err(format!("no body file {other}")),
    };
    match file::parse_with(&text, read_body) {
        Ok(targets) => {
            assert!(!targets.is_empty(), "Ok with no request");
            for FileTarget {
                method,
                url,
                headers,
                line,
                ..
            } in &targets
            {
                assert!((1..=lines).contains(line), "line {line} of {lines}");
                assert!(!method.is_empty() && url.contains("://"));
                assert!(headers.iter().all(|(name, _)| !name.is_empty()));
                template(url);
            }
        }
        Err(e) => {
            assert!(
                (1..=lines).contains(&e.line),
                "line {} of {lines}: {e}",
                e.line
            );
            assert!(e.column >= 1, "{e}");
        }
    }
}
