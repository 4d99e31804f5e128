//! agentd as PID 1 of a minimal VM guest (its `/init`; told apart from a
//! container's PID 1 by /proc not being mounted yet): before serving,
//! mount what a process needs (`/proc` above all: workers are re-executed
//! from `/proc/self/exe`) and load the kernel modules vsock needs
//! (`init.modules`, in order). When the daemon stops, power the machine
//! off, because PID 1 returning would panic the kernel.
//!
//! As PID 1, agentd also reaps every orphan in the guest: procman's
//! `waitpid(-1)` already handles pids it does not know.

use std::path::Path;

use crate::sys;

/// What to mount, if it is not mounted yet: (source, target, fstype).
/// devtmpfs first: /dev/console is needed for stdio before anything else.
const MOUNTS: &[(&str, &str, &str)] = &[
    ("devtmpfs", "/dev", "devtmpfs"),
    ("proc", "/proc", "proc"),
    ("sysfs", "/sys", "sysfs"),
    ("tmpfs", "/tmp", "tmpfs"),
    ("tmpfs", "/run", "tmpfs"),
];

/// PID 1 of a machine nobody prepared: a VM guest's /init. (PID 1 of a
/// container has /proc mounted by its runtime and must not mount, load
/// modules or power anything off; it only reaps, which procman does.)
pub fn is_guest_init() -> bool {
    sys::getpid() == 1 && !Path::new("/proc/self").exists()
}

/// Prepares the machine when agentd is its init. Errors name what failed.
pub fn prepare(modules: &[std::path::PathBuf]) -> Result<(), String> {
    for (source, target, fstype) in MOUNTS {
        let _ = std::fs::create_dir_all(target);
        let flags = libc::MS_NOSUID | if *fstype == "devtmpfs" { 0 } else { libc::MS_NODEV };
        sys::mount(source, target, fstype, flags).map_err(|e| format!("cannot mount {fstype} on {target}: {e}"))?;
        if *fstype == "devtmpfs" {
            sys::console_on_missing_stdio().map_err(|e| format!("cannot open /dev/console: {e}"))?;
        }
    }
    if std::env::var_os("PATH").is_none() {
        // The kernel gives init no PATH; programs and `sh -c` need one.
        // Still single-threaded here, so setting it is sound.
        std::env::set_var("PATH", "/bin:/sbin:/usr/bin:/usr/sbin");
    }
    for m in modules {
        load(m)?;
    }
    log::info!("agentd.init mounted={} modules={}", MOUNTS.len(), modules.len());
    Ok(())
}

fn load(path: &Path) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open module {}: {e}", path.display()))?;
    let name = path.to_string_lossy();
    let compressed = [".xz", ".zst", ".gz"].iter().any(|ext| name.ends_with(ext));
    sys::load_module(&file, compressed).map_err(|e| {
        let hint = if compressed {
            " (this kernel may not decompress modules itself: ship them uncompressed)"
        } else {
            ""
        };
        format!("cannot load module {}: {e}{hint}", path.display())
    })?;
    log::debug!("agentd.init module={}", path.display());
    Ok(())
}
