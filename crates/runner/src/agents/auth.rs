//! Who may control an agent: both sides say who they are, then prove they hold the shared
//! token without sending it. Each side sends a fresh random nonce in its `Hello`; each answers
//! with HMAC-SHA256(token, its role and both nonces) and checks the peer's answer with a
//! constant-time comparison (`ring::hmac::verify`). A version, protocol or schema that differs
//! is refused before any proof, with one line naming both, on both sides.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use meshbench_results::run::SCHEMA;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::wire::{Framed, Message, PROTOCOL};

/// The shared token: at least 16 bytes, from a file or the environment, never printed.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Why a token cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("no agent token: give --token-file FILE or set {}", super::TOKEN_ENV)]
    Missing,
    #[error("cannot read the token file {path}: {why}")]
    Unreadable { path: String, why: String },
    #[error("the agent token has {0} bytes; use at least 16 (e.g. `openssl rand -hex 32`)")]
    TooShort(usize),
}

impl Token {
    pub const MIN_LEN: usize = 16;

    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Token, TokenError> {
        let mut bytes = bytes.into();
        while bytes.last().is_some_and(|b| b.is_ascii_whitespace()) {
            bytes.pop();
        }
        if bytes.len() < Self::MIN_LEN {
            return Err(TokenError::TooShort(bytes.len()));
        }
        Ok(Token(bytes))
    }

    /// From `file` if given, else from the environment.
    pub fn load(file: Option<&Path>) -> Result<Token, TokenError> {
        match file {
            Some(p) => Token::new(std::fs::read(p).map_err(|e| TokenError::Unreadable {
                path: p.display().to_string(),
                why: e.to_string(),
            })?),
            None => match std::env::var(super::TOKEN_ENV) {
                Ok(v) if !v.is_empty() => Token::new(v),
                _ => Err(TokenError::Missing),
            },
        }
    }

    fn key(&self) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &self.0)
    }
}

/// Which end of a control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Agent,
    Coordinator,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Agent => "agent",
            Side::Coordinator => "coordinator",
        }
    }
}

/// The first message of each side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// Always `meshbench`.
    pub product: String,
    pub version: String,
    pub protocol: u32,
    /// The result schema its parts are measured in.
    pub schema: String,
    /// Which end sent it (its wire key is `role`, as it always was).
    pub role: Side,
    pub name: String,
    /// 32 random bytes, hex.
    pub nonce: String,
}

impl Hello {
    /// This process's hello, with a fresh nonce.
    pub fn ours(role: Side, name: &str) -> Hello {
        let mut nonce = [0u8; 32];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the system's random source works");
        Hello {
            product: "meshbench".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: PROTOCOL,
            schema: SCHEMA.to_string(),
            role,
            name: name.to_string(),
            nonce: hex(&nonce),
        }
    }
}

/// Why a control connection was not established.
#[derive(Debug, Error)]
pub enum HandshakeError {
    #[error("{peer} refused: {reason}")]
    Refused { peer: String, reason: String },
    #[error("{peer} is meshbench {theirs}, this is {ours}: run the same version on both sides")]
    Version {
        peer: String,
        ours: String,
        theirs: String,
    },
    #[error("{peer} speaks {what} {theirs}, this side {ours}: run the same meshbench version on both sides")]
    Protocol {
        peer: String,
        what: &'static str,
        ours: String,
        theirs: String,
    },
    #[error(
        "{peer} did not prove the shared token (wrong token): give both sides the same {}",
        super::TOKEN_ENV
    )]
    WrongToken { peer: String },
    #[error("{peer} is a {role} too: an agent talks to a coordinator")]
    SameRole { peer: String, role: &'static str },
    #[error("{peer} is not a meshbench peer: {why}")]
    NotMeshbench { peer: String, why: String },
    #[error("{peer} said nothing within {waited:?}")]
    Silent { peer: String, waited: Duration },
    #[error("{peer}: {source}")]
    Io {
        peer: String,
        source: std::io::Error,
    },
}

