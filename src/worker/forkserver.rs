//! The fork server: `agentd __forkserver`, spawned once by procman. It is
//! agentd's image already exec'd, logging set up and signals blocked, and
//! it stays single-threaded and never runs a task; it only forks workers
//! (sys::fork_sibling, as children of agentd, born in their cgroup). A
//! task's process then costs a fork instead of a spawn + exec + start-up:
//! each worker is still a fresh image that never ran another task.
//!
//! Its stdin is a SOCK_SEQPACKET socket to procman: each message is a
//! [`ForkRequest`] with the worker's control pipes (and its cgroup v2
//! directory and containment file) attached; each answer a [`ForkReply`],
//! in order. EOF means agentd is done with it; PDEATHSIG (SIGKILL) takes it
//! if agentd dies.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Birth, EXIT_ORPHANED, FRAME_MAX_ENV, LOG_LEVEL_ENV, SUPERVISOR_PID_ENV};
use crate::control::{ForkReply, ForkRequest};
use crate::sys;

/// The fork server's process name (comm).
pub const NAME: sys::ProcessName = sys::ProcessName::new("agentd-fork");
/// Its request socket: stdin.
const REQUESTS: i32 = 0;

/// Whether the fork server put itself, and so every worker it forks, under
/// SCHED_BATCH (it was under the default policy): a task's program is then
/// put back under SCHED_OTHER. A worker sees the value its fork server set.
static HELPERS_BATCHED: AtomicBool = AtomicBool::new(false);

/// See [`HELPERS_BATCHED`].
pub(super) fn helpers_batched() -> bool {
    HELPERS_BATCHED.load(Ordering::Relaxed)
}

