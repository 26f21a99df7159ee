//! Helpers for the black-box tests: run the real binary with a time limit, start the real
//! backend, nginx and generated gateways as the lab starts its roles (one process handle),
//! start misbehaving servers, validate JSON against the published schema.

#![allow(dead_code)]

pub mod cluster;
pub mod contour_node;
pub mod istio_node;
pub mod prometheus;
pub mod relay;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshbench_lab::process::Placement;
use meshbench_lab::program::{
    nginx, CommandTemplate, Hop, ProgramSpec, Run, Standalone, WrittenProgram,
};
use meshbench_lab::{rig, LabError, Program, RoleProcess};
use meshbench_results::{topology::Duty, Layer};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_meshbench")
}

/// Starts the binary with `args`, output piped, without waiting for it.
pub fn spawn_meshbench(args: &[&str]) -> Child {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    spawn_piped(cmd)
}

/// Starts the binary with `args` in a process group of its own, as a shell starts a
/// pipeline: Ctrl-C ([`interrupt_group`]) reaches it and everything it started in the group.
pub fn spawn_meshbench_in_own_group(args: &[&str]) -> Child {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    spawn_piped(cmd)
}

/// Ctrl-C from a terminal: SIGINT to `child`'s whole process group.
pub fn interrupt_group(child: &Child) {
    // SAFETY: signalling the process group of a child this test started.
    assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) }, 0);
}

/// Starts `cmd` with no input and its output piped, without waiting for it.
fn spawn_piped(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn meshbench")
}

/// Runs the binary with `args`; kills it after `limit`.
pub fn meshbench(args: &[&str], limit: Duration) -> Output {
    wait_with_limit(&mut spawn_meshbench(args), limit)
}

/// Runs the binary with `args`, every thread on CPU `cpu` (taskset); kills it after `limit`.
pub fn meshbench_on_cpu(cpu: usize, args: &[&str], limit: Duration) -> Output {
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &cpu.to_string(), bin()]).args(args);
    wait_with_limit(&mut spawn_piped(cmd), limit)
}

pub fn wait_with_limit(child: &mut Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("meshbench did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// A unique path for a result file.
pub fn temp_json(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("meshbench-test-{}-{name}.json", std::process::id()))
}

/// Runs `meshbench run ... --json FILE`, returns the output and the parsed, schema-checked JSON.
pub fn run_json(name: &str, args: &[&str], limit: Duration) -> (Output, serde_json::Value) {
    let path = temp_json(name);
    let _ = std::fs::remove_file(&path);
    let mut all: Vec<&str> = vec!["run", "-q"];
    all.extend_from_slice(args);
    let p = path.to_str().unwrap().to_string();
    all.push("--json");
    all.push(&p);
    let out = meshbench(&all, limit);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{name}: no JSON written ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let _ = std::fs::remove_file(&path);
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_valid(&json);
    (out, json)
}

/// Checks a result against docs/result.schema.json.
pub fn assert_valid(json: &serde_json::Value) {
    assert_valid_as(json, &result_schema());
}

/// docs/result.schema.json, parsed.
fn result_schema() -> serde_json::Value {
    let schema_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/result.schema.json");
    serde_json::from_str(&std::fs::read_to_string(schema_path).expect("schema file"))
        .expect("schema JSON")
}

/// Checks a value against one of docs/result.schema.json's `$defs` (the parts of other
/// outputs it describes, such as an exported role's `proxy`).
pub fn assert_valid_def(json: &serde_json::Value, def: &str) {
    let defs = result_schema()["$defs"].clone();
    assert!(defs.get(def).is_some(), "no $defs/{def} in the schema");
    let schema = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": defs,
        "$ref": format!("#/$defs/{def}"),
    });
    assert_valid_as(json, &schema);
}

fn assert_valid_as(json: &serde_json::Value, schema: &serde_json::Value) {
    let validator = jsonschema::validator_for(schema).expect("a valid schema");
    let errors: Vec<String> = validator
        .iter_errors(json)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "result does not match the schema: {errors:#?}"
    );
}

/// A free port on loopback.
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A fresh directory under the system's temporary directory.
pub fn scratch_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "meshbench-test-role-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A process started as the lab starts a role (its one handle, [`RoleProcess`]): its output in
/// `DIR/NAME.log`, ready once `addr` accepts; stopped when dropped, and its directory removed
/// when the test did not give one.
pub struct LabRole {
    process: Option<RoleProcess>,
    pub addr: SocketAddr,
    scratch: Option<PathBuf>,
}

