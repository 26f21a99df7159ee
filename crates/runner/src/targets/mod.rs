//! The target list of a run: one URL, a URL template, or a targets file, turned into requests
//! serialised for their protocol and grouped by host (address + TLS name) so that connections
//! can be pooled per host.
//!
//! `--connect-to HOST:PORT:ADDR:PORT` (curl's meaning) sends a host name to another address
//! without DNS, so a thousand gateway domains can all go to one local gateway.

pub mod file;
pub mod proto;
pub mod template;

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use meshbench_engine::{Host, HttpRequest, Target, Targets, Wire};
use meshbench_results::{Order, Protocol};

use serde::{Deserialize, Serialize};
use template::Template;

use crate::load::LoadError;

type Result<T> = std::result::Result<T, LoadError>;

/// Most requests a target list may hold once expanded.
pub const MAX_TARGETS: u64 = 2_000_000;

/// One line of the target list before expansion.
#[derive(Debug, Clone)]
pub struct Source {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Where it came from, for messages: "the URL" or "targets.txt line 3".
    pub origin: String,
}

/// `--connect-to HOST:PORT:ADDR:PORT`: an empty HOST or PORT matches any; an empty ADDR or PORT
/// on the right keeps the original.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectTo {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub to_host: Option<String>,
    pub to_port: Option<u16>,
}

/// A `--connect-to` rule that is not `HOST:PORT:ADDR:PORT`; each names the rule as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectToError {
    #[error(
        "--connect-to '{0}': expected HOST:PORT:ADDR:PORT, e.g. example.com:443:127.0.0.1:8443"
    )]
    Shape(String),
    #[error("--connect-to '{rule}': '{port}' is not a port number (0-65535)")]
    Port { rule: String, port: String },
}

/// The message, for callers that report a usage error as text.
impl std::str::FromStr for ConnectTo {
    type Err = ConnectToError;

    fn from_str(s: &str) -> std::result::Result<Self, ConnectToError> {
        let parts = split_host_ports(s);
        let [host, port, to_host, to_port] = parts.as_slice() else {
            return Err(ConnectToError::Shape(s.to_string()));
        };
        let port_of = |p: &str| -> std::result::Result<Option<u16>, ConnectToError> {
            if p.is_empty() {
                return Ok(None);
            }
            p.parse().map(Some).map_err(|_| ConnectToError::Port {
                rule: s.to_string(),
                port: p.to_string(),
            })
        };
        let name = |h: &str| {
            let h = h.trim_start_matches('[').trim_end_matches(']');
            (!h.is_empty()).then(|| h.to_ascii_lowercase())
        };
        Ok(ConnectTo {
            host: name(host),
            port: port_of(port)?,
            to_host: name(to_host),
            to_port: port_of(to_port)?,
        })
    }
}

/// Splits on ':' outside square brackets (IPv6 literals).
fn split_host_ports(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ':' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// What the target list needs besides its sources.
pub struct BuildOptions<'a> {
    pub protocol: Protocol,
    pub order: Order,
    pub connect_to: &'a [ConnectTo],
    /// HTTP/1.1: also serialise each request's closing variant (`Connection: close`), for a
    /// connection's last request when the server is to close first.
    pub announce_close: bool,
    /// gRPC: what a call carries when its source has no body of its own.
    pub grpc: GrpcCall,
}

/// The call of a gRPC run. A URL with a path names the method (`/pkg.Service/Method`); a bare
/// URL calls fortio's ping. A source's body is the request message: JSON when a `.proto` is
/// given, else already serialised as protobuf (framed here); without one the call is a ping of
/// `ping_payload` bytes.
#[derive(Debug, Clone, Default)]
pub struct GrpcCall {
    pub ping_payload: usize,
    /// Sent as `grpc-timeout`: the server gives up (DEADLINE_EXCEEDED) after this long.
    pub deadline: Duration,
    /// The user's `.proto`: bodies are JSON of the method's request message.
    pub proto: Option<Arc<proto::Proto>>,
}

/// The built list, and whether it is TLS (all https) or not (all http).
pub struct Built {
    pub targets: Targets,
    pub tls: bool,
}

