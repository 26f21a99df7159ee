//! Who played what in a step, typed: the [`Role`] (a role of a topology's chain or the backend,
//! meshbench's own sampler, or an external variant's role by the name its file gives it), the
//! proxy [`Program`]s the experiment file names, and what played a role ([`PlayedBy`]). Each is written with the word stored since the first schema (`server_proxy`,
//! `sampler`, `nginx`, `meshbench`...), so every store reads back into these types; readers
//! match them instead of comparing words.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::topology::{Class, Duty, Layer};

/// A role of a topology's chain, or the backend at its end: what the lab starts. An external
/// variant's role named with one of these words stands for it (Istio's CSV columns and SMP's
/// sidecar and ingress components read it so: `examples/external-istio.yaml` names its roles
/// `server_proxy` and `gateway`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChainRole {
    /// The client's sidecar (`client_proxy`).
    ClientProxy,
    /// The server's sidecar (`server_proxy`).
    ServerProxy,
    /// The ingress gateway (`gateway`).
    Gateway,
    /// Ambient's L7 proxy (`waypoint`).
    Waypoint,
    /// The client node's tunnel (`ztunnel_client`).
    ZtunnelClient,
    /// The server node's tunnel (`ztunnel_server`).
    ZtunnelServer,
    /// meshbench's built-in backend (`backend`); with `backend.replicas`, its first replica.
    Backend,
    /// Another replica of the backend behind the gateway (`backend_2` .. `backend_8`): the
    /// replica's number, from 2 to [`MAX_BACKEND_REPLICAS`].
    BackendReplica(u8),
}

/// The most replicas of the backend a step runs (`backend.replicas`).
pub const MAX_BACKEND_REPLICAS: u8 = 8;

/// The words of replicas 2 to [`MAX_BACKEND_REPLICAS`].
const REPLICA_NAMES: [&str; MAX_BACKEND_REPLICAS as usize - 1] = [
    "backend_2",
    "backend_3",
    "backend_4",
    "backend_5",
    "backend_6",
    "backend_7",
    "backend_8",
];

impl ChainRole {
    pub const ALL: [ChainRole; 7] = [
        ChainRole::ClientProxy,
        ChainRole::ServerProxy,
        ChainRole::Gateway,
        ChainRole::Waypoint,
        ChainRole::ZtunnelClient,
        ChainRole::ZtunnelServer,
        ChainRole::Backend,
    ];

    /// Its word in results, and the stem of its files.
    pub fn name(self) -> &'static str {
        match self {
            ChainRole::ClientProxy => "client_proxy",
            ChainRole::ServerProxy => "server_proxy",
            ChainRole::Gateway => "gateway",
            ChainRole::Waypoint => "waypoint",
            ChainRole::ZtunnelClient => "ztunnel_client",
            ChainRole::ZtunnelServer => "ztunnel_server",
            ChainRole::Backend => "backend",
            ChainRole::BackendReplica(n) => REPLICA_NAMES
                .get(usize::from(n).saturating_sub(2))
                .copied()
                .unwrap_or("backend_replica"),
        }
    }

    /// Which limits and programs it gets.
    pub fn class(self) -> Class {
        match self {
            ChainRole::ClientProxy
            | ChainRole::ServerProxy
            | ChainRole::Gateway
            | ChainRole::Waypoint => Class::Proxy,
            ChainRole::ZtunnelClient | ChainRole::ZtunnelServer => Class::Tunnel,
            ChainRole::Backend | ChainRole::BackendReplica(_) => Class::Backend,
        }
    }

    /// What it reads of the traffic; `None` for the backend, which is no hop.
    pub fn layer(self) -> Option<Layer> {
        match self.class() {
            Class::Proxy => Some(Layer::L7),
            Class::Tunnel => Some(Layer::L4),
            Class::Backend | Class::ControlPlane => None,
        }
    }

    /// The duty it takes on in the mesh it stands for; `None` for the backend.
    pub fn duty(self) -> Option<Duty> {
        match self {
            ChainRole::ClientProxy => Some(Duty::ClientSidecar),
            ChainRole::ServerProxy => Some(Duty::ServerSidecar),
            ChainRole::Gateway => Some(Duty::Gateway),
            ChainRole::Waypoint => Some(Duty::Waypoint),
            ChainRole::ZtunnelClient => Some(Duty::ClientTunnel),
            ChainRole::ZtunnelServer => Some(Duty::ServerTunnel),
            ChainRole::Backend | ChainRole::BackendReplica(_) => None,
        }
    }

    /// The backend's `n`-th replica (1-based): the backend itself for the first.
    pub fn backend_replica(n: u8) -> ChainRole {
        match n {
            0 | 1 => ChainRole::Backend,
            n => ChainRole::BackendReplica(n),
        }
    }

    /// Whether it is the backend or one of its replicas.
    pub fn is_backend(self) -> bool {
        self.class() == Class::Backend
    }

    /// The chain role this word names, if any.
    pub fn from_word(word: &str) -> Option<ChainRole> {
        let replica = (2..=MAX_BACKEND_REPLICAS).map(ChainRole::BackendReplica);
        ChainRole::ALL
            .into_iter()
            .chain(replica)
            .find(|r| r.name() == word)
    }
}

