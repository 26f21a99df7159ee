//! The command line, declared with clap. Flags say *how* to run; every number is checked later
//! when the run is resolved, so that bad values get a message that says what to change.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use meshbench_results::StepKind;

mod load;
pub mod reference;

pub use load::{
    ArrivalArg, CloseFirstArg, DelayModeArg, IdleArg, LiveFlags, OnOff, OrderArg, PacingFlags,
    PassedRequestFlags, RequestFlags, RunArgs,
};

/// How to read the headline's added-latency table, for `--help` of the commands that print it:
/// the run prints one legend line, and the rest is here and in docs/answers.md.
pub const READING_THE_HEADLINE: &str = "Reading the headline: each cell of \"Latency added over the baseline\" is the \
variant's shift over the baseline at that percentile, in ms, with a one-word verdict, and its 95 % interval on the \
line under it.
  slower / faster  the whole interval lies above (below) 0 and, when the test was over one-second intervals \
(\"+ margin\" in the last column), beyond the margin identical runs differ by: by default 5 % of the baseline at \
p50, 25 % at p90, 50 % at p99 and p99.9, at least 0.050 ms (see `compare --margin`)
  noise            the interval holds 0: no difference shown
  margin           clear of 0 but not of the margin: no more than identical runs differ by
  short            too few samples to test (4 a side: one-second intervals, or repeats); run longer or repeat
With 4 repeats a side or more the test is over the runs (\"runs\" in the last column) and needs no margin. \
Method: docs/answers.md.";

#[derive(Debug, Parser)]
#[command(
    name = "meshbench",
    version,
    about = "Measures what a gateway, reverse proxy or service-mesh data plane costs and how far it scales",
    // Help wraps to the terminal, and to 100 columns at most (and where there is no terminal).
    max_term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load-test a URL, a URL template or a targets file (closed loop by default, open loop
    /// with --rate).
    Run(Box<RunArgs>),
    /// Run the built-in test server.
    Backend(BackendArgs),
    /// A short version of examples/sidecar-overhead.yaml: the backend alone, behind an Envoy
    /// sidecar configured as Istio's (installed first where missing; nginx only where that
    /// fails, said in one line), and
    /// behind two with mutual TLS, at 500, 1000 and 2000 rps; what the sidecars add.
    #[command(after_long_help = READING_THE_HEADLINE)]
    Demo(DemoArgs),
    /// Generate configurations for systems under test.
    #[command(subcommand)]
    Gen(GenCommand),
    /// Run an experiment file: start each topology's real processes under their limits, drive
    /// the load matrix, sample their CPU, memory and bytes, store every step.
    #[command(after_long_help = READING_THE_HEADLINE)]
    Experiment(ExperimentArgs),
    /// Read the results store: list experiments, show one, export it.
    #[command(subcommand)]
    Results(ResultsCommand),
    /// Compare two measurements (run JSON files, experiments, variants or steps): differences
    /// per percentile with 95 % intervals and a verdict.
    Compare(CompareArgs),
    /// Find the highest open-loop rate that meets an SLO: doubling, then bisection to within
    /// --precision, then a confirmation run.
    Capacity(CapacityArgs),
    /// Replicas and cores for a target load, from a measured experiment or given figures.
    Size(SizeArgs),
    /// Write an experiment's report: one self-contained HTML file, and every plot as SVG and PNG.
    Report(ReportArgs),
    /// Send load for a coordinator (`run`/`experiment --agents`): listen for it, or dial it; the
    /// shared token comes from --token-file or MESHBENCH_AGENT_TOKEN.
    Agent(AgentArgs),
    /// Kubernetes as the engine: agents as an Indexed Job, coordinated from here.
    #[command(subcommand)]
    K8s(K8sCommand),
}

/// `meshbench agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Wait for coordinators on this address (default 127.0.0.1:7700 unless --coordinator).
    #[arg(long, value_name = "ADDR", conflicts_with = "coordinator")]
    pub listen: Option<String>,
    /// Dial this coordinator (HOST:PORT) and serve it until it ends the session.
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,
    /// This agent's name in results (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Give up dialling after this long without a coordinator, e.g. 2m.
    #[arg(long, value_name = "DURATION", default_value = "2m")]
    pub patience: String,
    #[command(flatten)]
    pub auth: AgentAuthFlags,
}

/// The shared token and optional mutual TLS, on agents and coordinators alike.
#[derive(Debug, Args, Default)]
pub struct AgentAuthFlags {
    /// Read the shared agent token from this file (else from MESHBENCH_AGENT_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Mutual TLS on the control connection: this side's certificate (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["agent_tls_key", "agent_tls_ca"])]
    pub agent_tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, value_name = "FILE", requires = "agent_tls_cert")]
    pub agent_tls_key: Option<PathBuf>,
    /// The CA that signed the peer's certificate (PEM).
    #[arg(long, value_name = "FILE", requires = "agent_tls_cert")]
    pub agent_tls_ca: Option<PathBuf>,
}

