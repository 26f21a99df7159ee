//! Topologies: who talks to whom. Each topology is a chain of roles between the client and the
//! backend, client side first, and each role has a class (which limits and which program it
//! gets) and a layer (L7 HTTP proxy or L4 tunnel). The experiment file names topologies with
//! these words; the rig starts the chain one role at a time (`rig`), each role played by a
//! program (`program`); this module knows neither.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::role::ChainRole;

/// The most routes (domains x paths) the gateway topology's plan may have: the lab generates
/// them all, and the experiment file is checked against it.
pub const MAX_ROUTES: u64 = 1_000_000;

/// Who talks to whom.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// client -> backend.
    Baseline,
    /// client -> proxy -> backend.
    Serveronly,
    /// client -> proxy -> backend, the proxy standing for the client's sidecar.
    Clientonly,
    /// client -> client proxy -> server proxy -> backend.
    Both,
    /// client -> gateway (N virtual hosts over TLS) -> backend.
    Gateway,
    /// client -> L4 tunnel -> L4 tunnel -> backend.
    Ambient,
    /// client -> L4 tunnel -> L7 waypoint -> L4 tunnel -> backend.
    Waypoint,
}

/// What kind of step the file lists (`topologies:`) and the store keeps (the `topology`
/// column): a chain of roles that meshbench starts, here or on a cluster; systems meshbench does
/// not start, read through Prometheus; or istiod under simulated proxies. Spelled with one word
/// each: the chain's topology, `external`, `control_plane`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StepKind {
    /// A chain of roles between the client and the backend.
    Chain(Topology),
    /// Systems meshbench does not start: the experiment file's `external` variants, each a URL
    /// whose roles are read from Prometheus. No chain, no class, no rig.
    External,
    /// istiod with simulated proxies connected over ADS and a real Envoy among them: what the
    /// control plane costs. No chain and no load; its steps ask a
    /// [`crate::control_plane::MeshScale`] instead.
    ControlPlane,
}

/// Istio's mutual TLS between sidecars, as a mesh-wide PeerAuthentication sets it. Clients
/// use Istio's auto mutual TLS either way: mutual TLS to every pod with a sidecar.
#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum PeerAuthentication {
    /// Istio's default: the server sidecar takes mutual TLS and plaintext.
    #[default]
    Permissive,
    /// Mutual TLS only.
    Strict,
    /// Plaintext only (the file's `proxy.mtls: false`).
    Disable,
}

impl PeerAuthentication {
    /// Its word in the file and in variant names.
    pub fn name(self) -> &'static str {
        match self {
            PeerAuthentication::Permissive => "permissive",
            PeerAuthentication::Strict => "strict",
            PeerAuthentication::Disable => "disable",
        }
    }

    /// Its mode as Istio's PeerAuthentication spells it.
    pub fn istio_mode(self) -> &'static str {
        match self {
            PeerAuthentication::Permissive => "PERMISSIVE",
            PeerAuthentication::Strict => "STRICT",
            PeerAuthentication::Disable => "DISABLE",
        }
    }
}

/// What kind of role a process plays: limits, CPU sweeps and programs are set per class.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// L7 proxies: sidecars, the gateway, the waypoint.
    Proxy,
    /// L4 tunnels.
    Tunnel,
    /// The built-in backend, at the end of every chain.
    Backend,
    /// The control plane the lab runs for the proxies it configures (istiod, Contour): not on
    /// the chain (no chain role has this class), but limited and swept as a class is.
    #[serde(rename = "control_plane")]
    ControlPlane,
}

/// What a proxy role reads of the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// HTTP: requests are parsed and forwarded over kept-alive upstream connections.
    L7,
    /// TCP: each client connection becomes one upstream connection.
    L4,
}

/// The duty a role takes on in the mesh it stands for: what a program configured as the real
/// mesh configures itself for (Envoy as Istio's sidecar, gateway, waypoint or ztunnel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duty {
    /// The client's sidecar: outbound traffic, originating mutual TLS.
    ClientSidecar,
    /// The server's sidecar: inbound traffic, terminating mutual TLS (or plaintext).
    ServerSidecar,
    /// The ingress gateway: TLS from outside, one virtual host per domain.
    Gateway,
    /// Ambient's L7 proxy between the two node tunnels.
    Waypoint,
    /// The client node's ztunnel: takes plain TCP, originates the tunnel.
    ClientTunnel,
    /// The server node's ztunnel: terminates the tunnel, plain TCP to the workload.
    ServerTunnel,
}

