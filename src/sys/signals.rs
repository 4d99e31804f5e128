//! Signal masks, handlers and names. (SIGCHLD's signalfd is wake.rs's.)

use std::io;

use super::cvt;

pub(super) fn empty_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigfillset set it up.
    unsafe { std::mem::zeroed() }
}

/// Blocks every signal of the calling thread (the fork server, which
/// takes none: SIGKILL and its PDEATHSIG cannot be blocked).
pub fn block_all_signals() {
    let mut all = empty_sigset();
    // SAFETY: `all` is a valid sigset_t.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: a valid set; affects only this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut()) };
}

/// Unblocks every signal of the calling thread: a worker forked by the
/// fork server begins with all of them blocked (see [`block_all_signals`]).
pub fn unblock_all_signals() {
    let set = empty_sigset();
    // SAFETY: an all-zero sigset_t is the empty set on Linux; a valid
    // pointer, affects only this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
}

/// Installs `handler` for `sig` (sigaction(2): no flags, so `sig` itself
/// is blocked while it runs). It runs in signal context, on whichever thread
/// the signal interrupts, wherever that thread was (inside malloc, holding a
/// lock): everything `handler` calls must be async-signal-safe — system
/// calls on stack buffers, no allocation, no lock. The caller keeps that
/// promise (the worker's parent-death path, worker/containment.rs, is the
/// one caller; its module doc lists what it calls).
pub fn catch_signal(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as *const () as libc::sighandler_t;
    // SAFETY: `action` is valid and the old action is not requested; the
    // handler makes only async-signal-safe calls (this function's contract,
    // above).
    cvt(unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) }).map(drop)
}

/// Keeps the calling thread's signal stack out of every process it forks
/// from now on (madvise MADV_DONTFORK): the fork server's, which std maps
/// to report a stack overflow. A memory area with pages in it costs each
/// fork a copy and each child's exit a teardown; a worker does not need
/// this one. Its own handlers run on the ordinary stack (no SA_ONSTACK);
/// std's stack-overflow handler would want it, and without it the kernel
/// ends an overflowing worker with SIGSEGV instead of std's message and
/// abort — a crash either way, reported as one. Nothing to do without a
/// signal stack.
pub fn keep_signal_stack_from_forks() -> io::Result<()> {
    // SAFETY: a zeroed stack_t is valid storage for sigaltstack to fill.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: reads the thread's signal stack into `current`; sets nothing.
    cvt(unsafe { libc::sigaltstack(std::ptr::null(), &mut current) })?;
    if current.ss_flags & libc::SS_DISABLE != 0 || current.ss_sp.is_null() {
        return Ok(());
    }
    // SAFETY: MADV_DONTFORK changes only what a later fork copies, never
    // this process's memory; the range is the signal stack the kernel
    // just reported (page-aligned as std maps it, else EINVAL).
    cvt(unsafe { libc::madvise(current.ss_sp, current.ss_size, libc::MADV_DONTFORK) }).map(drop)
}

extern "C" fn ignore_signal(_sig: libc::c_int) {}

/// Catches SIGTERM with a handler that does nothing. The kill ladder's
/// SIGTERM is for the task's program; the worker stays to report how the
/// program ended. (Caught, not SIG_IGN: exec resets a caught signal to its
/// default, so the program still sees SIGTERM normally.)
pub fn outlast_sigterm() -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = ignore_signal as *const () as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action` is valid and its handler does nothing at all.
    cvt(unsafe { libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) }).map(drop)
}

/// Restores SIGPIPE's default action (Rust ignores it), so a client whose
/// output pipe closes (`agentd events | head`) ends quietly like any Unix
/// tool instead of panicking on a failed print. Never for the daemon.
pub fn default_sigpipe() {
    // SAFETY: installing SIG_DFL for SIGPIPE touches no memory.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => "a real-time signal",
    }
}
