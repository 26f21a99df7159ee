//! URL templates: `https://workspace-{1..10}-domain-{1..100}.com/get/{1..50}` stands for every
//! combination of its parts. `{A..B}` is an integer range (zero-padded when A is, as in
//! `{001..100}`), `{x,y,z}` a list. Expansion is lazy: the n-th URL is computed from n, so a
//! template of a million URLs costs nothing until its URLs are used.

use std::fmt;

/// Most URLs one template may stand for.
pub const MAX_EXPANSION: u64 = 10_000_000;

/// A template that cannot be expanded, with the 1-based column of the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub column: usize,
    pub message: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Range { from: u64, len: u64, width: usize },
    List(Vec<String>),
}

impl Part {
    fn len(&self) -> u64 {
        match self {
            Part::Text(_) => 1,
            Part::Range { len, .. } => *len,
            Part::List(items) => items.len() as u64,
        }
    }
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
    count: u64,
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text.char_indices().peekable();
        while let Some((i, ch)) = rest.next() {
            match ch {
                '{' => {
                    let open = i;
                    let mut inner = String::new();
                    let mut closed = false;
                    for (_, c) in rest.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        if c == '{' {
                            return Err(err(
                                text,
                                open,
                                "'{' inside '{...}'; templates do not nest",
                            ));
                        }
                        inner.push(c);
                    }
                    if !closed {
                        return Err(err(text, open, "'{' is never closed; add '}'"));
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(parse_group(text, open, &inner)?);
                }
                '}' => return Err(err(text, i, "'}' without a '{' before it")),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        let mut count: u64 = 1;
        for p in &parts {
            count = count.saturating_mul(p.len());
        }
        if count > MAX_EXPANSION {
            return Err(TemplateError {
                column: 1,
                message: format!(
                    "stands for {count} URLs; at most {MAX_EXPANSION} are allowed, narrow a range"
                ),
            });
        }
        Ok(Template { parts, count })
    }

    /// How many URLs the template stands for.
    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The `n`-th URL (0-based), with the last group varying fastest.
    pub fn nth(&self, mut n: u64) -> String {
        let mut picks = vec![0u64; self.parts.len()];
        for (i, p) in self.parts.iter().enumerate().rev() {
            let len = p.len();
            picks[i] = n % len;
            n /= len;
        }
        let mut out = String::new();
        for (p, &k) in self.parts.iter().zip(&picks) {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Range { from, width, .. } => {
                    out.push_str(&format!("{:0width$}", from + k, width = *width))
                }
                Part::List(items) => out.push_str(&items[k as usize]),
            }
        }
        out
    }

    /// Every URL, in order.
    pub fn iter(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.count).map(|n| self.nth(n))
    }
}

fn err(text: &str, byte: usize, message: &str) -> TemplateError {
    TemplateError {
        column: text[..byte].chars().count() + 1,
        message: message.to_string(),
    }
}

fn parse_group(text: &str, open: usize, inner: &str) -> Result<Part, TemplateError> {
    if let Some((a, b)) = inner.split_once("..") {
        let (a, b) = (a.trim(), b.trim());
        let parse = |s: &str| {
            s.parse::<u64>().map_err(|_| {
                err(
                    text,
                    open,
                    &format!("'{{{inner}}}': a range needs two whole numbers, as in {{1..100}}"),
                )
            })
        };
        let (from, to) = (parse(a)?, parse(b)?);
        if to < from {
            return Err(err(
                text,
                open,
                &format!("the range {{{inner}}} ends before it starts"),
            ));
        }
        let width = if a.len() > 1 && a.starts_with('0') {
            a.len()
        } else {
            0
        };
        return Ok(Part::Range {
            from,
            // {0..18446744073709551615} has 2^64 values: saturated, it is refused as too many.
            len: (to - from).saturating_add(1),
            width,
        });
    }
    let items: Vec<String> = inner.split(',').map(str::to_string).collect();
    if items.iter().any(String::is_empty) {
        return Err(err(
            text,
            open,
            &format!("'{{{inner}}}': a list needs items between its commas, as in {{a,b,c}}"),
        ));
    }
    Ok(Part::List(items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_ranges_and_lists_in_order() {
        let t = Template::parse("https://w-{1..2}-d-{a,b}.com/get/{08..10}").unwrap();
        assert_eq!(t.len(), 12);
        let all: Vec<String> = t.iter().collect();
        assert_eq!(all[0], "https://w-1-d-a.com/get/08");
        assert_eq!(all[1], "https://w-1-d-a.com/get/09");
        assert_eq!(all[3], "https://w-1-d-b.com/get/08");
        assert_eq!(all[11], "https://w-2-d-b.com/get/10");
        let plain = Template::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(plain.iter().collect::<Vec<_>>(), ["http://127.0.0.1:8080/"]);
    }

    #[test]
    fn the_study_template_counts_without_expanding() {
        let t =
            Template::parse("https://workspace-{1..10}-domain-{1..100}.com/get/{1..100}").unwrap();
        assert_eq!(t.len(), 100_000);
        assert_eq!(t.nth(99_999), "https://workspace-10-domain-100.com/get/100");
    }

    #[test]
    fn errors_name_the_column() {
        let cases = [
            ("http://a/{1..", 10, "never closed"),
            ("http://a/}", 10, "without a '{'"),
            ("http://a/{x..3}", 10, "two whole numbers"),
            ("http://a/{5..3}", 10, "ends before"),
            ("http://a/{a,,b}", 10, "between its commas"),
            ("http://é/{a{b}}", 10, "do not nest"),
            ("http://a/{1..9999}{1..9999}", 1, "at most"),
            // Found by fuzzing (fuzz/corpus/url_template/crash-range-of-2-pow-64.txt).
            ("http://a/{0..18446744073709551615}", 1, "at most"),
        ];
        for (text, column, words) in cases {
            let e = Template::parse(text).unwrap_err();
            assert_eq!(e.column, column, "{text}: {e}");
            assert!(e.message.contains(words), "{text}: {e}");
        }
    }
}
