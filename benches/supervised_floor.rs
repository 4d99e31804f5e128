//! The supervised floor: the least a server can spend on a task with the
//! guarantees agentd gives every task, measured on this machine, now.
//!
//! `supervised_floor SOCKET [--no-cgroup]` serves HTTP/1.1 on a unix socket
//! from one thread (epoll, keep-alive, no parsing beyond finding where a
//! request ends). A GET is answered with a fixed small card. Every other
//! request is a task, and the answer, a fixed Task of the size agentd sends,
//! waits for a fresh process made with what agentd does for each of its
//! workers, and nothing else:
//!
//! - born by clone3 straight into a cgroup v2 slot (a directory made under
//!   this process's own v2 cgroup; plain fork(2) with `--no-cgroup` or where
//!   none can be made, said on stderr), given two fresh pipes;
//! - the child arms PDEATHSIG, checks its parent is still the one it was born
//!   to, takes a process group of its own, reads a 300-byte frame and writes a
//!   200-byte one, and exits;
//! - the parent writes the frame, polls for and reads the answer, reaps the
//!   child (wait4), probes its process group for escapees, reads the slot's
//!   cpu.stat, and closes its ends.
//!
//! No JSON, no task table, no threads, no helper processes: whatever agentd
//! spends above this is what its A2A handling and its structure cost.
//! bench/run.sh runs it as the server `floor`, on the server core, measured
//! like every other server (its CPU and its reaped children's from /proc).
//! It runs until SIGTERM or SIGINT, then removes its slot.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const CARD: &str = r#"{"name":"supervised floor","description":"the least a supervised task can cost","version":"1","supportedInterfaces":[{"url":"unix:///","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"capabilities":{"streaming":false},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[]}"#;
const TASK: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"0b6c5e8e-8f3a-4a57-9d2b-1f0c2d3e4f50","contextId":"5c1d7e2a-3b4c-4d5e-8f60-718293a4b5c6","status":{"state":"TASK_STATE_COMPLETED","timestamp":"2026-12-03T16:00:00.000Z"},"artifacts":[{"artifactId":"7d9e0f1a-2b3c-4d5e-9f60-718293a4b5c6","name":"echo","parts":[{"text":"hi"}]}],"history":[{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}],"contextId":"5c1d7e2a-3b4c-4d5e-8f60-718293a4b5c6","taskId":"0b6c5e8e-8f3a-4a57-9d2b-1f0c2d3e4f50"}]}}}"#;
const DOWN_FRAME: usize = 300;
const UP_FRAME: usize = 200;
/// Not in the libc crate for every target: linux/sched.h.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(sock) = args.first() else {
        eprintln!("usage: supervised_floor SOCKET [--no-cgroup]");
        return ExitCode::from(2);
    };
    let slot = if args.iter().any(|a| a == "--no-cgroup") {
        None
    } else {
        Slot::make()
    };
    match &slot {
        Some(s) => eprintln!("supervised_floor: tasks born in cgroup v2 slot {}", s.dir.display()),
        None => eprintln!("supervised_floor: tasks forked, in no cgroup of their own"),
    }
    let result = serve(sock, slot.as_ref());
    if let Some(s) = slot {
        let _ = fs::remove_dir(&s.dir);
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
        fs::create_dir(&dir).ok()?;
        let opened = fs::File::open(&dir).and_then(|d| Ok((d, fs::File::open(dir.join("cpu.stat"))?)));
        match opened {
            Ok((dir_fd, cpu_stat)) => Some(Slot { dir, dir_fd, cpu_stat }),
            Err(_) => {
                let _ = fs::remove_dir(&dir);
                None
            }
        }
    }
}

fn serve(sock: &str, slot: Option<&Slot>) -> io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let listener = UnixListener::bind(sock)?;
    listener.set_nonblocking(true)?;
    // SAFETY: epoll_create1 takes no pointers; the fd it returns is ours.
    let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    watch(ep, listener.as_raw_fd())?;
    let mut conns: HashMap<RawFd, (UnixStream, Vec<u8>)> = HashMap::new();
    let card = response(CARD);
    let task = response(TASK);
    let parent = std::process::id() as libc::pid_t;
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
                    supervised_task(slot, parent)?;
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

/// One task: a fresh process with agentd's per-worker guarantees, a frame
/// each way, reaped, its group probed and its slot's CPU read.
fn supervised_task(slot: Option<&Slot>, parent: libc::pid_t) -> io::Result<()> {
    let (down_r, down_w) = pipe()?;
    let (up_r, up_w) = pipe()?;
    set_nonblocking(up_r)?;
    set_nonblocking(down_w)?;
    let pid = match slot {
        Some(s) => clone_into(s.dir_fd.as_raw_fd())?,
        // SAFETY: one thread, so the child holds no lock another could hold;
        // it calls only async-signal-safe functions before _exit.
        None => cvt(unsafe { libc::fork() })?,
    };
    if pid == 0 {
        child(parent, down_r, up_w);
    }
    close(down_r);
    close(up_w);
    let frame = [b'x'; DOWN_FRAME];
    // SAFETY: frame is valid for reads of its length.
    cvt(unsafe { libc::write(down_w, frame.as_ptr().cast(), frame.len()) } as i32)?;
    let mut pfd = libc::pollfd {
        fd: up_r,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: pfd is one valid pollfd for the call.
    cvt(unsafe { libc::poll(&mut pfd, 1, -1) })?;
    let mut answer = [0u8; 512];
    // SAFETY: answer is valid for writes of its length.
    cvt(unsafe { libc::read(up_r, answer.as_mut_ptr().cast(), answer.len()) } as i32)?;
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
    close(up_r);
    close(down_w);
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

fn clone_into(cgroup_fd: RawFd) -> io::Result<libc::pid_t> {
    let mut args = [0u64; 11]; // struct clone_args up to `cgroup` (CLONE_ARGS_SIZE_VER2)
    args[0] = CLONE_INTO_CGROUP; // flags
    args[4] = libc::SIGCHLD as u64; // exit_signal
    args[10] = cgroup_fd as u64; // cgroup
                                 // SAFETY: args is a clone_args of the size passed; with no CLONE_VM the
                                 // child gets its own copy of this single-threaded process and returns
                                 // here like fork's child.
    let pid = unsafe { libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), std::mem::size_of_val(&args)) };
    cvt(pid as i32)
}

fn pipe() -> io::Result<(RawFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is valid for two ints.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((fds[0], fds[1]))
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFL on an fd we own takes no pointers.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) }).map(drop)
}

fn close(fd: RawFd) {
    // SAFETY: fd is ours and closed once.
    unsafe { libc::close(fd) };
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