/// Sending the load from agents (`run`, `experiment`).
#[derive(Debug, Args, Default)]
pub struct AgentsFlags {
    /// Send the load from agents: N (they dial --agents-listen) or ADDR,ADDR,... (agents that
    /// listen). Each drives its segment of the plan; the result is merged exactly.
    #[arg(long, value_name = "N|ADDR,...")]
    pub agents: Option<String>,
    /// Where N agents dial in.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7700")]
    pub agents_listen: String,
    /// How long to wait for N agents to dial in, e.g. 60s.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub agents_wait: String,
    #[command(flatten)]
    pub auth: AgentAuthFlags,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A: a `meshbench run --json` file (or several, separated by commas: repeats of one
    /// measurement), or EXPERIMENT, EXPERIMENT:VARIANT or EXPERIMENT#STEP from the store
    /// (EXPERIMENT is an id, a name or `latest`; STEP as `results show` numbers them).
    pub a: String,
    /// B, in the same forms; the differences are B - A.
    pub b: String,
    /// What identical runs differ by: a difference tested over one-second intervals is called
    /// one only when its whole 95 % interval lies beyond it. Shares of A's value, for every
    /// percentile (10%) or one (p99=50%), and a floor (50us); 0 for none (the test alone).
    /// Default p50=5%,p90=25%,p99=50%,p99.9=50%,50us, measured here (docs/answers.md). Not
    /// used when each side has 4 repeats or more: they are tested over the runs.
    #[arg(long, value_name = "SHARES,FLOOR")]
    pub margin: Option<String>,
    /// Fail (exit 1) unless this holds, e.g. 'delta_p99<1ms' or 'p99<10ms' (B's); repeatable.
    #[arg(long = "threshold", value_name = "METRIC<VALUE")]
    pub thresholds: Vec<String>,
    #[command(flatten)]
    pub store: StoreArg,
}

#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// The URL to load (open loop). `meshbench run`'s per-request flags (protocol, TLS,
    /// headers, body, timeout, threads...) go after `--`, e.g. `-- --http2 --insecure`; the
    /// rate, duration and connections are the search's own.
    #[arg(required_unless_present = "experiment")]
    pub url: Option<String>,
    /// Search an experiment file's rig instead: its first topology (or --topology), its first
    /// connection count, response size and CPU allotment.
    #[arg(long, value_name = "FILE", conflicts_with = "url")]
    pub experiment: Option<PathBuf>,
    /// Override a key of the experiment file.
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "experiment")]
    pub set: Vec<String>,
    /// The topology of the experiment to search.
    #[arg(long, requires = "experiment", value_parser = step_kind())]
    pub topology: Option<StepKind>,
    /// What a rate must meet, comma-separated: 'p99<10ms,errors<0.1%'.
    #[arg(long, required_unless_present = "cpu_under")]
    pub slo: Option<String>,
    /// A rate must also keep every proxy on the path (the gateway, the sidecars, the waypoint;
    /// the tunnels) under this share of its CPU limit, in percent: the highest rate before
    /// saturation, as gateway studies read "90 % CPU". Needs --experiment and a CPU limit
    /// (limits.proxy.cpus or limits.tunnel.cpus).
    #[arg(long, value_name = "PERCENT", requires = "experiment")]
    pub cpu_under: Option<f64>,
    /// First rate tried (req/s).
    #[arg(long, default_value_t = 100.0, value_name = "RPS")]
    pub start: f64,
    /// No rate above this is tried (req/s).
    #[arg(long, default_value_t = 1_000_000.0, value_name = "RPS")]
    pub max_rps: f64,
    /// Stop bisecting when the pass and the failure are this close.
    #[arg(long, default_value = "2%")]
    pub precision: String,
    /// Measured time of each step (URL mode; an experiment uses its duration_secs).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub step_duration: String,
    /// Warm-up before each step's measurement (URL mode).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub warmup: String,
    /// Connections (URL mode).
    #[arg(short = 'c', long, default_value_t = 64, value_name = "N")]
    pub connections: usize,
    #[command(flatten)]
    pub store: StoreArg,
    /// No progress lines.
    #[arg(short, long)]
    pub quiet: bool,
    /// Per-request flags of `meshbench run` for every step (URL mode).
    #[arg(last = true, value_name = "REQUEST FLAGS")]
    pub run_args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SizeArgs {
    /// The load to carry.
    #[arg(long, value_name = "RPS")]
    pub target_rps: f64,
    /// Share of each replica's CPU kept free.
    #[arg(long, default_value = "30%")]
    pub headroom: String,
    /// Cores allotted to each replica.
    #[arg(long, default_value_t = 1.0, value_name = "CORES")]
    pub cores_per_replica: f64,
    /// The measured experiment to size from (id or name), unless --rps-per-core; `latest`: the
    /// newest one that measured what a replica carries (it says which).
    #[arg(long, default_value = "latest")]
    pub experiment: String,
    /// Only this proxy role (default: every proxy role measured).
    #[arg(long)]
    pub role: Option<String>,
    /// Only this variant, or a topology with all its CPU allotments (default: every one with a
    /// proxy).
    #[arg(long)]
    pub variant: Option<String>,
    /// Size even when one replica would carry more than twice the highest load measured
    /// (without it, such a sizing is refused with the step that would measure it).
    #[arg(long)]
    pub extrapolate: bool,
    /// Size from a known figure instead of an experiment.
    #[arg(long, value_name = "RPS")]
    pub rps_per_core: Option<f64>,
    /// Memory per replica with --rps-per-core.
    #[arg(long, value_name = "MIB", default_value_t = 0.0)]
    pub memory_mib: f64,
    #[command(flatten)]
    pub store: StoreArg,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Experiment id, name (its newest run) or `latest`.
    #[arg(default_value = "latest")]
    pub experiment: String,
    /// Directory for report.html and the plots (created if needed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Draw this p99 SLO on the latency/throughput plot, e.g. 10ms.
    #[arg(long, value_name = "DURATION")]
    pub slo_p99: Option<String>,
    #[command(flatten)]
    pub store: StoreArg,
}

