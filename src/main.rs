/// The static (musl) build allocates through a size-class cache in front of
/// musl's malloc, which takes one process-wide lock per call (see
/// `sys/alloc.rs`). Only there, and only in the binary: glibc's malloc needs
/// no help, and tests and fuzzing see the system allocator.
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: agentd::sys::CachingAlloc = agentd::sys::CachingAlloc;

fn main() {
    std::process::exit(agentd::cli::main());
}
