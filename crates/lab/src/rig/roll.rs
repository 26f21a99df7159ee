//! The backend's replicas rolled in the lab: each killed (SIGKILL to its process group) and
//! started again at its address, in its cgroup and network namespace, one after another once
//! the one before accepts again. The gateway is not told: its upstreams are the replicas'
//! addresses, which stay the same, so it learns of each restart by the requests that fail
//! (a backend that crashes and comes back under a gateway with static upstreams). The
//! processes started again are the rig's to stop, as its own are. haproxy's plain reload starts
//! its gateway again the same way, beside the running one ([`GatewayRelaunch`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use meshbench_results::ChainRole;

use crate::cgroup::CgroupFiles;
use crate::change::{BackendRoll, Relaunch};
use crate::process::{accepts, copy_of, Placement, RoleProcess};

/// A replica as the rig started it, to be started again the same way.
pub(super) struct Respawn {
    pub name: ChainRole,
    pub command: Command,
    pub log: PathBuf,
    pub cgroup: Option<CgroupFiles>,
    pub netns: Option<String>,
    pub listen: SocketAddr,
    /// Its process group now.
    pub pgid: u32,
}

/// What rolls did to the rig's replicas: the roles killed, and the processes started again,
/// by the role they play now, stopped with the rig (each stops its process group). One lock,
/// so that a role killed is never seen without its replacement.
pub(super) type Respawned = Arc<Mutex<Rolled>>;

#[derive(Default)]
pub(super) struct Rolled {
    pub killed: Vec<ChainRole>,
    pub processes: Vec<(ChainRole, RoleProcess)>,
    /// The thread that starts them: a child is killed when the thread that started it ends
    /// (`PR_SET_DEATHSIG`), and this one lives as long as the rig, not as long as the step's
    /// changes.
    spawner: Option<mpsc::Sender<Spawn>>,
}

/// A replica to start again, and where the started process goes.
struct Spawn {
    respawn: (ChainRole, Command, PathBuf),
    cgroup: Option<CgroupFiles>,
    netns: Option<String>,
    reply: mpsc::Sender<Result<RoleProcess, String>>,
}

/// Starts the thread that starts replicas again, until the rig (the sender's last holder)
/// is gone.
fn spawner() -> Result<mpsc::Sender<Spawn>, String> {
    let (to, asked) = mpsc::channel::<Spawn>();
    std::thread::Builder::new()
        .name("respawner".into())
        .spawn(move || {
            for s in asked {
                let (name, command, log) = &s.respawn;
                let place = Placement {
                    cgroup: s.cgroup.as_ref(),
                    affinity: None,
                    netns: s.netns.clone(),
                    user: None,
                };
                let started = RoleProcess::spawn(name.name(), copy_of(command), log, &place)
                    .map_err(|e| format!("{name} started again: {e}"));
                let _ = s.reply.send(started);
            }
        })
        .map_err(|e| format!("a thread to start replicas: {e}"))?;
    Ok(to)
}

/// The backend's replicas, rolled one at a time.
pub struct ReplicaRoll {
    replicas: Vec<Respawn>,
    respawned: Respawned,
    /// The replica started again last, until it accepts.
    waiting_on: Option<usize>,
}

impl ReplicaRoll {
    pub(super) fn new(replicas: Vec<Respawn>, respawned: Respawned) -> ReplicaRoll {
        ReplicaRoll {
            replicas,
            respawned,
            waiting_on: None,
        }
    }

    /// Kills replica `i` and starts it again (not waiting for it to accept).
    fn restart(&mut self, i: usize) -> Result<(), String> {
        let r = &mut self.replicas[i];
        start_again(r, &self.respawned, &[], |pgid| {
            // SAFETY: signalling a process group this rig started (or a roll started again).
            unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
        })?;
        self.waiting_on = Some(i);
        Ok(())
    }
}

/// Starts `r` again with `extra` arguments, in its cgroup and namespace, on the thread that
/// outlives the step, once `before` was done to the process group it replaces (under the
/// lock, so that the role is never seen gone without its replacement); the new one is `r`'s
/// process from now on.
fn start_again(
    r: &mut Respawn,
    respawned: &Respawned,
    extra: &[String],
    before: impl FnOnce(u32),
) -> Result<(), String> {
    let mut rolled = (respawned.lock()).unwrap_or_else(std::sync::PoisonError::into_inner);
    if !rolled.killed.contains(&r.name) {
        rolled.killed.push(r.name);
    }
    before(r.pgid);
    let to = match &rolled.spawner {
        Some(to) => to.clone(),
        None => rolled.spawner.insert(spawner()?).clone(),
    };
    let mut command = copy_of(&r.command);
    command.args(extra);
    let (reply, started) = mpsc::channel();
    let asked = to.send(Spawn {
        respawn: (r.name, command, r.log.clone()),
        cgroup: r.cgroup.clone(),
        netns: r.netns.clone(),
        reply,
    });
    let process = asked
        .ok()
        .and_then(|()| started.recv().ok())
        .unwrap_or_else(|| Err(format!("the thread that starts {} again is gone", r.name)))?;
    r.pgid = process.pid();
    rolled.processes.push((r.name, process));
    Ok(())
}

/// haproxy's plain reload: a new haproxy started as the gateway was, with `-sf` and the
/// running one's process id, which binds beside it and then tells it to finish; the new one
/// is the gateway from then on (the old one ends by itself once its connections are done).
pub struct GatewayRelaunch {
    gateway: Respawn,
    respawned: Respawned,
}

impl GatewayRelaunch {
    pub(super) fn new(gateway: Respawn, respawned: Respawned) -> GatewayRelaunch {
        GatewayRelaunch { gateway, respawned }
    }
}

impl Relaunch for GatewayRelaunch {
    fn relaunch(&mut self) -> Result<(), String> {
        let old = self.gateway.pgid.to_string();
        start_again(
            &mut self.gateway,
            &self.respawned,
            &["-sf".to_string(), old],
            |_| {},
        )
    }
}

impl BackendRoll for ReplicaRoll {
    fn told_by(&self) -> &'static str {
        "replicas killed and started again in turn, the gateway not told"
    }

    fn begin(&mut self) -> Result<(String, Instant), String> {
        if self.replicas.is_empty() {
            return Err("the backend has no replica to roll".into());
        }
        let written = Instant::now();
        self.restart(0)?;
        let n = self.replicas.len();
        Ok((
            format!("backend rolled ({n} replica(s), one at a time)"),
            written,
        ))
    }

    fn done(&mut self) -> Result<bool, String> {
        let Some(i) = self.waiting_on else {
            return Ok(true);
        };
        let r = &self.replicas[i];
        let listen = r.listen;
        let accepting = crate::netns::within(r.netns.as_deref(), move || accepts(listen))
            .map_err(|e| e.to_string())?;
        if !accepting {
            return Ok(false);
        }
        if i + 1 < self.replicas.len() {
            self.restart(i + 1)?;
            return Ok(false);
        }
        self.waiting_on = None;
        Ok(true)
    }
}