/// `agentd __forkserver`: returns the process exit code.
pub fn main() -> i32 {
    // First: no handler may ever run in a half-made worker, and abort() in a
    // worker signals us (see sys::fork_sibling); workers unblock their own.
    sys::block_all_signals();
    // Blocked here for good; every worker inherits them (and unblocks).
    if let Err(e) = super::containment::install_worker_handlers() {
        eprintln!("agentd fork server: cannot install the workers' signal handlers: {e}");
        return 2;
    }
    // Each memory area a worker inherits costs its fork and its exit; std's
    // signal stack is one a worker does without (see the function).
    if let Err(e) = sys::keep_signal_stack_from_forks() {
        log::debug!("forkserver.sigaltstack kept for workers: {e}");
    }
    sys::set_process_name(&NAME);
    // Where argv lies, read once here: each worker rewrites its own copy.
    sys::remember_cmdline_area();
    let supervisor: i32 = match std::env::var(SUPERVISOR_PID_ENV).ok().and_then(|s| s.parse().ok()) {
        Some(pid) => pid,
        None => {
            eprintln!("agentd: __forkserver is internal; it is started by `agentd serve`");
            return 2;
        }
    };
    let level = std::env::var(LOG_LEVEL_ENV).unwrap_or_else(|_| "info".into());
    crate::logging::init(&level, "worker");
    // Asked for workers while procman is in the middle of a turn, it waits
    // for that turn to end rather than cutting it short, and so do the
    // workers it forks (they inherit the policy), given their task; a
    // task's program gets the default policy back (worker/program.rs).
    match sys::yield_on_wakeup() {
        Ok(batched) => HELPERS_BATCHED.store(batched, Ordering::Relaxed),
        Err(e) => log::info!("forkserver.sched SCHED_BATCH refused: {e}; the fork server keeps its policy"),
    }
    // Where the workers find their children: the daemon found out, and
    // says so only when it is the fallback.
    if std::env::var_os(super::containment::CHILDREN_SCAN_ENV).is_some() {
        super::containment::set_children_source(super::containment::ChildrenSource::ProcScan);
    }
    // Anything inherited past stdio is a leak from whoever started agentd.
    sys::close_fds_from(3);
    if let Err(e) = sys::set_parent_death_signal(libc::SIGKILL) {
        eprintln!("agentd fork server: cannot arm PDEATHSIG: {e}");
        return EXIT_ORPHANED;
    }
    if sys::getppid() != supervisor {
        return EXIT_ORPHANED;
    }
    let null: OwnedFd = match std::fs::File::open("/dev/null") {
        Ok(f) => f.into(),
        Err(e) => {
            eprintln!("agentd fork server: cannot open /dev/null: {e}");
            return 2;
        }
    };
    let frame_max = std::env::var(FRAME_MAX_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(crate::limits::control_frame_max_bytes(
            crate::limits::HTTP_BODY_MAX_BYTES,
        ));
    // A debug build can be told to answer late, as a fork server starved
    // of the CPU does: tests of a late helper (tests/helpers_late.rs).
    let reply_delay = late_reply_for_tests();
    let settings = Settings {
        supervisor,
        frame_max,
        reply_delay,
        null,
    };
    on_a_page_of_its_own(sys::page_size(), || answer_requests(&settings))
}

/// What every worker is born with, set once at start-up.
struct Settings {
    supervisor: i32,
    frame_max: usize,
    reply_delay: Option<std::time::Duration>,
    null: OwnedFd,
}

/// How far below a page's top the request loop's frame may begin, and how
/// far each step down moves it at least: a step is less than the window
/// (its pad plus a frame's few words), so one of a page's worth of steps
/// lands in it.
const LOOP_WINDOW: usize = 512;
const STEP_PAD: usize = 256;

/// Runs `serve` with its stack frame near the top of a stack page.
///
/// Every stack page a worker writes costs it a page fault (a copy of the
/// fork server's page, or a fresh one below), and the fork server one more
/// for each of its own it writes again after the fork. A worker's stack
/// begins in the fork server's request loop: from a loop near a page's
/// top, an idle worker writes that one page and an echo task two, and the
/// fork server rewrites only that one. But the kernel begins a process's
/// stack at a random offset in its page, and from an unlucky one the same
/// worker wrote three, the loop straddled two, and a task cost 8 to 10
/// faults in all instead of 7 (measured in bench/README.md). So before
/// serving, the fork server steps down its stack until the loop begins
/// near a page's top.
fn on_a_page_of_its_own(page: usize, serve: impl FnOnce() -> i32) -> i32 {
    step_down(page, page / STEP_PAD + 1, serve)
}

/// One step down, unless this frame ends in the window or the steps are
/// spent (a step larger than the window would pass it by forever).
#[inline(never)]
fn step_down<F: FnOnce() -> i32>(page: usize, steps_left: usize, serve: F) -> i32 {
    let pad = [0u8; STEP_PAD];
    // Where this frame's pad begins: the next frame starts right below it.
    let low = std::hint::black_box(&pad).as_ptr() as usize;
    if low % page >= page.saturating_sub(LOOP_WINDOW) || steps_left == 0 {
        return serve();
    }
    step_down(page, steps_left - 1, serve)
}

/// Answers fork requests until procman lets go of us.
#[inline(never)]
fn answer_requests(settings: &Settings) -> i32 {
    let Settings {
        supervisor,
        frame_max,
        reply_delay,
        ref null,
    } = *settings;
    // From here on nothing is allocated: each heap page written after a
    // fork would be a copy-on-write fault, once per worker. A request is a
    // few bytes; its descriptors are held on the stack.
    let mut buf = [0u8; 64];
    let mut fds = sys::ReceivedFds::default();
    loop {
        fds.clear();
        let reply = match sys::recv_with_fds(REQUESTS, &mut buf, &mut fds, false) {
            Ok(0) => return 0, // agentd let go of us
            Ok(n) => match (ForkRequest::decode(&buf[..n]), fds.get(0), fds.get(1)) {
                // In the request's order: pipes, cgroup directory, containment file.
                (Some(request), Some(from_agentd), Some(to_agentd)) if request.fds() == fds.len() => {
                    let cgroup = if request.into_cgroup { fds.get(2) } else { None };
                    super::containment::preset(request.containment);
                    let birth = Birth {
                        supervisor,
                        frame_max,
                        from_agentd,
                        to_agentd,
                        containment: request
                            .containment
                            .and_then(|what| Some((what, fds.get(fds.len() - 1)?))),
                        null,
                    };
                    fork_one(birth, cgroup, request.placed_only)
                }
                _ => {
                    log::error!("forkserver.request refused: not a fork request with its descriptors");
                    ForkReply::Failed { errno: libc::EINVAL }
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                log::error!("forkserver.request refused: {e}");
                ForkReply::Failed { errno: libc::EINVAL }
            }
            Err(e) => {
                log::error!("forkserver.recv error={e}; exiting");
                return 1;
            }
        };
        if let Some(delay) = reply_delay {
            std::thread::sleep(delay);
        }
        if let Err(e) = sys::send_with_fds(REQUESTS, &reply.encode(), &[], false) {
            // agentd is gone (EPIPE) or the socket broke: nothing to serve.
            log::debug!("forkserver.reply error={e}; exiting");
            return 0;
        }
    }
}

/// `AGENTD_TEST_LATE_FORK_REPLY_MS` in a debug build: how long to wait
/// before each answer. Never in a release build.
fn late_reply_for_tests() -> Option<std::time::Duration> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let ms: u64 = std::env::var("AGENTD_TEST_LATE_FORK_REPLY_MS").ok()?.parse().ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// Forks one worker; in the worker, runs it and exits. `placed_only`: in
/// `cgroup` or not at all (its task may be in its pipe already). Not
/// inlined: it is one of the anchors of link/worker-text.ld.
#[inline(never)]
fn fork_one(birth: Birth<'_>, cgroup: Option<&OwnedFd>, placed_only: bool) -> ForkReply {
    let forked = match cgroup {
        Some(dir) if placed_only => sys::fork_sibling_into(dir.as_raw_fd()),
        _ => sys::fork_sibling(cgroup.map(|fd| fd.as_raw_fd())),
    };
    match forked {
        // No exit handlers to run (nothing is buffered): std's would unmap
        // the signal stack first, one more system call per task. The worker
        // allocates from its arena first (sys/alloc.rs): fewer pages touched.
        Ok(sys::Forked::Child) => {
            sys::start_worker_arena();
            sys::exit_now(super::start(birth))
        }
        Ok(sys::Forked::Parent { pid, placement_refused }) => ForkReply::Forked {
            pid,
            placement_errno: placement_refused.map_or(0, |e| e.raw_os_error().unwrap_or(libc::EINVAL)),
        },
        Err(e) => {
            log::warn!("forkserver.fork error={e}");
            ForkReply::Failed {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            }
        }
    }
}
