//! The one daemon of the soak: started on a fixed socket, SIGKILLed and
//! restarted there by the injector, watched by everyone. Each life is an
//! epoch; clients note the epoch they sent in, and a call that breaks while
//! the daemon is being killed (or in a later epoch) is lost by restart, not
//! a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct Daemon {
    pub bin: PathBuf,
    pub socket: PathBuf,
    pub dir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    life: Mutex<Life>,
    changed: Condvar,
    /// Time windows in which an fd squeeze was in force (from the run's
    /// start), with some slack after: errors inside are the squeeze's.
    squeezes: Mutex<Vec<(Instant, Option<Instant>)>>,
}

struct Life {
    child: Option<Child>,
    pid: i32,
    epoch: u32,
    /// Being killed or started: calls that break now are the kill's.
    down: bool,
    logs: Vec<PathBuf>,
    isolation: String,
    /// When each epoch's daemon was killed, died or was stopped, and when
    /// each began serving.
    ended: Vec<(u32, Instant)>,
    began: Vec<(u32, Instant)>,
}

/// What a kill left to check.
pub struct Killed {
    pub old_pid: i32,
    pub old_epoch: u32,
    pub ready_in: Duration,
}

impl Daemon {
    pub fn new(bin: PathBuf, dir: PathBuf, args: Vec<String>, env: Vec<(String, String)>) -> Daemon {
        Daemon {
            bin,
            socket: dir.join("a.sock"),
            dir,
            args,
            env,
            life: Mutex::new(Life {
                child: None,
                pid: 0,
                epoch: 0,
                down: true,
                logs: Vec::new(),
                isolation: String::new(),
                ended: Vec::new(),
                began: Vec::new(),
            }),
            changed: Condvar::new(),
            squeezes: Mutex::new(Vec::new()),
        }
    }