impl LabRole {
    pub fn start(
        name: &str,
        cmd: Command,
        addr: SocketAddr,
        dir: &Path,
    ) -> Result<LabRole, LabError> {
        let log = dir.join(format!("{name}.log"));
        let process = RoleProcess::start(
            name,
            cmd,
            &log,
            &Placement::default(),
            addr,
            &meshbench_results::Stop::new(),
        )?;
        Ok(LabRole {
            process: Some(process),
            addr,
            scratch: None,
        })
    }

    /// The last lines the process logged.
    pub fn log_tail(&self) -> String {
        self.process
            .as_ref()
            .map_or(String::new(), |p| p.log_tail(5))
    }
}

impl Drop for LabRole {
    fn drop(&mut self) {
        drop(self.process.take());
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A program's gateway, on the configuration `meshbench gen gateway` wrote into `dir` (with
/// its default of one worker).
pub fn start_gateway(
    program: Program,
    dir: &Path,
    listen: SocketAddr,
) -> Result<LabRole, LabError> {
    let meshbench_results::Configuration::Written(written) = program.configuration() else {
        panic!("{program}'s gateway is started by the rig with its control plane");
    };
    let cmd = written.gateway_command(dir, 1)?;
    LabRole::start(program.name(), cmd, listen, dir)
}

/// A real nginx (one worker) answering every request with a body of `body_bytes` bytes.
pub fn nginx_static(body_bytes: usize) -> Result<LabRole, LabError> {
    let dir = scratch_dir("nginx");
    let addr = free_addr();
    let config = dir.join("nginx.conf");
    std::fs::write(&config, nginx::static_config(&dir, addr, body_bytes, 1)).unwrap();
    let bin = ProgramSpec::from(Program::Nginx).binary()?;
    let run = Run {
        config: &config,
        dir: &dir,
        name: "nginx",
        workers: 1,
    };
    let mut role = LabRole::start("nginx", nginx::command(&bin, &run), addr, &dir)?;
    role.scratch = Some(dir);
    Ok(role)
}

/// A real nginx (one worker) as an L7 hop in front of `upstream`.
pub fn nginx_proxy(upstream: SocketAddr) -> Result<LabRole, LabError> {
    let dir = scratch_dir("nginx-proxy");
    let hop = Hop {
        name: "nginx".into(),
        duty: Duty::ServerSidecar,
        layer: Layer::L7,
        listen: free_addr(),
        listen_tls: None,
        upstream,
        upstream_tls: None,
        http2: false,
        grpc: false,
        http3: false,
        workers: 1,
        dir: dir.clone(),
        destination: upstream,
        hbone_in: false,
        hbone_out: false,
        admin: None,
        istio_telemetry: false,
        access_log: None,
    };
    let cmd = Standalone::Nginx.prepare_hop(&CommandTemplate::default(), &hop)?;
    let mut role = LabRole::start("nginx", cmd, hop.listen, &dir)?;
    role.scratch = Some(dir);
    Ok(role)
}

/// The backend, as a separate process, on a free port.
pub struct BackendProc {
    _role: LabRole,
    pub addr: SocketAddr,
}

impl BackendProc {
    pub fn start(extra: &[&str]) -> Self {
        let args: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        Self::start_as(|addr| rig::backend_command(Path::new(bin()), addr, &args))
    }

    /// The backend with every thread on CPU `cpu` (taskset), for a test whose generator has
    /// the other CPU to itself: on two cores, a backend that spends a core's CPU otherwise
    /// takes the generator's, and the generator rightly calls its figures contended.
    pub fn start_on_cpu(cpu: usize, extra: &[&str]) -> Self {
        Self::start_as(|addr| {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &cpu.to_string(), bin(), "backend", "--listen"])
                .arg(addr.to_string())
                .args(extra);
            cmd
        })
    }

