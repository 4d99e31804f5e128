//! The worker: one per task, forked by the fork server
//! (`agentd __forkserver`, see [`forkserver`]) as a child of agentd. It
//! speaks the control protocol on its two control pipes (frames from
//! agentd on one, to agentd on the other) and runs one runner: `echo`,
//! `peer`, or `exec` with the program's protocol (`text` or `jsonl`).
//! Each worker is a fresh copy of the fork server, which never runs a task.
//!
//! Start-up, in order (each step is why the next is safe):
//! 1. lead its own process group (procman sets it too, whoever is first);
//! 2. stdin is /dev/null, the two control pipes are close-on-exec fds, every
//!    other inherited fd is closed;
//! 3. arm containment: keep the task cgroup's `cgroup.kill` (v2) or
//!    `cgroup.procs` (v1 freezer) that came open with the fork request, and
//!    — cgroup or not — become a child subreaper, so what leaves our process
//!    group is still ours; then PDEATHSIG as a caught signal whose handler kills
//!    the whole task that way (containment::arm), so a program's
//!    descendants die with agentd too, even SIGKILLed ones that `setsid`;
//! 4. SIGTERM is caught (the ladder's SIGTERM is for the program; the
//!    worker stays to report how it ended — SIGKILL still takes it); that
//!    handler and the parent-death one were installed once by the fork
//!    server and come with the fork; only now are signals unblocked (the
//!    fork server keeps them all blocked, so no handler runs half-way
//!    through these steps);
//! 5. `getppid()` must be agentd: if agentd died before step 3, we were
//!    already reparented and must exit now — this check is what makes
//!    arming PDEATHSIG after the fork race-free;
//! 6. read `spawn`, run, (as subreaper, after a program) kill what is
//!    left of the task, say `done`, exit: nothing of a task outlives its
//!    worker.
//!
//! A control-channel EOF means the supervisor is gone: kill the task.

mod containment;
mod echo;
mod exec;
pub mod forkserver;
pub mod jsonl;
mod peer;
mod program;
mod text;

pub use containment::{
    children_source, detect_children_source, for_each_child, set_children_source, ChildrenSource, CHILDREN_SCAN_ENV,
};
pub use program::Note;

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

use crate::control::{self, Cause, ExecProtocol, FromWorker, Outcome, RunnerSpec, ToWorker};
use crate::sys;

/// Environment variable carrying the supervisor's pid to the fork server.
/// Only the fork server is started with it, so main.rs reads it (without
/// allocating) to tell the fork server before its first allocation.
pub const SUPERVISOR_PID_ENV_C: &std::ffi::CStr = c"AGENTD_SUPERVISOR_PID";
pub const SUPERVISOR_PID_ENV: &str = match SUPERVISOR_PID_ENV_C.to_str() {
    Ok(name) => name,
    Err(_) => panic!("the variable's name is ASCII"),
};
/// Environment variable carrying the daemon's log level to the worker.
pub const LOG_LEVEL_ENV: &str = "AGENTD_LOG_LEVEL";
/// Environment variable carrying the control channel's frame limit
/// (`limits::control_frame_max_bytes` of the daemon's configuration).
pub const FRAME_MAX_ENV: &str = "AGENTD_CONTROL_FRAME_MAX_BYTES";
/// What a worker inherits from agentd's environment: what its program may
/// inherit (program::ENV_ALLOW) plus RUST_LOG for its own logging.
pub const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "RUST_LOG",
];
/// What a debug build's fork server inherits besides: the hooks tests
/// use to make agentd's helpers misbehave (never read by a release build).
pub const TEST_HOOKS_ENV: &[&str] = &["AGENTD_TEST_LATE_FORK_REPLY_MS"];
/// Exit code of a worker (or fork server) that found its supervisor gone
/// at start.
const EXIT_ORPHANED: i32 = 111;
/// The process name (comm) of a worker waiting in the pool, and of one
/// running a task: `ps` tells them apart (the argv of a pooled worker
/// says `idle` for ever).
pub const IDLE_NAME: sys::ProcessName = sys::ProcessName::new("agentd-idle");
pub const TASK_NAME: sys::ProcessName = sys::ProcessName::new("agentd-task");

/// The worker's half of the control channel, shared by its threads.
pub struct Link {
    writer: Mutex<Writer>,
    frame_max: usize,
}

struct Writer {
    pipe: File,
    /// Frames held back to go out with the next one (see [`Link::hold`]),
    /// and the buffer every frame is encoded into.
    held: Vec<u8>,
}

impl Link {
    /// The link over `pipe`, the write end of the channel to agentd.
    pub fn new(pipe: File, frame_max: usize) -> Link {
        Link {
            writer: Mutex::new(Writer { pipe, held: Vec::new() }),
            frame_max,
        }
    }

