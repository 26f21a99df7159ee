//! A real Kubernetes cluster on this machine for the tests of `meshbench k8s run`, started and
//! stopped by the test, from what scripts/install-k8s.sh installed and built (k8s.io/kubernetes
//! v1.36.1, Debian's etcd, containerd, runc and CNI plugins).
//!
//! Two shapes, one helper:
//! - [`TestCluster::control_plane`]: etcd, kube-apiserver and kube-controller-manager only; the
//!   test plays the node (tests/it/k8s.rs, for machines where a kubelet cannot run).
//! - [`TestCluster::with_node`]: plus kube-scheduler, containerd, a kubelet registered as node
//!   [`NODE`], kube-proxy, and a bridge CNI network ([`BRIDGE`], pods in [`POD_SUBNET`]) whose
//!   gateway [`GATEWAY`] is an address of this machine: pods have routes to the bridge and the
//!   Service range only, nothing else. [`node_unavailable`] says why it cannot run, if it
//!   cannot (not root, no writable cgroups, a binary missing, a foreign containerd).
//! - [`TestCluster::with_two_nodes`]: the same and a second node on this machine, [`NODE2`],
//!   so that where pods go is what is tested: its own containerd (root, state and socket under
//!   `STATE/node2`), its own kubelet (port, root and certificates, pod logs, and a cgroup root
//!   `meshbench-k8s/node2` nested in the tracking tree), its own bridge [`BRIDGE2`] with its
//!   pods in [`POD_SUBNET2`] behind [`GATEWAY2`]. Every pod of either node has a route to the
//!   whole [`CLUSTER_CIDR`] through its bridge's gateway, so a pod reaches the other node's
//!   pods through this machine, which forwards between the bridges. One kube-proxy serves both:
//!   the nodes share this machine's network stack and iptables, and kube-proxy's rules are the
//!   machine's, not a node's (`--cluster-cidr` is then [`CLUSTER_CIDR`]). The same binaries
//!   and images: the second node costs a containerd, a kubelet and seconds, no build.
//!
//! The contract: every server binds loopback (the pods' bridge aside); start and stop are
//! bounded and say why with the log's tail; nothing is left behind. Everything lives in one fixed
//! directory ([`STATE`]), one cgroup tree (`meshbench-k8s`: the daemons in `daemons`, the pods
//! the kubelet makes under `kubepods`), the bridge and `KUBE-*` iptables chains; [`sweep`]
//! removes all of it (processes killed by cgroup, mounts under the directory unmounted, the
//! bridge and chains deleted, cgroups removed, containerd's socket and the images gone with its
//! root), at stop and again before every start, so a run killed with SIGKILL is cleaned by the
//! next. A lock file keeps two test processes from sharing it. Daemons also die with the test
//! (parent-death signal); the containers they started wait for the next sweep.

use std::ffi::CString;
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use meshbench_lab::kube::K8S_VERSION;

use super::free_addr;

/// The one directory of the cluster (as root): data, configuration, logs, pid files.
pub const STATE: &str = "/var/lib/meshbench-k8s";
/// The cgroup (in every hierarchy) holding the daemons and, below `kubepods`, the pods.
const CGROUP: &str = "meshbench-k8s";
/// The node's name, as registered.
pub const NODE: &str = "meshbench-node";
/// The pods' bridge, its subnet and its address on this machine.
pub const BRIDGE: &str = "mbk8s0";
pub const POD_SUBNET: &str = "10.217.0.0/24";
pub const GATEWAY: &str = "10.217.0.1";
/// The Service (cluster IP) range: the only other destination a pod has a route to.
pub const SERVICE_RANGE: &str = "10.96.0.0/16";
/// The second node of [`TestCluster::with_two_nodes`]: its name, its pods' bridge, their subnet
/// and the bridge's address on this machine (the node's InternalIP).
pub const NODE2: &str = "meshbench-node2";
pub const BRIDGE2: &str = "mbk8s1";
pub const POD_SUBNET2: &str = "10.217.1.0/24";
pub const GATEWAY2: &str = "10.217.1.1";
/// Both nodes' pods: kube-proxy's cluster CIDR with two nodes, and the route every pod then
/// has to the other node's pods, through its gateway (this machine).
pub const CLUSTER_CIDR: &str = "10.217.0.0/16";
/// containerd's default socket: cAdvisor inside the kubelet looks for containerd there (with
/// another path only pod-level series appear in /metrics/cadvisor).
pub const CONTAINERD_SOCK: &str = "/run/containerd/containerd.sock";
/// How often the kubelet's cAdvisor refreshes container stats.
pub const HOUSEKEEPING: &str = "1s";
/// containerd's sandbox image, built from deploy/pause/pause.c by scripts/install-k8s.sh.
pub const PAUSE_IMAGE: &str = "localhost/meshbench-pause:1";
const API_TOKEN: &str = "meshbench-test-admin-token";
/// The user a run is made as when the test wants the shipped RBAC to be what lets it
/// (deploy/cluster-experiment-rbac.yaml bound to it): in no group, so RBAC alone decides.
pub const USER: &str = "meshbench-user";
const USER_TOKEN: &str = "meshbench-test-user-token";
const CNI_BIN: &str = "/usr/lib/cni";
const LOG_TAIL_LINES: usize = 15;

/// Where scripts/install-k8s.sh caches what it builds.
pub fn k8s_cache() -> PathBuf {
    std::env::var("K8S_CACHE").map_or_else(
        |_| PathBuf::from(format!("/var/cache/meshbench/k8s/{K8S_VERSION}")),
        PathBuf::from,
    )
}

/// The Kubernetes binaries.
pub fn k8s_bin() -> PathBuf {
    std::env::var("K8S_BIN").map_or_else(|_| k8s_cache().join("bin"), PathBuf::from)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// STATE as root; a control plane alone also runs as another user, in the temporary directory.
fn state() -> PathBuf {
    if is_root() {
        PathBuf::from(STATE)
    } else {
        std::env::temp_dir().join(format!("meshbench-k8s-{}", unsafe { libc::geteuid() }))
    }
}

/// Held while a cluster runs (outside the state directory, which a sweep removes).
fn lock_path() -> PathBuf {
    let mut p = state().into_os_string();
    p.push(".lock");
    PathBuf::from(p)
}

/// How the cgroups of this machine are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cgroups {
    /// v1: one directory per hierarchy (cpu, memory, pids...).
    V1(Vec<PathBuf>),
    /// v2: the unified tree.
    V2,
}