    /// The backend `command` starts on a free port it is given.
    fn start_as(command: impl FnOnce(SocketAddr) -> Command) -> Self {
        let dir = scratch_dir("backend");
        let addr = free_addr();
        let mut role =
            LabRole::start("backend", command(addr), addr, &dir).expect("the backend starts");
        role.scratch = Some(dir);
        BackendProc { _role: role, addr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// How a misbehaving server treats each connection.
#[derive(Clone, Copy, Debug)]
pub enum Misbehaviour {
    /// Reads the request, then resets the connection (RST).
    Reset,
    /// Sends half a response, then closes.
    CloseEarly,
    /// Closes without a byte as soon as the request arrives.
    CloseSilently,
    /// Answers bytes that are not HTTP.
    Garbage,
    /// Answers a 1 MiB header.
    HugeHeader,
    /// Never answers.
    Silent,
}

/// A server on a loopback port that misbehaves in one way; stops when dropped.
pub struct BadServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl BadServer {
    pub fn start(how: Misbehaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            let mut parked = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let (mut s, _) = match listener.accept() {
                    Ok(c) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                match how {
                    Misbehaviour::Reset => {
                        meshbench_net::socket::set_linger_zero(s.as_raw_fd()).unwrap();
                    }
                    Misbehaviour::CloseEarly => {
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
                    }
                    Misbehaviour::CloseSilently => {}
                    Misbehaviour::Garbage => {
                        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\nnot http at all\r\n\r\n");
                    }
                    Misbehaviour::HugeHeader => {
                        let mut r = b"HTTP/1.1 200 OK\r\nX-Big: ".to_vec();
                        r.extend(std::iter::repeat_n(b'a', 1 << 20));
                        r.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
                        let _ = s.write_all(&r);
                    }
                    Misbehaviour::Silent => {
                        parked.push(s);
                        continue;
                    }
                }
                drop(s);
            }
        });
        BadServer { addr, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for BadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// The self-check's findings and the warnings in a run's summary, each joined into one
/// string (`INVALID: ...`, `NOTE: ...`, `WARNING: ...`): the summary wraps a finding at 120
/// columns, its later lines indented under its first.
pub fn findings(summary: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in summary.lines() {
        let text = line.trim_start();
        let tagged = ["INVALID: ", "NOTE: ", "WARNING: "]
            .iter()
            .any(|t| text.starts_with(t));
        if line.starts_with("  ") && tagged {
            out.push(text.to_string());
            open = true;
        } else if open && line.starts_with("    ") {
            if let Some(last) = out.last_mut() {
                last.push(' ');
                last.push_str(text);
            }
        } else {
            open = false;
        }
    }
    out
}

/// Each case `(file name, experiment text, words)` written into `dir` and given to
/// `meshbench experiment FILE --dry-run`: refused before anything starts, with exit 2 and one
/// line that holds `words`, never a panic.
pub fn assert_refused_in_one_line(dir: &Path, cases: &[(&str, &str, &str)]) {
    for (name, text, says) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = meshbench(
            &["experiment", &path.display().to_string(), "--dry-run"],
            Duration::from_secs(60),
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The messages of a stderr, each line joined with its continuations: the binary wraps what it
/// says at 120 columns with a two-space hanging indent (issue 47), so one message can take
/// several lines.
pub fn messages(stderr: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in stderr.lines() {
        match out.last_mut() {
            Some(last) if line.starts_with("  ") => {
                last.push(' ');
                last.push_str(line.trim_start());
            }
            _ => out.push(line.to_string()),
        }
    }
    out
}

pub fn u(v: &serde_json::Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(|x| x.as_u64())
        .unwrap_or_else(|| panic!("no integer at {path}"))
}

pub fn f(v: &serde_json::Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(|x| x.as_f64())
        .unwrap_or_else(|| panic!("no number at {path}"))
}

/// The protocol matrix the black-box tests run over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    H1,
    H1Tls,
    H2c,
    H2Tls,
}

impl Proto {
    pub const ALL: [Proto; 4] = [Proto::H1, Proto::H1Tls, Proto::H2c, Proto::H2Tls];

    pub fn tls(self) -> bool {
        matches!(self, Proto::H1Tls | Proto::H2Tls)
    }

    pub fn h2(self) -> bool {
        matches!(self, Proto::H2c | Proto::H2Tls)
    }
}

/// The backend serving one protocol of the matrix: plain HTTP/1.1 by the fast server, the rest
/// by the hyper server (`--http2` for h2c, `--tls` with generated certificates).
pub struct ProtoBackend {
    pub proto: Proto,
    pub backend: BackendProc,
    pub tls_dir: PathBuf,
}

impl ProtoBackend {
    pub fn start(proto: Proto, extra: &[&str]) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let tls_dir = std::env::temp_dir().join(format!(
            "meshbench-test-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let dir = tls_dir.to_str().unwrap().to_string();
        let mut args: Vec<&str> = extra.to_vec();
        match proto {
            Proto::H1 => {}
            Proto::H2c => args.push("--http2"),
            Proto::H1Tls | Proto::H2Tls => args.extend(["--tls", "--tls-dir", &dir]),
        }
        ProtoBackend {
            proto,
            backend: BackendProc::start(&args),
            tls_dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.proto.tls() { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.backend.addr)
    }

    /// Flags `meshbench run` needs for this protocol.
    pub fn flags(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.proto.h2() {
            f.push("--http2".to_string());
        }
        if self.proto.tls() {
            f.push("--cacert".to_string());
            f.push(self.tls_dir.join("ca.pem").display().to_string());
        }
        f
    }

    /// `meshbench run` arguments: the URL of `path`, this protocol's flags, then `rest`.
    pub fn args(&self, path: &str, rest: &[&str]) -> Vec<String> {
        let mut a = vec![self.url(path)];
        a.extend(self.flags());
        a.extend(rest.iter().map(|s| s.to_string()));
        a
    }
}

impl Drop for ProtoBackend {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.tls_dir);
    }
}

/// `run_json` with owned arguments.
pub fn run_json_owned(name: &str, args: &[String], limit: Duration) -> (Output, serde_json::Value) {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run_json(name, &refs, limit)
}

/// One request as a [`RecordingServer`] saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub host: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A plain HTTP/1.1 upstream that records every request (method, target, Host, headers, body)
/// and answers 200 with a short body: to check what reached the backend through a gateway, and in what order.
pub struct RecordingServer {
    pub addr: SocketAddr,
    pub seen: Arc<std::sync::Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl RecordingServer {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let seen = s2.clone();
                        std::thread::spawn(move || serve_recording(conn, seen));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        RecordingServer { addr, seen, stop }
    }

    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Drop for RecordingServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve_recording(mut conn: std::net::TcpStream, seen: Arc<std::sync::Mutex<Vec<Seen>>>) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        // Parse every complete request in the buffer (bodies by Content-Length).
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            let Ok(httparse::Status::Complete(head)) = req.parse(&buf) else {
                break;
            };
            let all = header_list(req.headers);
            let length: usize = all
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() < head + length {
                break;
            }
            seen.lock().unwrap().push(Seen {
                method: req.method.unwrap_or("").to_string(),
                target: req.path.unwrap_or("").to_string(),
                host: all
                    .iter()
                    .find(|(n, _)| n == "host")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default(),
                headers: all.clone(),
                body: buf[head..head + length].to_vec(),
            });
            buf.drain(..head + length);
            if conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .is_err()
            {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Parsed headers as (lower-case name, value text) pairs.
pub fn header_list(headers: &[httparse::Header]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

/// A stored step's usage row of `role` (its word in results: `gateway`, `istiod`...).
pub fn usage_of<'a>(step: &'a serde_json::Value, role: &str) -> &'a serde_json::Value {
    step["usage"]
        .as_array()
        .expect("the step's usage")
        .iter()
        .find(|r| r["role"] == role)
        .unwrap_or_else(|| panic!("no {role} role: {}", step["usage"]))
}

/// The latest experiment of `store` as `results export --format json` writes it.
pub fn export_json(store: &Path) -> serde_json::Value {
    let out = meshbench(
        &[
            "results",
            "export",
            "latest",
            "--format",
            "json",
            "--store",
            store.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("a JSON export")
}

/// The Envoy the lab runs (`$MESHBENCH_ENVOY`, PATH, /usr/local/bin/envoy), or a failure that
/// says how to install it.
pub fn envoy_binary() -> PathBuf {
    meshbench_lab::program::envoy::binary()
        .unwrap_or_else(|e| panic!("Envoy is not installed: run scripts/install-envoy.sh ({e})"))
}

/// Copies `binary` into the root filesystem `root` at `dest` (a path inside it), with every
/// shared library `ldd` lists at its own path and the loader: what an image built here from a
/// host binary needs, without a base image.
pub fn copy_with_libraries(root: &Path, binary: &Path, dest: &str) {
    let to = root.join(dest.trim_start_matches('/'));
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(binary, &to).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let ldd = Command::new("ldd").arg(binary).output().expect("ldd");
    let libs: std::collections::BTreeSet<String> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(str::to_string)
        .collect();
    for lib in &libs {
        let to = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        // Follow symbolic links: the image holds the files under the names the loader asks.
        std::fs::copy(lib, &to).unwrap_or_else(|e| panic!("{lib}: {e}"));
    }
}

/// docs/kubernetes.md's checklist, its RBAC step: Istio's namespace (the shipped Role lives
/// there), deploy/cluster-experiment-rbac.yaml and its binding to [`cluster::USER`], applied
/// as `kubectl apply -f` would; how many objects each file made.
pub fn bind_user_to_shipped_rbac(k: &meshbench_k8s::BlockingClient) -> (usize, usize) {
    let deploy = |name: &str| {
        std::fs::read_to_string(format!(
            "{}/../../deploy/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    k.apply(&serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "istio-system"}}))
        .unwrap();
    let rbac = meshbench_k8s::blocking::documents(&deploy("cluster-experiment-rbac.yaml")).unwrap();
    let binding = deploy("cluster-experiment-binding.yaml").replace("YOUR-USER", cluster::USER);
    let binding = meshbench_k8s::blocking::documents(&binding).unwrap();
    (k.apply_all(rbac).unwrap(), k.apply_all(binding).unwrap())
}