    /// Sends one frame (after any held back). A frame over the channel's
    /// limit is not sent: the error names the limit, for the runner to fail
    /// its task with. A write failure means the supervisor is gone: the
    /// task's group is killed.
    pub fn send(&self, frame: &FromWorker) -> Result<(), control::FrameError> {
        let mut w = self.writer();
        let w = &mut *w;
        // Written after the frames held back, from one buffer kept for the
        // worker's life; a long text goes from where it is, in the same
        // write: a stream of large chunks is copied once less and allocates
        // (and faults in) no buffer per chunk.
        let raw = control::encode_head_onto(&mut w.held, frame, self.frame_max, frame.text_bytes())?;
        w.write_out(raw);
        Ok(())
    }

    /// Sends a frame whose one long text is not in it: `shell` is the frame
    /// with that text left empty (a jsonl line's text goes from the line
    /// it was read into, never copied into a frame of its own). Limits as
    /// for `send`.
    pub fn send_with_text(&self, shell: &FromWorker, text: &str) -> Result<(), control::FrameError> {
        let mut w = self.writer();
        let w = &mut *w;
        control::encode_shell_onto(&mut w.held, shell, text.len(), self.frame_max)?;
        w.write_out(text);
        Ok(())
    }

    /// Queues a frame to go out with the next [`send`](Self::send), in
    /// order: a runner whose last frame is followed at once by `done` (the
    /// echo) saves agentd a write and a wake-up. Limits as for `send`.
    pub fn hold(&self, frame: &FromWorker) -> Result<(), control::FrameError> {
        let mut w = self.writer();
        control::encode_onto(&mut w.held, frame, self.frame_max, frame.text_bytes())
    }