impl fmt::Display for ChainRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One role of a step, as its usage row names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    /// A role of a topology's chain or the backend (in the lab, or an external role named so).
    Chain(ChainRole),
    /// meshbench's own sampler, stored as a pseudo-role (`sampler`) so that its cost can be
    /// checked; never a proxy.
    Sampler,
    /// A role of an external variant, read from Prometheus, by the name its experiment file
    /// gives it: none of the chain's words, nor `sampler` (which the file refuses).
    External(String),
    /// Istio's control plane (`istiod`), in a `control_plane` step and beside the proxies it
    /// configures in the lab: not on any request's path.
    Istiod,
    /// Contour (`contour`), beside the gateway it configures in the lab: not on any
    /// request's path.
    Contour,
}

impl Role {
    /// Its word in results.
    pub fn name(&self) -> &str {
        match self {
            Role::Chain(r) => r.name(),
            Role::Sampler => "sampler",
            Role::External(name) => name,
            Role::Istiod => "istiod",
            Role::Contour => "contour",
        }
    }

    /// A word as a step wrote it: a chain role's, the sampler's, or else an external role's
    /// name.
    pub fn from_word(word: &str) -> Role {
        match ChainRole::from_word(word) {
            Some(r) => Role::Chain(r),
            None if word == Role::Sampler.name() => Role::Sampler,
            None if word == Role::Istiod.name() => Role::Istiod,
            None if word == Role::Contour.name() => Role::Contour,
            None => Role::External(word.to_string()),
        }
    }

    /// Whether its cost is what the answers are about: a proxy or tunnel on the path, or an
    /// external role (the file names the roles it wants costed).
    pub fn is_on_path(&self) -> bool {
        match self {
            Role::Chain(r) => match r.class() {
                Class::Proxy | Class::Tunnel => true,
                Class::Backend | Class::ControlPlane => false,
            },
            Role::Sampler | Role::Istiod | Role::Contour => false,
            Role::External(_) => true,
        }
    }

    /// The chain role, if it is one.
    pub fn chain_role(&self) -> Option<ChainRole> {
        match self {
            Role::Chain(r) => Some(*r),
            Role::Sampler | Role::External(_) | Role::Istiod | Role::Contour => None,
        }
    }

    /// Whether it is a control plane (istiod, Contour): it configures the proxies on the path.
    pub fn is_control_plane(&self) -> bool {
        matches!(self, Role::Istiod | Role::Contour)
    }

    /// The class whose `limits` key limits it: a chain role's, the control plane's; the
    /// sampler and an external role have none.
    pub fn class(&self) -> Option<Class> {
        match self {
            Role::Chain(r) => Some(r.class()),
            Role::Istiod | Role::Contour => Some(Class::ControlPlane),
            Role::Sampler | Role::External(_) => None,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Role::Chain(_) => 0,
            Role::Sampler => 1,
            Role::External(_) => 2,
            Role::Istiod => 3,
            Role::Contour => 4,
        }
    }
}

impl From<ChainRole> for Role {
    fn from(r: ChainRole) -> Role {
        Role::Chain(r)
    }
}

/// By name first (the order a map of roles had when they were words), then by kind.
impl Ord for Role {
    fn cmp(&self, other: &Role) -> Ordering {
        self.name()
            .cmp(other.name())
            .then(self.rank().cmp(&other.rank()))
    }
}

