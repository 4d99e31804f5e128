/// The static (musl) build allocates through a size-class cache in front of
/// musl's malloc, which takes one process-wide lock per call (see
/// `sys/alloc.rs`). Only there, and only in the binary: glibc's malloc needs
/// no help, and tests and fuzzing see the system allocator.
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: agentd::sys::CachingAlloc = agentd::sys::CachingAlloc;

fn main() {
    // The fork server (`agentd __forkserver`, started with its
    // supervisor's pid in the environment) allocates from its own arena
    // from the first byte: see sys/alloc.rs.
    if agentd::sys::env_is_set(agentd::worker::SUPERVISOR_PID_ENV_C) {
        agentd::sys::start_fork_server_arena();
    }
    std::process::exit(agentd::cli::main());
}
