//! Which exposition format a scrape gets, from its `Accept` header.
//!
//! Three formats are offered:
//!
//! - [`Format::Protobuf`]: length-delimited `io.prometheus.client.MetricFamily` messages, the
//!   only format that carries native histograms to Prometheus 2.x. Chosen only when the client
//!   names it (`application/vnd.google.protobuf` with, if given, `proto=` and `encoding=`
//!   matching); Prometheus asks for it first when `native-histograms` is on.
//! - [`Format::OpenMetrics`]: OpenMetrics 1.0.0 text, what Prometheus asks for first by default.
//! - [`Format::Text`]: the Prometheus text format 0.0.4, for everything else: no `Accept`,
//!   `*/*`, `text/plain`, or an `Accept` none of the offers satisfies (serving something a
//!   person or a script can read beats a 406 at a scrape endpoint).
//!
//! The header is read as RFC 9110 says: comma-separated media ranges with parameters, each
//! offer takes the `q` of the most specific range that matches it, the highest `q` wins. On
//! equal `q`, the offer named by the more specific range wins (so `*/*` never picks protobuf),
//! then the order text, OpenMetrics, protobuf. Parameters we do not know (`charset`,
//! `escaping`, ...) neither match nor spoil a match; a known one (`version`, `proto`,
//! `encoding`) must equal the offer's.

/// An exposition format `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4.
    Text,
    /// OpenMetrics text 1.0.0.
    OpenMetrics,
    /// Length-delimited protobuf `MetricFamily` messages.
    Protobuf,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Protobuf => {
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
            }
        }
    }

    /// Media type and the parameters that must agree when a range names them.
    fn offer(
        self,
    ) -> (
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    ) {
        match self {
            Format::Text => ("text", "plain", &[("version", "0.0.4")]),
            Format::OpenMetrics => ("application", "openmetrics-text", &[("version", "1.0.0")]),
            Format::Protobuf => (
                "application",
                "vnd.google.protobuf",
                &[
                    ("proto", "io.prometheus.client.MetricFamily"),
                    ("encoding", "delimited"),
                ],
            ),
        }
    }
}

/// Offers in the order that breaks ties.
const OFFERS: [Format; 3] = [Format::Text, Format::OpenMetrics, Format::Protobuf];

/// One media range of an `Accept` header.
#[derive(Debug, PartialEq)]
struct Range {
    kind: String,
    subtype: String,
    /// Parameters before `q`, names lower-cased, values unquoted.
    params: Vec<(String, String)>,
    q: f64,
}

/// The format to answer a request whose `Accept` header is `accept`.
pub fn choose(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let ranges = parse(accept);
    let mut best: Option<(f64, u32, Format)> = None;
    for offer in OFFERS {
        // The most specific matching range decides the offer's q.
        let Some((specificity, q)) = ranges
            .iter()
            .filter_map(|r| matches(r, offer).map(|s| (s, r.q)))
            .max_by(|a, b| a.0.cmp(&b.0))
        else {
            continue;
        };
        if q <= 0.0 {
            continue;
        }
        let better = match best {
            None => true,
            Some((bq, bs, _)) => q > bq || (q == bq && specificity > bs),
        };
        if better {
            best = Some((q, specificity, offer));
        }
    }
    best.map_or(Format::Text, |(_, _, f)| f)
}

/// How specifically `range` names `offer` (higher is more specific), or `None` if it does not
/// match it.
fn matches(range: &Range, offer: Format) -> Option<u32> {
    let (kind, subtype, known) = offer.offer();
    if range.kind == "*" {
        return (range.subtype == "*").then_some(0);
    }
    if !range.kind.eq_ignore_ascii_case(kind) {
        return None;
    }
    if range.subtype == "*" {
        return Some(1);
    }
    if !range.subtype.eq_ignore_ascii_case(subtype) {
        return None;
    }
    let mut specificity = 2;
    for (name, value) in &range.params {
        if let Some((_, want)) = known.iter().find(|(k, _)| k == name) {
            if !value.eq_ignore_ascii_case(want) {
                return None;
            }
            specificity += 1;
        }
    }
    Some(specificity)
}

