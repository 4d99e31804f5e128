//! The worker: agentd re-executed by procman as `agentd __worker`, one per
//! task. It speaks the control protocol on fd 3 and runs one runner.
//!
//! Start-up, in order (each step is why the next is safe):
//! 1. close every inherited fd past stdio;
//! 2. arm containment: open the task cgroup's `cgroup.kill` (v2) or
//!    `cgroup.procs` (v1 freezer) named in our environment, or — without a
//!    cgroup — become a child subreaper, so what leaves our process group
//!    is still ours; then PDEATHSIG as a caught signal whose handler kills
//!    the whole task that way (sys::arm_containment), so a program's
//!    descendants die with agentd too, even SIGKILLed ones that `setsid`;
//!    (signals are unblocked after step 3: a worker spawned into a cgroup
//!    starts with all blocked, see sys::spawn_worker);
//! 3. catch SIGTERM (the ladder's SIGTERM is for the program; the worker
//!    stays to report how it ended — SIGKILL still takes it);
//! 4. `getppid()` must be the supervisor pid procman passed: if agentd died
//!    before step 2, we were already reparented and must exit now — this
//!    check is what makes arming PDEATHSIG after exec race-free;
//! 5. move the control socket off stdin to a close-on-exec fd, and put
//!    /dev/null on stdin;
//! 6. say `ready`, read `spawn`, run, (as subreaper) kill what is left of
//!    the task, say `done`, exit.
//!
//! A control-channel EOF means the supervisor is gone: kill the task.

mod echo;
pub mod jsonl;
mod peer;
mod program;
mod text;

use std::io;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

use crate::control::{self, Cause, FromWorker, Outcome, RunnerSpec, ToWorker};
use crate::sys;

/// Environment variable carrying the supervisor's pid to the worker.
pub const SUPERVISOR_PID_ENV: &str = "AGENTD_SUPERVISOR_PID";
/// Environment variable naming the task cgroup's v2 `cgroup.kill`: the
/// worker opens it at start-up and its parent-death path writes `1`.
pub const CGROUP_KILL_ENV: &str = "AGENTD_CGROUP_KILL";
/// Environment variable naming the task cgroup's v1 freezer `cgroup.procs`
/// (hosts without cgroup v2): the parent-death path SIGKILLs every pid in it.
pub const CGROUP_PROCS_ENV: &str = "AGENTD_CGROUP_PROCS";
/// Environment variable carrying the daemon's log level to the worker.
pub const LOG_LEVEL_ENV: &str = "AGENTD_LOG_LEVEL";
/// Environment variable carrying the control channel's frame limit
/// (`limits::control_frame_max_bytes` of the daemon's configuration).
pub const FRAME_MAX_ENV: &str = "AGENTD_CONTROL_FRAME_MAX_BYTES";
/// What a worker inherits from agentd's environment: what its program may
/// inherit (exec::ENV_ALLOW) plus RUST_LOG for its own logging.
pub const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "RUST_LOG",
];
/// The fd the control socket arrives on: the worker's stdin.
pub const CONTROL_FD: i32 = 0;
/// Exit code of a worker that found its supervisor gone at start.
const EXIT_ORPHANED: i32 = 111;
/// The process name (comm) of a worker waiting in the pool, and of one
/// running a task: `ps` tells them apart (the argv of a pooled worker
/// says `idle` for ever).
pub const IDLE_NAME: &std::ffi::CStr = c"agentd-idle";
pub const TASK_NAME: &std::ffi::CStr = c"agentd-task";

/// The worker's half of the control channel, shared by its threads.
pub struct Link {
    writer: Mutex<UnixStream>,
    frame_max: usize,
}

impl Link {
    /// Sends one frame. A frame over the channel's limit is not sent: the
    /// error names the limit, for the runner to fail its task with. A write
    /// failure means the supervisor is gone: the task's group is killed.
    pub fn send(&self, frame: &FromWorker) -> Result<(), control::FrameError> {
        let bytes = control::encode(frame, self.frame_max)?;
        let mut w = match self.writer.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Err(e) = std::io::Write::write_all(&mut *w, &bytes) {
            log::error!(
                "worker.link.lost pid={} error={e}; killing the task's group",
                sys::getpid()
            );
            sys::kill_own_task();
        }
        Ok(())
    }
}

/// What reaches a runner from the supervisor while it runs.
#[derive(Debug)]
pub enum Event {
    Cancel,
    Input(crate::wire::Message),
}

/// How a runner ended.
pub struct Done {
    pub outcome: Outcome,
    pub cause: Cause,
    pub text: Option<String>,
}

/// `agentd __worker`: returns the process exit code.
pub fn main() -> i32 {
    sys::set_process_name(IDLE_NAME);
    let supervisor: i32 = match std::env::var(SUPERVISOR_PID_ENV).ok().and_then(|s| s.parse().ok()) {
        Some(pid) => pid,
        None => {
            eprintln!("agentd: __worker is internal; it is started by `agentd serve`");
            return 2;
        }
    };
    // Anything inherited past stdio is a leak from whoever started agentd.
    sys::close_fds_from(3);
    let kill_file = std::env::var_os(CGROUP_KILL_ENV).map(std::path::PathBuf::from);
    let procs_file = std::env::var_os(CGROUP_PROCS_ENV).map(std::path::PathBuf::from);
    let containment = match sys::arm_containment(kill_file.as_deref(), procs_file.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("agentd worker: cannot arm parent-death containment: {e}");
            return EXIT_ORPHANED;
        }
    };
    if let Err(e) = sys::outlast_sigterm() {
        eprintln!("agentd worker: cannot catch SIGTERM: {e}");
    }
    // Spawned into a cgroup, we start with every signal blocked (see
    // sys::spawn_worker); the handlers are in place now.
    sys::unblock_all_signals();
    if sys::getppid() != supervisor {
        return EXIT_ORPHANED;
    }
    let ctrl = match sys::take_control_fd(CONTROL_FD) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agentd worker: no control channel on fd {CONTROL_FD}: {e}");
            return 2;
        }
    };
    match run(ctrl, containment) {
        Ok(()) => 0,
        Err(e) => {
            log::error!("worker.failed pid={} error={e}", sys::getpid());
            1
        }
    }
}

