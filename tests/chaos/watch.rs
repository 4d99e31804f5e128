//! The monitor: every half second it samples the daemon from outside —
//! threads, fds, RSS; zombies; processes of ended tasks; agentd's helpers —
//! and every two seconds checks /metrics against what clients have seen.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::breaks;
use crate::http;
use crate::load::Env;
use crate::procs;

#[derive(Clone, Debug)]
pub struct Sample {
    pub t: f64,
    pub epoch: u32,
    pub threads: usize,
    pub fds: usize,
    pub rss_kb: u64,
    pub workers: usize,
}

/// What one tick found, kept for the next ticks' comparisons.
struct Tick {
    at: Instant,
    zombies: HashSet<(i32, u64)>,
    escapes: HashMap<(i32, u64), String>,
    /// Fork servers, when more than one (a worker just forked carries the
    /// fork server's name for a moment).
    forks: Vec<(i32, u64)>,
}

pub struct Watch {
    env: Arc<Env>,
    run_id: String,
    samples: Vec<Sample>,
    ticks: VecDeque<Tick>,
    reported: HashSet<(i32, u64)>,
    no_idle_since: Option<Instant>,
    no_idle_reported: bool,
    pub most_transient_zombies: usize,
    /// What the breaks hold (see breaks.rs): processes of the soak's own,
    /// idle connections to the daemon.
    planted: Vec<Child>,
    zombie: Option<Child>,
    fork: Option<Child>,
    held: Vec<UnixStream>,
    held_until: Option<Instant>,
    /// The growth break's leak: the epoch it leaks into, when that daemon
    /// grew warm (seconds into the run), the connections it holds.
    life: (u32, Option<f64>),
    held_for_growth: Vec<UnixStream>,
    /// Threads the daemon may have (resource_bound's bound).
    thread_bound: usize,
}

/// How long a zombie or an escapee must be seen before it counts.
const LINGER: Duration = Duration::from_millis(1000);

impl Watch {
    pub fn new(env: Arc<Env>, run_id: String, thread_bound: usize) -> Watch {
        Watch {
            env,
            run_id,
            samples: Vec::new(),
            ticks: VecDeque::new(),
            reported: HashSet::new(),
            no_idle_since: None,
            no_idle_reported: false,
            most_transient_zombies: 0,
            planted: Vec::new(),
            zombie: None,
            fork: None,
            held: Vec::new(),
            held_until: None,
            life: (0, None),
            held_for_growth: Vec::new(),
            thread_bound,
        }
    }

