//! The supervised floor: the least a server can spend on a task with the
//! guarantees agentd gives every task, measured on this machine, now.
//!
//! `supervised_floor SOCKET [--no-cgroup] [--inline] [--threads | --direct]`
//! serves HTTP/1.1 on a unix socket from one thread (epoll, keep-alive, no
//! parsing beyond finding where a request ends). A GET is answered with a
//! fixed small card. Every other request is a task, and the answer, a fixed
//! Task of the size agentd sends, waits for a fresh process made with what
//! agentd does for each of its workers, and nothing else:
//!
//! - forked by a fork server: a helper forked once at start-up, before the
//!   server has held any task's data, that is asked over a seqpacket socket
//!   (the child's two pipe ends passed with SCM_RIGHTS) and answers the pid.
//!   Every task is so a fresh image that never held another task's data, as
//!   agentd's design requires (DESIGN.md §5); `--inline` forks from the
//!   server itself instead, for comparison only;
//! - born by clone3 (CLONE_PARENT: the server's child) straight into a
//!   cgroup v2 slot, a directory made under this process's own v2 cgroup
//!   (no cgroup with `--no-cgroup` or where none can be made, said on
//!   stderr), given two fresh pipes;
//! - the child arms PDEATHSIG, checks its parent is the server, takes a
//!   process group of its own, reads a 300-byte frame, writes a 200-byte
//!   one, and exits;
//! - the server writes the frame, polls for and reads the answer, reaps the
//!   child (wait4), probes its process group for escapees, reads the slot's
//!   cpu.stat, and closes its ends.
//!
//! No JSON, no task table, no threads: whatever agentd spends above this is
//! what its A2A handling and its structure (connection threads, procman)
//! cost. `--threads` puts agentd's structure around the same tasks (a
//! thread per connection under SCHED_BATCH, each task handed to one
//! supervisor thread and waited for), to tell the two apart. `--direct`
//! keeps the threads but lets each connection's thread supervise its own
//! tasks (the fork server asked under a lock), so the threads' share and
//! the supervisor hop's can be told apart too.
//!
//! bench/run.sh runs it as the server `floor` (and as `floor-threads`,
//! `floor-direct` and `floor-nocg`, when asked for), on the server core,
//! measured like every other server (its CPU, its reaped children's and its
//! live descendants', the fork server's, from /proc). It runs until SIGTERM
//! or SIGINT, then removes its slot.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use agentd::sys;

