//! Starting tasks: the queue under tasks.max_running, the pool of idle
//! workers sized to demand, and spawning a worker straight into its cgroup
//! slot. Part of procman's one thread (see the module above).

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::channel::Channel;
use super::lifecycle::{self, Event, Life, Stop};
use super::{State, Worker, DEMAND_WINDOW, SPAWNS_PER_TURN};
use crate::cgroup::TaskCgroups;
use crate::config::Runner;
use crate::control::{Cause, Rlimits, RunnerSpec, ToWorker};
use crate::limits;
use crate::sys;
use crate::tasks::Notice;
use crate::wire::{Message, TaskState};
use crate::worker;

impl State {
    /// Starts queued tasks while there is room under tasks.max_running.
    pub(super) fn start_queued(&mut self) {
        // Every worker with a task counts, stopping ones too: their processes
        // still run.
        while self.by_task.len() < self.tasks.max_running() && self.shutdown.is_none() {
            let Some(id) = self.queue.pop_front() else { return };
            if self.tasks.state(&id) != Some(TaskState::Submitted) {
                continue; // cancelled while queued, or pruned
            }
            let Some((context_id, message)) = self.tasks.start_info(&id) else {
                continue;
            };
            let now = Instant::now();
            self.starts.push_back(now);
            let idle = self
                .workers
                .values()
                .filter(|w| w.task.is_none() && w.life.phase == lifecycle::Phase::Idle && w.chan.is_open())
                .map(|w| w.pid)
                .min();
            let pid = match idle {
                Some(pid) => pid,
                None => match self.spawn_worker(&id) {
                    Ok(pid) => pid,
                    Err(e) => {
                        log::error!("task.spawn_failed task={id} error={e}");
                        self.end(
                            &id,
                            TaskState::Failed,
                            Cause::Crashed,
                            Some(format!("agentd could not start a worker: {e}")),
                        );
                        continue;
                    }
                },
            };
            self.assign(pid, id, context_id, message, now);
        }
    }

    fn assign(&mut self, pid: i32, id: String, context_id: String, message: Message, now: Instant) {
        let deadline_ms = self.cfg.tasks.deadline_ms;
        let runner = self.runner_spec();
        let Some(w) = self.workers.get_mut(&pid) else { return };
        w.task = Some(id.clone());
        w.assigned = now;
        w.life
            .set_deadline((deadline_ms > 0).then(|| now + Duration::from_millis(deadline_ms)));
        self.by_task.insert(id.clone(), pid);
        self.event(pid, Event::Assigned);
        self.tasks.worker_notice(&Notice::WorkerSpawn { task_id: &id, pid });
        self.tasks.set_progress(&id, TaskState::Working, None);
        let trace = self.tasks.trace(&id);
        match &trace {
            Some(t) => log::info!("task.start task={id} pid={pid} trace={}", t.trace_id()),
            None => log::info!("task.start task={id} pid={pid}"),
        }
        let spawn = ToWorker::Spawn {
            task_id: id,
            context_id,
            message,
            runner,
            trace,
        };
        self.send(pid, &spawn);
    }

    /// Keeps idle workers ready, so a task's start does not wait for a
    /// process to be spawned and exec'd: tasks.prespawn of them, or with
    /// `auto` as many as tasks started within DEMAND_WINDOW (at least one,
    /// at most PRESPAWN_AUTO_MAX).
    pub(super) fn fill_pool(&mut self) {
        let now = Instant::now();
        while self
            .starts
            .front()
            .is_some_and(|t| now.duration_since(*t) > DEMAND_WINDOW)
        {
            self.starts.pop_front();
        }
        let want = match self.cfg.tasks.prespawn {
            Some(n) => n,
            None => self.starts.len().clamp(1, limits::PRESPAWN_AUTO_MAX),
        };
        if self.shutdown.is_some() || want == 0 {
            return;
        }
        let idle: Vec<(Instant, i32)> = self
            .workers
            .values()
            .filter(|w| w.task.is_none() && w.life.phase == lifecycle::Phase::Idle)
            .map(|w| (w.assigned, w.pid))
            .collect();
        if idle.len() > want {
            // Demand fell: retire the oldest surplus worker once it has
            // waited a whole window, one per turn (no churn under bursts).
            if let Some((since, pid)) = idle.iter().min().copied() {
                if now.duration_since(since) > DEMAND_WINDOW * 4 {
                    self.event(
                        pid,
                        Event::Stop(Stop {
                            cause: Cause::Shutdown,
                            why: None,
                        }),
                    );
                }
            }
            return;
        }
        let idle = idle.len();
        for _ in idle..want.min(idle + SPAWNS_PER_TURN) {
            if let Err(e) = self.spawn_worker("idle") {
                log::warn!("procman.prespawn error={e}");
                return;
            }
        }
    }

