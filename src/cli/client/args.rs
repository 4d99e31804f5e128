//! The client commands' argv: each command's own options (anything else is
//! refused, with the nearest option named), `--` to end options, the
//! ENDPOINT when the first word is one, and a word that looks like a
//! mistyped one refused rather than sent as text.

use std::time::Duration;

use super::help::{self, Command};
use crate::transport::Address;

/// What argv asked for.
pub enum Parsed {
    Help,
    Run(Opts),
}

pub struct Opts {
    pub json: bool,
    /// The ENDPOINT (when one was given) and the arguments after it.
    pub positional: Vec<String>,
    /// How many of `positional` came before `--`: only the first of those
    /// may be the ENDPOINT.
    before_dashes: usize,
    flags: Vec<(&'static str, Option<String>)>,
}

/// The flag as the command knows it (its own or a common one).
fn known(c: &Command, flag: &str) -> Option<&'static str> {
    c.flags.iter().chain(help::COMMON_FLAGS).copied().find(|f| *f == flag)
}

fn takes_value(c: &Command, flag: &str) -> bool {
    c.valued.contains(&flag) || help::COMMON_VALUED.contains(&flag)
}

pub fn parse(c: &Command, args: &[String]) -> Result<Parsed, String> {
    let mut o = Opts {
        json: false,
        positional: Vec::new(),
        before_dashes: 0,
        flags: Vec::new(),
    };
    let mut it = args.iter();
    let mut dashes = false;
    while let Some(a) = it.next() {
        if dashes {
            o.positional.push(a.clone());
            continue;
        }
        match a.as_str() {
            "--" => {
                dashes = true;
                continue;
            }
            "-h" | "--help" => return Ok(Parsed::Help),
            "-" => {
                o.positional.push(a.clone());
                o.before_dashes += 1;
                continue;
            }
            _ => {}
        }
        if !a.starts_with('-') {
            o.positional.push(a.clone());
            o.before_dashes += 1;
            continue;
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let Some(flag) = known(c, name) else {
            return Err(unknown_option(c, name));
        };
        if takes_value(c, flag) {
            let v = inline
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value"))?;
            o.flags.push((flag, Some(v)));
        } else if inline.is_some() {
            return Err(format!("{flag} takes no value"));
        } else {
            o.json |= flag == "--json";
            o.flags.push((flag, None));
        }
    }
    Ok(Parsed::Run(o))
}

fn unknown_option(c: &Command, name: &str) -> String {
    if let Some(other) = help::COMMANDS.iter().find(|o| o.flags.contains(&name)) {
        return format!("{name} is an option of `{}`, not of `{}`", other.name, c.name);
    }
    let own: Vec<&str> = c.flags.iter().chain(help::COMMON_FLAGS).copied().collect();
    let hint = match crate::config::nearest(name, &own) {
        Some(f) => format!(" (did you mean `{f}`?)"),
        None if c.name == "send" => " (to send text that starts with `-`, put `--` before it)".into(),
        None => String::new(),
    };
    format!("unknown option `{name}`{hint}")
}

impl Opts {
    pub fn has(&self, name: &str) -> bool {
        self.flags.iter().any(|(n, _)| *n == name)
    }

    pub fn value(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// A whole-number option.
    pub fn number(&self, name: &str) -> Result<Option<i64>, String> {
        self.value(name)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("{name}: `{v}` is not a whole number"))
            })
            .transpose()
    }

    /// `--timeout SECS`: seconds, fractions allowed.
    pub fn timeout(&self) -> Result<Option<Duration>, String> {
        let Some(v) = self.value("--timeout") else {
            return Ok(None);
        };
        match crate::config::parse_secs(v) {
            None => Err(format!("--timeout: `{v}` is not a number of seconds (e.g. 30 or 0.5)")),
            Some(Duration::ZERO) => Err(format!("--timeout: `{v}` must be more than 0 seconds")),
            Some(t) => Ok(Some(t)),
        }
    }

    /// The ENDPOINT the first word names, if it names one (the rest of
    /// `positional` then follows it).
    pub fn endpoint(&self) -> Result<Option<Address>, String> {
        let Some(first) = self.positional.first().filter(|_| self.before_dashes > 0) else {
            return Ok(None);
        };
        if looks_like_endpoint(first) {
            return Address::parse(first).map(Some).map_err(|e| e.to_string());
        }
        if looks_like_a_mistyped_endpoint(first) {
            let here = (first.contains('/') && !first.contains(':'))
                .then(|| std::env::current_dir().ok())
                .flatten()
                .map(|cwd| format!(" (here: unix://{})", cwd.join(first).display()))
                .unwrap_or_default();
            return Err(format!(
                "`{first}` looks like a mistyped ENDPOINT: write unix:///ABSOLUTE/PATH{here}, \
                 vsock://CID:PORT or vsock+uds:///PATH:PORT; to send it as text, give the ENDPOINT \
                 first or put `--` before it"
            ));
        }
        Ok(None)
    }

    /// The words after the ENDPOINT (all of them when none was given).
    pub fn rest(&self, endpoint_given: bool) -> &[String] {
        &self.positional[usize::from(endpoint_given)..]
    }
}