/// Expands every source and serialises each request once.
pub fn build(sources: &[Source], opts: &BuildOptions) -> Result<Built> {
    let (templates, total) = expand(sources, opts.protocol)?;
    let mut hosts = HostTable::default();
    let mut requests = Vec::with_capacity(total as usize);
    let mut scheme: Option<String> = None;
    for (src, tpl) in sources.iter().zip(&templates) {
        for text in tpl.iter() {
            let url = parse_url(src, &text, &mut scheme)?;
            let host = url_host(src, &url, &text)?;
            let port = url.port_or_known_default().unwrap_or(80);
            let host_id = hosts.id(&host, port, opts.connect_to)?;
            requests.push(target(src, &url, &text, &host, host_id, opts)?);
        }
    }
    Ok(Built {
        targets: Targets {
            hosts: hosts.hosts,
            requests,
            order: opts.order,
        },
        tls: scheme.as_deref() == Some("https"),
    })
}

/// Each source's URL template, parsed, and how many requests they expand to; refused when
/// that is over [`MAX_TARGETS`] or, on HTTP/1.1, when the bodies would take over 1 GiB.
fn expand(sources: &[Source], protocol: Protocol) -> Result<(Vec<Template>, u64)> {
    let mut templates = Vec::with_capacity(sources.len());
    let mut total = 0u64;
    for src in sources {
        let t = Template::parse(&src.url).map_err(|e| {
            LoadError::new(format!(
                "{}: invalid template '{}': {e}",
                src.origin, src.url
            ))
        })?;
        total += t.len();
        templates.push(t);
    }
    if total > MAX_TARGETS {
        return Err(LoadError::new(format!(
            "the target list expands to {total} requests; at most {MAX_TARGETS} are allowed (narrow the templates)"
        )));
    }
    let body_bytes: u64 = sources
        .iter()
        .zip(&templates)
        .map(|(s, t)| s.body.len() as u64 * t.len())
        .sum();
    if protocol == Protocol::Http1 && body_bytes > 1 << 30 {
        return Err(LoadError::new(
            "request bodies times targets exceed 1 GiB; use a smaller body or fewer targets",
        ));
    }
    Ok((templates, total))
}

/// One expanded URL, parsed: http or https, and the same scheme as every target before it
/// (`scheme`, set by the first).
fn parse_url(src: &Source, text: &str, scheme: &mut Option<String>) -> Result<url::Url> {
    let url = url::Url::parse(text).map_err(|e| {
        LoadError::new(format!(
            "{}: invalid URL '{text}': {e}; e.g. http://127.0.0.1:8080/",
            src.origin
        ))
    })?;
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(LoadError::new(format!(
                "{}: '{text}': unsupported scheme '{other}'; use http:// or https://",
                src.origin
            )))
        }
    }
    match scheme {
        None => *scheme = Some(url.scheme().to_string()),
        Some(s) if s != url.scheme() => {
            return Err(LoadError::new(format!(
                "{}: '{text}' is {} but earlier targets are {s}; one run uses one scheme",
                src.origin,
                url.scheme()
            )))
        }
        Some(_) => {}
    }
    Ok(url)
}

/// The URL's host, lower case; refused when it has none.
fn url_host(src: &Source, url: &url::Url, text: &str) -> Result<String> {
    Ok(url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            LoadError::new(format!(
                "{}: '{text}' has no host; give one like http://127.0.0.1:8080/",
                src.origin
            ))
        })?
        .to_ascii_lowercase())
}

/// The hosts of the list, each resolved once, in the order first met.
#[derive(Default)]
struct HostTable {
    hosts: Vec<Host>,
    /// A host and port's index in `hosts`.
    index: HashMap<(String, u16), u32>,
}

impl HostTable {
    /// The index of `host:port`, resolved (through `connect_to`) and added when new.
    fn id(&mut self, host: &str, port: u16, connect_to: &[ConnectTo]) -> Result<u32> {
        let key = (host.to_string(), port);
        if let Some(&id) = self.index.get(&key) {
            return Ok(id);
        }
        let addr = resolve(host, port, connect_to)?;
        let id = self.hosts.len() as u32;
        self.hosts.push(Host {
            name: format!("{host}:{port}"),
            addr,
            server_name: meshbench_net::tls::server_name(host),
        });
        self.index.insert(key, id);
        Ok(id)
    }
}

