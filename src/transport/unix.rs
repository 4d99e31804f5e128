//! Unix listeners. A unix listener is created the way the binding text demands: the socket
//! is bound inside a fresh 0700 staging directory beside the target, made
//! 0600, then `rename(2)`d into place, so no other user can connect even for
//! an instant. A live socket already at the path means another daemon; a
//! stale one is replaced; anything that is not a socket is never touched.
//! Every accepted connection is gated on SO_PEERCRED before a byte is read
//! (see [`super::Gate`]).
//!
//! ```text
//!  the socket's directory        opened O_DIRECTORY|O_NOFOLLOW, then fstat'd:
//!    missing                     created 0700 (one level only: its parent must exist)
//!    a symlink / not a dir       refused
//!    owner not our euid or root  refused   ─┐ another user could rename the
//!    group/other-writable        refused   ─┘ socket aside and bind their own
//!      (unless sticky, like /tmp: then nobody else may rename our entries)
//!  everything after works through that fd (mkdirat, renameat, unlinkat),
//!  never through the path again; the staged socket is bound through
//!  /proc/self/fd/N/ when its own path would not fit in sun_path.
//! ```

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};

use std::path::{Path, PathBuf};

use crate::sys;

/// Why a listener could not be set up. Each says what to do about it.
#[derive(Debug)]
pub enum BindError {
    InUse {
        path: PathBuf,
    },
    NotASocket {
        path: PathBuf,
    },
    /// The socket's directory is not safely ours.
    UnsafeDir {
        dir: PathBuf,
        why: String,
    },
    Io {
        path: PathBuf,
        what: &'static str,
        source: io::Error,
    },
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::InUse { path } => write!(
                f,
                "cannot listen on {}: a live socket is already there — is another agentd running? \
                 Stop it or choose another --listen path",
                path.display()
            ),
            BindError::NotASocket { path } => write!(
                f,
                "cannot listen on {}: the path exists and is not a socket; agentd never replaces \
                 other files — remove it or choose another path",
                path.display()
            ),
            BindError::UnsafeDir { dir, why } => write!(f, "cannot listen in {}: {why}", dir.display()),
            BindError::Io { path, what, source } => {
                write!(f, "cannot listen on {}: {what}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for BindError {}

/// A bound unix listener that removes its socket file when dropped — but
/// only if the file at the path is still the one it created.
pub struct UnixSocketListener {
    pub listener: UnixListener,
    pub path: PathBuf,
    ino: (u64, u64),
}

impl Drop for UnixSocketListener {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if (meta.dev(), meta.ino()) == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Binds `path` atomically with mode 0600 (see the module doc).
pub fn bind_unix(path: &Path) -> Result<UnixSocketListener, BindError> {
    let io_err = |what: &'static str| {
        let path = path.to_path_buf();
        move |source| BindError::Io { path, what, source }
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io_err("the path names no socket file")(io::ErrorKind::InvalidInput.into()))?;
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("/"));
    let dir = open_socket_dir(parent)?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(BindError::InUse { path: path.into() });
            }
            // Nobody answers: a stale socket from a daemon that died. The
            // rename below replaces it atomically.
            log::info!(
                "a2a.unix.stale path={} replacing a socket nobody listens on",
                path.display()
            );
        }
        Ok(_) => return Err(BindError::NotASocket { path: path.into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("cannot inspect the path")(e)),
    }
    let (staging_name, staging) =
        make_staging_dir(&dir).map_err(io_err("cannot create a staging directory beside it"))?;
    // The staged socket's own path is longer than the final one; through
    // the staging directory's fd it fits whatever the parent's length.
    let direct = parent.join(&staging_name).join("s");
    let staged = if direct.as_os_str().len() <= super::SUN_PATH_MAX {
        direct
    } else {
        PathBuf::from(format!("/proc/self/fd/{}/s", staging.as_raw_fd()))
    };
    let result = (|| {
        let listener = UnixListener::bind(&staged).map_err(io_err("bind (in the staging directory)"))?;
        sys::chmod_at(&staging, "s", 0o600).map_err(io_err("chmod 0600"))?;
        sys::rename_at(&staging, "s", &dir, name).map_err(io_err("rename into place"))?;
        let meta = std::fs::symlink_metadata(path).map_err(io_err("stat after rename"))?;
        Ok(UnixSocketListener {
            listener,
            path: path.to_path_buf(),
            ino: (meta.dev(), meta.ino()),
        })
    })();
    let _ = sys::unlink_at(&staging, "s", false);
    let _ = sys::unlink_at(&dir, &staging_name, true);
    result
}