/// One role of a topology's chain, before it has an address or a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolePlan {
    /// Which role it is: its name in results and the stem of its files (`server_proxy`,
    /// `ztunnel_client`...).
    pub role: ChainRole,
    pub class: Class,
    pub layer: Layer,
    pub duty: Duty,
}

const fn l7(role: ChainRole, duty: Duty) -> RolePlan {
    RolePlan {
        role,
        class: Class::Proxy,
        layer: Layer::L7,
        duty,
    }
}

const fn l4(role: ChainRole, duty: Duty) -> RolePlan {
    RolePlan {
        role,
        class: Class::Tunnel,
        layer: Layer::L4,
        duty,
    }
}

impl Topology {
    pub const ALL: [Topology; 7] = [
        Topology::Baseline,
        Topology::Serveronly,
        Topology::Clientonly,
        Topology::Both,
        Topology::Gateway,
        Topology::Ambient,
        Topology::Waypoint,
    ];

    /// The topology this word names, if any.
    pub fn from_word(word: &str) -> Option<Topology> {
        Topology::ALL.into_iter().find(|t| t.name() == word)
    }

    pub fn name(self) -> &'static str {
        match self {
            Topology::Baseline => "baseline",
            Topology::Serveronly => "serveronly",
            Topology::Clientonly => "clientonly",
            Topology::Both => "both",
            Topology::Gateway => "gateway",
            Topology::Ambient => "ambient",
            Topology::Waypoint => "waypoint",
        }
    }

    /// The mode word of Istio's perf/benchmark labels.
    pub fn istio_mode(self) -> &'static str {
        match self {
            Topology::Baseline => "no_istio",
            Topology::Serveronly => "serveronly",
            Topology::Clientonly => "clientonly",
            Topology::Both => "both",
            Topology::Gateway => "ingress",
            Topology::Ambient => "ambient",
            Topology::Waypoint => "waypoint",
        }
    }

    /// The roles between the client and the backend, client side first.
    pub fn chain(self) -> &'static [RolePlan] {
        const CLIENT_PROXY: RolePlan = l7(ChainRole::ClientProxy, Duty::ClientSidecar);
        const SERVER_PROXY: RolePlan = l7(ChainRole::ServerProxy, Duty::ServerSidecar);
        const GATEWAY: RolePlan = l7(ChainRole::Gateway, Duty::Gateway);
        const WAYPOINT: RolePlan = l7(ChainRole::Waypoint, Duty::Waypoint);
        const ZTUNNEL_CLIENT: RolePlan = l4(ChainRole::ZtunnelClient, Duty::ClientTunnel);
        const ZTUNNEL_SERVER: RolePlan = l4(ChainRole::ZtunnelServer, Duty::ServerTunnel);
        match self {
            Topology::Baseline => &[],
            Topology::Serveronly => &[SERVER_PROXY],
            Topology::Clientonly => &[CLIENT_PROXY],
            Topology::Both => &[CLIENT_PROXY, SERVER_PROXY],
            Topology::Gateway => &[GATEWAY],
            Topology::Ambient => &[ZTUNNEL_CLIENT, ZTUNNEL_SERVER],
            Topology::Waypoint => &[ZTUNNEL_CLIENT, WAYPOINT, ZTUNNEL_SERVER],
        }
    }

    /// Whether a role of this class is part of the topology's chain (every one has the
    /// backend; none has the control plane, which the experiment decides:
    /// `Experiment::runs_control_plane`).
    pub fn has(self, class: Class) -> bool {
        class == Class::Backend || self.chain().iter().any(|r| r.class == class)
    }

    /// Whether a proxy stands beside the client as its sidecar (clientonly, both).
    pub fn has_client_sidecar(self) -> bool {
        self.chain().iter().any(|r| r.duty == Duty::ClientSidecar)
    }

    /// Whether a proxy stands beside the server as its sidecar (serveronly, both).
    pub fn has_server_sidecar(self) -> bool {
        self.chain().iter().any(|r| r.duty == Duty::ServerSidecar)
    }

    /// Whether it has sidecars (serveronly, clientonly, both): what Istio injects, and what
    /// its PeerAuthentication applies to.
    pub fn has_sidecars(self) -> bool {
        self.has_client_sidecar() || self.has_server_sidecar()
    }

    /// Whether a proxy of the mesh is on its chain, a sidecar or the waypoint: what the file's
    /// `proxy` section configures (the gateway has a section of its own).
    pub fn has_mesh_proxy(self) -> bool {
        self.has_sidecars() || self.chain().iter().any(|r| r.duty == Duty::Waypoint)
    }

    /// Whether it runs on ambient's data plane, the node tunnels (ambient, waypoint).
    pub fn is_ambient(self) -> bool {
        self.has(Class::Tunnel)
    }
}

