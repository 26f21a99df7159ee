//! A user's `.proto` for gRPC calls: the file is compiled here (protox, no `protoc` needed),
//! the method is found from the URL's path (`/package.Service/Method`), and a JSON body becomes
//! the method's request message (protobuf's JSON mapping), serialised once before the run.

use std::path::{Path, PathBuf};

use prost::Message;
use prost_reflect::{DescriptorError, DescriptorPool, DynamicMessage, MethodDescriptor};
use thiserror::Error;

/// Why a `.proto`, its method or a request body could not be used; each names the file, the
/// path or the message.
#[derive(Debug, Error)]
pub enum ProtoError {
    /// The file, or one it imports, does not compile.
    #[error("{}: {source}", .file.display())]
    Compile {
        file: PathBuf,
        source: protox::Error,
    },
    /// An encoded `FileDescriptorSet` (the coordinator's compilation) does not decode.
    #[error("{name}: {source}")]
    Descriptors {
        name: String,
        source: DescriptorError,
    },
    /// The URL's path is not `/package.Service/Method`; the file's methods are listed.
    #[error("'{path}': give the method as /package.Service/Method; {} has {}", .file.display(), .methods.join(", "))]
    NotAMethod {
        path: String,
        file: PathBuf,
        methods: Vec<String>,
    },
    /// The file has no such service or method; its methods are listed.
    #[error("'{path}': no such method in {}; it has {}", .file.display(), .methods.join(", "))]
    NoSuchMethod {
        path: String,
        file: PathBuf,
        methods: Vec<String>,
    },
    /// The body is not the method's request message in protobuf's JSON mapping.
    #[error("the body is not a {message} in JSON: {source}")]
    Body {
        message: String,
        source: serde_json::Error,
    },
}

/// The services of a compiled `.proto` (and of the files it imports).
#[derive(Debug, Clone)]
pub struct Proto {
    file: PathBuf,
    pool: DescriptorPool,
    /// The encoded `FileDescriptorSet` the pool was built from (what agents are sent).
    descriptors: Vec<u8>,
}

impl Proto {
    /// Compiles `file`; imports are looked up beside it and in `includes`. An error names the
    /// file.
    pub fn compile(file: &Path, includes: &[PathBuf]) -> Result<Proto, ProtoError> {
        let dir = file
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let mut paths = vec![dir];
        paths.extend(includes.iter().cloned());
        let set = protox::compile([file], &paths).map_err(|source| ProtoError::Compile {
            file: file.to_path_buf(),
            source,
        })?;
        Proto::from_descriptors(&file.display().to_string(), set.encode_to_vec())
    }

    /// The services of an encoded `FileDescriptorSet` (as [`Proto::descriptors`] gives it);
    /// `name` is the `.proto` it came from, for messages.
    pub fn from_descriptors(name: &str, descriptors: Vec<u8>) -> Result<Proto, ProtoError> {
        let pool = DescriptorPool::decode(descriptors.as_slice()).map_err(|source| {
            ProtoError::Descriptors {
                name: name.to_string(),
                source,
            }
        })?;
        Ok(Proto {
            file: PathBuf::from(name),
            pool,
            descriptors,
        })
    }

    /// The encoded `FileDescriptorSet` of the file and its imports.
    pub fn descriptors(&self) -> &[u8] {
        &self.descriptors
    }

    /// The method a gRPC path names: `/package.Service/Method`.
    pub fn method(&self, path: &str) -> Result<MethodDescriptor, ProtoError> {
        let (service, method) = path
            .trim_start_matches('/')
            .split_once('/')
            .ok_or_else(|| ProtoError::NotAMethod {
                path: path.to_string(),
                file: self.file.clone(),
                methods: self.methods(),
            })?;
        self.pool
            .get_service_by_name(service)
            .and_then(|s| s.methods().find(|m| m.name() == method))
            .ok_or_else(|| ProtoError::NoSuchMethod {
                path: path.to_string(),
                file: self.file.clone(),
                methods: self.methods(),
            })
    }

    /// Every method of every service, as a gRPC path.
    fn methods(&self) -> Vec<String> {
        let all: Vec<String> = self
            .pool
            .services()
            .flat_map(|s| {
                s.methods()
                    .map(|m| format!("/{}/{}", s.full_name(), m.name()))
                    .collect::<Vec<_>>()
            })
            .collect();
        if all.is_empty() {
            vec!["no services".into()]
        } else {
            all
        }
    }

    /// The request message of `method` from its JSON form (empty: the default message).
    pub fn request(&self, method: &MethodDescriptor, json: &[u8]) -> Result<Vec<u8>, ProtoError> {
        let input = method.input();
        if json.iter().all(u8::is_ascii_whitespace) {
            return Ok(DynamicMessage::new(input).encode_to_vec());
        }
        let mut de = serde_json::Deserializer::from_slice(json);
        let message = DynamicMessage::deserialize(input.clone(), &mut de)
            .and_then(|m| de.end().map(|()| m))
            .map_err(|source| ProtoError::Body {
                message: input.full_name().to_string(),
                source,
            })?;
        Ok(message.encode_to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping_proto(dir: &Path) -> PathBuf {
        let file = dir.join("ping.proto");
        std::fs::write(
            &file,
            "syntax = \"proto3\";\npackage fgrpc;\nmessage PingMessage {\n  int64 seq = 1;\n  int64 ts = 2;\n  string payload = 3;\n  int64 delayNanos = 4;\n}\nservice PingServer {\n  rpc Ping (PingMessage) returns (PingMessage) {}\n}\n",
        )
        .unwrap();
        file
    }

    #[test]
    fn json_becomes_the_same_bytes_as_the_message() {
        let dir = std::env::temp_dir().join(format!("meshbench-proto-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let proto = Proto::compile(&ping_proto(&dir), &[]).unwrap();
        let method = proto.method("/fgrpc.PingServer/Ping").unwrap();
        let bytes = proto
            .request(&method, br#"{"payload": "abc", "delayNanos": "2000000"}"#)
            .unwrap();
        let ping = meshbench_net::grpc::PingMessage::decode(bytes.as_slice()).unwrap();
        assert_eq!(ping.payload, "abc");
        assert_eq!(ping.delay_nanos, 2_000_000);
        assert!(proto.request(&method, b"").unwrap().is_empty());

        let err = proto
            .method("/fgrpc.PingServer/Pong")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/fgrpc.PingServer/Ping"), "{err}");
        let err = proto
            .request(&method, br#"{"nope": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("fgrpc.PingMessage"), "{err}");
        let bad = dir.join("bad.proto");
        std::fs::write(&bad, "syntax = \"proto3\";\nmessage {").unwrap();
        let err = Proto::compile(&bad, &[]).unwrap_err().to_string();
        assert!(err.contains("bad.proto"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