const CARD: &str = r#"{"name":"supervised floor","description":"the least a supervised task can cost","version":"1","supportedInterfaces":[{"url":"unix:///","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"capabilities":{"streaming":false},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[]}"#;
const TASK: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"0b6c5e8e-8f3a-4a57-9d2b-1f0c2d3e4f50","contextId":"5c1d7e2a-3b4c-4d5e-8f60-718293a4b5c6","status":{"state":"TASK_STATE_COMPLETED","timestamp":"2026-12-03T16:00:00.000Z"},"artifacts":[{"artifactId":"7d9e0f1a-2b3c-4d5e-9f60-718293a4b5c6","name":"echo","parts":[{"text":"hi"}]}],"history":[{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}],"contextId":"5c1d7e2a-3b4c-4d5e-8f60-718293a4b5c6","taskId":"0b6c5e8e-8f3a-4a57-9d2b-1f0c2d3e4f50"}]}}}"#;
const DOWN_FRAME: usize = 300;
const UP_FRAME: usize = 200;
/// Not in the libc crate for every target: linux/sched.h.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(sock) = args.first() else {
        eprintln!("usage: supervised_floor SOCKET [--no-cgroup] [--inline] [--threads | --direct]");
        return ExitCode::from(2);
    };
    let slot = if args.iter().any(|a| a == "--no-cgroup") {
        None
    } else {
        Slot::make()
    };
    let cgroup_fd = slot.as_ref().map(|s| s.dir_fd.as_raw_fd());
    let births = if args.iter().any(|a| a == "--inline") {
        Births::Inline(cgroup_fd)
    } else {
        match ForkServer::start(cgroup_fd) {
            Ok(f) => Births::ForkServer(f),
            Err(e) => {
                eprintln!("supervised_floor: no fork server: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let by = match births {
        Births::Inline(_) => "forked by the server itself (--inline)",
        Births::ForkServer(_) => "forked by a fork server",
    };
    match &slot {
        Some(s) => eprintln!(
            "supervised_floor: tasks {by}, born in cgroup v2 slot {}",
            s.dir.display()
        ),
        None => eprintln!("supervised_floor: tasks {by}, in no cgroup of their own"),
    }
    let slot_dir = slot.as_ref().map(|s| s.dir.clone());
    let threads = args.iter().any(|a| a == "--threads");
    let direct = args.iter().any(|a| a == "--direct");
    // Lives as long as the process: the threads mode's threads are not
    // joined, they end with it.
    let sup: &'static Supervisor = Box::leak(Box::new(Supervisor {
        slot,
        births,
        server: std::process::id() as libc::pid_t,
    }));
    let result = if threads || direct {
        serve_threads(sock, sup, direct)
    } else {
        serve(sock, sup)
    };
    if let Some(dir) = slot_dir {
        let _ = fs::remove_dir(dir);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("supervised_floor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The cgroup v2 directory tasks are born in, and the files kept open for it.
struct Slot {
    dir: PathBuf,
    dir_fd: fs::File,
    cpu_stat: fs::File,
}

impl Slot {
    /// A directory under this process's own v2 cgroup, if one can be made.
    fn make() -> Option<Slot> {
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))?
            .trim_start_matches('/')
            .to_string();
        let mounts = fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mount = mounts.lines().find_map(|l| {
            let (fields, fs_type) = l.split_once(" - ")?;
            fs_type
                .starts_with("cgroup2 ")
                .then(|| fields.split(' ').nth(4).map(PathBuf::from))?
        })?;
        let dir = mount.join(rel).join(format!("supervised-floor-{}", std::process::id()));
        if let Err(e) = fs::create_dir(&dir) {
            eprintln!("supervised_floor: cannot make cgroup {}: {e}", dir.display());
            return None;
        }
        let opened = fs::File::open(&dir).and_then(|d| Ok((d, fs::File::open(dir.join("cpu.stat"))?)));
        // One process born there and reaped first: a cgroup that takes none
        // (controllers on in its parent's subtree, no delegation) is not used.
        let usable = opened.and_then(|(dir_fd, cpu_stat)| {
            match clone_into(Some(dir_fd.as_raw_fd()))? {
                // SAFETY: _exit is async-signal-safe and ends the probe at once.
                0 => unsafe { libc::_exit(0) },
                pid => {
                    let mut status = 0;
                    // SAFETY: status is valid and writable for the call.
                    cvt(unsafe { libc::waitpid(pid, &mut status, 0) })?;
                }
            }
            Ok((dir_fd, cpu_stat))
        });
        match usable {
            Ok((dir_fd, cpu_stat)) => Some(Slot { dir, dir_fd, cpu_stat }),
            Err(e) => {
                eprintln!("supervised_floor: cannot use cgroup {}: {e}", dir.display());
                let _ = fs::remove_dir(&dir);
                None
            }
        }
    }
}