impl StepKind {
    /// Every kind, in the order the file's words are listed when one is unknown.
    pub const ALL: [StepKind; 9] = [
        StepKind::Chain(Topology::Baseline),
        StepKind::Chain(Topology::Serveronly),
        StepKind::Chain(Topology::Clientonly),
        StepKind::Chain(Topology::Both),
        StepKind::Chain(Topology::Gateway),
        StepKind::Chain(Topology::Ambient),
        StepKind::Chain(Topology::Waypoint),
        StepKind::External,
        StepKind::ControlPlane,
    ];

    /// The words, as serde's "expected one of" lists them.
    const WORDS: [&'static str; 9] = [
        "baseline",
        "serveronly",
        "clientonly",
        "both",
        "gateway",
        "ambient",
        "waypoint",
        "external",
        "control_plane",
    ];

    /// The kind this word names, if any.
    pub fn from_word(word: &str) -> Option<StepKind> {
        StepKind::ALL.into_iter().find(|k| k.name() == word)
    }

    pub fn name(self) -> &'static str {
        match self {
            StepKind::Chain(t) => t.name(),
            StepKind::External => "external",
            StepKind::ControlPlane => "control_plane",
        }
    }

    /// The chain it starts, if it is one.
    pub fn chain(self) -> Option<Topology> {
        match self {
            StepKind::Chain(t) => Some(t),
            StepKind::External | StepKind::ControlPlane => None,
        }
    }

    /// The mode word of Istio's perf/benchmark labels (an external step's label ends with its
    /// variant's name instead).
    pub fn istio_mode(self) -> &'static str {
        match self {
            StepKind::Chain(t) => t.istio_mode(),
            StepKind::External => "external",
            StepKind::ControlPlane => "control_plane",
        }
    }

    /// Whether a role of this class is part of it: only a chain has classes.
    pub fn has(self, class: Class) -> bool {
        self.chain().is_some_and(|t| t.has(class))
    }
}

impl From<Topology> for StepKind {
    fn from(t: Topology) -> StepKind {
        StepKind::Chain(t)
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for StepKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for StepKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StepKind, D::Error> {
        /// Reads the word inside the deserializer's own call, so that a reader that knows
        /// where it is (the experiment file's) says where an unknown word stands.
        struct Word;
        impl serde::de::Visitor<'_> for Word {
            type Value = StepKind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a topology's word")
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<StepKind, E> {
                StepKind::from_word(word).ok_or_else(|| E::unknown_variant(word, &StepKind::WORDS))
            }
        }
        d.deserialize_str(Word)
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Proxy => "proxy",
            Class::Tunnel => "tunnel",
            Class::Backend => "backend",
            Class::ControlPlane => "control_plane",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a measured run is compared as: the system it measured. The answers group runs by it
/// and compare every subject with the baseline's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    /// A lab topology meshbench started.
    Lab(Topology),
    /// A control-plane step (istiod under simulated proxies): compared with nothing.
    ControlPlane,
    /// A step with no rig: the load aimed at a URL (stored as `url`).
    Url,
    /// An external variant, by the name its experiment file gives it; the one named like the
    /// baseline topology (`baseline`) is what the others are compared with, as a lab
    /// baseline is.
    External(String),
    /// A `meshbench run --json` file, by the name it is given (its file's stem, or `run`).
    File(String),
}

impl Subject {
    /// What a stored step measured: its topology (`None`: a URL), and for an external step its
    /// variant's name.
    pub fn of_step(kind: Option<StepKind>, variant: &str) -> Subject {
        match kind {
            None => Subject::Url,
            Some(StepKind::External) => Subject::External(variant.to_string()),
            Some(StepKind::Chain(t)) => Subject::Lab(t),
            Some(StepKind::ControlPlane) => Subject::ControlPlane,
        }
    }

