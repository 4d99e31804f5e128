//! Unix listeners. A unix listener is created the way the binding text demands: the socket
//! is bound inside a fresh 0700 staging directory beside the target, made
//! 0600, then `rename(2)`d into place, so no other user can connect even for
//! an instant. A live socket already at the path means another daemon; a
//! stale one is replaced; anything that is not a socket is never touched.
//! Every accepted connection is gated on SO_PEERCRED before a byte is read
//! (see [`super::Gate`]).

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
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
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("/"));
    if !parent.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(io_err("cannot create the socket's directory"))?;
    }
    let staging = make_staging_dir(parent).map_err(io_err("cannot create a staging directory beside it"))?;
    let staged = staging.join("s");
    let result = (|| {
        let listener = UnixListener::bind(&staged).map_err(io_err("bind"))?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600)).map_err(io_err("chmod 0600"))?;
        std::fs::rename(&staged, path).map_err(io_err("rename into place"))?;
        let meta = std::fs::symlink_metadata(path).map_err(io_err("stat after rename"))?;
        Ok(UnixSocketListener {
            listener,
            path: path.to_path_buf(),
            ino: (meta.dev(), meta.ino()),
        })
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    result
}

/// A new 0700 directory `.agentd-XXXXXXXX` in `parent`. Short, because the
/// staged socket's path must still fit in sun_path.
fn make_staging_dir(parent: &Path) -> io::Result<PathBuf> {
    for _ in 0..16 {
        let mut r = [0u8; 4];
        sys::random_bytes(&mut r)?;
        let name = format!(".agentd-{:08x}", u32::from_ne_bytes(r));
        let dir = parent.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free staging name"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