    pub fn run(mut self, stop: Arc<AtomicBool>) -> (Vec<Sample>, usize) {
        let mut last_metrics = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            self.tick();
            self.breaks();
            if last_metrics.elapsed() > Duration::from_secs(2) {
                self.metrics_lower_bound();
                last_metrics = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        for c in self.planted.drain(..).chain(self.zombie.take()).chain(self.fork.take()) {
            breaks::end(c);
        }
        (self.samples, self.most_transient_zombies)
    }

    /// The monitor's part of the breaks: each done where the monitor looks.
    fn breaks(&mut self) {
        let env = self.env.clone();
        let Some((epoch, _)) = env.daemon.current() else {
            return;
        };
        let t = env.ledger.t();
        let quiet =
            !env.daemon
                .squeezed_between(Instant::now() - Duration::from_secs(2), Instant::now(), Duration::ZERO);
        if t > 2.0 && env.breaks.take("escaped_process") {
            // Marked as the run's agent, and under no daemon.
            if let Ok(c) = Command::new("sleep")
                .arg("3")
                .env("CHAOS_RUN", &self.run_id)
                .stdout(Stdio::null())
                .spawn()
            {
                self.planted.push(c);
            }
        }
        if t > 2.0 && env.breaks.take("zombie") {
            self.zombie = Command::new("true").spawn().ok();
        }
        if let Some(until) = self.held_until {
            if Instant::now() > until {
                self.held.clear();
                self.held_until = None;
            }
        } else if t > 3.0 && quiet && env.break_pending("resource_bound") {
            self.held = breaks::hold_connections(&env.daemon.socket, self.thread_bound + 8);
            self.held_until = Some(Instant::now() + Duration::from_secs(3));
        }
        // A leak, from when the daemon is warm (its growth is judged from
        // then): one more idle connection held every second, to the end of
        // the life or of the load (the daemon at rest is judged on its
        // own). A leak slower than the daemon's own swings may not show
        // against its second quarter in a warm life of a minute or two.
        if self.life.0 != epoch || env.stopping() {
            self.life = (epoch, None);
            self.held_for_growth.clear();
        }
        if env.breaks.asked("resource_growth") && !env.stopping() {
            if self.life.1.is_none() {
                self.life.1 = env.ledger.nth_end(epoch, crate::judge::RETAIN_MAX);
            }
            let leaked = self.life.1.map_or(0, |warm| (t - warm).max(0.0) as usize).min(256);
            if leaked > self.held_for_growth.len() {
                let more = breaks::hold_connections(&env.daemon.socket, leaked - self.held_for_growth.len());
                self.held_for_growth.extend(more);
            }
        }
        if t > 2.0 && env.breaks.take("helper_pool") {
            // A second fork server, by its name.
            let dir = env.pids.parent().unwrap_or(&env.pids).to_path_buf();
            self.fork = breaks::start_named(&dir, "agentd-fork", "/bin/sleep", &["3"], &[]);
        }
        self.planted.retain_mut(|c| c.try_wait().ok().flatten().is_none());
        let zombie = self.zombie.as_ref().map(|c| c.id() as i32);
        if zombie.is_some_and(|z| self.reported.iter().any(|(p, _)| *p == z)) {
            breaks::end(self.zombie.take().unwrap());
        }
    }

    pub fn tick(&mut self) {
        let env = self.env.clone();
        if let Some(status) = env.daemon.died() {
            env.ledger.violation(
                "violation.daemon_died",
                format!(
                    "agentd exited on its own ({status}); log tail:\n{}",
                    env.daemon.log_tail(40)
                ),
            );
            if let Err(e) = env.daemon.start() {
                env.ledger
                    .violation("violation.daemon_died", format!("and could not be restarted: {e}"));
            }
            return;
        }
        let Some((epoch, pid)) = env.daemon.current() else {
            self.ticks.clear();
            return;
        };
        let table = procs::scan();
        if let Some((threads, fds, rss_kb)) = procs::threads_fds_rss(pid) {
            let workers = procs::children(&table, pid).filter(|p| p.comm == "agentd-task").count();
            self.samples.push(Sample {
                t: env.ledger.t(),
                epoch,
                threads,
                fds,
                rss_kb,
                workers,
            });
        }
        let now = Instant::now();
        for name in ["zombie", "escaped_process", "helper_pool", "daemon_died"] {
            env.ledger.judged(&format!("violation.{name}"), 1);
        }
        // The zombie break: a child of the soak's own, unreaped, counted
        // among the daemon's.
        let planted = self.zombie.as_ref().map(|c| c.id() as i32);
        let zombies: HashSet<(i32, u64)> = procs::children(&table, pid)
            .chain(planted.and_then(|p| table.get(&p)))
            .filter(|p| p.state == 'Z')
            .map(|p| (p.pid, p.start))
            .collect();
        self.most_transient_zombies = self.most_transient_zombies.max(zombies.len());
        let escapes = self.escapes(&table, pid);
        let fork = self.fork.as_ref().map(|c| c.id() as i32);
        let mut forks: Vec<(i32, u64)> = procs::children(&table, pid)
            .chain(fork.and_then(|p| table.get(&p)))
            .filter(|p| p.comm == "agentd-fork" && p.state != 'Z')
            .map(|p| (p.pid, p.start))
            .collect();
        forks.sort();
        if forks.len() < 2 {
            forks.clear();
        }
        // Compared with the newest tick at least LINGER old.
        if let Some(old) = self.ticks.iter().rev().find(|t| now - t.at >= LINGER) {
            for z in zombies.intersection(&old.zombies) {
                if self.reported.insert(*z) {
                    env.ledger.violation(
                        "violation.zombie",
                        format!("pid {} (child of agentd {pid}) is a zombie for over {LINGER:?}", z.0),
                    );
                }
            }
            for (p, why) in &escapes {
                if old.escapes.contains_key(p) && self.reported.insert(*p) {
                    env.ledger.violation(
                        "violation.escaped_process",
                        format!("pid {}: {why} (seen for over {LINGER:?}): {:?}", p.0, table.get(&p.0)),
                    );
                }
            }
            if !forks.is_empty() && forks == old.forks {
                env.ledger.violation(
                    "violation.helper_pool",
                    format!(
                        "{} fork servers under agentd {pid} for over {LINGER:?}: {forks:?}",
                        forks.len()
                    ),
                );
            }
        }
        self.ticks.push_back(Tick {
            at: now,
            zombies,
            escapes,
            forks,
        });
        while self.ticks.len() > 6 {
            self.ticks.pop_front();
        }
        self.helpers(&table, pid);
    }

    /// Processes of the soak's agent (marked CHAOS_RUN in their environment)
    /// that should not be there: under no worker of the live daemon, or of
    /// a task that ended.
    fn escapes(&self, table: &HashMap<i32, procs::Proc>, daemon: i32) -> HashMap<(i32, u64), String> {
        let mut out = HashMap::new();
        let ended_before = Instant::now() - Duration::from_millis(1500);
        for p in table.values() {
            if p.state == 'Z' || !matches!(p.comm.as_str(), "agent.sh" | "sleep" | "sh") {
                continue;
            }
            if procs::env_var(p.pid, "CHAOS_RUN").as_deref() != Some(self.run_id.as_str()) {
                continue;
            }
            let why = if !procs::descends(table, p.pid, daemon) {
                Some(format!("a task process outside agentd {daemon}"))
            } else if let Some(ctx) = procs::env_var(p.pid, "CHAOS_CTX") {
                self.env
                    .ledger
                    .ended_before(&ctx, ended_before)
                    .then(|| format!("a process of task ctx={ctx}, which ended over 1.5 s ago"))
            } else if table.get(&p.ppid).is_none_or(|w| w.comm != "agentd-task") {
                Some("an agent program under no task worker".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                out.insert((p.pid, p.start), why);
            }
        }
        out
    }

    /// agentd keeps one fork server at most, and (tasks.prespawn auto) at
    /// least one idle worker: none for 10 s outside an fd squeeze is a pool
    /// that was not refilled. Where agentd hands tasks to their workers at
    /// birth (no v1 cgroup: isolation cgroup2 or subreaper only), `auto`
    /// refills only when no task runs: there, 10 s with no idle worker and
    /// no task worker either.
    fn helpers(&mut self, table: &HashMap<i32, procs::Proc>, daemon: i32) {
        let live = |comm: &str| {
            procs::children(table, daemon)
                .filter(|p| p.comm == comm && p.state != 'Z')
                .count()
        };
        let iso = self.env.daemon.isolation();
        let hands_at_birth = iso == "process-group+cgroup2" || iso == "process-group+subreaper";
        if live("agentd-idle") > 0 || (hands_at_birth && live("agentd-task") > 0) {
            self.no_idle_since = None;
            self.no_idle_reported = false;
            return;
        }
        let since = *self.no_idle_since.get_or_insert_with(Instant::now);
        let squeezed = self.env.daemon.squeezed_between(since, Instant::now(), Duration::ZERO);
        if since.elapsed() > Duration::from_secs(10) && !squeezed && !self.no_idle_reported {
            self.no_idle_reported = true;
            self.env.ledger.violation(
                "violation.helper_pool",
                format!("no idle worker under agentd {daemon} for 10 s (tasks.prespawn=auto keeps one)"),
            );
        }
    }

    /// Every task a client saw end in this epoch must be counted already
    /// in agentd_tasks_ended_total.
    fn metrics_lower_bound(&self) {
        let env = &self.env;
        let Some((epoch, _)) = env.daemon.current() else { return };
        // The break: an end no daemon gave, under an outcome none gives.
        let phantom = env
            .breaks
            .take("metrics_undercount")
            .then(|| breaks::phantom_end(env, epoch, "COMPLETED", "phantom"));
        let seen = env.ledger.seen_in_epoch(epoch);
        if let Some(ctx) = phantom {
            env.ledger.forget(&ctx);
        }
        let Ok(resp) = http::get(&env.daemon.socket, "/metrics", Duration::from_secs(10)) else {
            return;
        };
        if env.daemon.epoch() != epoch || env.daemon.current().is_none() {
            return;
        }
        crate::judge::judge_undercount(&env.ledger, epoch, &http::ended_totals(&resp.text()), &seen);
    }
}