/// An address (`unix://…`, `vsock://…`, a bare `/path` to be told how to
/// write it, or any other `scheme://`, to be told what is served).
fn looks_like_endpoint(word: &str) -> bool {
    word.starts_with('/') || word.split_once("://").is_some_and(|(scheme, _)| !scheme.contains(' '))
}

/// One word that is surely not a message: a relative socket path, or a
/// scheme missing its slashes (`tmp/agentd.sock`, `a.sock`, `unix:/x`).
fn looks_like_a_mistyped_endpoint(word: &str) -> bool {
    !word.contains(char::is_whitespace)
        && (word.ends_with(".sock")
            || word.contains('/')
            || ["unix:", "vsock:", "vsock+uds:"].iter().any(|s| word.starts_with(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(cmd: &str, args: &[&str]) -> Result<Opts, String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        match parse(help::find(cmd).unwrap(), &args)? {
            Parsed::Run(o) => Ok(o),
            Parsed::Help => Err("help".into()),
        }
    }

    #[test]
    fn each_command_takes_its_own_options() {
        assert!(parsed("send", &["--stream", "hi"]).unwrap().has("--stream"));
        assert_eq!(
            parsed("list", &["--stream"]).err().unwrap(),
            "--stream is an option of `send`, not of `list`"
        );
        assert_eq!(
            parsed("send", &["--strem"]).err().unwrap(),
            "unknown option `--strem` (did you mean `--stream`?)"
        );
        assert!(parsed("send", &["-5", "degrees"])
            .err()
            .unwrap()
            .contains("put `--` before it"));
        assert_eq!(parsed("send", &["--json=yes"]).err().unwrap(), "--json takes no value");
        assert_eq!(parsed("get", &["--history"]).err().unwrap(), "--history needs a value");
        for help in [["-h"], ["--help"]] {
            assert_eq!(parsed("list", &help).err().unwrap(), "help");
        }
        let o = parsed("send", &["unix:///a", "--", "-h", "--json"]).unwrap();
        assert_eq!(o.positional, ["unix:///a", "-h", "--json"]);
        assert!(!o.json);
    }

    #[test]
    fn the_endpoint_is_the_first_word_before_dashes() {
        let o = parsed("send", &["unix:///a.sock", "hi"]).unwrap();
        assert_eq!(o.endpoint().unwrap(), Some(Address::Unix("/a.sock".into())));
        assert_eq!(o.rest(true), ["hi"]);
        let o = parsed("send", &["hello", "there"]).unwrap();
        assert_eq!(o.endpoint().unwrap(), None);
        for typo in ["tmp/agentd.sock", "agentd.sock", "unix:/tmp/a.sock", "vsock:3:5000"] {
            let e = parsed("send", &[typo, "hi"]).unwrap().endpoint().unwrap_err();
            assert!(
                e.starts_with(&format!("`{typo}` looks like a mistyped ENDPOINT")),
                "{e}"
            );
        }
        let e = parsed("list", &["tmp/a.sock"]).unwrap().endpoint().unwrap_err();
        assert!(e.contains("(here: unix:///"), "{e}");
        let o = parsed("send", &["--", "tmp/agentd.sock"]).unwrap();
        assert_eq!(o.endpoint().unwrap(), None, "after -- it is text");
        assert!(parsed("send", &["fix src/main.rs"])
            .unwrap()
            .endpoint()
            .unwrap()
            .is_none());
    }

    #[test]
    fn timeouts_take_fractions() {
        let t = |v: &str| parsed("list", &["--timeout", v]).unwrap().timeout();
        assert_eq!(t("0.5"), Ok(Some(Duration::from_millis(500))));
        assert_eq!(t("2"), Ok(Some(Duration::from_secs(2))));
        assert_eq!(t("0").unwrap_err(), "--timeout: `0` must be more than 0 seconds");
        assert_eq!(
            t("0.000").unwrap_err(),
            "--timeout: `0.000` must be more than 0 seconds"
        );
        for bad in ["-1", "NaN", "soon", "1e3", "1.2.3", ".", ""] {
            assert!(t(bad).unwrap_err().contains("is not a number of seconds"), "{bad}");
        }
        let o = parsed("get", &["--history", "0.5"]).unwrap();
        assert_eq!(
            o.number("--history").unwrap_err(),
            "--history: `0.5` is not a whole number"
        );
    }
}
