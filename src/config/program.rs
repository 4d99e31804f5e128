//! What `serve --check` and start-up can check of the exec runner's
//! program without running it.

use std::path::{Path, PathBuf};

use super::{Config, Runner};

impl Config {
    /// For the exec runner: the program must resolve (on the PATH a task
    /// gets, or as a path) to an executable file, so a typo shows at
    /// `serve --check` and start-up rather than as every task's exit 127.
    /// The resolved path on success.
    pub fn check_program(&self) -> Result<Option<PathBuf>, String> {
        let Runner::Exec { argv } = &self.runner else {
            return Ok(None);
        };
        let program = argv.first().map(String::as_str).unwrap_or("");
        let path_var = self
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        let candidates: Vec<PathBuf> = if program.contains('/') {
            let p = Path::new(program);
            match &self.workdir {
                Some(dir) if p.is_relative() => vec![dir.join(p)],
                _ => vec![p.to_path_buf()],
            }
        } else {
            std::env::split_paths(&path_var).map(|d| d.join(program)).collect()
        };
        for c in &candidates {
            if let Ok(meta) = std::fs::metadata(c) {
                use std::os::unix::fs::PermissionsExt;
                if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                    return Ok(Some(c.clone()));
                }
                if program.contains('/') {
                    return Err(format!(
                        "agent.exec: `{}` is not an executable file (mode {:o}): chmod +x it or name another program",
                        c.display(),
                        meta.permissions().mode() & 0o7777
                    ));
                }
            }
        }
        Err(if program.contains('/') {
            format!(
                "agent.exec: `{}` does not exist: install it or correct the path",
                candidates[0].display()
            )
        } else {
            format!(
                "agent.exec: `{program}` is not an executable on PATH ({path_var}): install it or give its absolute path"
            )
        })
    }
}