fn cgroups() -> Cgroups {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return Cgroups::V2;
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dirs = mounts
        .lines()
        // The cgroup2 tree of a hybrid layout too: runc makes the pods' groups there as well.
        .filter(|l| l.contains(" - cgroup ") || l.contains(" - cgroup2 "))
        .filter_map(|l| l.split(' ').nth(4).map(PathBuf::from))
        .collect();
    Cgroups::V1(dirs)
}

/// The hierarchy whose `meshbench-k8s` tree holds every process of the cluster.
fn tracking_root() -> PathBuf {
    match cgroups() {
        Cgroups::V2 => PathBuf::from("/sys/fs/cgroup").join(CGROUP),
        Cgroups::V1(_) => PathBuf::from("/sys/fs/cgroup/pids").join(CGROUP),
    }
}

/// Why a real node (containerd and a kubelet) cannot run on this machine, or None if it can.
/// Never a silent skip: the node's tests fail with this reason.
pub fn node_unavailable() -> Option<String> {
    if !is_root() {
        return Some("not root: containerd, the kubelet and the CNI plugins need root".into());
    }
    let mut missing = Vec::new();
    for b in ["kube-scheduler", "kubelet", "kube-proxy", "kube-apiserver"] {
        if !k8s_bin().join(b).exists() {
            missing.push(k8s_bin().join(b).display().to_string());
        }
    }
    for b in ["containerd", "runc", "ctr", "etcd", "iptables", "ip"] {
        if !on_path(b) {
            missing.push(b.to_string());
        }
    }
    for p in ["bridge", "host-local", "loopback"] {
        if !Path::new(CNI_BIN).join(p).exists() {
            missing.push(format!("{CNI_BIN}/{p}"));
        }
    }
    if !k8s_cache().join("images/pause.tar").exists() {
        missing.push(k8s_cache().join("images/pause.tar").display().to_string());
    }
    if !missing.is_empty() {
        return Some(format!(
            "missing {}: run scripts/install-k8s.sh",
            missing.join(", ")
        ));
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems.contains("overlay") {
        return Some("the kernel has no overlay filesystem (containerd's snapshotter)".into());
    }
    match cgroups() {
        Cgroups::V1(dirs) => {
            for c in ["cpu", "cpuacct", "cpuset", "memory", "pids"] {
                if !dirs.iter().any(|d| {
                    d.file_name()
                        .is_some_and(|n| n.to_string_lossy().split(',').any(|x| x == c))
                }) {
                    return Some(format!("cgroup v1 controller {c} is not mounted"));
                }
            }
        }
        Cgroups::V2 => {
            let have =
                std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
            for c in ["cpu", "memory", "pids"] {
                if !have.split_whitespace().any(|x| x == c) {
                    return Some(format!("cgroup v2 has no {c} controller here"));
                }
            }
        }
    }
    let probe = tracking_root().with_file_name("meshbench-k8s-probe");
    if let Err(e) = std::fs::create_dir(&probe) {
        return Some(format!(
            "cgroups are not writable ({}: {e}): the kubelet could not make pod cgroups",
            probe.display()
        ));
    }
    let _ = std::fs::remove_dir(&probe);
    None
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| d.join(program).is_file())
            || ["/usr/sbin", "/sbin"]
                .iter()
                .any(|d| Path::new(d).join(program).is_file())
    })
}

/// The last lines of a log, for a timeout's message.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    format!(
        "--- last lines of {} ---\n{}",
        path.display(),
        all[all.len().saturating_sub(lines)..].join("\n")
    )
}

/// What the cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    ControlPlane,
    WithNode,
    WithTwoNodes,
}

/// Where one node of the cluster keeps its things: the first is where it always was (STATE,
/// containerd's default socket, the tracking cgroup's root); the second nests inside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeLayout {
    name: &'static str,
    bridge: &'static str,
    subnet: &'static str,
    gateway: &'static str,
    /// Its directory below STATE; empty for the first node.
    subdir: &'static str,
    /// After its daemons' names (logs, pid files): empty for the first node.
    suffix: &'static str,
    /// The NAT chain that leads its InternalIP's kubelet port to loopback.
    kubelet_chain: &'static str,
}

const FIRST_NODE: NodeLayout = NodeLayout {
    name: NODE,
    bridge: BRIDGE,
    subnet: POD_SUBNET,
    gateway: GATEWAY,
    subdir: "",
    suffix: "",
    kubelet_chain: "KUBE-MESHBENCH-KUBELET",
};

const SECOND_NODE: NodeLayout = NodeLayout {
    name: NODE2,
    bridge: BRIDGE2,
    subnet: POD_SUBNET2,
    gateway: GATEWAY2,
    subdir: "node2",
    suffix: "-node2",
    kubelet_chain: "KUBE-MESHBENCH-KUBELET2",
};

impl NodeLayout {
    fn dir(&self) -> PathBuf {
        match self.subdir {
            "" => state(),
            sub => state().join(sub),
        }
    }

    /// The first node's containerd is at the default socket (its kubelet's cAdvisor looks
    /// there); the second's in its directory, which its kubelet's `--containerd` names.
    fn containerd_sock(&self) -> PathBuf {
        match self.subdir {
            "" => PathBuf::from(CONTAINERD_SOCK),
            _ => self.dir().join("containerd.sock"),
        }
    }

    /// Its kubelet's cgroup root, within the tracking tree.
    fn cgroup_root(&self) -> String {
        match self.subdir {
            "" => format!("/{CGROUP}"),
            sub => format!("/{CGROUP}/{sub}"),
        }
    }

    /// Its CNI network's name (the CNI result cache's files begin with it: `meshbench-`).
    fn network(&self) -> String {
        format!("meshbench{}", self.suffix)
    }

    fn daemon(&self, program: &str) -> String {
        format!("{program}{}", self.suffix)
    }
}

/// A started cluster; stopped and swept when dropped (a failing test included).
pub struct TestCluster {
    pub kubeconfig: PathBuf,
    /// The same API server as [`USER`], whom RBAC alone allows (nothing until bound).
    pub user_kubeconfig: PathBuf,
    /// The API server's port on 127.0.0.1.
    pub api_port: u16,
    /// Where each daemon logs (`NAME.log`).
    pub logs: PathBuf,
    /// The kubelet's read-only-by-anyone HTTPS port on 127.0.0.1 (/metrics/cadvisor), if any.
    pub kubelet_port: Option<u16>,
    /// Every node's name and its kubelet's port, the first node's first.
    pub kubelets: Vec<(&'static str, u16)>,
    /// Every node's containerd: an image is imported into each.
    containerd_socks: Vec<PathBuf>,
    /// Why kube-proxy cannot serve Services here, if it cannot (pods then reach a backend by
    /// its pod address).
    pub kube_proxy_unavailable: Option<String>,
    daemons: Vec<(String, Child)>,
    /// The API server as the pods reach it (the `kubernetes` Service's endpoint, on the first
    /// node's gateway), carried to its loopback address.
    _api_for_pods: Option<super::relay::Relay>,
    _lock: File,
    /// How long start took.
    pub started_in: Duration,
}

impl TestCluster {
    /// etcd, kube-apiserver and kube-controller-manager (Job controller, garbage collector,
    /// namespace controller) on loopback; there is no node: the test plays it, or pods stay
    /// Pending.
    pub fn control_plane() -> TestCluster {
        TestCluster::start(Shape::ControlPlane)
    }