/// The media ranges of an `Accept` value; malformed ones are skipped.
fn parse(accept: &str) -> Vec<Range> {
    split_outside_quotes(accept, ',')
        .into_iter()
        .filter_map(|item| {
            let mut parts = split_outside_quotes(item, ';').into_iter();
            let media = parts.next()?.trim();
            let (kind, subtype) = media.split_once('/')?;
            let (kind, subtype) = (kind.trim(), subtype.trim());
            if kind.is_empty() || subtype.is_empty() || (kind == "*" && subtype != "*") {
                return None;
            }
            let mut range = Range {
                kind: kind.to_ascii_lowercase(),
                subtype: subtype.to_ascii_lowercase(),
                params: Vec::new(),
                q: 1.0,
            };
            for p in parts {
                let Some((name, value)) = p.split_once('=') else {
                    continue;
                };
                let name = name.trim().to_ascii_lowercase();
                let value = value.trim().trim_matches('"').to_string();
                if name == "q" {
                    // Whatever follows q is an accept-extension, not a media-type parameter.
                    range.q = value.parse::<f64>().ok().filter(|q| q.is_finite())?;
                    range.q = range.q.clamp(0.0, 1.0);
                    break;
                }
                range.params.push((name, value));
            }
            Some(range)
        })
        .collect()
}

/// Splits `s` at `sep`, except inside double-quoted strings (with `\` escapes).
fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            out.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&s[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Prometheus 2.42 sends by default, and with `--enable-feature=native-histograms`
    /// (captured from its scrapes).
    const PROMETHEUS: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const PROMETHEUS_NATIVE: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

    #[test]
    fn table() {
        use Format::*;
        let cases: &[(Option<&str>, Format)] = &[
            (None, Text),
            (Some(""), Text),
            (Some("*/*"), Text),
            (Some("text/plain"), Text),
            (Some("text/*"), Text),
            (Some("application/*"), OpenMetrics),
            (Some(PROMETHEUS), OpenMetrics),
            (Some(PROMETHEUS_NATIVE), Protobuf),
            (Some("application/openmetrics-text"), OpenMetrics),
            (Some("APPLICATION/OpenMetrics-Text; Version=1.0.0"), OpenMetrics),
            // A version we do not speak: not OpenMetrics, and nothing else asked: text.
            (Some("application/openmetrics-text;version=0.0.1"), Text),
            // Protobuf of another kind, or another encoding.
            (
                Some("application/vnd.google.protobuf;proto=other.Message;encoding=delimited"),
                Text,
            ),
            (
                Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text,text/plain;q=0.1"),
                Text,
            ),
            (Some("application/vnd.google.protobuf"), Protobuf),
            // q decides; order in the header does not.
            (
                Some("text/plain;q=0.2, application/openmetrics-text;q=0.3"),
                OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.3, application/vnd.google.protobuf;q=0.4"),
                Protobuf,
            ),
            // q=0 refuses an offer even when a wildcard would take it.
            (Some("text/plain;q=0, */*"), OpenMetrics),
            (Some("text/plain;q=0, application/openmetrics-text;q=0, */*"), Protobuf),
            // On equal q the explicitly named offer beats the wildcard.
            (Some("*/*, application/openmetrics-text"), OpenMetrics),
            // Unknown parameters do not spoil a match.
            (
                Some("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,text/plain;q=0.5"),
                OpenMetrics,
            ),
            (Some("text/plain; charset=utf-8"), Text),
            // Quoted values, commas inside quotes, garbage.
            (Some("application/openmetrics-text;version=\"1.0.0\""), OpenMetrics),
            (Some("text/plain;foo=\"a,b\";q=0.1, application/openmetrics-text;q=0.2"), OpenMetrics),
            (Some("garbage, ;;, /, */x, application/openmetrics-text;q=bad"), Text),
            (Some("image/png"), Text),
        ];
        for (accept, want) in cases {
            assert_eq!(choose(*accept), *want, "Accept: {accept:?}");
        }
    }

    #[test]
    fn q_is_read_and_clamped() {
        let r = parse("a/b;x=1;q=0.5;ext=2, c/d;q=7");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].q, 0.5);
        assert_eq!(r[0].params, vec![("x".to_string(), "1".to_string())]);
        assert_eq!(r[1].q, 1.0);
    }
}