    /// Starts a worker process, `agentd __worker`, born in a free cgroup
    /// slot where agentd has them; it waits for a `spawn` frame.
    fn spawn_worker(&mut self, label: &str) -> std::io::Result<i32> {
        let (ours, theirs) = UnixStream::pair()?;
        let cgroups = if self.isolation.is_cgroup() {
            match self.isolation.acquire() {
                Ok(c) => Some(c),
                Err(e) => {
                    log::warn!("task.cgroup error={e}; process group only");
                    None
                }
            }
        } else {
            None
        };
        let argv = [c"agentd".to_owned(), c"__worker".to_owned(), cstring(label.as_bytes())?];
        let envp = self.worker_env(cgroups.as_ref())?;
        let slot_dir = cgroups.as_ref().and_then(|c| self.isolation.clone_into(c));
        let mut spawn = sys::WorkerSpawn {
            argv: &argv,
            envp: &envp,
            control_fd: theirs.as_raw_fd(),
            cgroup_fd: slot_dir.as_ref().map(|f| f.as_raw_fd()),
        };
        // Born in its cgroup (clone3) where the kernel lets us: no
        // migration, whose machine-wide lock stalls every fork. The worker
        // arms PDEATHSIG itself and then checks getppid(), which closes the
        // window (see worker::main). The control socket is its stdin.
        let spawned = match sys::spawn_worker(&spawn) {
            Err(e) if spawn.cgroup_fd.is_some() && sys::placement_refused(&e) => {
                self.isolation.placement_refused(&e);
                spawn.cgroup_fd = None;
                sys::spawn_worker(&spawn)
            }
            other => other,
        };
        match &spawned {
            Ok(_) => crate::metrics::worker_spawned(),
            Err(_) => crate::metrics::worker_spawn_failed(),
        }
        let born_inside = spawn.cgroup_fd.is_some();
        drop((theirs, slot_dir));
        let pid = match spawned {
            Ok(pid) => pid,
            Err(e) => {
                if let Some(cg) = cgroups {
                    self.isolation.release(cg);
                }
                return Err(e);
            }
        };
        // Into the cgroups it was not born in (v1 limits; v2 after a
        // refused clone3) before it hears `spawn`: everything the task
        // forks is inside from the start. The child is reaped by reap().
        let cgroups = cgroups.and_then(|cg| match self.isolation.enter(pid, &cg, born_inside) {
            Ok(()) => Some(cg),
            Err(e) => {
                log::warn!("task.cgroup pid={pid} error={e}; process group only");
                self.isolation.release(cg);
                None
            }
        });
        let now = Instant::now();
        let chan = match Channel::new(ours, self.frame_max()) {
            Ok(c) => c,
            Err(e) => {
                let _ = sys::kill_group(pid, libc::SIGKILL);
                return Err(e);
            }
        };
        self.workers.insert(
            pid,
            Worker {
                pid,
                task: None,
                chan,
                life: Life::idle(now, self.timing),
                cgroups,
                assigned: now,
                spawned: now,
            },
        );
        Ok(pid)
    }

    /// The worker's whole environment: an allow-list of ours, the
    /// supervisor's pid, and where its parent-death path kills its slot.
    fn worker_env(&self, cgroups: Option<&TaskCgroups>) -> std::io::Result<Vec<CString>> {
        use std::os::unix::ffi::OsStrExt;
        let mut env: Vec<(&str, std::ffi::OsString)> = vec![
            (worker::SUPERVISOR_PID_ENV, sys::getpid().to_string().into()),
            (worker::LOG_LEVEL_ENV, self.cfg.log_level.clone().into()),
            (worker::FRAME_MAX_ENV, self.frame_max().to_string().into()),
        ];
        if let Some(cg) = cgroups {
            if let Some(f) = cg.kill_file() {
                env.push((worker::CGROUP_KILL_ENV, f.into()));
            }
            if let Some(f) = cg.procs_file() {
                env.push((worker::CGROUP_PROCS_ENV, f.into()));
            }
        }
        for name in worker::INHERITED_ENV {
            if let Some(v) = std::env::var_os(name) {
                env.push((name, v));
            }
        }
        env.into_iter()
            .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect()
    }

    /// The control channel's frame limit, from the configured input limits.
    fn frame_max(&self) -> usize {
        limits::control_frame_max_bytes(self.cfg.body_max_bytes)
    }

    fn runner_spec(&self) -> RunnerSpec {
        match &self.cfg.runner {
            Runner::Echo => RunnerSpec::Echo,
            Runner::Peer { address } => RunnerSpec::Peer {
                address: address.to_string(),
            },
            Runner::Exec { argv } => RunnerSpec::Exec {
                argv: argv.clone(),
                protocol: self.cfg.exec_protocol.clone(),
                workdir: self.cfg.workdir.as_ref().map(|p| p.display().to_string()),
                env: self.cfg.env.clone(),
                rlimits: Rlimits {
                    as_bytes: self.cfg.tasks.rlimit_as_bytes,
                    cpu_secs: self.cfg.tasks.rlimit_cpu_secs,
                    nofile: self.cfg.tasks.rlimit_nofile,
                },
                output_max_bytes: self.cfg.tasks.output_max_bytes,
            },
        }
    }
}

fn cstring(bytes: &[u8]) -> std::io::Result<CString> {
    CString::new(bytes).map_err(|_| std::io::ErrorKind::InvalidInput.into())
}