/// Set by SIGTERM or SIGINT.
fn stop_flag() -> io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// One thread: epoll over the listener and every connection, each task
/// supervised in line.
fn serve(sock: &str, sup: &Supervisor) -> io::Result<()> {
    let stop = stop_flag()?;
    let listener = UnixListener::bind(sock)?;
    listener.set_nonblocking(true)?;
    // SAFETY: epoll_create1 takes no pointers; the fd it returns is ours.
    let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    watch(ep, listener.as_raw_fd())?;
    let mut conns: HashMap<RawFd, (UnixStream, Vec<u8>)> = HashMap::new();
    let card = response(CARD);
    let task = response(TASK);
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: events is a valid array of 64 epoll_events for the call.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 64, 100) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for ev in &events[..n as usize] {
            let fd = ev.u64 as RawFd;
            if fd == listener.as_raw_fd() {
                while let Ok((s, _)) = listener.accept() {
                    s.set_nonblocking(true)?;
                    watch(ep, s.as_raw_fd())?;
                    conns.insert(s.as_raw_fd(), (s, Vec::new()));
                }
                continue;
            }
            let Some((stream, buf)) = conns.get_mut(&fd) else {
                continue;
            };
            let mut open = read_all(stream, buf);
            while let Some((end, close_after)) = request_end(buf) {
                let answer = if buf.starts_with(b"GET ") {
                    &card
                } else {
                    sup.task()?;
                    &task
                };
                buf.drain(..end);
                if stream.write_all(answer).is_err() || close_after {
                    open = false;
                    break;
                }
            }
            if !open {
                conns.remove(&fd);
            }
        }
    }
    Ok(())
}