/// Opens the socket's directory and checks that it is agentd's own (see the
/// module doc), creating it 0700 when missing — one level only, so a typo
/// in the path cannot build a tree of directories.
fn open_socket_dir(dir: &Path) -> Result<File, BindError> {
    let unsafe_dir = |why: String| BindError::UnsafeDir { dir: dir.into(), why };
    let opened = match sys::open_dir_nofollow(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => create_socket_dir(dir)?,
        other => other.map_err(|e| match e.raw_os_error() {
            // O_DIRECTORY|O_NOFOLLOW on a symlink: ELOOP or ENOTDIR.
            Some(libc::ELOOP | libc::ENOTDIR) if dir.is_symlink() => unsafe_dir(format!(
                "it is a symbolic link (to {}); agentd does not follow one for its socket's directory — \
                 name the real directory in --listen",
                std::fs::read_link(dir).map_or_else(|_| "?".into(), |t| t.display().to_string())
            )),
            Some(libc::ENOTDIR) => unsafe_dir("it is not a directory".into()),
            _ => unsafe_dir(format!("cannot open it: {e}")),
        })?,
    };
    let meta = opened
        .metadata()
        .map_err(|e| unsafe_dir(format!("cannot stat it: {e}")))?;
    check_socket_dir(dir, meta.uid(), meta.mode(), sys::geteuid()).map_err(unsafe_dir)?;
    Ok(opened)
}

/// The directory rule, on what fstat said of `dir`: owned by `euid` or
/// root, and not writable by group or other unless sticky. `Err` says why
/// and what to do.
fn check_socket_dir(dir: &Path, uid: u32, mode: u32, euid: u32) -> Result<(), String> {
    if uid != euid && uid != 0 {
        return Err(format!(
            "it is owned by uid {uid}, not by agentd's uid {euid} or root, so its owner could replace the \
             socket with their own — remove it if it is not yours, or listen in a directory you own \
             (set XDG_RUNTIME_DIR, or --listen unix:///PATH/agentd.sock)"
        ));
    }
    const STICKY: u32 = 0o1000;
    if mode & 0o022 != 0 && mode & STICKY == 0 {
        return Err(format!(
            "it is writable by {} (mode {:04o}), so another user could rename the socket aside and bind \
             their own — `chmod go-w` it, or listen one level below it, in a directory agentd makes \
             itself with mode 0700 (--listen unix://{}/agentd/agentd.sock; this is the way for a \
             shared volume such as a Kubernetes emptyDir)",
            if mode & 0o002 != 0 { "every user" } else { "its group" },
            mode & 0o7777,
            dir.display().to_string().trim_end_matches('/')
        ));
    }
    Ok(())
}

/// Creates the missing socket directory 0700 inside its existing parent.
fn create_socket_dir(dir: &Path) -> Result<File, BindError> {
    let unsafe_dir = |why: String| BindError::UnsafeDir { dir: dir.into(), why };
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str())) else {
        return Err(unsafe_dir("it does not exist".into()));
    };
    let parent_dir = File::open(parent).map_err(|e| {
        unsafe_dir(format!(
            "it does not exist, and neither does its parent ({e}); agentd creates only the socket's own \
             directory — check --listen for a typo, or create {} first",
            parent.display()
        ))
    })?;
    match sys::mkdir_at(&parent_dir, name, 0o700) {
        Ok(()) => log::info!("a2a.unix.mkdir dir={} mode=0700", dir.display()),
        // Someone made it meanwhile: it is checked like any other.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(unsafe_dir(format!("it does not exist and cannot be created: {e}"))),
    }
    sys::open_dir_at(&parent_dir, name).map_err(|e| unsafe_dir(format!("cannot open it: {e}")))
}