fn run(ctrl: UnixStream, containment: sys::Containment) -> io::Result<()> {
    let mut reader = ctrl.try_clone()?;
    let frame_max = std::env::var(FRAME_MAX_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(crate::limits::control_frame_max_bytes(
            crate::limits::HTTP_BODY_MAX_BYTES,
        ));
    let link = Link {
        writer: Mutex::new(ctrl),
        frame_max,
    };
    let _ = link.send(&FromWorker::Ready { pid: sys::getpid() });
    let Some(ToWorker::Spawn {
        task_id,
        context_id,
        message,
        runner,
        trace,
    }) = control::read_frame::<ToWorker>(&mut reader, frame_max)?
    else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "expected a spawn frame first",
        ));
    };
    sys::set_process_name(TASK_NAME);
    if let Some(t) = &trace {
        crate::logging::set_trace_id(t.trace_id());
    }
    let (tx, rx) = crossbeam_channel::unbounded();
    let link = Arc::new(link);
    // A runner that can block needs someone to answer pings and hear a
    // cancel meanwhile. The echo runner answers at once: no thread for it
    // (a thread is a clone, a stack and a sigaltstack per task).
    if !matches!(runner, RunnerSpec::Echo) {
        let reader_link = link.clone();
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || read_control(reader, &reader_link, tx))?;
    }
    log::debug!("worker.spawn task={task_id} pid={} runner={runner:?}", sys::getpid());
    let done = match runner {
        RunnerSpec::Echo => echo::run(&task_id, &context_id, &message, &link, &rx),
        RunnerSpec::Peer { address } => match crate::transport::Address::parse(&address) {
            Ok(addr) => peer::run(&addr, &message, trace.as_ref(), &link, &rx),
            Err(e) => program::failed(Cause::Failed, format!("bad peer address: {e}")),
        },
        RunnerSpec::Exec {
            argv,
            protocol,
            workdir,
            env,
            rlimits,
            output_max_bytes,
        } => {
            // OpenTelemetry's environment carrier.
            let mut env = env;
            if let Some(t) = &trace {
                env.push((crate::trace::TRACEPARENT_ENV.into(), t.traceparent.clone()));
                if let Some(s) = &t.tracestate {
                    env.push((crate::trace::TRACESTATE_ENV.into(), s.clone()));
                }
            }
            let prog = program::Program {
                argv,
                workdir,
                env,
                rlimits,
                output_max_bytes,
            };
            if protocol == "jsonl" {
                let turn = jsonl::Turn {
                    task_id: &task_id,
                    context_id: &context_id,
                    message: &message,
                };
                jsonl::run(&prog, &turn, &link, &rx)
            } else {
                text::run(&prog, &message, &link, &rx)
            }
        }
    };
    if containment == sys::Containment::Subreaper {
        // Nothing of a task outlives it: what left our process group (setsid)
        // was re-parented to us; procman can see only the group.
        sys::kill_children();
    }
    let sent = link.send(&FromWorker::Done {
        outcome: done.outcome,
        cause: done.cause,
        text: done.text,
    });
    if let Err(e) = sent {
        // Only a text can make `done` that big; the verdict still goes.
        let _ = link.send(&FromWorker::Done {
            outcome: Outcome::Failed,
            cause: Cause::Failed,
            text: Some(format!("the task's final status text does not fit: {e}")),
        });
    }
    Ok(())
}

/// Answers pings itself (so a busy runner is not mistaken for a stalled
/// worker) and forwards the rest to the runner.
fn read_control(mut reader: UnixStream, link: &Link, tx: Sender<Event>) {
    loop {
        match control::read_frame::<ToWorker>(&mut reader, link.frame_max) {
            Ok(Some(ToWorker::Ping)) => {
                let _ = link.send(&FromWorker::Pong);
            }
            Ok(Some(ToWorker::Cancel)) => {
                let _ = tx.send(Event::Cancel);
            }
            Ok(Some(ToWorker::Input { message })) => {
                let _ = tx.send(Event::Input(message));
            }
            Ok(Some(ToWorker::Spawn { .. })) => {
                log::warn!("worker.control ignoring a second spawn frame pid={}", sys::getpid());
            }
            Ok(None) | Err(_) => {
                // The supervisor is gone (or talking nonsense): nothing of
                // this task may outlive it.
                sys::kill_own_task();
            }
        }
    }
}

/// Drains events without blocking; true if a cancel arrived.
pub fn cancel_requested(rx: &Receiver<Event>) -> bool {
    rx.try_iter().any(|e| matches!(e, Event::Cancel))
}

/// `agentd __worker`, with logging set up from the daemon's level.
pub fn main_with_logging() -> i32 {
    let level = std::env::var(LOG_LEVEL_ENV).unwrap_or_else(|_| "info".into());
    crate::logging::init(&level, "worker");
    main()
}
