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

/// An interpreter whose first operand is a script file, and how its
/// options read: which letters mean the code is on the command line (no
/// script), which options take the next word as their value.
struct Interpreter {
    code: &'static [char],
    code_long: &'static [&'static str],
    valued: &'static [&'static str],
}

const PYTHON: Interpreter = Interpreter {
    code: &['c', 'm'],
    code_long: &[],
    valued: &["-W", "-X", "-Q"],
};
const SHELL: Interpreter = Interpreter {
    code: &['c'],
    code_long: &[],
    valued: &["-o", "+o", "-O", "+O"],
};
const NODE: Interpreter = Interpreter {
    code: &['e', 'p'],
    code_long: &["--eval", "--print"],
    valued: &[
        "-r",
        "--require",
        "--import",
        "--loader",
        "--experimental-loader",
        "-C",
        "--conditions",
    ],
};
const PERL: Interpreter = Interpreter {
    code: &['e', 'E'],
    code_long: &[],
    valued: &["-I"],
};
const RUBY: Interpreter = Interpreter {
    code: &['e'],
    code_long: &[],
    valued: &["-I", "-r", "-C"],
};

fn interpreter(program: &str) -> Option<&'static Interpreter> {
    let name = Path::new(program).file_name()?.to_str()?;
    let versionless = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    match versionless {
        "python" | "pypy" => Some(&PYTHON),
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" => Some(&SHELL),
        "node" | "nodejs" => Some(&NODE),
        "perl" => Some(&PERL),
        "ruby" => Some(&RUBY),
        _ => None,
    }
}

/// The script operand of `argv` when its program is an interpreter we
/// know and the code is not on the command line: the first word that is
/// not an option (or an option's value).
fn script_operand(argv: &[String]) -> Option<&str> {
    let interp = interpreter(argv.first()?)?;
    let mut words = argv[1..].iter();
    while let Some(w) = words.next() {
        match w.as_str() {
            "-" => return None, // the script is stdin
            "--" => return words.next().map(String::as_str),
            v if interp.valued.contains(&v) => {
                words.next();
            }
            long if long.starts_with("--") => {
                if interp
                    .code_long
                    .iter()
                    .any(|c| long == *c || long.starts_with(&format!("{c}=")))
                {
                    return None;
                }
            }
            short if short.starts_with('-') || short.starts_with('+') => {
                if short[1..].chars().any(|c| interp.code.contains(&c)) {
                    return None;
                }
            }
            operand => return Some(operand),
        }
    }
    None
}

impl Config {
    /// For the exec runner whose program is an interpreter (python, sh,
    /// node, perl, ruby): its script operand, when it names a file (a `/`
    /// or an extension in it), must exist — a typo there otherwise shows
    /// only as every task's failure. Relative to agent.workdir, else to
    /// agentd's working directory. The script's path on success, None when
    /// there is no such operand to check.
    pub fn check_script(&self) -> Result<Option<PathBuf>, String> {
        let Runner::Exec { argv } = &self.runner else {
            return Ok(None);
        };
        let Some(script) = script_operand(argv) else {
            return Ok(None);
        };
        let names_a_file = script.contains('/') || Path::new(script).extension().is_some();
        if !names_a_file {
            return Ok(None);
        }
        let base = match &self.workdir {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        };
        let path = base.join(script);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(path)),
            Ok(_) => Err(format!(
                "agent.exec: the script `{script}` is not a file ({}): correct the path",
                path.display()
            )),
            Err(_) => {
                let fix = near_file(&path)
                    .map(|name| format!("did you mean `{name}`?"))
                    .unwrap_or_else(|| "correct the path".into());
                let from = if self.workdir.is_some() {
                    "agent.workdir"
                } else {
                    "the directory agentd starts in"
                };
                Err(format!(
                    "agent.exec: the script `{script}` does not exist (no {}, relative to {from}): {fix}",
                    path.display()
                ))
            }
        }
    }
}

/// A file beside a missing `path` whose name is a few edits from its name.
fn near_file(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let names: Vec<String> = std::fs::read_dir(path.parent()?)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    super::nearest(name, &names).map(String::from)
}

#[cfg(test)]
mod tests {
    use super::script_operand;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn finds_the_script_an_interpreter_runs() {
        let cases = [
            (
                "python3 examples/agents/trip_planner.py",
                Some("examples/agents/trip_planner.py"),
            ),
            ("python3.12 -u -W ignore agent.py --flag", Some("agent.py")),
            ("/usr/bin/python3 -m http.server", None),
            ("python3 -c print(1)", None),
            ("sh -ec true", None),
            ("bash -x run.sh", Some("run.sh")),
            (
                "node --require ts-node/register --inspect=9229 agent.js",
                Some("agent.js"),
            ),
            ("node -e 1", None),
            ("node --eval=1", None),
            ("perl -I lib agent.pl", Some("agent.pl")),
            ("ruby -- agent.rb", Some("agent.rb")),
            ("python3 -", None),
            ("tr a-z A-Z", None),
            ("python3", None),
        ];
        for (argv, want) in cases {
            assert_eq!(script_operand(&words(argv)), want, "{argv}");
        }
    }
}