    /// Its word in tables and exports: the topology's, `url`, or the variant's or file's name.
    pub fn name(&self) -> &str {
        match self {
            Subject::Lab(t) => t.name(),
            Subject::ControlPlane => StepKind::ControlPlane.name(),
            Subject::Url => "url",
            Subject::External(name) | Subject::File(name) => name,
        }
    }

    /// Whether the others are compared with it.
    pub fn is_baseline(&self) -> bool {
        match self {
            Subject::Lab(t) => *t == Topology::Baseline,
            Subject::External(name) => name == Topology::Baseline.name(),
            Subject::ControlPlane | Subject::Url | Subject::File(_) => false,
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_are_chains_of_hops() {
        let names = |t: Topology| t.chain().iter().map(|p| p.role.name()).collect::<Vec<_>>();
        assert!(names(Topology::Baseline).is_empty());
        assert_eq!(names(Topology::Both), ["client_proxy", "server_proxy"]);
        assert_eq!(
            names(Topology::Waypoint),
            ["ztunnel_client", "waypoint", "ztunnel_server"]
        );
        assert!(Topology::Ambient
            .chain()
            .iter()
            .all(|p| p.layer == Layer::L4));
    }

    #[test]
    fn a_plan_agrees_with_its_role() {
        for t in [Topology::Both, Topology::Gateway, Topology::Waypoint] {
            for p in t.chain() {
                assert_eq!(p.role.class(), p.class);
                assert_eq!(p.role.layer(), Some(p.layer));
                assert_eq!(p.role.duty(), Some(p.duty));
            }
        }
    }

    #[test]
    fn the_baseline_is_a_lab_baseline_or_an_external_variant_named_so() {
        let chain = |t| Some(StepKind::Chain(t));
        assert!(Subject::of_step(chain(Topology::Baseline), "baseline").is_baseline());
        assert!(Subject::of_step(Some(StepKind::External), "baseline").is_baseline());
        assert!(!Subject::of_step(Some(StepKind::External), "mesh").is_baseline());
        assert!(!Subject::of_step(chain(Topology::Both), "baseline").is_baseline());
        assert!(!Subject::of_step(None, "baseline").is_baseline());
        assert!(!Subject::File("baseline".into()).is_baseline());
        assert_eq!(Subject::of_step(None, "").name(), "url");
        assert_eq!(
            Subject::of_step(Some(StepKind::External), "mesh").name(),
            "mesh"
        );
    }

    #[test]
    fn classes_follow_the_chain() {
        assert!(Topology::Baseline.has(Class::Backend));
        assert!(!Topology::Baseline.has(Class::Proxy));
        assert!(Topology::Gateway.has(Class::Proxy));
        assert!(!Topology::Ambient.has(Class::Proxy));
        assert!(Topology::Waypoint.has(Class::Tunnel));
        assert!(!Topology::Both.has(Class::Tunnel));
        assert!(!StepKind::External.has(Class::Backend));
    }

    #[test]
    fn sidecars_mesh_proxies_and_ambient_follow_the_chain() {
        let which = |rule: fn(Topology) -> bool| {
            Topology::ALL
                .into_iter()
                .filter(|t| rule(*t))
                .map(Topology::name)
                .collect::<Vec<_>>()
        };
        assert_eq!(which(Topology::has_client_sidecar), ["clientonly", "both"]);
        assert_eq!(which(Topology::has_server_sidecar), ["serveronly", "both"]);
        assert_eq!(
            which(Topology::has_sidecars),
            ["serveronly", "clientonly", "both"]
        );
        assert_eq!(
            which(Topology::has_mesh_proxy),
            ["serveronly", "clientonly", "both", "waypoint"]
        );
        assert_eq!(which(Topology::is_ambient), ["ambient", "waypoint"]);
    }

    #[test]
    fn a_kind_is_spelled_with_its_one_word_and_an_unknown_word_lists_them_all() {
        for k in StepKind::ALL {
            let text = serde_json::to_string(&k).unwrap();
            assert_eq!(text, format!("\"{}\"", k.name()));
            assert_eq!(serde_json::from_str::<StepKind>(&text).unwrap(), k);
        }
        let err = serde_json::from_str::<StepKind>("\"sidecar\"").unwrap_err();
        assert!(err
            .to_string()
            .contains("unknown variant `sidecar`, expected one of `baseline`"));
        assert!(err.to_string().contains("`control_plane`"));
    }
}
