//! The fault injector: a schedule drawn from the seed before the run (and
//! printed), carried out against whatever runs when each fault is due.
//! Task faults claim one running target task in the ledger before the
//! signal goes, so the judge knows what was done to it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ledger::{IdleFault, Kind, TaskFault};
use crate::load::Env;
use crate::procs::{self, Held, Proc};
use crate::rng::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    KillWorker,
    StopWorkerShort,
    StopWorkerLong,
    KillProgram,
    StopProgram,
    KillChild,
    StopChild,
    SqueezeMemory,
    KillForkServer,
    StopForkServerShort,
    StopForkServerAtDeadline,
    StopForkServerLong,
    KillIdleWorker,
    StopIdleWorkerShort,
    StopIdleWorkerLong,
    SqueezeNofile,
    KillDaemon,
}

pub const ALL: &[Fault] = &[
    Fault::KillWorker,
    Fault::StopWorkerShort,
    Fault::StopWorkerLong,
    Fault::KillProgram,
    Fault::StopProgram,
    Fault::KillChild,
    Fault::StopChild,
    Fault::SqueezeMemory,
    Fault::KillForkServer,
    Fault::StopForkServerShort,
    Fault::StopForkServerAtDeadline,
    Fault::StopForkServerLong,
    Fault::KillIdleWorker,
    Fault::StopIdleWorkerShort,
    Fault::StopIdleWorkerLong,
    Fault::SqueezeNofile,
    Fault::KillDaemon,
];

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillWorker => "kill-worker",
            Fault::StopWorkerShort => "stop-worker-short",
            Fault::StopWorkerLong => "stop-worker-long",
            Fault::KillProgram => "kill-program",
            Fault::StopProgram => "stop-program",
            Fault::KillChild => "kill-child",
            Fault::StopChild => "stop-child",
            Fault::SqueezeMemory => "squeeze-memory",
            Fault::KillForkServer => "kill-forkserver",
            Fault::StopForkServerShort => "stop-forkserver-short",
            Fault::StopForkServerAtDeadline => "stop-forkserver-at-deadline",
            Fault::StopForkServerLong => "stop-forkserver-long",
            Fault::KillIdleWorker => "kill-idle-worker",
            Fault::StopIdleWorkerShort => "stop-idle-worker-short",
            Fault::StopIdleWorkerLong => "stop-idle-worker-long",
            Fault::SqueezeNofile => "squeeze-nofile",
            Fault::KillDaemon => "kill-daemon",
        }
    }

    /// How long a stop or a squeeze holds (ms range), given the daemon's
    /// ping interval and stall timeout.
    fn hold_ms(self, ping_ms: u64, stall_ms: u64) -> (u64, u64) {
        match self {
            // Well inside one stall timeout: the worker must come back unharmed.
            Fault::StopWorkerShort => (150, stall_ms / 3),
            // Past a ping and a whole stall timeout: the task must stall.
            Fault::StopWorkerLong => (ping_ms + stall_ms + 1500, ping_ms + stall_ms + 2000),
            Fault::StopProgram | Fault::StopChild => (300, 2000),
            Fault::StopForkServerShort => (200, 800),
            // Just under, at and just over agentd's own answer deadline
            // (FORK_ANSWER_MS, 1 s): a worker made before the stop is
            // adopted, not killed; no task may fail for it.
            Fault::StopForkServerAtDeadline => (950, 1051),
            // Longer than the probe waits for an answer: a task must not wait
            // on a stopped helper.
            Fault::StopForkServerLong => (12_000, 15_000),
            // An idle worker may be handed a task while it is stopped: short,
            // the task only waits; long, past a ping and a stall timeout.
            Fault::StopIdleWorkerShort => (200, stall_ms / 3),
            Fault::StopIdleWorkerLong => (ping_ms + stall_ms + 1500, ping_ms + stall_ms + 3000),
            Fault::SqueezeNofile => (300, 1500),
            Fault::SqueezeMemory => (4000, 4001),
            _ => (0, 1),
        }
    }

    fn weight(self) -> u32 {
        match self {
            Fault::KillDaemon => 0,
            Fault::StopWorkerLong | Fault::StopForkServerLong | Fault::StopIdleWorkerLong => 4,
            Fault::SqueezeMemory | Fault::SqueezeNofile => 6,
            _ => 8,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Planned {
    pub at: Duration,
    pub fault: Fault,
    pub hold: Duration,
}

/// The least a run must apply of a kind it planned `planned` times: half,
/// and at least one (a kind that never found a victim broke nothing).
pub fn floor(planned: u64) -> u64 {
    (planned / 2).max(1)
}

/// How many of each kind a plan holds.
pub fn planned_per_kind(plan: &[Planned]) -> BTreeMap<Fault, u64> {
    let mut out = BTreeMap::new();
    for p in plan {
        *out.entry(p.fault).or_default() += 1;
    }
    out
}

/// The run's faults: every kind not skipped at least once (shuffled), then
/// more drawn by weight; the daemon killed once per ten minutes (once in a
/// shorter run), away from the run's ends.
pub fn schedule(seed: u64, secs: u64, skip: &[Fault], ping_ms: u64, stall_ms: u64) -> Vec<Planned> {
    let mut rng = Rng::stream(seed, 0xFA17);
    let kinds: Vec<Fault> = ALL
        .iter()
        .copied()
        .filter(|f| *f != Fault::KillDaemon && !skip.contains(f))
        .collect();
    let mut first = kinds.clone();
    rng.shuffle(&mut first);
    let weighted: Vec<(Fault, u32)> = kinds.iter().map(|f| (*f, f.weight())).collect();
    // Short runs need every kind in; long ones spread out.
    let gap_ms = if secs <= 120 { 1000 } else { 2000 };
    let end_ms = secs * 1000 - secs * 1000 / 8;
    let mut out = Vec::new();
    let mut at = 1500;
    let mut queue = first.into_iter();
    while at < end_ms && !weighted.is_empty() {
        let fault = queue.next().unwrap_or_else(|| rng.weighted(&weighted));
        let (lo, hi) = fault.hold_ms(ping_ms, stall_ms);
        out.push(Planned {
            at: Duration::from_millis(at),
            fault,
            hold: Duration::from_millis(rng.range(lo, hi)),
        });
        at += rng.range(gap_ms / 2, gap_ms * 3 / 2);
    }
    if !skip.contains(&Fault::KillDaemon) {
        let kills = (secs / 600).max(1);
        for k in 0..kills {
            let slot = secs * 1000 / kills;
            let at = k * slot + slot / 2 + rng.range(0, slot / 10);
            out.push(Planned {
                at: Duration::from_millis(at),
                fault: Fault::KillDaemon,
                hold: Duration::ZERO,
            });
        }
    }
    out.sort_by_key(|p| p.at);
    out
}

/// The schedule as printed at the start: a few entries a line.
pub fn describe(plan: &[Planned]) -> String {
    let items: Vec<String> = plan
        .iter()
        .map(|p| {
            if p.hold.is_zero() {
                format!("{:.1}s {}", p.at.as_secs_f64(), p.fault.name())
            } else {
                format!(
                    "{:.1}s {}({}ms)",
                    p.at.as_secs_f64(),
                    p.fault.name(),
                    p.hold.as_millis()
                )
            }
        })
        .collect();
    items
        .chunks(6)
        .map(|c| format!("    {}", c.join(", ")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Something to undo once its time comes.
enum Undo {
    /// SIGCONT; an `exclusive` stop (a long one) is not cut short by
    /// another fault on the same process, so its effect is seen whole.
    Resume {
        held: Held,
        what: &'static str,
        exclusive: bool,
    },
    Nofile {
        pid: i32,
        old: (u64, u64),
    },
    Memory {
        file: PathBuf,
        old: String,
        victim: Held,
    },
}

pub struct Injector {
    env: Arc<Env>,
    rng: Rng,
    pending: Vec<(Instant, Undo)>,
    log: Vec<String>,
    verbose: bool,
    /// Per kind: (planned, applied), for the floor.
    tally: BTreeMap<Fault, (u64, u64)>,
    /// The checks after each restart, which wait on their own while the
    /// schedule goes on.
    after_restarts: Vec<std::thread::JoinHandle<()>>,
}

impl Injector {
    pub fn new(env: Arc<Env>, seed: u64, verbose: bool) -> Injector {
        Injector {
            env,
            rng: Rng::stream(seed, 0x1417),
            pending: Vec::new(),
            log: Vec::new(),
            verbose,
            tally: BTreeMap::new(),
            after_restarts: Vec::new(),
        }
    }

    /// Whether `fault`'s kind is still under its floor: a fault of it that
    /// found no victim in time is armed again, while the load runs.
    fn under_floor(&self, fault: Fault) -> bool {
        self.tally
            .get(&fault)
            .is_some_and(|(planned, applied)| *applied < floor(*planned))
    }

    /// Carries out `plan` (times from the run's start), then undoes
    /// whatever is still held. A fault that needs a victim (a task, a
    /// helper) is armed when due and fires at the first one that fits,
    /// within a few seconds; meanwhile the schedule goes on. Returns the
    /// log of what was done.
    pub fn run(mut self, plan: Vec<Planned>) -> Vec<String> {
        for (f, n) in planned_per_kind(&plan) {
            self.tally.insert(f, (n, 0));
        }
        let start = self.env.ledger.start;
        let mut plan = plan.into_iter().peekable();
        let mut armed: Vec<(Planned, Instant)> = Vec::new();
        let mut last_try = Instant::now();
        while !self.env.stopping() && (plan.peek().is_some() || !armed.is_empty() || !self.pending.is_empty()) {
            while let Some(p) = plan.next_if(|p| Instant::now() >= start + p.at) {
                match p.fault {
                    Fault::SqueezeNofile => {
                        let r = self.apply_now(&p);
                        self.outcome(p.fault, r);
                    }
                    // A kill waits (a little) for a task in flight: what
                    // the restart must not know needs a task to be lost.
                    Fault::KillDaemon => armed.push((p, Instant::now() + Duration::from_secs(5))),
                    Fault::SqueezeMemory => armed.push((p, Instant::now() + Duration::from_secs(10))),
                    _ => armed.push((p, Instant::now() + Duration::from_secs(3))),
                }
            }
            if !armed.is_empty() && last_try.elapsed() >= Duration::from_millis(100) {
                last_try = Instant::now();
                let table = procs::scan();
                let mut still = Vec::new();
                for (p, until) in std::mem::take(&mut armed) {
                    if p.fault == Fault::KillDaemon {
                        if self.task_in_flight() || Instant::now() > until {
                            let r = self.apply_now(&p);
                            self.outcome(p.fault, r);
                        } else {
                            still.push((p, until));
                        }
                        continue;
                    }
                    match self.try_armed(&table, &p) {
                        Some(what) => self.outcome(p.fault, Ok(what)),
                        None if Instant::now() > until => {
                            let again = self.under_floor(p.fault) && !self.env.stopping();
                            self.outcome(p.fault, Err("nothing to aim at in time".into()));
                            if again {
                                still.push((p, Instant::now() + Duration::from_secs(3)));
                            }
                        }
                        None => still.push((p, until)),
                    }
                }
                armed = still;
            }
            self.undo_due(false);
            std::thread::sleep(Duration::from_millis(20));
        }
        // What is held runs its course: a stop or a squeeze cut short
        // would not do what the ledger says was done.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.pending.is_empty() && Instant::now() < deadline {
            self.undo_due(false);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.undo_due(true);
        for h in self.after_restarts.drain(..) {
            h.join().expect("the checks after a restart panicked");
        }
        self.log
    }

    /// Whether a task of the serving daemon is running, its id known.
    fn task_in_flight(&self) -> bool {
        self.env
            .daemon
            .current()
            .is_some_and(|(epoch, _)| self.env.ledger.open_in_epoch(epoch).iter().any(|(_, t)| t.is_some()))
    }

    fn outcome(&mut self, fault: Fault, r: Result<String, String>) {
        let name = fault.name();
        match r {
            Ok(what) => {
                if let Some((_, applied)) = self.tally.get_mut(&fault) {
                    *applied += 1;
                }
                self.env.ledger.count(&format!("fault.{name}"));
                self.note(format!("t={:.1}s {name}: {what}", self.env.ledger.t()));
            }
            Err(why) => {
                self.env.ledger.count(&format!("fault.{name}.no_target"));
                self.note(format!("t={:.1}s {name}: skipped ({why})", self.env.ledger.t()));
            }
        }
    }

    fn note(&mut self, line: String) {
        if self.verbose {
            eprintln!("chaos: {line}");
        }
        self.log.push(line);
    }

    /// Undoes what is due (or everything).
    fn undo_due(&mut self, all: bool) {
        let now = Instant::now();
        let mut keep = Vec::new();
        for (at, undo) in std::mem::take(&mut self.pending) {
            let due = all || at <= now || matches!(&undo, Undo::Memory { victim, .. } if victim.exited());
            if !due {
                keep.push((at, undo));
                continue;
            }
            match undo {
                Undo::Resume { held, what, .. } => {
                    if held.signal(libc::SIGCONT).is_ok() {
                        self.log
                            .push(format!("t={:.1}s SIGCONT {what} pid={}", self.env.ledger.t(), held.pid));
                    }
                }
                Undo::Nofile { pid, old } => {
                    if self.env.daemon.current().is_some_and(|(_, p)| p == pid) {
                        let _ = procs::set_nofile(pid, old.0, old.1);
                    }
                    self.env.daemon.squeeze_end();
                }
                Undo::Memory { file, old, .. } => {
                    let _ = std::fs::write(&file, old.trim());
                }
            }
        }
        self.pending = keep;
    }

    fn apply_now(&mut self, p: &Planned) -> Result<String, String> {
        let Some((_, daemon)) = self.env.daemon.wait_up(Duration::from_secs(10)) else {
            return Err("the daemon is down".into());
        };
        match p.fault {
            Fault::SqueezeNofile => self.squeeze_nofile(daemon, p.hold),
            _ => self.kill_daemon(),
        }
    }

    /// One try at an armed fault against this scan.
    fn try_armed(&mut self, table: &HashMap<i32, Proc>, p: &Planned) -> Option<String> {
        let (_, daemon) = self.env.daemon.current()?;
        let fault = match p.fault {
            Fault::KillWorker => Some(TaskFault::KillWorker),
            Fault::StopWorkerShort => Some(TaskFault::StopWorker { long: false }),
            Fault::StopWorkerLong => Some(TaskFault::StopWorker { long: true }),
            Fault::KillProgram => Some(TaskFault::KillProgram),
            Fault::StopProgram => Some(TaskFault::StopProgram),
            Fault::KillChild => Some(TaskFault::KillChild),
            Fault::StopChild => Some(TaskFault::StopChild),
            Fault::SqueezeMemory => Some(TaskFault::SqueezeMemory),
            _ => None,
        };
        if let Some(fault) = fault {
            return self.task_fault(table, fault, p.hold);
        }
        let (comm, sig) = match p.fault {
            Fault::KillForkServer => ("agentd-fork", libc::SIGKILL),
            Fault::StopForkServerShort | Fault::StopForkServerAtDeadline | Fault::StopForkServerLong => {
                ("agentd-fork", libc::SIGSTOP)
            }
            Fault::KillIdleWorker => ("agentd-idle", libc::SIGKILL),
            _ => ("agentd-idle", libc::SIGSTOP),
        };
        let long = matches!(p.fault, Fault::StopForkServerLong | Fault::StopIdleWorkerLong);
        self.helper(table, daemon, comm, sig, p.hold, long)
    }

    /// SIGKILLs or SIGSTOPs one of agentd's own helpers.
    fn helper(
        &mut self,
        table: &HashMap<i32, Proc>,
        daemon: i32,
        comm: &'static str,
        sig: i32,
        hold: Duration,
        long: bool,
    ) -> Option<String> {
        let held_long: Vec<i32> = self
            .pending
            .iter()
            .filter_map(|(_, u)| match u {
                Undo::Resume {
                    held, exclusive: true, ..
                } => Some(held.pid),
                _ => None,
            })
            .collect();
        let mut found: Vec<&Proc> = procs::children(table, daemon)
            .filter(|p| p.comm == comm && p.state != 'Z' && !held_long.contains(&p.pid))
            .collect();
        if found.is_empty() {
            return None;
        }
        found.sort_by_key(|p| p.pid);
        let p = *self.rng.pick(&found);
        let held = Held::open(p)?;
        held.signal(sig).ok()?;
        if comm == "agentd-idle" && (sig == libc::SIGKILL || long) {
            let what = if sig == libc::SIGKILL {
                IdleFault::Kill
            } else {
                IdleFault::StopLong
            };
            self.env.ledger.idle_worker_fault(p.pid, what);
        }
        let what = if sig == libc::SIGSTOP {
            let resume = Undo::Resume {
                held,
                what: comm,
                exclusive: long,
            };
            self.pending.push((Instant::now() + hold, resume));
            "SIGSTOP"
        } else {
            "SIGKILL"
        };
        Some(format!("{what} {comm} pid={}", p.pid))
    }

    /// One fault on one running target task, if one fits now.
    fn task_fault(&mut self, table: &HashMap<i32, Proc>, fault: TaskFault, hold: Duration) -> Option<String> {
        // A squeeze must come while the task still grows (it doubles its
        // memory every 0.6 s until 2.4 s in): at least two doublings left.
        let margin = Duration::from_millis(if fault == TaskFault::SqueezeMemory { 2000 } else { 1200 });
        let mut targets: Vec<(String, Kind)> = self
            .env
            .ledger
            .open_targets(margin)
            .into_iter()
            .filter(|(_, k)| match fault {
                TaskFault::KillChild | TaskFault::StopChild => matches!(k, Kind::Sleep | Kind::Child),
                TaskFault::SqueezeMemory => *k == Kind::Grow,
                _ => true,
            })
            .collect();
        targets.sort();
        self.rng.shuffle(&mut targets);
        for (ctx, kind) in &targets {
            if let Some(done) = self.try_target(table, ctx, *kind, fault, hold) {
                return Some(done);
            }
        }
        // None fits: the next blocking task is one that will. (A short run
        // sends three or so `grow` tasks, each a target for a second: left
        // to chance, a squeeze would now and then find none at all.)
        self.env.want(if fault == TaskFault::SqueezeMemory {
            Kind::Grow
        } else {
            Kind::Sleep
        });
        None
    }

    fn try_target(
        &mut self,
        table: &HashMap<i32, Proc>,
        ctx: &str,
        kind: Kind,
        fault: TaskFault,
        hold: Duration,
    ) -> Option<String> {
        // The agent wrote "pid start" under its contextId when it began.
        let line = std::fs::read_to_string(self.env.pids.join(ctx)).ok()?;
        let mut f = line.split_whitespace();
        let (pid, start): (i32, u64) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?);
        let program = table.get(&pid).filter(|p| p.start == start && p.state != 'Z')?;
        let worker = table.get(&program.ppid).filter(|w| w.comm == "agentd-task")?;
        let victim = match fault {
            TaskFault::KillWorker | TaskFault::StopWorker { .. } => worker,
            TaskFault::KillProgram | TaskFault::StopProgram | TaskFault::SqueezeMemory => program,
            TaskFault::KillChild | TaskFault::StopChild => procs::children(table, program.pid)
                .find(|c| c.comm == "sleep" && c.pgid == program.pgid && c.state != 'Z')?,
        };
        if !self.env.ledger.claim(ctx, fault) {
            return None;
        }
        let Some(held) = Held::open(victim) else {
            self.env.ledger.unclaim(ctx);
            return None;
        };
        let what = format!("{fault:?} ctx={ctx} ({kind:?}) pid={} ({})", victim.pid, victim.comm);
        let sent = match fault {
            TaskFault::KillWorker | TaskFault::KillProgram | TaskFault::KillChild => held.signal(libc::SIGKILL),
            TaskFault::StopWorker { .. } | TaskFault::StopProgram | TaskFault::StopChild => {
                let r = held.signal(libc::SIGSTOP);
                if r.is_ok() {
                    let resume = Undo::Resume {
                        held,
                        what: "task process",
                        exclusive: false,
                    };
                    self.pending.push((Instant::now() + hold, resume));
                }
                r
            }
            TaskFault::SqueezeMemory => match squeeze_memory(victim.pid) {
                Ok((file, old)) => {
                    self.pending.push((
                        Instant::now() + hold,
                        Undo::Memory {
                            file,
                            old,
                            victim: held,
                        },
                    ));
                    Ok(())
                }
                Err(e) => Err(e),
            },
        };
        match sent {
            Ok(()) => Some(what),
            Err(_) => {
                self.env.ledger.unclaim(ctx);
                None
            }
        }
    }

    /// The daemon's RLIMIT_NOFILE down to its lowest free fd number (and
    /// 0–2 more): it can open nothing more, or a fd or two.
    fn squeeze_nofile(&mut self, daemon: i32, hold: Duration) -> Result<String, String> {
        let (_, fds, _) = procs::threads_fds_rss(daemon).ok_or("daemon gone")?;
        // A squeeze that comes while one is held takes it over: the limit to
        // restore is the one from before the first (the daemon's limit now is
        // the squeezed one, and restoring that would squeeze it for good), and
        // it is restored once, when the later of the two ends.
        let mut until = Instant::now() + hold;
        let held = self
            .pending
            .iter()
            .position(|(_, u)| matches!(u, Undo::Nofile { pid, .. } if *pid == daemon));
        let old = match held.map(|i| self.pending.remove(i)) {
            Some((at, Undo::Nofile { old, .. })) => {
                until = until.max(at);
                self.env.daemon.squeeze_end();
                old
            }
            _ => procs::nofile(daemon).map_err(|e| e.to_string())?,
        };
        let soft = procs::lowest_free_fd(daemon) + self.rng.range(0, 3);
        self.env.daemon.squeeze_begin();
        if let Err(e) = procs::set_nofile(daemon, soft, old.1) {
            let _ = procs::set_nofile(daemon, old.0, old.1);
            self.env.daemon.squeeze_end();
            return Err(format!("prlimit: {e}"));
        }
        self.pending.push((until, Undo::Nofile { pid: daemon, old }));
        Ok(format!(
            "RLIMIT_NOFILE {} → {soft} ({fds} open) until {:?} from now",
            old.0,
            until - Instant::now()
        ))
    }

    /// kill -9 of the daemon and its restart (restart.rs); the checks
    /// after the restart go on beside the schedule.
    fn kill_daemon(&mut self) -> Result<String, String> {
        // Whatever is held belongs to the daemon about to die.
        self.undo_due(true);
        let (what, checks) = crate::restart::kill_and_restart(self.env.clone())?;
        self.after_restarts.push(checks);
        Ok(what)
    }
}

/// Lowers a task's memory limit to what it uses now plus 1 MiB; returns the
/// limit file and the limit it had.
fn squeeze_memory(pid: i32) -> std::io::Result<(PathBuf, String)> {
    let (limit, usage) = procs::memory_limit_file(pid).ok_or_else(|| std::io::Error::other("no memory cgroup"))?;
    let old = std::fs::read_to_string(&limit)?;
    let used: u64 = std::fs::read_to_string(&usage)?
        .trim()
        .parse()
        .map_err(|_| std::io::Error::other("bad usage"))?;
    std::fs::write(&limit, (used + (1 << 20)).to_string())?;
    Ok((limit, old))
}
