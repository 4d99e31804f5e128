//! The monitor: every half second it samples the daemon from outside —
//! threads, fds, RSS; zombies; processes of ended tasks; agentd's helpers —
//! and every two seconds checks /metrics against what clients have seen.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
}

/// How long a zombie or an escapee must be seen before it counts.
const LINGER: Duration = Duration::from_millis(1000);

impl Watch {
    pub fn new(env: Arc<Env>, run_id: String) -> Watch {
        Watch {
            env,
            run_id,
            samples: Vec::new(),
            ticks: VecDeque::new(),
            reported: HashSet::new(),
            no_idle_since: None,
            no_idle_reported: false,
            most_transient_zombies: 0,
        }
    }

    pub fn run(mut self, stop: Arc<AtomicBool>) -> (Vec<Sample>, usize) {
        let mut last_metrics = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            self.tick();
            if last_metrics.elapsed() > Duration::from_secs(2) {
                self.metrics_lower_bound();
                last_metrics = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        (self.samples, self.most_transient_zombies)
    }

    fn tick(&mut self) {
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
        let zombies: HashSet<(i32, u64)> = procs::children(&table, pid)
            .filter(|p| p.state == 'Z')
            .map(|p| (p.pid, p.start))
            .collect();
        self.most_transient_zombies = self.most_transient_zombies.max(zombies.len());
        let escapes = self.escapes(&table, pid);
        let mut forks: Vec<(i32, u64)> = procs::children(&table, pid)
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
        let seen = env.ledger.seen_in_epoch(epoch);
        let Ok(resp) = http::get(&env.daemon.socket, "/metrics", Duration::from_secs(10)) else {
            return;
        };
        if env.daemon.epoch() != epoch || env.daemon.current().is_none() {
            return;
        }
        let totals = http::ended_totals(&resp.text());
        for (key, n) in &seen {
            let m = totals.get(key).copied().unwrap_or(0);
            if m < *n {
                env.ledger.violation(
                    "violation.metrics_undercount",
                    format!("epoch {epoch}: clients saw {n} tasks end {key}, /metrics counted {m}"),
                );
            }
        }
    }
}