fn mac_input(sender: Side, receiver_nonce: &str, sender_nonce: &str) -> Vec<u8> {
    format!(
        "meshbench-agents/{PROTOCOL}\n{}\n{receiver_nonce}\n{sender_nonce}",
        sender.name()
    )
    .into_bytes()
}

/// Says hello, checks the peer's, proves the token and checks the peer's proof. Returns the
/// peer's hello. On a mismatch the peer is told why (a `Refused`) before the error returns.
pub fn handshake(
    framed: &mut Framed,
    ours: &Hello,
    token: &Token,
    wait: Duration,
) -> Result<Hello, HandshakeError> {
    let peer = framed.peer();
    let io = |source| HandshakeError::Io {
        peer: peer.clone(),
        source,
    };
    framed.send(&Message::Hello(ours.clone())).map_err(io)?;
    let theirs = match next(framed, wait, &peer)? {
        Message::Hello(h) => h,
        other => {
            return Err(HandshakeError::NotMeshbench {
                peer,
                why: format!("its first message was {other:?}"),
            })
        }
    };
    let mismatch = if theirs.product != "meshbench" {
        Some(HandshakeError::NotMeshbench {
            peer: peer.clone(),
            why: format!("it calls itself '{}'", theirs.product),
        })
    } else if theirs.version != ours.version {
        Some(HandshakeError::Version {
            peer: peer.clone(),
            ours: ours.version.clone(),
            theirs: theirs.version.clone(),
        })
    } else if theirs.protocol != ours.protocol {
        Some(HandshakeError::Protocol {
            peer: peer.clone(),
            what: "control protocol",
            ours: ours.protocol.to_string(),
            theirs: theirs.protocol.to_string(),
        })
    } else if theirs.schema != ours.schema {
        Some(HandshakeError::Protocol {
            peer: peer.clone(),
            what: "result schema",
            ours: ours.schema.clone(),
            theirs: theirs.schema.clone(),
        })
    } else if theirs.role == ours.role {
        Some(HandshakeError::SameRole {
            peer: peer.clone(),
            role: ours.role.name(),
        })
    } else {
        None
    };
    if let Some(e) = mismatch {
        let reason = match &e {
            HandshakeError::Version { ours, theirs, .. } => {
                format!("this side is meshbench {ours}, you are {theirs}: run the same version on both sides")
            }
            other => other.to_string(),
        };
        let _ = framed.send(&Message::Refused { reason });
        return Err(e);
    }
    let mac = hmac::sign(
        &token.key(),
        &mac_input(ours.role, &theirs.nonce, &ours.nonce),
    );
    framed
        .send(&Message::Proof {
            mac: hex(mac.as_ref()),
        })
        .map_err(io)?;
    let proof = match next(framed, wait, &peer)? {
        Message::Proof { mac } => mac,
        other => {
            return Err(HandshakeError::NotMeshbench {
                peer,
                why: format!("it sent {other:?} instead of its proof"),
            })
        }
    };
    let expected = mac_input(theirs.role, &ours.nonce, &theirs.nonce);
    let valid =
        unhex(&proof).is_some_and(|tag| hmac::verify(&token.key(), &expected, &tag).is_ok());
    if !valid {
        let _ = framed.send(&Message::Refused {
            reason: format!(
                "wrong token: your proof does not match this side's token; give both sides the same {}",
                super::TOKEN_ENV
            ),
        });
        return Err(HandshakeError::WrongToken { peer });
    }
    Ok(theirs)
}

/// The next message within `wait`; a `Refused` is the peer's error.
fn next(framed: &mut Framed, wait: Duration, peer: &str) -> Result<Message, HandshakeError> {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HandshakeError::Silent {
                peer: peer.to_string(),
                waited: wait,
            });
        }
        match framed.recv(left) {
            Ok(Some(Message::Refused { reason })) => {
                return Err(HandshakeError::Refused {
                    peer: peer.to_string(),
                    reason,
                })
            }
            Ok(Some(m)) => return Ok(m),
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(HandshakeError::NotMeshbench {
                    peer: peer.to_string(),
                    why: e.to_string(),
                })
            }
            Err(source) => {
                return Err(HandshakeError::Io {
                    peer: peer.to_string(),
                    source,
                })
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
