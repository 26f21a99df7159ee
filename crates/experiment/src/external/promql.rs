//! The little PromQL this crate writes: label selectors whose values come from the experiment
//! file, escaped as PromQL string literals, and the `$window` placeholder of rate windows.
//! Nothing here parses PromQL; Prometheus judges the queries (a malformed one is a warning at
//! run time, not a panic).

use std::fmt::Write as _;

/// A label matcher: `name=value` or `name=~regex`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Matcher {
    pub label: String,
    pub value: String,
    /// `=~` (the value is an RE2 regular expression, matched against the whole label value)
    /// instead of `=`.
    pub regex: bool,
}

impl Matcher {
    pub fn eq(label: &str, value: &str) -> Matcher {
        Matcher {
            label: label.into(),
            value: value.into(),
            regex: false,
        }
    }

    pub fn re(label: &str, value: &str) -> Matcher {
        Matcher {
            label: label.into(),
            value: value.into(),
            regex: true,
        }
    }
}

/// `metric{a="x",b=~"y"}`, the matchers in the order given, each value a PromQL string literal.
pub fn selector(metric: &str, matchers: &[Matcher]) -> String {
    let mut s = format!("{metric}{{");
    for (i, m) in matchers.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let op = if m.regex { "=~" } else { "=" };
        let _ = write!(s, "{}{op}{}", m.label, string_literal(&m.value));
    }
    s.push('}');
    s
}

/// `text` as a double-quoted PromQL string literal: backslash, double quote and control
/// characters escaped (PromQL reads Go's escapes), everything else as it is. A regular
/// expression's own backslashes are doubled too, so `a\.b` reaches RE2 as `a\.b`.
pub fn string_literal(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(s, "\\x{:02x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// Whether `name` can be a label name in a selector: `[a-zA-Z_][a-zA-Z0-9_]*`, and not one of
/// Prometheus' reserved `__` names.
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// The placeholder of a rate window in a query: replaced by the experiment's window
/// (`60s`, or `4000ms`) before the query is sent.
pub const WINDOW: &str = "$window";

/// A duration as PromQL writes it, in whole milliseconds (`4000ms`): exact for any window.
pub fn duration(ms: u64) -> String {
    format!("{}ms", ms.max(1))
}

/// `query` with every `$window` replaced by `window_ms`.
pub fn with_window(query: &str, window_ms: u64) -> String {
    query.replace(WINDOW, &duration(window_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_promql_strings() {
        assert_eq!(string_literal("bench"), "\"bench\"");
        assert_eq!(string_literal(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(string_literal("x\ny\u{1}"), "\"x\\ny\\x01\"");
        assert_eq!(string_literal("é-ü"), "\"é-ü\"");
        assert_eq!(
            selector(
                "container_cpu_usage_seconds_total",
                &[
                    Matcher::eq("container", "istio-proxy"),
                    Matcher::re("pod", r"fortio\.server-.*")
                ]
            ),
            r#"container_cpu_usage_seconds_total{container="istio-proxy",pod=~"fortio\\.server-.*"}"#
        );
    }

    #[test]
    fn label_names_follow_prometheus() {
        for ok in ["pod", "_x", "a1_b"] {
            assert!(is_label_name(ok), "{ok}");
        }
        for bad in ["", "1a", "a-b", "a b", "__name__", "pod\"}"] {
            assert!(!is_label_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_window_placeholder_is_replaced_everywhere() {
        assert_eq!(
            with_window("rate(a[$window]) / rate(b[$window])", 4000),
            "rate(a[4000ms]) / rate(b[4000ms])"
        );
    }
}