#[derive(Debug, Args)]
pub struct ExperimentArgs {
    /// The experiment file (YAML; see docs/experiment.md and examples/).
    pub file: PathBuf,
    /// Override a key of the file, e.g. --set duration_secs=3 --set 'load.rate_rps=[100,200]'.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Print the steps and the total time, start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With a list of gateways (gateway.type), run those installed here and name the others
    /// with the script that installs each, instead of refusing the plan.
    #[arg(long)]
    pub installed_only: bool,
    /// A file with `cluster:`: run its coordinator in the cluster, as a Job, and return; follow
    /// it with `k8s attach`, bring its results home with `k8s fetch`, end it with `k8s stop`.
    #[arg(long, conflicts_with = "dry_run")]
    pub detach: bool,
    /// With --detach: how long a finished run's results wait in the cluster to be fetched
    /// before the coordinator removes them with its namespace, e.g. 24h.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "24h",
        requires = "detach"
    )]
    pub keep_for: String,
    /// The results store (SQLite).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Fail (exit 1) unless this holds for every measurement, e.g. 'p99<10ms',
    /// 'errors<0.1%', 'proxy_cpu_per_1k_rps<0.6', 'added_p99<2ms'; repeatable.
    #[arg(long = "threshold", value_name = "METRIC<VALUE")]
    pub thresholds: Vec<String>,
    #[command(flatten)]
    pub live: LiveFlags,
    #[command(flatten)]
    pub agents: AgentsFlags,
}