/// A new 0700 directory `.agentd-XXXXXXXX` in `dir`: its name and an fd.
fn make_staging_dir(dir: &File) -> io::Result<(String, File)> {
    for _ in 0..16 {
        let mut r = [0u8; 4];
        sys::random_bytes(&mut r)?;
        let name = format!(".agentd-{:08x}", u32::from_ne_bytes(r));
        match sys::mkdir_at(dir, &name, 0o700) {
            Ok(()) => return sys::open_dir_at(dir, &name).map(|f| (name, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free staging name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_directory_rule() {
        let me = 1000;
        let dir = Path::new("/run/agentd");
        assert_eq!(check_socket_dir(dir, me, 0o40700, me), Ok(()));
        assert_eq!(check_socket_dir(dir, 0, 0o40755, me), Ok(()));
        assert_eq!(check_socket_dir(dir, 0, 0o41777, me), Ok(()), "root's sticky /tmp");
        // What agentd makes itself below a shared volume: setgid is harmless.
        assert_eq!(
            check_socket_dir(dir, me, 0o42700, me),
            Ok(()),
            "inherited setgid (fsGroup)"
        );
        let other = check_socket_dir(dir, 65534, 0o40777, me).unwrap_err();
        assert!(
            other.contains("owned by uid 65534, not by agentd's uid 1000 or root"),
            "{other}"
        );
        // A Kubernetes emptyDir: root's, 0777 (2777 with an fsGroup).
        for mode in [0o40777, 0o42777] {
            let world = check_socket_dir(dir, 0, mode, me).unwrap_err();
            assert!(
                world.contains(&format!("writable by every user (mode {:04o})", mode & 0o7777))
                    && world.contains("chmod go-w")
                    && world.contains("--listen unix:///run/agentd/agentd/agentd.sock"),
                "{world}"
            );
        }
        let group = check_socket_dir(dir, me, 0o40770, me).unwrap_err();
        assert!(group.contains("writable by its group (mode 0770)"), "{group}");
    }

    #[test]
    fn refuses_symlinked_dirs_and_creates_one_missing_level_only() {
        let base = std::env::temp_dir().join(format!("agentd-t-{}", crate::ids::new_id()));
        std::fs::create_dir_all(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        let err = bind_unix(&base.join("link/a.sock")).err().unwrap().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(
            std::fs::read_dir(base.join("real")).unwrap().next().is_none(),
            "nothing made through the link"
        );

        let l = bind_unix(&base.join("new/a.sock")).unwrap();
        let mode = std::fs::metadata(base.join("new")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        drop(l);
        let err = bind_unix(&base.join("typo/deeper/a.sock")).err().unwrap().to_string();
        assert!(err.contains("neither does its parent") && err.contains("typo"), "{err}");
        assert!(!base.join("typo").exists(), "no tree built");

        std::fs::create_dir(base.join("open")).unwrap();
        std::fs::set_permissions(base.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = bind_unix(&base.join("open/a.sock")).err().unwrap().to_string();
        assert!(err.contains("writable by every user"), "{err}");
        assert!(!base.join("open/a.sock").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn binds_a_path_of_the_full_107_bytes() {
        let base = std::env::temp_dir().join(format!("agentd-t-{}", crate::ids::new_id()));
        let fill = 107 - base.as_os_str().len() - "/".len() - "/a.sock".len();
        let dir = base.join("d".repeat(fill));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.sock");
        assert_eq!(path.as_os_str().len(), 107);
        let l = bind_unix(&path).unwrap();
        UnixStream::connect(&path).unwrap();
        drop(l);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "socket and staging gone");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn binds_0600_refuses_live_replaces_stale_never_touches_files() {
        let dir = std::env::temp_dir().join(format!("agentd-t-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.sock");
        let l = bind_unix(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(matches!(bind_unix(&path), Err(BindError::InUse { .. })));
        drop(l);
        assert!(!path.exists(), "socket removed on drop");
        // A stale socket: bound by someone who died without unlinking it.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let l2 = bind_unix(&path).unwrap();
        drop(l2);
        assert!(!path.exists(), "socket removed on drop");
        std::fs::write(&path, b"not a socket").unwrap();
        assert!(matches!(bind_unix(&path), Err(BindError::NotASocket { .. })));
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no staging directory left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