impl PartialOrd for Role {
    fn partial_cmp(&self, other: &Role) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for ChainRole {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for ChainRole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ChainRole, D::Error> {
        let word = String::deserialize(d)?;
        ChainRole::ALL
            .into_iter()
            .find(|r| r.name() == word)
            .ok_or_else(|| serde::de::Error::custom(format!("no chain role is called {word:?}")))
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Role, D::Error> {
        let word = String::deserialize(d)?;
        Ok(Role::from_word(&word))
    }
}

/// The program that plays a proxy role: the `type:` of the experiment file's `proxy`,
/// `tunnel` and `gateway` sections. The lab knows how to run each (`meshbench_lab::program`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "lowercase")]
pub enum Program {
    /// The default proxy (a Debian package, installed when missing).
    #[default]
    Nginx,
    Haproxy,
    Caddy,
    /// Needs an `envoy` binary on PATH (Envoy has no Debian package).
    Envoy,
    /// Any program, from a command template.
    Command,
    /// The gateway (`gateway.type`) and the sidecars in pods (`proxy.type`): Envoy configured
    /// by Istio's control plane, which the lab starts for them. Needs scripts/install-istio.sh
    /// and scripts/install-k8s.sh.
    Istio,
    /// The gateway (`gateway.type`) as Contour runs it: Envoy configured by Contour, which the
    /// lab starts for it. Needs scripts/install-contour.sh and scripts/install-k8s.sh.
    Contour,
}

impl Program {
    pub const ALL: [Program; 7] = [
        Program::Nginx,
        Program::Haproxy,
        Program::Caddy,
        Program::Envoy,
        Program::Command,
        Program::Istio,
        Program::Contour,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Program::Nginx => "nginx",
            Program::Haproxy => "haproxy",
            Program::Caddy => "caddy",
            Program::Envoy => "envoy",
            Program::Command => "command",
            Program::Istio => "istio",
            Program::Contour => "contour",
        }
    }

    /// The program this word names, if any.
    pub fn from_word(word: &str) -> Option<Program> {
        Program::ALL.into_iter().find(|p| p.name() == word)
    }

    /// How it comes to its configuration: written by the lab for a standalone program, or
    /// sent by a control plane to the Envoy it configures.
    pub fn configuration(self) -> Configuration {
        match self {
            Program::Nginx => Configuration::Written(Standalone::Nginx),
            Program::Haproxy => Configuration::Written(Standalone::Haproxy),
            Program::Caddy => Configuration::Written(Standalone::Caddy),
            Program::Envoy => Configuration::Written(Standalone::Envoy),
            Program::Command => Configuration::Written(Standalone::Command),
            Program::Istio => Configuration::ByControlPlane(ControlPlaneKind::Istio),
            Program::Contour => Configuration::ByControlPlane(ControlPlaneKind::Contour),
        }
    }

    /// The control plane that configures it, if one does (its binary is then Envoy).
    pub fn configured_by(self) -> Option<ControlPlaneKind> {
        match self.configuration() {
            Configuration::ByControlPlane(kind) => Some(kind),
            Configuration::Written(_) => None,
        }
    }
}

/// How a [`Program`] comes to its configuration: the two kinds of proxy the lab runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Configuration {
    /// The lab writes its configuration file and command line.
    Written(Standalone),
    /// A control plane the lab starts beside it sends its Envoy what to do.
    ByControlPlane(ControlPlaneKind),
}

/// A program that runs on the configuration the lab writes for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Standalone {
    Nginx,
    Haproxy,
    Caddy,
    Envoy,
    Command,
}

impl Standalone {
    /// The program, as the experiment file and the results name it.
    pub fn program(self) -> Program {
        match self {
            Standalone::Nginx => Program::Nginx,
            Standalone::Haproxy => Program::Haproxy,
            Standalone::Caddy => Program::Caddy,
            Standalone::Envoy => Program::Envoy,
            Standalone::Command => Program::Command,
        }
    }
}

/// Who configures an Envoy when a control plane does. Its own `type:` word (`istio`,
/// `contour`) is a [`Program`]'s: a user names what plays the role, and the lab starts the
/// control plane with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlPlaneKind {
    /// istiod, configuring Istio's gateway or its sidecars through their agents.
    Istio,
    /// Contour, configuring its Envoy from HTTPProxies.
    Contour,
}