    /// The writer; a thread that panicked holding it left it whole (it
    /// only ever appends or writes whole buffers).
    fn writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        match self.writer.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Writer {
    /// Writes what is held, then `raw` (a frame's text that goes after
    /// it). A write failure means the supervisor is gone: the task's group
    /// is killed.
    fn write_out(&mut self, raw: &str) {
        let written = write_both(&mut self.pipe, &self.held, raw.as_bytes());
        self.held.clear();
        if self.held.capacity() > crate::limits::WORKER_FRAME_BUFFER_KEEP_BYTES {
            self.held = Vec::new(); // a frame of megabytes of JSON is not kept for the next
        }
        if let Err(e) = written {
            log::error!(
                "worker.link.lost pid={} error={e}; killing the task's group",
                sys::getpid()
            );
            containment::kill_own_task();
        }
    }
}

/// Writes all of `head`, then all of `tail`, in as few writes as the pipe
/// takes them.
fn write_both(pipe: &mut File, head: &[u8], tail: &[u8]) -> std::io::Result<()> {
    use std::io::{IoSlice, Write};
    let mut both = [IoSlice::new(head), IoSlice::new(tail)];
    let mut left = &mut both[..];
    IoSlice::advance_slices(&mut left, 0); // drops empty slices
    while !left.is_empty() {
        match pipe.write_vectored(left) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What reaches a runner from the supervisor while it runs.
#[derive(Debug)]
pub enum ControlEvent {
    Cancel,
    Input(crate::wire::Message),
}

/// How a runner ended.
#[derive(Debug, PartialEq)]
pub struct Done {
    pub outcome: Outcome,
    pub cause: Cause,
    pub text: Option<String>,
}

/// What a worker is born with: the fork server's settings and what came
/// with its request.
pub struct Birth<'a> {
    /// agentd's pid: our parent, or we are orphaned.
    pub supervisor: i32,
    pub frame_max: usize,
    /// The control pipes: frames from agentd, frames to agentd.
    pub from_agentd: &'a OwnedFd,
    pub to_agentd: &'a OwnedFd,
    /// The open cgroup file the parent-death path kills the task through.
    pub containment: Option<(control::ContainmentFile, &'a OwnedFd)>,
    /// Open /dev/null, for stdin.
    pub null: &'a OwnedFd,
}

/// A worker, just forked: start-up as above, then its one task. Returns
/// the process exit code (the caller exits with it; it never returns to
/// the fork server's loop).
pub fn start(birth: Birth<'_>) -> i32 {
    sys::set_process_name(&IDLE_NAME);
    sys::set_cmdline(IDLE_NAME.bytes());
    let _ = sys::become_group_leader();
    let (reader, writer, kept) = match sys::settle_worker_fds(
        birth.from_agentd.as_raw_fd(),
        birth.to_agentd.as_raw_fd(),
        birth.containment.map(|(_, fd)| fd.as_raw_fd()),
        birth.null.as_raw_fd(),
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agentd worker: cannot set up its descriptors: {e}");
            return 2;
        }
    };
    let (kill_fd, procs_fd) = match birth.containment.map(|(what, _)| what) {
        Some(control::ContainmentFile::Kill) => (kept, None),
        Some(control::ContainmentFile::Procs) => (None, kept),
        None => (None, None),
    };
    if let Err(e) = containment::arm(kill_fd, procs_fd) {
        eprintln!("agentd worker: cannot arm parent-death containment: {e}");
        return EXIT_ORPHANED;
    }
    // The handlers came with the fork (install_worker_handlers) and
    // containment is armed: signals may come now.
    sys::unblock_all_signals();
    if sys::getppid() != birth.supervisor {
        return EXIT_ORPHANED;
    }
    match run(reader, writer, birth.frame_max) {
        Ok(()) => 0,
        Err(e) => {
            log::error!("worker.failed pid={} error={e}", sys::getpid());
            1
        }
    }
}

fn run(mut reader: File, writer: File, frame_max: usize) -> io::Result<()> {
    let link = Link::new(writer, frame_max);
    // Who we are goes out with our first frame: procman learns it from the
    // fork server too, unless the fork server is lost before it says so.
    link.hold(&FromWorker::Hello { pid: sys::getpid() })
        .map_err(io::Error::from)?;
    let (task_id, context_id, message, runner, trace) = match control::read_frame::<ToWorker>(&mut reader, frame_max)? {
        Some(ToWorker::Spawn {
            task_id,
            context_id,
            message,
            runner,
            trace,
        }) => (task_id, context_id, message, Arc::unwrap_or_clone(runner), trace),
        // agentd let go of us before it gave us a task (it retired us, or
        // lost the fork server that made us before it knew us).
        None => return Ok(()),
        Some(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "expected a spawn frame first",
            ))
        }
    };
    sys::set_process_name(&TASK_NAME);
    sys::set_cmdline(TASK_NAME.bytes());
    if let Some(t) = &trace {
        crate::logging::set_trace_id(t.trace_id());
    }
    log::debug!("worker.spawn task={task_id} pid={} runner={runner:?}", sys::getpid());
    let link = Arc::new(link);
    // Only a program can leave children behind: echo and peer start none,
    // and as subreaper we inherit only orphans of our own descendants.
    let may_leave_children = matches!(runner, RunnerSpec::Exec { .. });
    let done = match runner {
        // It answers at once: no thread to hear the control channel
        // meanwhile, nor anything to hear (a thread is a clone, a stack
        // and a sigaltstack per task).
        RunnerSpec::Echo => echo::run(&message, &link),
        RunnerSpec::Peer { address } => {
            let rx = hear_control(reader, &link)?;
            match crate::transport::Address::parse(&address) {
                Ok(addr) => peer::run(&addr, &message, trace.as_ref(), &link, &rx),
                Err(e) => program::failed(Cause::Failed, format!("bad peer address: {e}")),
            }
        }
        RunnerSpec::Exec {
            argv,
            protocol,
            workdir,
            env,
            rlimits,
            output_max_bytes,
        } => {
            let rx = hear_control(reader, &link)?;
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
            match protocol {
                ExecProtocol::Text => exec::run(&prog, &mut text::Text::new(&message, &link), &rx),
                ExecProtocol::Jsonl => {
                    let mut jsonl = jsonl::Jsonl::new(&task_id, &context_id, &message, &link);
                    exec::run(&prog, &mut jsonl, &rx)
                }
            }
        }
    };
    // Nothing of a task outlives it: what left our process group (setsid)
    // or its parent (a double fork) was re-parented to us. With a cgroup
    // procman would sweep it too, but only after our exit, and not at all
    // if agentd dies in between.
    if may_leave_children {
        containment::kill_children();
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

/// A runner that can block needs someone to answer pings and hear a
/// cancel meanwhile: a thread reading the control channel, whose events
/// come through the receiver returned.
fn hear_control(reader: File, link: &Arc<Link>) -> io::Result<Receiver<ControlEvent>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let link = link.clone();
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || read_control(reader, &link, tx))?;
    Ok(rx)
}

/// Answers pings itself (so a busy runner is not mistaken for a stalled
/// worker) and forwards the rest to the runner.
fn read_control(mut reader: File, link: &Link, tx: Sender<ControlEvent>) {
    loop {
        match control::read_frame::<ToWorker>(&mut reader, link.frame_max) {
            Ok(Some(ToWorker::Ping)) => {
                let _ = link.send(&FromWorker::Pong);
            }
            Ok(Some(ToWorker::Cancel)) => {
                let _ = tx.send(ControlEvent::Cancel);
            }
            Ok(Some(ToWorker::Input { message })) => {
                let _ = tx.send(ControlEvent::Input(*message));
            }
            Ok(Some(ToWorker::Spawn { .. })) => {
                log::warn!("worker.control ignoring a second spawn frame pid={}", sys::getpid());
            }
            Ok(None) | Err(_) => {
                // The supervisor is gone (or talking nonsense): nothing of
                // this task may outlive it.
                containment::kill_own_task();
            }
        }
    }
}

/// Drains events without blocking; true if a cancel arrived.
pub fn cancel_requested(rx: &Receiver<ControlEvent>) -> bool {
    rx.try_iter().any(|e| matches!(e, ControlEvent::Cancel))
}