#[derive(Debug, Subcommand)]
pub enum ResultsCommand {
    /// Every stored experiment, newest first.
    List(StoreArg),
    /// One experiment's steps: load, latency, and each role's CPU and memory.
    #[command(after_long_help = READING_THE_HEADLINE)]
    Show(ShowArgs),
    /// One experiment as CSV (Istio perf/benchmark columns), JSON, fortio JSON per step, or
    /// Service Mesh Performance (SMP) documents.
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub struct StoreArg {
    /// The results store (SQLite).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Experiment id, name (its newest run) or `latest`.
    #[arg(default_value = "latest")]
    pub experiment: String,
    #[command(flatten)]
    pub store: StoreArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    Csv,
    Json,
    Fortio,
    /// Service Mesh Performance documents, one per step (lossy: see docs/cli.md).
    Smp,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Experiment id, name (its newest run) or `latest`.
    #[arg(default_value = "latest")]
    pub experiment: String,
    /// What to write.
    #[arg(long, value_enum, default_value = "csv")]
    pub format: ExportFormat,
    /// Where to write: a file for csv and json (stdout without it), a directory for fortio.
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArg,
}

#[derive(Debug, Subcommand)]
pub enum GenCommand {
    /// A gateway serving N domains x M paths, every route to one backend with its path
    /// rewritten to /, with a CA and certificates; plus targets.txt covering every route.
    Gateway(GatewayArgs),
    /// A CA, a server certificate and a client certificate (PEM), for TLS and mutual TLS labs.
    Certs(CertsArgs),
    /// A Grafana dashboard (JSON) of the live stream: rate, latency percentiles, errors,
    /// schedule lag, CPU and memory per role, per step, from the series of --metrics-listen
    /// and --prometheus-remote-write.
    Grafana(GrafanaArgs),
    /// The Kubernetes objects of a run from agents: a Secret (token), a ConfigMap (the
    /// experiment), a headless Service and an Indexed Job of N agents that dial --coordinator.
    K8s(K8sGenArgs),
}

/// What the Kubernetes objects are made of (`gen k8s`, `k8s run`).
#[derive(Debug, Args)]
pub struct K8sPlanFlags {
    /// The experiment file (YAML; see docs/experiment.md), put in the ConfigMap.
    pub file: PathBuf,
    /// Agent pods.
    #[arg(long, value_name = "N")]
    pub agents: u32,
    /// The agent image (deploy/Containerfile builds one).
    #[arg(long, value_name = "IMAGE")]
    pub image: String,
    /// Prefix of every object's name.
    #[arg(long, default_value = "meshbench")]
    pub name: String,
    /// The namespace the objects go in (it must exist).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// CPU of each agent (requests = limits), e.g. 2 or 500m.
    #[arg(long, value_name = "QUANTITY")]
    pub cpu: Option<String>,
    /// Memory of each agent (requests = limits), e.g. 1Gi.
    #[arg(long, value_name = "QUANTITY")]
    pub memory: Option<String>,
    /// A pod sysctl, e.g. --sysctl 'net.ipv4.ip_local_port_range=1024 65535'; repeatable.
    #[arg(long = "sysctl", value_name = "KEY=VALUE")]
    pub sysctls: Vec<String>,
    /// How agents spread over nodes: preferred (one per node if it can), required, none.
    #[arg(long, value_enum, value_name = "HOW", default_value = "preferred")]
    pub anti_affinity: AntiAffinityArg,
    /// Read the shared token from this file (else MESHBENCH_AGENT_TOKEN, else a new one).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// `--anti-affinity`: how agent pods spread over nodes (`meshbench_k8s::AntiAffinity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AntiAffinityArg {
    Preferred,
    Required,
    None,
}

#[derive(Debug, Args)]
pub struct K8sGenArgs {
    #[command(flatten)]
    pub plan: K8sPlanFlags,
    /// HOST:PORT the agents dial (where `meshbench experiment --agents N` listens).
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: String,
    /// Where to write the YAML (stdout without it).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `meshbench k8s ...`.
#[derive(Debug, Subcommand)]
pub enum K8sCommand {
    /// Apply the objects, wait for the agent pods, run the experiment from them, delete all.
    Run(Box<K8sRunArgs>),
    /// Put back what a cluster experiment (a file with `cluster:`) changed and did not undo
    /// (it was killed): the journals beside the store, or the ones named.
    Restore(K8sRestoreArgs),
    /// Print this node's kernel, CPU model and CPUs as JSON (a cluster run's check pods).
    #[command(hide = true)]
    NodeFacts,
    /// Follow a detached run (`experiment FILE --detach`): its progress lines until it ends.
    Attach(K8sDetachedArgs),
    /// Bring a detached run's results into the local store, then remove it from the cluster.
    Fetch(K8sFetchArgs),
    /// Stop a detached run: it puts back what it changed and keeps what it measured for fetch.
    Stop(K8sDetachedArgs),
    /// The coordinator of a detached run, in its pod (the Job `--detach` makes runs this).
    #[command(hide = true)]
    Coordinator(K8sCoordinatorArgs),
}

/// Which detached run, on which cluster.
#[derive(Debug, Args)]
pub struct K8sDetachedArgs {
    /// The run's namespace (the file's `cluster.namespace`).
    pub namespace: String,
    /// The kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the pod's own account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct K8sFetchArgs {
    #[command(flatten)]
    pub run: K8sDetachedArgs,
    /// The results store (SQLite) the run's experiments are added to.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct K8sCoordinatorArgs {
    /// How long the results wait to be fetched once the run has ended.
    #[arg(long, value_name = "SECONDS")]
    pub keep_secs: u64,
}

#[derive(Debug, Args)]
pub struct K8sRestoreArgs {
    /// Journals to undo (default: every one beside the store whose run has ended).
    pub journals: Vec<PathBuf>,
    /// The results store whose journals are meant.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Wait until standard input closes, then undo the journal if it is still there (the
    /// watcher a cluster experiment starts beside itself).
    #[arg(long, hide = true)]
    pub when_stdin_closes: bool,
}

#[derive(Debug, Args)]
pub struct K8sRunArgs {
    #[command(flatten)]
    pub plan: K8sPlanFlags,
    /// Where this coordinator listens for its agents.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7700")]
    pub listen: String,
    /// HOST:PORT the agents dial (default: the --listen address, when it is not every address).
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// The kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the pod's own account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// How long the agent pods may take to be ready (and then to dial in), e.g. 2m.
    #[arg(long, value_name = "DURATION", default_value = "2m")]
    pub ready_timeout: String,
    /// The results store (SQLite).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Leave the objects in the cluster afterwards.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct GrafanaArgs {
    /// Where to write the dashboard (stdout without it).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The uid of the Prometheus data source the dashboard starts on (the `datasource`
    /// variable still offers every Prometheus).
    #[arg(long, value_name = "UID")]
    pub datasource_uid: Option<String>,
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// Names the server certificate is valid for.
    #[arg(
        long,
        value_name = "NAME,...",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,::1"
    )]
    pub names: Vec<String>,
    /// Output directory: ca.pem, server.pem, server-key.pem, client.pem, client-key.pem.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GatewayFlavor {
    Nginx,
    Haproxy,
    Caddy,
    Envoy,
    Istio,
    /// Contour's objects: an HTTPProxy per domain, its Secrets, the backend's Service and
    /// EndpointSlice (needs --tls).
    Contour,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CertsArg {
    /// One certificate per domain, chosen by SNI.
    PerDomain,
    /// One certificate naming every domain.
    Shared,
}

#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Which gateway to configure.
    #[arg(long = "for", value_enum, value_name = "GATEWAY")]
    pub flavor: GatewayFlavor,
    /// Number of domains (workspace-{w}-domain-{d}.com, 100 per workspace).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    pub domains: i64,
    /// Paths per domain (/get/1 .. /get/M).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    pub paths: i64,
    /// Serve HTTPS with generated certificates.
    #[arg(long)]
    pub tls: bool,
    /// How certificates are cut.
    #[arg(long, value_enum, default_value = "per-domain")]
    pub certs: CertsArg,
    /// Offer HTTP/1.1 only (no h2 over ALPN, no h2c).
    #[arg(long)]
    pub no_http2: bool,
    /// Offer HTTP/3 too (QUIC on the same port over UDP): caddy and envoy; needs --tls.
    #[arg(long)]
    pub http3: bool,
    /// Route gRPC: each domain routes the backend's gRPC methods (fortio's ping, the health
    /// check) unchanged over HTTP/2 (h2c to the backend, which needs --http2); --paths does
    /// not apply.
    #[arg(long, conflicts_with_all = ["no_http2", "paths"])]
    pub grpc: bool,
    /// Address of the backend every route goes to.
    #[arg(long, value_name = "ADDR:PORT")]
    pub backend: String,
    /// Where the gateway listens (default 127.0.0.1:8443 with --tls, else 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// Worker processes or threads of the gateway.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub workers: i64,
    /// Where Envoy's admin endpoint listens (stats, memory; envoy only).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:15000")]
    pub admin: String,
    /// Output directory.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(short = 'l', long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Response body size in bytes (a request may ask for another with ?size=N or
    /// x-meshbench-size).
    #[arg(long, default_value_t = 1024, value_name = "BYTES")]
    pub size: usize,
    /// Delay before answering: 5ms, uniform:1ms..5ms or exp:2ms (per request: ?delay=).
    #[arg(long, value_name = "DELAY")]
    pub delay: Option<String>,
    /// How delays are waited out: sleep (no CPU; the timer's lateness is added) or spin
    /// (sleeps until 300 us before the response is due, then polls: the delay is exact, for up
    /// to 300 us of CPU per delayed response). Plain HTTP/1.1 only.
    #[arg(long, value_enum, default_value = "sleep")]
    pub delay_mode: DelayModeArg,
    /// CPU time spent on each request, holding its thread (unlike --delay): the backend then
    /// saturates at --threads / WORK requests per second. 1ms, 250us.
    #[arg(long, value_name = "DURATION")]
    pub work: Option<String>,
    /// Inject statuses: 503:1% or 503:1%,500:0.5% (per request: ?status=).
    #[arg(long, value_name = "CODE:PCT")]
    pub status: Option<String>,
    /// Event-loop threads.
    #[arg(short = 't', long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
    /// Serve TLS (HTTP/1.1 and HTTP/2 by ALPN). Without --cert, a CA, a server certificate and
    /// a client certificate are generated into --tls-dir.
    #[arg(long)]
    pub tls: bool,
    /// Also accept prior-knowledge HTTP/2 (h2c) on a plain port.
    #[arg(long)]
    pub http2: bool,
    /// Also serve HTTP/3 (QUIC) on the same port number over UDP; needs --tls.
    #[arg(long, requires = "tls")]
    pub http3: bool,
    /// Server certificate chain (PEM) instead of a generated one; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Require client certificates (mutual TLS) signed by this CA, or by the generated CA when
    /// no file is given.
    #[arg(long, value_name = "CA_FILE", num_args = 0..=1, default_missing_value = "")]
    pub mtls: Option<String>,
    /// Where generated certificates are written (default: a new directory under the temp dir).
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
    /// Names the generated server certificate is valid for.
    #[arg(
        long,
        value_name = "NAME,...",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,::1"
    )]
    pub tls_names: Vec<String>,
    /// Record when every request arrives (the kernel's receive time of its first segment) and,
    /// on stopping, write the steady state's gaps and bursts to FILE as JSON: how evenly a
    /// generator's load reaches the target. Plain HTTP/1.1 only.
    #[arg(long, value_name = "FILE")]
    pub arrivals: Option<PathBuf>,
    /// With --arrivals: seconds left out at each end of the arrivals (ramp-up and drain).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 1.0,
        requires = "arrivals"
    )]
    pub arrivals_trim: f64,
    /// Misbehave instead of answering, to see what a client or proxy does with a broken server:
    /// slowloris, endless-header, informational, informational-flood, chunked-lie,
    /// chunked-lie-stall, short-body, short-body-stall, early-close, rst (HTTP/1.1);
    /// h2-rst-flood, h2-goaway-flood, h2-zero-window (h2c); tls-stall. See docs/hostile.md.
    #[arg(
        long,
        value_name = "BEHAVIOUR",
        value_parser = parse_hostile,
        conflicts_with_all = ["tls", "http2", "delay", "work", "status", "cert", "mtls", "tls_dir", "arrivals"]
    )]
    pub hostile: Option<meshbench_backend::Hostile>,
    /// With --hostile slowloris: the pause between two bytes.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "100ms",
        requires = "hostile"
    )]
    pub drip: String,
}

/// `--topology`: a word of the experiment file's `topologies:` (`StepKind::name`), each one
/// listed by `--help` and a word that is none of them refused by clap (exit 2).
fn step_kind() -> impl TypedValueParser<Value = StepKind> {
    PossibleValuesParser::new(StepKind::ALL.map(StepKind::name))
        .try_map(|word| StepKind::from_word(&word).ok_or(format!("{word}: not a topology")))
}

fn parse_hostile(s: &str) -> Result<meshbench_backend::Hostile, String> {
    s.parse()
        .map_err(|e: meshbench_backend::UnknownHostile| e.to_string())
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the Istio-style CSV.
    #[arg(long, default_value = "meshbench-demo")]
    pub out: PathBuf,
    /// The results store (SQLite; default: every command's, so that `results`, `compare` and
    /// `report` find the demo's experiment with no flag).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Override a key of the embedded experiment, e.g. --set duration_secs=10.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
}