/// One request of `src` to `url`, serialised for the run's protocol.
fn target(
    src: &Source,
    url: &url::Url,
    text: &str,
    host: &str,
    host_id: u32,
    opts: &BuildOptions,
) -> Result<Target> {
    let mut path = url.path().to_string();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let (wire, closing) = match opts.protocol {
        Protocol::Http1 => {
            let bytes = meshbench_engine::encode_request(
                &src.method,
                &path,
                &authority,
                &src.headers,
                &src.body,
            );
            let closing = opts
                .announce_close
                .then(|| meshbench_engine::closing_variant(&bytes))
                .flatten()
                .map(Vec::into_boxed_slice);
            (Wire::Http1(bytes.into_boxed_slice()), closing)
        }
        Protocol::Http2 | Protocol::Http3 => {
            (Wire::Parts(Box::new(http_request(src, url, text)?)), None)
        }
        Protocol::Grpc => (
            Wire::Parts(Box::new(grpc_request(src, url, text, &opts.grpc)?)),
            None,
        ),
    };
    Ok(Target {
        host: host_id,
        wire,
        head: src.method == "HEAD",
        closing,
    })
}

/// The HTTP/2 and HTTP/3 form of a request: connection-specific headers are dropped (both
/// forbid them) and `Host` becomes the `:authority` of the URL.
fn http_request(src: &Source, url: &url::Url, text: &str) -> Result<HttpRequest> {
    let bad = |what: String| LoadError::new(format!("{}: {what}", src.origin));
    let method = http::Method::from_bytes(src.method.as_bytes())
        .map_err(|_| bad(format!("'{}' is not an HTTP method", src.method)))?;
    let uri: http::Uri = url
        .as_str()
        .parse()
        .map_err(|e| bad(format!("'{text}' is not a valid URI: {e}")))?;
    let mut headers = http::HeaderMap::new();
    for (name, value) in &src.headers {
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "host"
                | "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
        ) {
            continue;
        }
        let name = http::header::HeaderName::from_bytes(lower.as_bytes())
            .map_err(|_| bad(format!("'{name}' is not a valid header name")))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|_| bad(format!("the value of header '{name}' is not valid")))?;
        headers.append(name, value);
    }
    if !headers.contains_key(http::header::USER_AGENT) {
        headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!("meshbench/", env!("CARGO_PKG_VERSION"))),
        );
    }
    Ok(HttpRequest {
        method,
        uri,
        headers,
        body: src.body.clone(),
        grpc: false,
    })
}

/// A gRPC call as HTTP/2 carries it: POST to the method's path, `application/grpc`,
/// `te: trailers`, the deadline, the message framed.
fn grpc_request(src: &Source, url: &url::Url, text: &str, call: &GrpcCall) -> Result<HttpRequest> {
    use meshbench_net::grpc;
    let mut req = http_request(src, url, text)?;
    let from_json = match &call.proto {
        Some(proto) => {
            let bad = |e: proto::ProtoError| LoadError::new(format!("{}: {e}", src.origin));
            let method = proto.method(url.path()).map_err(bad)?;
            Some(proto.request(&method, &src.body).map_err(bad)?)
        }
        None => None,
    };
    let body = from_json.map_or_else(|| src.body.clone(), Bytes::from);
    if url.path() == "/" || url.path().is_empty() {
        let mut with_method = url.clone();
        with_method.set_path(grpc::PING_PATH);
        req.uri = with_method.as_str().parse().map_err(|e| {
            LoadError::new(format!(
                "{}: '{text}' with the ping method: {e}",
                src.origin
            ))
        })?;
    }
    req.method = http::Method::POST;
    let message = if body.is_empty() && call.proto.is_none() {
        let ping = grpc::PingMessage::with_payload(call.ping_payload, Duration::ZERO);
        grpc::frame(&ping)
    } else if body.len() > grpc::MAX_MESSAGE {
        return Err(LoadError::new(format!(
            "{}: a {}-byte gRPC message is over the 4 MiB limit",
            src.origin,
            body.len()
        )));
    } else {
        grpc::frame_bytes(&body)
    };
    req.body = Bytes::from(message);
    let h = &mut req.headers;
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(grpc::CONTENT_TYPE),
    );
    h.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    if !call.deadline.is_zero() {
        let timeout = grpc::timeout_header(call.deadline);
        h.insert(
            "grpc-timeout",
            http::HeaderValue::from_str(&timeout).expect("digits and a unit"),
        );
    }
    req.grpc = true;
    Ok(req)
}