    /// Starts the next epoch's daemon and waits until it serves.
    pub fn start(&self) -> Result<Duration, String> {
        let t = Instant::now();
        let epoch = self.life.lock().unwrap().epoch + 1;
        let log = self.dir.join(format!("agentd-{epoch}.log"));
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix://{}", self.socket.display()))
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?)
            .spawn()
            .map_err(|e| format!("start {}: {e}", self.bin.display()))?;
        let pid = child.id() as i32;
        {
            let mut l = self.life.lock().unwrap();
            l.child = Some(child);
            l.pid = pid;
            l.logs.push(log.clone());
        }
        // Ready: the socket answers and the ready line (with isolation=) is out.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(iso) = text
                .lines()
                .find(|l| l.contains("agentd.ready"))
                .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("isolation=")))
            {
                if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                    let mut l = self.life.lock().unwrap();
                    l.isolation = iso.to_string();
                    l.epoch = epoch;
                    l.down = false;
                    l.began.push((epoch, Instant::now()));
                    self.changed.notify_all();
                    return Ok(t.elapsed());
                }
            }
            let exited = self
                .life
                .lock()
                .unwrap()
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(format!("agentd exited at start ({status}); log:\n{text}"));
            }
            if Instant::now() > deadline {
                return Err(format!("agentd not ready within 30 s; log:\n{text}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Takes `pid` for the serving daemon of epoch 1, started by someone
    /// else (the judges' tests watch a process of their own this way).
    pub fn pretend_up(&self, pid: i32) {
        let mut l = self.life.lock().unwrap();
        (l.pid, l.epoch, l.down) = (pid, 1, false);
        l.began.push((1, Instant::now()));
    }

    /// (epoch, pid) of the daemon serving now, or None while it is down.
    pub fn current(&self) -> Option<(u32, i32)> {
        let l = self.life.lock().unwrap();
        (!l.down).then_some((l.epoch, l.pid))
    }

    pub fn epoch(&self) -> u32 {
        self.life.lock().unwrap().epoch
    }

    pub fn isolation(&self) -> String {
        self.life.lock().unwrap().isolation.clone()
    }

    /// Waits (bounded) for a serving daemon.
    pub fn wait_up(&self, timeout: Duration) -> Option<(u32, i32)> {
        let deadline = Instant::now() + timeout;
        let mut l = self.life.lock().unwrap();
        loop {
            if !l.down {
                return Some((l.epoch, l.pid));
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            l = self.changed.wait_timeout(l, left).unwrap().0;
        }
    }

    /// Whether the daemon of `epoch` has been (or is being) killed since.
    pub fn disrupted_since(&self, epoch: u32) -> bool {
        let l = self.life.lock().unwrap();
        l.down || l.epoch != epoch
    }

    /// SIGKILLs the daemon, reaps it, and starts the next epoch on the same
    /// socket. `before_restart` runs between the two (the checks that the
    /// old daemon's processes are gone).
    pub fn kill_and_restart(&self, before_restart: impl FnOnce(i32)) -> Result<Killed, String> {
        let (old_pid, old_epoch, mut child) = {
            let mut l = self.life.lock().unwrap();
            l.down = true;
            let epoch = l.epoch;
            l.ended.push((epoch, Instant::now()));
            (l.pid, l.epoch, l.child.take())
        };
        if let Some(c) = child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        before_restart(old_pid);
        let ready_in = self.start()?;
        Ok(Killed {
            old_pid,
            old_epoch,
            ready_in,
        })
    }

    /// An exit nobody asked for: Some(status) when the daemon died.
    pub fn died(&self) -> Option<String> {
        let mut l = self.life.lock().unwrap();
        if l.down {
            return None;
        }
        let status = l.child.as_mut()?.try_wait().ok().flatten()?;
        l.down = true;
        let epoch = l.epoch;
        l.ended.push((epoch, Instant::now()));
        Some(status.to_string())
    }

    /// SIGTERM, bounded wait; the exit code.
    pub fn stop(&self) -> Option<i32> {
        self.stop_with(libc::SIGTERM)
    }

    /// `signal` (SIGTERM to stop it as a service manager would), bounded
    /// wait; the exit code (None when a signal ended it).
    pub fn stop_with(&self, signal: i32) -> Option<i32> {
        let mut child = {
            let mut l = self.life.lock().unwrap();
            l.down = true;
            let epoch = l.epoch;
            l.ended.push((epoch, Instant::now()));
            l.child.take()?
        };
        crate::common::signal(child.id() as i32, signal);
        let status = crate::common::wait_child(&mut child, Duration::from_secs(30));
        status.and_then(|s| s.code())
    }

    /// When the daemon of `epoch` was killed, died or was stopped.
    pub fn ended_at(&self, epoch: u32) -> Option<Instant> {
        let l = self.life.lock().unwrap();
        l.ended.iter().find(|(e, _)| *e == epoch).map(|(_, at)| *at)
    }

    /// How long each epoch's daemon served (until now for the live one).
    pub fn lives(&self) -> Vec<(u32, Duration)> {
        let l = self.life.lock().unwrap();
        l.began
            .iter()
            .map(|(e, began)| {
                let end = l
                    .ended
                    .iter()
                    .find(|(x, _)| x == e)
                    .map_or_else(Instant::now, |(_, at)| *at);
                (*e, end.saturating_duration_since(*began))
            })
            .collect()
    }

    pub fn log_paths(&self) -> Vec<PathBuf> {
        self.life.lock().unwrap().logs.clone()
    }

    /// The last `n` lines of the current log.
    pub fn log_tail(&self, n: usize) -> String {
        let Some(p) = self.log_paths().pop() else {
            return String::new();
        };
        tail(&p, n)
    }

    pub fn squeeze_begin(&self) {
        self.squeezes.lock().unwrap().push((Instant::now(), None));
    }

    pub fn squeeze_end(&self) {
        if let Some(w) = self.squeezes.lock().unwrap().last_mut() {
            w.1 = Some(Instant::now());
        }
    }

    /// Whether [from, to] overlaps a squeeze (plus `slack` after it).
    pub fn squeezed_between(&self, from: Instant, to: Instant, slack: Duration) -> bool {
        self.squeezes
            .lock()
            .unwrap()
            .iter()
            .any(|(s, e)| from <= e.map_or(to, |e| e + slack) && to >= *s)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.life.lock().unwrap().child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn tail(p: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