    /// The control plane plus a real node (scheduler, containerd, kubelet, kube-proxy, bridge
    /// CNI). Panics with [`node_unavailable`]'s reason where a node cannot run.
    pub fn with_node() -> TestCluster {
        if let Some(why) = node_unavailable() {
            panic!("a real Kubernetes node cannot run here: {why}");
        }
        TestCluster::start(Shape::WithNode)
    }

    /// The control plane plus two real nodes on this machine ([`NODE`] and [`NODE2`], the
    /// module's header says how they differ), and the DaemonSet controller. Panics with
    /// [`node_unavailable`]'s reason where a node cannot run.
    pub fn with_two_nodes() -> TestCluster {
        if let Some(why) = node_unavailable() {
            panic!("a real Kubernetes node cannot run here: {why}");
        }
        TestCluster::start(Shape::WithTwoNodes)
    }

    fn start(shape: Shape) -> TestCluster {
        let began = Instant::now();
        let bins = k8s_bin();
        assert!(
            bins.join("kube-apiserver").exists(),
            "no kube-apiserver in {}: run scripts/install-k8s.sh",
            bins.display()
        );
        let lock =
            File::create(lock_path()).unwrap_or_else(|e| panic!("{}: {e}", lock_path().display()));
        lock.lock().expect("the cluster lock");
        let locked = began.elapsed();
        sweep();
        eprintln!(
            "cluster: the lock after {:.1} s, swept after {:.1} s",
            locked.as_secs_f64(),
            began.elapsed().as_secs_f64()
        );
        let dir = state();
        let logs = dir.join("logs");
        for d in [&logs, &dir.join("pids")] {
            std::fs::create_dir_all(d).unwrap();
        }
        // Its time marks what the node wrote outside STATE (the CNI result cache).
        std::fs::write(dir.join("started"), "").unwrap();
        make_cgroups();
        let mut c = TestCluster {
            kubeconfig: dir.join("kubeconfig"),
            user_kubeconfig: dir.join("kubeconfig-user"),
            api_port: 0,
            logs: logs.clone(),
            kubelet_port: None,
            kubelets: Vec::new(),
            containerd_socks: Vec::new(),
            kube_proxy_unavailable: None,
            daemons: Vec::new(),
            _api_for_pods: None,
            _lock: lock,
            started_in: Duration::ZERO,
        };
        let (client, peer, api) = (free_addr().port(), free_addr().port(), free_addr().port());
        c.spawn(
            "etcd",
            Path::new("etcd"),
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer}"),
            ],
        );
        let key = dir.join("sa.key");
        let ok = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&key)
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(ok.success());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{API_TOKEN},admin,admin,system:masters\n{USER_TOKEN},{USER},{USER}\n"),
        )
        .unwrap();
        c.spawn(
            "kube-apiserver",
            &bins.join("kube-apiserver"),
            &[
                format!("--etcd-servers=http://127.0.0.1:{client}"),
                "--bind-address=127.0.0.1".into(),
                // With a node, the address the `kubernetes` Service leads the pods to: the
                // first node's gateway, where a relay carries them to the loopback address
                // (an in-cluster client, a detached run's coordinator, reaches it so).
                format!(
                    "--advertise-address={}",
                    match shape {
                        Shape::ControlPlane => "127.0.0.1",
                        _ => GATEWAY,
                    }
                ),
                format!("--secure-port={api}"),
                format!("--cert-dir={}", dir.join("certs").display()),
                format!("--token-auth-file={}", dir.join("tokens.csv").display()),
                // RBAC, so that the RBAC a user is told to bind is what a run as that user is
                // allowed (the daemons and the tests' own client are system:masters).
                "--authorization-mode=RBAC".into(),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-account-key-file={}", key.display()),
                format!("--service-account-signing-key-file={}", key.display()),
                format!("--service-cluster-ip-range={SERVICE_RANGE}"),
                "--disable-admission-plugins=ServiceAccount".into(),
                // The node's Hostname address names no host anyone resolves: the API server
                // reaches the kubelet (logs, exec, port-forward) at its InternalIP, which
                // `kubelet_reached_from_this_machine` leads to the kubelet's loopback address.
                "--kubelet-preferred-address-types=InternalIP".into(),
            ],
        );
        std::fs::write(
            &c.kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://127.0.0.1:{api}\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  user:\n    token: {API_TOKEN}\ncontexts:\n- name: test\n  context: {{cluster: test, user: admin}}\ncurrent-context: test\n"
            ),
        )
        .unwrap();
        std::fs::write(
            &c.user_kubeconfig,
            user_kubeconfig(&format!("https://127.0.0.1:{api}")),
        )
        .unwrap();
        c.api_port = api;
        c.wait_for(
            "kube-apiserver",
            Duration::from_secs(90),
            "kube-apiserver",
            || https_ok(&format!("https://127.0.0.1:{api}/readyz"), Some(API_TOKEN)),
        );
        // A node needs its lifecycle controller (it lifts the not-ready taint every new node
        // is given) and the EndpointSlice controller (what kube-proxy programs from); the
        // Deployment and ReplicaSet controllers run workloads as Istio's charts deploy them; the
        // namespace controller empties a deleted namespace (an experiment on the cluster ends so).
        // Two nodes run a DaemonSet too (Contour's Envoy, one per node).
        let controllers = match shape {
            Shape::ControlPlane => "job-controller,garbage-collector-controller,namespace-controller",
            Shape::WithNode => "job-controller,garbage-collector-controller,node-lifecycle-controller,endpointslice-controller,deployment-controller,replicaset-controller,namespace-controller",
            Shape::WithTwoNodes => "job-controller,garbage-collector-controller,node-lifecycle-controller,endpointslice-controller,deployment-controller,replicaset-controller,daemonset-controller,namespace-controller",
        };
        c.spawn(
            "kube-controller-manager",
            &bins.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={}", c.kubeconfig.display()),
                // Every namespace gets `kube-root-ca.crt`, the CA an in-cluster client trusts
                // (the API server's self-signed bundle names it).
                format!("--controllers={controllers},root-ca-certificate-publisher-controller"),
                format!(
                    "--root-ca-file={}",
                    dir.join("certs/apiserver.crt").display()
                ),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--use-service-account-credentials=false".into(),
            ],
        );
        match shape {
            Shape::ControlPlane => {}
            Shape::WithNode => c.start_nodes(&[FIRST_NODE]),
            Shape::WithTwoNodes => c.start_nodes(&[FIRST_NODE, SECOND_NODE]),
        }
        if shape != Shape::ControlPlane {
            c._api_for_pods = Some(super::relay::Relay::start(
                SocketAddr::new(GATEWAY.parse().unwrap(), api),
                SocketAddr::from(([127, 0, 0, 1], api)),
            ));
        }
        c.started_in = began.elapsed();
        eprintln!(
            "cluster ({shape:?}) started in {:.1} s",
            c.started_in.as_secs_f64()
        );
        c
    }

    /// Scheduler; each node's bridge, containerd (pause image imported) and kubelet (every
    /// node Ready); kube-proxy, one for the machine.
    fn start_nodes(&mut self, nodes: &[NodeLayout]) {
        let dir = state();
        let bins = k8s_bin();
        let kubeconfig = self.kubeconfig.display().to_string();
        self.spawn(
            "kube-scheduler",
            &bins.join("kube-scheduler"),
            &[
                format!("--kubeconfig={kubeconfig}"),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ],
        );
        let _ = std::fs::write(
            dir.join("ip_forward.saved"),
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap_or_default(),
        );
        let two = nodes.len() > 1;
        if two {
            pods_forwarded_between_nodes();
        }
        // Every kubelet started before any is waited for: the nodes come up side by side.
        for node in nodes {
            self.start_node(node, two);
        }
        let kc = self.kubeconfig.clone();
        for node in nodes {
            let kubelet = node.daemon("kubelet");
            self.wait_for(
                &format!("node {} to be Ready", node.name),
                Duration::from_secs(120),
                &kubelet,
                || node_ready(&kc, node.name),
            );
        }
        let proxy_health = free_addr().port();
        // One kube-proxy: both nodes share this machine's iptables, so one set of rules serves
        // every pod; with two nodes its cluster CIDR is both subnets.
        let cluster_cidr = match two {
            true => CLUSTER_CIDR,
            false => POD_SUBNET,
        };
        self.spawn(
            "kube-proxy",
            &bins.join("kube-proxy"),
            &[
                format!("--kubeconfig={kubeconfig}"),
                format!("--hostname-override={NODE}"),
                "--proxy-mode=iptables".into(),
                format!("--cluster-cidr={cluster_cidr}"),
                // Service traffic leaves the host from the gateway's address, so a backend on
                // the same bridge answers through the host (which undoes the DNAT).
                "--masquerade-all".into(),
                // Leave the machine's sysctls alone (no conntrack table sizes, no route_localnet).
                "--conntrack-max-per-core=0".into(),
                "--conntrack-tcp-timeout-established=0".into(),
                "--conntrack-tcp-timeout-close-wait=0".into(),
                "--iptables-localhost-nodeports=false".into(),
                "--nodeport-addresses=127.0.0.0/8".into(),
                format!("--healthz-bind-address=127.0.0.1:{proxy_health}"),
                format!("--metrics-bind-address=127.0.0.1:{}", free_addr().port()),
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = format!("http://127.0.0.1:{proxy_health}/healthz");
        loop {
            let (code, body) = http_get(&url);
            if code == 200 {
                eprintln!("cluster: kube-proxy healthy");
                break;
            }
            let exited = self
                .daemons
                .last_mut()
                .and_then(|(_, c)| c.try_wait().ok().flatten());
            if Instant::now() > deadline || exited.is_some() {
                self.kube_proxy_unavailable = Some(format!(
                    "kube-proxy's /healthz said {code} {body:?} for 30 s (exited: {exited:?})\n{}",
                    log_tail(&self.logs.join("kube-proxy.log"), LOG_TAIL_LINES)
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// One node's bridge, containerd (the pause image imported) and kubelet, started (not yet
    /// waited for); `routed`: its pods get a route to every node's pods ([`CLUSTER_CIDR`]).
    fn start_node(&mut self, node: &NodeLayout, routed: bool) {
        let dir = node.dir();
        std::fs::create_dir_all(&dir).unwrap();
        // The bridge and its address exist before the first pod, so a coordinator can listen
        // on the gateway address at once; the bridge plugin takes it as it is.
        run_ok("ip", &["link", "add", node.bridge, "type", "bridge"]);
        run_ok(
            "ip",
            &[
                "addr",
                "add",
                &format!(
                    "{}/{}",
                    node.gateway,
                    node.subnet.split('/').nth(1).unwrap()
                ),
                "dev",
                node.bridge,
            ],
        );
        run_ok("ip", &["link", "set", node.bridge, "up"]);
        if *node == FIRST_NODE {
            // The Service range leads to the bridge too: what kube-proxy has not (yet)
            // rewritten to a pod ends there instead of following this machine's default route
            // out.
            run_ok("ip", &["route", "add", SERVICE_RANGE, "dev", node.bridge]);
        }
        let cni = dir.join("cni");
        std::fs::create_dir_all(&cni).unwrap();
        std::fs::write(
            cni.join("10-meshbench.conflist"),
            cni_conflist(node, routed),
        )
        .unwrap();
        let config = dir.join("containerd.toml");
        let sock = node.containerd_sock();
        std::fs::write(&config, containerd_config(&dir, &sock)).unwrap();
        std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
        let containerd = node.daemon("containerd");
        self.spawn(
            &containerd,
            Path::new("containerd"),
            &["--config".into(), config.display().to_string()],
        );
        self.wait_for(
            &format!("{containerd} to answer"),
            Duration::from_secs(30),
            &containerd,
            || ctr(&sock, &["version"]).is_ok(),
        );
        if let Err(e) = ctr(
            &sock,
            &[
                "images",
                "import",
                &k8s_cache().join("images/pause.tar").display().to_string(),
            ],
        ) {
            panic!("importing the pause image into {containerd}: {e}");
        }
        self.containerd_socks.push(sock.clone());
        let kubelet_port = free_addr().port();
        if *node == FIRST_NODE {
            self.kubelet_port = Some(kubelet_port);
        }
        self.kubelets.push((node.name, kubelet_port));
        kubelet_reached_from_this_machine(node, kubelet_port);
        let kubelet_config = dir.join("kubelet.yaml");
        std::fs::write(&kubelet_config, kubelet_config_yaml(node, kubelet_port)).unwrap();
        let mut args = vec![
            format!("--config={}", kubelet_config.display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--root-dir={}", dir.join("kubelet").display()),
            format!("--cert-dir={}", dir.join("kubelet/pki").display()),
            format!("--hostname-override={}", node.name),
            // The gateway, not loopback: the kubelet refuses to report a loopback node IP,
            // and kube-proxy waits 30 s for the node's address before it starts.
            format!("--node-ip={}", node.gateway),
            // cAdvisor refreshes container stats every 1 s, not every 10 s (plus jitter), so
            // that a load of a few seconds has fresh points in /metrics/cadvisor
            // (tests/it/k8s_gateway_cadvisor.rs); the one setting that differs from a default
            // kubelet, said in docs/kubernetes.md.
            format!("--housekeeping-interval={HOUSEKEEPING}"),
        ];
        if *node != FIRST_NODE {
            // cAdvisor inside the kubelet finds containerd by this (deprecated, still read)
            // flag, not by the CRI endpoint: without it the second node's /metrics/cadvisor
            // has pod-level series only.
            args.push(format!("--containerd={}", sock.display()));
        }
        self.spawn(&node.daemon("kubelet"), &k8s_bin().join("kubelet"), &args);
    }

    /// Starts a daemon: output in `logs/NAME.log`, pid in `pids/NAME.pid`, in the tracking
    /// cgroup, and killed when the test process dies.
    fn spawn(&mut self, name: &str, program: &Path, args: &[String]) {
        let log = File::create(self.logs.join(format!("{name}.log"))).unwrap();
        let procs = CString::new(
            tracking_root()
                .join("daemons/cgroup.procs")
                .display()
                .to_string(),
        )
        .unwrap();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // SAFETY: only async-signal-safe calls (prctl, open, write, close) on memory made
        // before the fork.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd >= 0 {
                    libc::write(fd, b"0".as_ptr().cast(), 1);
                    libc::close(fd);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/install-k8s.sh", program.display()));
        let _ = std::fs::write(
            state().join("pids").join(format!("{name}.pid")),
            child.id().to_string(),
        );
        self.daemons.push((name.to_string(), child));
    }

    /// Waits until `ready`, at most `limit`; a daemon that exits meanwhile, or the limit, fails
    /// the test with the tail of `log`.
    fn wait_for(
        &mut self,
        what: &str,
        limit: Duration,
        log: &str,
        mut ready: impl FnMut() -> bool,
    ) {
        let began = Instant::now();
        let deadline = began + limit;
        loop {
            if ready() {
                eprintln!(
                    "cluster: {what} after {:.1} s",
                    began.elapsed().as_secs_f64()
                );
                return;
            }
            for (name, child) in &mut self.daemons {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "{name} exited ({status}) while waiting for {what}\n{}",
                        log_tail(&self.logs.join(format!("{name}.log")), LOG_TAIL_LINES)
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not ready after {limit:?}\n{}",
                log_tail(&self.logs.join(format!("{log}.log")), LOG_TAIL_LINES)
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// A client that works while `rt` runs: kube's client serves its requests from a task on
    /// the runtime it was made in, so every thread makes its own.
    pub fn client(&self, rt: &tokio::runtime::Runtime) -> Client {
        client(&self.kubeconfig, rt)
    }

    /// Waits (at most `limit`) until a pod is Ready: the pod as it then is. Fails with the
    /// kubelet's log and the pod's own.
    pub fn wait_pod_ready(
        &self,
        rt: &tokio::runtime::Runtime,
        client: &Client,
        ns: &str,
        name: &str,
        limit: Duration,
    ) -> Pod {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let deadline = Instant::now() + limit;
        loop {
            let pod = rt.block_on(pods.get(name)).expect("the pod");
            let status = pod.status.clone().unwrap_or_default();
            if status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
            {
                return pod;
            }
            assert!(
                Instant::now() < deadline,
                "pod {ns}/{name} not Ready after {limit:?}: {status:?}\n{}\n{}",
                log_tail(&self.logs.join("kubelet.log"), 20),
                container_log(ns, name)
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Imports an OCI image archive into the node's containerd (namespace k8s.io), where the
    /// kubelet finds it without pulling.
    pub fn import_image(&self, archive: &Path) {
        for sock in &self.containerd_socks {
            if let Err(e) = ctr(sock, &["images", "import", &archive.display().to_string()]) {
                panic!(
                    "importing {} into {}: {e}",
                    archive.display(),
                    sock.display()
                );
            }
        }
    }

    /// The meshbench image as users build it, from deploy/Containerfile (scripts/build-image.sh,
    /// podman) with this build's binary, saved as an OCI archive, imported as `name` and removed
    /// from podman's storage again.
    pub fn load_meshbench_image(&self, name: &str) {
        let archive = state().join("image-meshbench.tar");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/build-image.sh");
        let out = Command::new(script)
            .env("TAG", name)
            .env("BIN", super::bin())
            .env("OCI_ARCHIVE", &archive)
            .env("RMI", "1")
            .output()
            .expect("scripts/build-image.sh");
        assert!(
            out.status.success(),
            "build-image.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.import_image(&archive);
        let _ = std::fs::remove_file(&archive);
    }

    /// Packages `rootfs` as image `name` (scripts/oci-archive.sh) with its entrypoint, user
    /// and environment (`KEY=VALUE` each), and imports it.
    pub fn load_image(
        &self,
        rootfs: &Path,
        name: &str,
        entrypoint: &str,
        user: &str,
        env: &[&str],
    ) {
        let archive = state().join(format!("image-{}.tar", name.replace(['/', ':'], "_")));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/oci-archive.sh");
        let out = Command::new(script)
            .arg(rootfs)
            .arg(name)
            .arg(&archive)
            .args(["--entrypoint", entrypoint, "--user", user])
            .args(env.iter().flat_map(|e| ["--env", e]))
            .output()
            .expect("scripts/oci-archive.sh");
        assert!(
            out.status.success(),
            "oci-archive.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.import_image(&archive);
        let _ = std::fs::remove_file(&archive);
    }

    /// Stops every daemon (SIGTERM, then SIGKILL after a few seconds) and sweeps; returns how
    /// long it took.
    pub fn stop(mut self) -> Duration {
        self.shutdown()
    }

    /// What a SIGKILL of the test leaves: the daemons die at once (as the parent-death signal
    /// kills them), the lock is released, and nothing is swept: containerd's shims, the
    /// containers, their mounts, the bridge, the chains and the cgroups stay for the next start.
    pub fn abandon(mut self) {
        for (_, child) in &mut self.daemons {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.daemons.clear();
    }

    fn shutdown(&mut self) -> Duration {
        let began = Instant::now();
        for (_, child) in self.daemons.iter_mut().rev() {
            // SAFETY: kill on a pid this process started and has not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.daemons.clear();
        sweep();
        began.elapsed()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if !self.daemons.is_empty() {
            let took = self.shutdown();
            eprintln!("cluster stopped in {:.1} s", took.as_secs_f64());
        }
    }
}

/// A kubeconfig of [`USER`] for the API server at `server` (its serving certificate is
/// self-signed and names loopback only: not verified).
pub fn user_kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: {USER}\n  user:\n    token: {USER_TOKEN}\ncontexts:\n- name: test\n  context: {{cluster: test, user: {USER}}}\ncurrent-context: test\n"
    )
}

/// A kube client from a kubeconfig, on `rt`.
pub fn client(kubeconfig: &Path, rt: &tokio::runtime::Runtime) -> Client {
    rt.block_on(async {
        let kc = Kubeconfig::read_from(kubeconfig).unwrap();
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(config).unwrap()
    })
}

fn https_ok(url: &str, token: Option<&str>) -> bool {
    let mut cmd = Command::new("curl");
    cmd.args(["-skf", "-m", "2"]);
    if let Some(t) = token {
        cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    cmd.arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A plain GET by curl: the status (0 when nothing answered) and the body.
fn http_get(url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-m", "2", "-w", "\n%{http_code}", url])
        .output();
    let text = out.map_or_else(
        |_| String::new(),
        |o| String::from_utf8_lossy(&o.stdout).into_owned(),
    );
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Whether node `name` reports Ready and carries no taint.
fn node_ready(kubeconfig: &Path, name: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = client(kubeconfig, &rt);
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c);
    let node = rt.block_on(nodes.get_opt(name)).ok().flatten();
    let ready = node
        .as_ref()
        .and_then(|n| n.status.as_ref()?.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    // And schedulable: the node lifecycle controller lifts the not-ready taint a new node is
    // given a moment after it is Ready (a run's checks count a node with it as unusable).
    let untainted = node
        .and_then(|n| n.spec?.taints)
        .is_none_or(|t| t.is_empty());
    ready && untainted
}

/// `ctr` against a node's containerd at `sock`, namespace k8s.io (the CRI's).
fn ctr(sock: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(sock)
        .args(["--namespace", "k8s.io"])
        .args(args)
        .output()
        .map_err(|e| format!("ctr: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ctr {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn run_ok(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A node's CNI network: a bridge with its own subnet, no masquerading and no default route,
/// so a pod reaches the bridge (this machine) and the Service range through it, nothing else;
/// `routed` (two nodes): the other node's pods too, through this machine.
fn cni_conflist(node: &NodeLayout, routed: bool) -> String {
    let mut routes = vec![serde_json::json!({"dst": SERVICE_RANGE})];
    if routed {
        routes.push(serde_json::json!({"dst": CLUSTER_CIDR}));
    }
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": node.network(),
        "plugins": [{
            "type": "bridge",
            "bridge": node.bridge,
            "isGateway": true,
            "isDefaultGateway": false,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "dataDir": node.dir().join("cni-ipam").display().to_string(),
                "ranges": [[{"subnet": node.subnet, "gateway": node.gateway}]],
                "routes": routes
            }
        }]
    })
    .to_string()
}

/// Packets between the nodes' bridges are forwarded whatever the machine's FORWARD policy
/// (a machine with Docker drops them): a rule in chain `KUBE-MESHBENCH-FORWARD`, swept with
/// the others.
fn pods_forwarded_between_nodes() {
    const CHAIN: &str = "KUBE-MESHBENCH-FORWARD";
    let iptables = |args: &[&str]| {
        let mut all = vec!["-w", "5", "-t", "filter"];
        all.extend_from_slice(args);
        run_ok("iptables", &all);
    };
    iptables(&["-N", CHAIN]);
    iptables(&["-A", CHAIN, "-j", "ACCEPT"]);
    iptables(&[
        "-I",
        "FORWARD",
        "-s",
        CLUSTER_CIDR,
        "-d",
        CLUSTER_CIDR,
        "-j",
        CHAIN,
    ]);
}

/// containerd's defaults with what this machine needs: cgroupfs (no systemd),
/// `restrict_oom_score_adj` (this sandbox may not lower oom_score_adj: without it every sandbox
/// fails with runc's "can't get final child's PID from pipe: EOF"), the pause image built here,
/// Debian's CNI plugins and our config, and every path under STATE but the socket.
fn containerd_config(dir: &Path, sock: &Path) -> String {
    let d = dir.display();
    let sock = sock.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{sock}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
      Root = "{d}/runc"
"#
    )
}

/// The kubelet: cgroupfs under our cgroup (v1 too: since Kubernetes 1.35 the kubelet refuses a
/// cgroup v1 machine unless told not to), loopback only, anonymous reads allowed (it listens
/// on 127.0.0.1 only: /metrics/cadvisor for Prometheus), swap tolerated, no eviction surprises
/// from a full disk, pod logs under STATE.
fn kubelet_config_yaml(node: &NodeLayout, port: u16) -> String {
    let dir = node.dir();
    let d = dir.display();
    let cgroup_root = node.cgroup_root();
    let sock = node.containerd_sock();
    let sock = sock.display();
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzPort: 0
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
podLogsDir: {d}/pod-logs
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
serializeImagePulls: false
evictionHard:
  memory.available: "1%"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#
    )
}

/// The cluster's cgroup in every hierarchy (cpuset given its parent's CPUs and memory nodes),
/// and the daemons' leaf in the tracking one.
fn make_cgroups() {
    // The second node's kubelet root (unused with one node) nests inside: swept with the tree.
    let second = SECOND_NODE.cgroup_root();
    let second = second.trim_start_matches('/');
    match cgroups() {
        Cgroups::V1(dirs) => {
            for d in dirs {
                for (parent, g) in [
                    (d.clone(), d.join(CGROUP)),
                    (d.join(CGROUP), d.join(second)),
                ] {
                    let _ = std::fs::create_dir_all(&g);
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        if let Ok(v) = std::fs::read_to_string(parent.join(f)) {
                            let _ = std::fs::write(g.join(f), v.trim());
                        }
                    }
                }
            }
        }
        Cgroups::V2 => {
            let g = Path::new("/sys/fs/cgroup").join(CGROUP);
            let _ = std::fs::create_dir_all(&g);
            let _ = std::fs::write(
                "/sys/fs/cgroup/cgroup.subtree_control",
                "+cpu +cpuset +memory +pids",
            );
            let _ = std::fs::write(
                g.join("cgroup.subtree_control"),
                "+cpu +cpuset +memory +pids",
            );
            let g2 = Path::new("/sys/fs/cgroup").join(second);
            let _ = std::fs::create_dir_all(&g2);
            let _ = std::fs::write(
                g2.join("cgroup.subtree_control"),
                "+cpu +cpuset +memory +pids",
            );
        }
    }
    // Without it (not root) the pid files alone find the daemons again.
    let _ = std::fs::create_dir_all(tracking_root().join("daemons"));
}

/// Every directory of a cgroup tree, deepest first.
fn cgroup_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
            out.push(d);
        }
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// The pids in a cgroup tree.
fn cgroup_pids(root: &Path) -> Vec<i32> {
    cgroup_dirs(root)
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .flat_map(|s| {
            s.lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Removes everything a cluster may have left, its processes first: safe to run when nothing
/// is there, bounded (about 20 s at most), and it says what it could not remove.
pub fn sweep() {
    let dir = state();
    // 1. Processes: the tracking cgroup's (daemons, shims, containers), and any daemon a pid
    //    file names that is still the program it was (a cgroup move that failed).
    let root = tracking_root();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut pids = cgroup_pids(&root);
        if let Ok(rd) = std::fs::read_dir(dir.join("pids")) {
            for e in rd.flatten() {
                let name = e
                    .file_name()
                    .to_string_lossy()
                    .trim_end_matches(".pid")
                    .to_string();
                let pid: i32 = std::fs::read_to_string(e.path())
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0);
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if pid > 0 && !comm.is_empty() && name.starts_with(comm.trim()) {
                    pids.push(pid);
                }
            }
        }
        if pids.is_empty() {
            break;
        }
        for p in &pids {
            // SAFETY: kill has no memory preconditions; these pids are the cluster's.
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        if Instant::now() > deadline {
            eprintln!("sweep: processes still alive after 15 s: {pids:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // 2. Mounts under STATE (overlay roots, shm, secrets, network namespaces), deepest first.
    let prefix = format!("{}/", dir.display());
    for _ in 0..3 {
        let mut points: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|p| p.starts_with(&prefix))
            .collect();
        if points.is_empty() {
            break;
        }
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let c = CString::new(p).unwrap();
            // SAFETY: a valid C string; a lazy unmount of a path under our directory.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
    // 3. The bridges, the Services', the kubelets' and the forwarding iptables chains,
    //    ip_forward as it was.
    for bridge in [BRIDGE, BRIDGE2] {
        if Path::new("/sys/class/net").join(bridge).exists() {
            let _ = Command::new("ip").args(["link", "del", bridge]).status();
        }
    }
    for tool in ["iptables", "ip6tables"] {
        remove_kube_chains(tool);
    }
    if let Ok(v) = std::fs::read_to_string(dir.join("ip_forward.saved")) {
        if !v.trim().is_empty() {
            let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v.trim());
        }
    }
    // 4. Cgroups, deepest first, in every hierarchy.
    let roots: Vec<PathBuf> = match cgroups() {
        Cgroups::V1(dirs) => dirs.iter().map(|d| d.join(CGROUP)).collect(),
        Cgroups::V2 => vec![Path::new("/sys/fs/cgroup").join(CGROUP)],
    };
    for r in &roots {
        for d in cgroup_dirs(r) {
            let _ = std::fs::remove_dir(&d);
        }
    }
    // 5. Files: containerd's socket directory (ours alone: a foreign containerd is refused),
    //    the kubelet's log links, then STATE itself (images, etcd, logs; the second node's
    //    containerd socket, root and state, its kubelet's directories).
    let sock_dir = Path::new(CONTAINERD_SOCK).parent().unwrap();
    for f in ["containerd.sock", "containerd.sock.ttrpc"] {
        let _ = std::fs::remove_file(sock_dir.join(f));
    }
    let _ = std::fs::remove_dir_all(sock_dir.join("s"));
    let _ = std::fs::remove_dir(sock_dir);
    if let Ok(rd) = std::fs::read_dir("/var/log/containers") {
        for e in rd.flatten() {
            if std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&dir)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir("/var/log/containers");
    // Paths the kubelet and libcni do not let us move: the device plugins' socket and the
    // CNI result cache (ours: named after our network, `meshbench-*`, or containerd's
    // loopback, `cni-loopback-*`, written since the cluster started; no other containerd runs).
    let _ = std::fs::remove_file("/var/lib/kubelet/device-plugins/kubelet.sock");
    for d in ["/var/lib/kubelet/device-plugins", "/var/lib/kubelet"] {
        let _ = std::fs::remove_dir(d);
    }
    let since = std::fs::metadata(dir.join("started"))
        .and_then(|m| m.modified())
        .ok();
    if let (Ok(rd), Some(since)) = (std::fs::read_dir("/var/lib/cni/results"), since) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let made = e.metadata().and_then(|m| m.modified()).ok();
            if (name.starts_with("meshbench-") || name.starts_with("cni-loopback-"))
                && made.is_some_and(|t| t >= since)
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    for d in ["/var/lib/cni/results", "/var/lib/cni"] {
        let _ = std::fs::remove_dir(d);
    }
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("sweep: {}: {e}", dir.display());
        }
    }
    let left: Vec<String> = roots
        .iter()
        .filter(|r| r.exists())
        .map(|r| r.display().to_string())
        .collect();
    if !left.is_empty() {
        eprintln!("sweep: cgroups left: {left:?}");
    }
}

/// The kubelet listens on loopback only (its anonymous reads are for this machine alone), yet
/// the API server dials the node's InternalIP, its bridge's address ([`GATEWAY`], [`GATEWAY2`]),
/// for a pod's logs, exec and port-forward. A NAT rule of this machine's own output (chain
/// `KUBE-MESHBENCH-KUBELET`, `...2` for the second node, swept with the others) leads
/// `GATEWAY:port` to `127.0.0.1:port`;
/// the pods' packets to that address come in through PREROUTING, which has no such rule, and
/// are refused.
fn kubelet_reached_from_this_machine(node: &NodeLayout, port: u16) {
    let chain = node.kubelet_chain;
    let port = port.to_string();
    let iptables = |args: &[&str]| {
        let mut all = vec!["-w", "5", "-t", "nat"];
        all.extend_from_slice(args);
        run_ok("iptables", &all);
    };
    iptables(&["-N", chain]);
    iptables(&[
        "-A",
        chain,
        "-p",
        "tcp",
        "-j",
        "DNAT",
        "--to-destination",
        &format!("127.0.0.1:{port}"),
    ]);
    iptables(&[
        "-A",
        "OUTPUT",
        "-d",
        &format!("{}/32", node.gateway),
        "-p",
        "tcp",
        "--dport",
        &port,
        "-j",
        chain,
    ]);
}

/// Deletes every `KUBE-*` chain (kube-proxy's, the kubelet's and ours that leads to the
/// kubelet) of every table, with the rules that jump to them. The check refuses a machine with a foreign kubelet, so these are
/// ours.
fn remove_kube_chains(tool: &str) {
    for table in ["filter", "nat", "mangle", "raw"] {
        let Ok(out) = Command::new(tool)
            .args(["-w", "5", "-t", table, "-S"])
            .output()
        else {
            return;
        };
        if !out.status.success() {
            continue;
        }
        let rules = String::from_utf8_lossy(&out.stdout).to_string();
        let mut chains = Vec::new();
        for line in rules.lines() {
            let words = shell_words(line);
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            match words.as_slice() {
                ["-N", chain] if chain.starts_with("KUBE-") => chains.push(chain.to_string()),
                ["-A", chain, ..] if !chain.starts_with("KUBE-") && line.contains(" KUBE-") => {
                    let mut args = vec!["-w", "5", "-t", table, "-D"];
                    args.extend_from_slice(&words[1..]);
                    let _ = Command::new(tool).args(&args).output();
                }
                _ => {}
            }
        }
        for c in &chains {
            let _ = Command::new(tool)
                .args(["-w", "5", "-t", table, "-F", c])
                .output();
        }
        for c in &chains {
            let _ = Command::new(tool)
                .args(["-w", "5", "-t", table, "-X", c])
                .output();
        }
    }
}

/// The words of a line of `iptables -S`, whose comments are double-quoted with `\"` inside.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut escaped, mut any) = (false, false, false);
    for ch in line.chars() {
        match ch {
            _ if escaped => {
                word.push(ch);
                escaped = false;
            }
            '\\' if quoted => escaped = true,
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}

/// What the kubelet set on a pod's cgroup: the CPU quota in cores (None: unlimited) and the
/// memory limit in bytes. The pod's cgroup is `meshbench-k8s[/node2]/kubepods[/QOS]/pod<UID>`.
pub fn pod_cgroup_limits(uid: &str) -> Result<(Option<f64>, u64), String> {
    let find = |root: &Path| -> Option<PathBuf> {
        let name = format!("pod{uid}");
        cgroup_dirs(&root.join(CGROUP))
            .into_iter()
            .find(|d| d.file_name().is_some_and(|n| n.to_string_lossy() == name))
    };
    let read = |p: PathBuf| -> Result<String, String> {
        std::fs::read_to_string(&p)
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    match cgroups() {
        Cgroups::V1(_) => {
            let cpu = find(Path::new("/sys/fs/cgroup/cpu")).ok_or("no pod cgroup under cpu")?;
            let mem =
                find(Path::new("/sys/fs/cgroup/memory")).ok_or("no pod cgroup under memory")?;
            let quota: i64 = read(cpu.join("cpu.cfs_quota_us"))?
                .parse()
                .map_err(|e| format!("cpu.cfs_quota_us: {e}"))?;
            let period: f64 = read(cpu.join("cpu.cfs_period_us"))?
                .parse()
                .map_err(|e| format!("cpu.cfs_period_us: {e}"))?;
            let limit: u64 = read(mem.join("memory.limit_in_bytes"))?
                .parse()
                .map_err(|e| format!("memory.limit_in_bytes: {e}"))?;
            Ok(((quota > 0).then(|| quota as f64 / period), limit))
        }
        Cgroups::V2 => {
            let g = find(Path::new("/sys/fs/cgroup")).ok_or("no pod cgroup")?;
            let cpu = read(g.join("cpu.max"))?;
            let mut parts = cpu.split_whitespace();
            let quota = parts.next().and_then(|q| q.parse::<f64>().ok());
            let period: f64 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(100_000.0);
            let limit: u64 = read(g.join("memory.max"))?.parse().unwrap_or(u64::MAX);
            Ok((quota.map(|q| q / period), limit))
        }
    }
}

/// The CPU quota in cores on one container's cgroup (`pod<UID>/<container id>` on either node, the id without
/// its `containerd://`), None: unlimited. A pod with a container or an init container without
/// a CPU limit has no quota at the pod's level; its limited containers have theirs.
pub fn container_cpu_quota(uid: &str, container_id: &str) -> Result<Option<f64>, String> {
    let (root, v1) = match cgroups() {
        Cgroups::V1(_) => ("/sys/fs/cgroup/cpu", true),
        Cgroups::V2 => ("/sys/fs/cgroup", false),
    };
    let name = format!("pod{uid}");
    let pod = cgroup_dirs(&Path::new(root).join(CGROUP))
        .into_iter()
        .find(|d| d.file_name().is_some_and(|n| n.to_string_lossy() == name))
        .ok_or("no pod cgroup")?;
    let dir = pod.join(container_id.trim_start_matches("containerd://"));
    let read = |f: &str| -> Result<String, String> {
        std::fs::read_to_string(dir.join(f))
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("{}/{f}: {e}", dir.display()))
    };
    if v1 {
        let quota: f64 = read("cpu.cfs_quota_us")?
            .parse()
            .map_err(|e| format!("{e}"))?;
        let period: f64 = read("cpu.cfs_period_us")?
            .parse()
            .map_err(|e| format!("{e}"))?;
        return Ok((quota > 0.0).then(|| quota / period));
    }
    let max = read("cpu.max")?;
    let mut parts = max.split_whitespace();
    let quota = parts.next().and_then(|q| q.parse::<f64>().ok());
    let period: f64 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(100_000.0);
    Ok(quota.map(|q| q / period))
}

/// The last lines a pod's containers wrote (a kubelet's pod logs under its node's directory).
pub fn container_log(ns: &str, pod: &str) -> String {
    let mut out = String::new();
    let roots = [FIRST_NODE, SECOND_NODE].map(|n| n.dir().join("pod-logs"));
    let entries = roots
        .iter()
        .flat_map(|root| std::fs::read_dir(root).into_iter().flatten().flatten());
    for e in entries {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with(&format!("{ns}_{pod}_")) {
            for c in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                for f in std::fs::read_dir(c.path()).into_iter().flatten().flatten() {
                    out.push_str(&log_tail(&f.path(), 15));
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// The text of every file in `dir` whose name ends in `.{ext}`, one after another (empty when
/// there is no such directory).
pub fn files_ending(dir: &Path, ext: &str) -> String {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == ext))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

/// Waits until no journal of a cluster run is left beside `store` (its watcher's work done).
pub fn wait_journal_gone(store: &Path, within: Duration) {
    let journals = store.with_file_name("results-cluster-runs");
    let deadline = Instant::now() + within;
    loop {
        let left = files_ending(&journals, "jsonl");
        if left.is_empty() {
            return;
        }
        let log = files_ending(&journals, "log");
        assert!(
            Instant::now() < deadline,
            "a journal is left: {left:?}; the watcher's log: {log}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