impl ControlPlaneKind {
    /// The program word that asks for it.
    pub fn program(self) -> Program {
        match self {
            ControlPlaneKind::Istio => Program::Istio,
            ControlPlaneKind::Contour => Program::Contour,
        }
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What played a role, as its usage row's `program` names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PlayedBy {
    /// A proxy program the lab started (`nginx`, `envoy`, `istio`...).
    Proxy(Program),
    /// meshbench's built-in backend (`backend`).
    Backend,
    /// meshbench itself: the sampler's pseudo-role (`meshbench`).
    Meshbench,
    /// An external role: what it was read with, its preset's name (`istio-sidecar`,
    /// `process`...) or `promql`.
    External(String),
}

impl PlayedBy {
    /// Its word in results.
    pub fn name(&self) -> &str {
        match self {
            PlayedBy::Proxy(p) => p.name(),
            PlayedBy::Backend => "backend",
            PlayedBy::Meshbench => "meshbench",
            PlayedBy::External(source) => source,
        }
    }

    /// A word as a step wrote it: a program's, the backend's, meshbench's, or else what read
    /// an external role (no preset is named like a program).
    pub fn from_word(word: &str) -> PlayedBy {
        if let Some(p) = Program::from_word(word) {
            return PlayedBy::Proxy(p);
        }
        [PlayedBy::Backend, PlayedBy::Meshbench]
            .into_iter()
            .find(|p| p.name() == word)
            .unwrap_or_else(|| PlayedBy::External(word.to_string()))
    }
}

impl From<Program> for PlayedBy {
    fn from(p: Program) -> PlayedBy {
        PlayedBy::Proxy(p)
    }
}

impl fmt::Display for PlayedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for PlayedBy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for PlayedBy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PlayedBy, D::Error> {
        let word = String::deserialize(d)?;
        Ok(PlayedBy::from_word(&word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_is_standalone_or_configured_by_one_control_plane() {
        for p in Program::ALL {
            let back = match p.configuration() {
                Configuration::Written(s) => s.program(),
                Configuration::ByControlPlane(kind) => kind.program(),
            };
            assert_eq!(back, p);
        }
        assert_eq!(
            Program::Istio.configured_by(),
            Some(ControlPlaneKind::Istio)
        );
        assert_eq!(Program::Envoy.configured_by(), None);
    }

    #[test]
    fn every_word_reads_back_as_what_wrote_it() {
        for r in ChainRole::ALL {
            assert_eq!(Role::from_word(r.name()), Role::Chain(r));
        }
        assert_eq!(Role::from_word("sampler"), Role::Sampler);
        assert_eq!(Role::from_word("edge"), Role::External("edge".to_string()));
        for p in Program::ALL {
            assert_eq!(PlayedBy::from_word(p.name()), PlayedBy::Proxy(p));
        }
        assert_eq!(PlayedBy::from_word("backend"), PlayedBy::Backend);
        assert_eq!(PlayedBy::from_word("meshbench"), PlayedBy::Meshbench);
        assert_eq!(
            PlayedBy::from_word("promql"),
            PlayedBy::External("promql".to_string())
        );
        let text =
            serde_json::to_string(&(Role::Chain(ChainRole::ZtunnelClient), PlayedBy::Meshbench))
                .unwrap();
        assert_eq!(text, r#"["ztunnel_client","meshbench"]"#);
    }

    #[test]
    fn roles_sort_by_name_as_their_words_did() {
        let mut roles = [
            Role::Sampler,
            Role::Chain(ChainRole::ServerProxy),
            Role::Chain(ChainRole::Backend),
            Role::External("edge".into()),
        ];
        roles.sort();
        let names: Vec<&str> = roles.iter().map(Role::name).collect();
        assert_eq!(names, ["backend", "edge", "sampler", "server_proxy"]);
    }

    #[test]
    fn the_cost_is_of_the_roles_on_the_path() {
        assert!(Role::Chain(ChainRole::Gateway).is_on_path());
        assert!(Role::Chain(ChainRole::ZtunnelServer).is_on_path());
        assert!(Role::External("mesh".into()).is_on_path());
        assert!(!Role::Chain(ChainRole::Backend).is_on_path());
        assert!(!Role::Sampler.is_on_path());
    }
}