/// agentd's structure around the same tasks: a thread per connection
/// (blocking reads, under SCHED_BATCH as agentd's are) handing each task to
/// one supervisor thread and waiting for it to end, as agentd's connection
/// threads hand theirs to procman. What this costs above [`serve`] is what
/// the structure costs, before any A2A handling. With `direct` there is no
/// supervisor thread: each connection's thread runs its own tasks.
fn serve_threads(sock: &str, sup: &'static Supervisor, direct: bool) -> io::Result<()> {
    let stop = stop_flag()?;
    let listener = UnixListener::bind(sock)?;
    listener.set_nonblocking(true)?;
    let (jobs, queue) = mpsc::channel::<mpsc::SyncSender<bool>>();
    if !direct {
        std::thread::spawn(move || {
            for done in queue {
                let ok = sup.task().is_ok();
                let _ = done.send(ok);
            }
        });
    }
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                let jobs = jobs.clone();
                std::thread::spawn(move || connection(stream, jobs, direct.then_some(sup)));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: pfd is one valid pollfd for the call.
                unsafe { libc::poll(&mut pfd, 1, 100) };
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One connection's thread: its requests in turn, each task run here
/// (`direct`) or handed to the supervisor thread, and waited for.
fn connection(mut stream: UnixStream, jobs: mpsc::Sender<mpsc::SyncSender<bool>>, direct: Option<&'static Supervisor>) {
    // Under SCHED_BATCH, as agentd's connection threads are.
    let _ = sys::yield_on_wakeup();
    let (card, task) = (response(CARD), response(TASK));
    let (done, finished) = mpsc::sync_channel(1);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some((end, close_after)) = request_end(&buf) {
            let answer = if buf.starts_with(b"GET ") {
                &card
            } else {
                if let Some(sup) = direct {
                    if sup.task().is_err() {
                        return;
                    }
                } else if jobs.send(done.clone()).is_err() || finished.recv() != Ok(true) {
                    return;
                }
                &task
            };
            buf.drain(..end);
            if stream.write_all(answer).is_err() || close_after {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn watch(ep: RawFd, fd: RawFd) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: ev is a valid epoll_event for the call; both fds are open.
    cvt(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(drop)
}

/// Reads what is there; false once the peer is gone.
fn read_all(stream: &mut UnixStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Where the first whole request in `buf` ends (its head and its
/// Content-Length body), if it is all there, and whether it asked for the
/// connection to be closed after the answer.
fn request_end(buf: &[u8]) -> Option<(usize, bool)> {
    let head = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = std::str::from_utf8(&buf[..head]).ok()?;
    let header = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    let body = header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    (buf.len() >= head + body).then_some((head + body, close))
}

/// What makes and supervises each task's process.
struct Supervisor {
    slot: Option<Slot>,
    births: Births,
    /// This process: the parent every task's process checks it has.
    server: libc::pid_t,
}

impl Supervisor {
    fn task(&self) -> io::Result<()> {
        supervised_task(self.slot.as_ref(), &self.births, self.server)
    }
}

/// How a task's process is made.
enum Births {
    /// Forked by the fork server.
    ForkServer(ForkServer),
    /// Forked by the server itself (into this cgroup slot, if any).
    Inline(Option<RawFd>),
}

/// The helper that forks every task's process, asked one at a time.
struct ForkServer {
    sock: OwnedFd,
    /// Pairs each request with its answer when threads ask at once.
    asking: std::sync::Mutex<()>,
}

impl ForkServer {
    /// Forks the helper now, while this process is single-threaded and has
    /// held no task's data.
    fn start(cgroup_fd: Option<RawFd>) -> io::Result<ForkServer> {
        let (ours, theirs) = sys::seqpacket_pair()?;
        let server = std::process::id() as libc::pid_t;
        // SAFETY: this program has one thread here, so the child may go on
        // running ordinary code (it holds no lock another thread held).
        let pid = cvt(unsafe { libc::fork() })?;
        if pid == 0 {
            drop(ours);
            serve_forks(theirs.as_raw_fd(), cgroup_fd, server);
        }
        Ok(ForkServer {
            sock: ours,
            asking: std::sync::Mutex::new(()),
        })
    }

    /// A task's process, its ends of the pipes given; its pid.
    fn ask(&self, down_r: RawFd, up_w: RawFd) -> io::Result<libc::pid_t> {
        let sock = self.sock.as_raw_fd();
        let _turn = self.asking.lock().unwrap_or_else(|e| e.into_inner());
        sys::send_with_fds(sock, &[0], &[down_r, up_w], false)?;
        let mut pid = [0u8; 4];
        let mut none = sys::ReceivedFds::default();
        match sys::recv_with_fds(sock, &mut pid, &mut none, false)? {
            4 => match i32::from_ne_bytes(pid) {
                errno if errno < 0 => Err(io::Error::from_raw_os_error(-errno)),
                pid => Ok(pid),
            },
            _ => Err(io::Error::other("the fork server did not answer")),
        }
    }
}

/// The fork server's life: a process for every request, until EOF.
fn serve_forks(sock: RawFd, cgroup_fd: Option<RawFd>, server: libc::pid_t) -> ! {
    // SAFETY: prctl takes integers; the fork server dies with the server.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let mut byte = [0u8; 1];
    let mut fds = sys::ReceivedFds::default();
    while sys::recv_with_fds(sock, &mut byte, &mut fds, false).is_ok_and(|n| n > 0) {
        let (Some(down_r), Some(up_w)) = (fds.get(0), fds.get(1)) else {
            break;
        };
        let answer = match clone_parent(cgroup_fd) {
            Ok(0) => child(server, down_r.as_raw_fd(), up_w.as_raw_fd()),
            Ok(pid) => pid,
            Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
        };
        fds.clear();
        if sys::send_with_fds(sock, &answer.to_ne_bytes(), &[], false).is_err() {
            break;
        }
    }
    // SAFETY: _exit ends the fork server without running the server's exit
    // handlers.
    unsafe { libc::_exit(0) }
}

/// One task: a fresh process with agentd's per-worker guarantees, a frame
/// each way, reaped, its group probed and its slot's CPU read.
fn supervised_task(slot: Option<&Slot>, births: &Births, parent: libc::pid_t) -> io::Result<()> {
    let (down_r, down_w) = sys::pipe()?;
    let (up_r, up_w) = sys::pipe()?;
    sys::set_pipe_nonblocking(up_r.as_raw_fd())?;
    sys::set_pipe_nonblocking(down_w.as_raw_fd())?;
    // Ours, open until the task is done.
    let (to_child, from_child) = (down_w.as_raw_fd(), up_r.as_raw_fd());
    let pid = match births {
        Births::ForkServer(f) => f.ask(down_r.as_raw_fd(), up_w.as_raw_fd())?,
        Births::Inline(cgroup_fd) => match clone_into(*cgroup_fd)? {
            0 => child(parent, down_r.as_raw_fd(), up_w.as_raw_fd()),
            pid => pid,
        },
    };
    // The child's ends are the child's now.
    drop((down_r, up_w));
    let frame = [b'x'; DOWN_FRAME];
    // SAFETY: frame is valid for reads of its length.
    cvt(unsafe { libc::write(to_child, frame.as_ptr().cast(), frame.len()) } as i32)?;
    let mut pfd = libc::pollfd {
        fd: from_child,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: pfd is one valid pollfd for the call.
    cvt(unsafe { libc::poll(&mut pfd, 1, -1) })?;
    let mut answer = [0u8; 512];
    // SAFETY: answer is valid for writes of its length.
    cvt(unsafe { libc::read(from_child, answer.as_mut_ptr().cast(), answer.len()) } as i32)?;
    let mut status = 0;
    let mut usage: libc::rusage = unsafe_zeroed_rusage();
    // SAFETY: status and usage are valid and writable for the call.
    cvt(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) })?;
    // SAFETY: kill with signal 0 only asks whether the group still exists.
    let _ = unsafe { libc::kill(-pid, 0) };
    if let Some(s) = slot {
        let mut stat = [0u8; 256];
        s.cpu_stat.read_at(&mut stat, 0)?;
    }
    Ok(())
}

/// The child's whole life: only async-signal-safe calls, then _exit.
fn child(parent: libc::pid_t, down_r: RawFd, up_w: RawFd) -> ! {
    let mut frame = [0u8; 512];
    let reply = [b'y'; UP_FRAME];
    // SAFETY: prctl, getppid, setpgid, read, write and _exit are
    // async-signal-safe; the buffers are valid for their lengths.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        libc::setpgid(0, 0);
        if libc::read(down_r, frame.as_mut_ptr().cast(), frame.len()) <= 0 {
            libc::_exit(2);
        }
        libc::write(up_w, reply.as_ptr().cast(), reply.len());
        libc::_exit(0)
    }
}

/// clone3 like fork(2), into the cgroup if one is given.
fn clone_into(cgroup_fd: Option<RawFd>) -> io::Result<libc::pid_t> {
    clone3(cgroup_fd, false)
}

/// clone3 making the child the caller's parent's (the fork server's
/// children are the server's, which reaps them), into the cgroup if given.
fn clone_parent(cgroup_fd: Option<RawFd>) -> io::Result<libc::pid_t> {
    clone3(cgroup_fd, true)
}

fn clone3(cgroup_fd: Option<RawFd>, parent: bool) -> io::Result<libc::pid_t> {
    let mut args = [0u64; 11]; // struct clone_args up to `cgroup` (CLONE_ARGS_SIZE_VER2)
    if let Some(fd) = cgroup_fd {
        args[0] |= CLONE_INTO_CGROUP; // flags
        args[10] = fd as u64; // cgroup
    }
    if parent {
        // The kernel takes the exit signal from the parent's own then.
        args[0] |= libc::CLONE_PARENT as u64;
    } else {
        args[4] = libc::SIGCHLD as u64; // exit_signal
    }
    // SAFETY: args is a clone_args of the size passed; with no CLONE_VM the
    // child gets its own copy of this single-threaded process and returns
    // here like fork's child.
    let pid = unsafe { libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), std::mem::size_of_val(&args)) };
    cvt(pid as i32)
}

fn unsafe_zeroed_rusage() -> libc::rusage {
    // SAFETY: rusage is plain old data; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
