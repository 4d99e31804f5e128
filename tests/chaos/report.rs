//! The report a run prints: what it sent and broke, what came of it, and
//! each invariant with its violations and how much it judged — or, where a
//! run this short cannot judge it, why not (never a bare 0).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::judge::{percentile, Bounds, Tally};
use crate::ledger::{self, Ledger};
use crate::watch::Sample;

pub struct Report<'a> {
    /// The first line's settings: seed, seconds, clients.
    pub head: String,
    pub ledger: &'a Ledger,
    pub tally: Tally,
    pub probe: Vec<Duration>,
    pub probe_bound: Duration,
    pub samples: Vec<Sample>,
    pub transient_zombies: usize,
    pub bounds: Bounds,
    pub base: (usize, usize, u64),
    pub end: (usize, usize, u64),
    pub faults: Vec<String>,
    /// Each daemon life: epoch and how long it served.
    pub lives: Vec<(u32, Duration)>,
    /// Invariants this run cannot judge, and why.
    pub unjudgeable: BTreeMap<&'static str, String>,
    pub clients_done_in: Duration,
    pub total: Duration,
    pub print_fault_log: bool,
}

impl Report<'_> {
    pub fn print(&self) {
        let c = self.ledger.counters();
        let judged = self.ledger.judged_counts();
        let t = &self.tally;
        let mut out = String::new();
        let mut line = |l: String| {
            out.push_str(&l);
            out.push('\n');
        };
        line(format!(
            "chaos report: {}, total {:.1?} (clients done {:.1?} after the end)",
            self.head, self.total, self.clients_done_in
        ));
        let lives: Vec<String> = self
            .lives
            .iter()
            .map(|(e, d)| {
                format!(
                    "{e}: {:.1}s, {} ended",
                    d.as_secs_f64(),
                    t.ended_per_epoch.get(e).copied().unwrap_or(0)
                )
            })
            .collect();
        line(format!(
            "  tasks: {} sent, {} ended, {} lost by restart; {} restart(s); daemon lives (epoch: served, tasks ended) {}",
            t.sent,
            t.ended,
            t.lost,
            c.get("restarts").copied().unwrap_or(0),
            lives.join(", ")
        ));
        let not_created: BTreeMap<String, u64> =
            t.not_created.iter().map(|(k, n)| (k.label().to_string(), *n)).collect();
        line(format!(
            "  not created: {} ({})",
            t.not_created.values().sum::<u64>(),
            join(&not_created)
        ));
        line(format!("  outcomes: {}", join(&t.outcomes)));
        let pick = |prefix: &str| -> BTreeMap<String, u64> {
            c.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_string(), *v)))
                .collect()
        };
        line(format!("  load: {}", join(&pick("via."))));
        line(format!("  faults applied: {}", join(&pick("fault."))));
        for (what, outcomes) in &t.by_fault {
            line(format!("    after {what}: {}", join(outcomes)));
        }
        let others: BTreeMap<String, u64> = c
            .iter()
            .filter(|(k, _)| {
                !k.starts_with("via.") && !k.starts_with("fault.") && !k.starts_with("violation.") && *k != "restarts"
            })
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        line(format!("  other counts: {}", join(&others)));
        line(format!(
            "  probe: {} calls, p50 {:?}, p99 {:?} (bound {:?}), max {:?}",
            self.probe.len(),
            percentile(&self.probe, 50),
            percentile(&self.probe, 99),
            self.probe_bound,
            self.probe.iter().max().copied().unwrap_or_default()
        ));
        let curve = |name: &str, f: &dyn Fn(&Sample) -> u64, base: u64, end: u64, bound: u64| {
            let max = self.samples.iter().map(f).max().unwrap_or(0);
            let start = self.samples.first().map(f).unwrap_or(0);
            format!("{name} idle {base}, first sample {start}, max {max}, end {end} (bound {bound})")
        };
        line(format!(
            "  resources ({} samples, at most {} task workers at once): {}; {}; {}; at most {} transient zombies in a sample",
            self.samples.len(),
            self.samples.iter().map(|s| s.workers).max().unwrap_or(0),
            curve("threads", &|s| s.threads as u64, self.base.0 as u64, self.end.0 as u64, self.bounds.threads as u64),
            curve("fds", &|s| s.fds as u64, self.base.1 as u64, self.end.1 as u64, self.bounds.fds as u64),
            curve("RSS KiB", &|s| s.rss_kb, self.base.2, self.end.2, self.bounds.rss_kb),
            self.transient_zombies
        ));
        if self.samples.last().is_some_and(|s| s.t > 120.0) {
            let mut minutes: BTreeMap<u64, (usize, usize, u64)> = BTreeMap::new();
            for s in &self.samples {
                let m = minutes.entry(s.t as u64 / 60).or_default();
                *m = (m.0.max(s.threads), m.1.max(s.fds), m.2.max(s.rss_kb));
            }
            let curve: Vec<String> = minutes
                .iter()
                .map(|(m, (t, f, r))| format!("{m}:{t}/{f}/{:.1}", *r as f64 / 1024.0))
                .collect();
            line(format!("  per minute (threads/fds/RSS MiB, max): {}", curve.join(" ")));
        }
        line("  invariants (violations, then what each judged):".into());
        for (name, unit) in ledger::INVARIANTS {
            let n = c.get(*name).copied().unwrap_or(0);
            let short = name.trim_start_matches("violation.");
            let what = match (judged.get(*name).copied().unwrap_or(0), self.unjudgeable.get(short)) {
                (0, Some(why)) => format!("not judged in this run: {why}"),
                (0, None) => "JUDGED NOTHING".to_string(),
                (j, _) => format!("{j} {unit}"),
            };
            line(format!("    {name:<44} {n:>3}   {what}"));
        }
        for (name, ex) in self.ledger.examples() {
            line(format!("  {name}, first cases:"));
            for e in ex {
                line(format!("    {e}"));
            }
        }
        if self.ledger.violations(&[]) > 0 || self.print_fault_log {
            line(format!("  fault log ({} entries):", self.faults.len()));
            for f in self.faults.iter().take(400) {
                line(format!("    {f}"));
            }
        }
        eprint!("{out}");
    }
}

pub fn join<K: std::fmt::Display>(m: &BTreeMap<K, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}