/// Where to connect for `host:port`, after `--connect-to`.
fn resolve(host: &str, port: u16, connect_to: &[ConnectTo]) -> Result<SocketAddr> {
    let rule = connect_to
        .iter()
        .find(|r| r.host.as_deref().is_none_or(|h| h == host) && r.port.is_none_or(|p| p == port));
    let (to_host, to_port) = match rule {
        Some(r) => (
            r.to_host.clone().unwrap_or_else(|| host.to_string()),
            r.to_port.unwrap_or(port),
        ),
        None => (host.to_string(), port),
    };
    let lookup = to_host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = lookup.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, to_port));
    }
    let addrs: Vec<SocketAddr> = (lookup, to_port)
        .to_socket_addrs()
        .map_err(|e| {
            // The resolver's own words, less std's preamble: "Name or service not known".
            let why = e.to_string();
            let why = why
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(&why);
            LoadError::new(format!(
                "cannot resolve host '{to_host}' ({why}); use an IP or --connect-to"
            ))
        })?
        .collect();
    pick_address(&addrs).ok_or_else(|| {
        LoadError::new(format!(
            "host '{to_host}' has no address; check the name or give an IP address"
        ))
    })
}

/// Of several addresses for one name (`localhost` is often ::1 and 127.0.0.1), the first that
/// accepts a connection, as curl would use; the first one if none does (the run then counts the
/// connect errors).
fn pick_address(addrs: &[SocketAddr]) -> Option<SocketAddr> {
    if addrs.len() > 1 {
        let probe = Duration::from_millis(500);
        if let Some(a) = addrs
            .iter()
            .find(|a| std::net::TcpStream::connect_timeout(a, probe).is_ok())
        {
            return Some(*a);
        }
    }
    addrs.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_to_follows_curl() {
        let r: ConnectTo = "example.com:443:127.0.0.1:8443".parse().unwrap();
        assert_eq!(r.host.as_deref(), Some("example.com"));
        assert_eq!((r.port, r.to_port), (Some(443), Some(8443)));
        let any: ConnectTo = "::[::1]:9000".parse().unwrap();
        assert_eq!((any.host.as_deref(), any.port), (None, None));
        assert_eq!(any.to_host.as_deref(), Some("::1"));
        assert!("a:b:c".parse::<ConnectTo>().is_err());
        assert!("a:99999:c:1"
            .parse::<ConnectTo>()
            .unwrap_err()
            .to_string()
            .contains("port"));
        let rules = [any];
        let addr = resolve("workspace-1-domain-1.com", 443, &rules).unwrap();
        assert_eq!(addr, "[::1]:9000".parse().unwrap());
    }

    #[test]
    fn hosts_are_pooled_by_name_and_port() {
        let src = Source {
            method: "GET".into(),
            url: "https://w-{1..3}.com/get/{1..4}".into(),
            headers: vec![],
            body: Bytes::new(),
            origin: "the URL".into(),
        };
        let rules = ["::127.0.0.1:8443".parse().unwrap()];
        let built = build(
            &[src],
            &BuildOptions {
                protocol: Protocol::Http1,
                order: Order::RoundRobin,
                connect_to: &rules,
                announce_close: false,
                grpc: GrpcCall::default(),
            },
        )
        .unwrap();
        assert!(built.tls);
        assert_eq!(built.targets.hosts.len(), 3);
        assert_eq!(built.targets.requests.len(), 12);
        let Wire::Http1(first) = &built.targets.requests[5].wire else {
            panic!("http/1.1 wire expected")
        };
        let text = String::from_utf8_lossy(first);
        assert!(
            text.starts_with("GET /get/2 HTTP/1.1\r\nHost: w-2.com\r\n"),
            "{text}"
        );
    }
}
