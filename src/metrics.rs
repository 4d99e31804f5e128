//! What `GET /metrics` tells an operator, in the Prometheus text format
//! (version 0.0.4). Counters are process-wide atomics that the rooms bump
//! where things happen (no lock on any hot path: one `fetch_add`); gauges
//! are read at render time from whoever owns them (the task table, the
//! connection count), passed in as [`Gauges`].
//!
//! ```text
//!  procman   ─ spawns, spawn latency, ladder rungs, tasks ended (state × cause),
//!              what each task cost (CPU time, peak memory by source)
//!  server    ─ connections refused, peers denied (uid / CID)
//!  streams   ─ task streams and the events feed resynced after falling behind
//!  render()  ─ all of the above + Gauges ─▶ text/plain; version=0.0.4
//! ```

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use crate::control::Cause;
use crate::cost::{Cost, MEMORY_CGROUP1, MEMORY_CGROUP2, MEMORY_RUSAGE};
use crate::wire::TaskState;

/// The Content-Type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const CAUSES: [Cause; 10] = [
    Cause::Completed,
    Cause::Refused,
    Cause::Canceled,
    Cause::Deadline,
    Cause::Stalled,
    Cause::Exhausted,
    Cause::Idle,
    Cause::Crashed,
    Cause::Failed,
    Cause::Shutdown,
];
const END_STATES: [TaskState; 4] = [
    TaskState::Completed,
    TaskState::Failed,
    TaskState::Canceled,
    TaskState::Rejected,
];
/// The kill ladder's rungs, as procman names them.
const RUNGS: [&str; 4] = ["cancel", "SIGTERM", "SIGKILL", "exit_grace"];
/// Spawn-latency histogram bounds: microseconds, and the `le` label in
/// seconds. Integers, so that no float formatting is linked in (11 KB).
const SPAWN_BUCKETS: [(u64, &str); 11] = [
    (1_000, "0.001"),
    (2_500, "0.0025"),
    (5_000, "0.005"),
    (10_000, "0.01"),
    (25_000, "0.025"),
    (50_000, "0.05"),
    (100_000, "0.1"),
    (250_000, "0.25"),
    (500_000, "0.5"),
    (1_000_000, "1"),
    (2_500_000, "2.5"),
];
/// Per-task CPU time (user + system) histogram bounds: microseconds, and
/// the `le` label in seconds.
const CPU_BUCKETS: [(u64, &str); 12] = [
    (1_000, "0.001"),
    (5_000, "0.005"),
    (10_000, "0.01"),
    (50_000, "0.05"),
    (100_000, "0.1"),
    (500_000, "0.5"),
    (1_000_000, "1"),
    (5_000_000, "5"),
    (10_000_000, "10"),
    (60_000_000, "60"),
    (300_000_000, "300"),
    (1_800_000_000, "1800"),
];
/// Per-task peak memory histogram bounds, in bytes (1 MiB to 64 GiB).
const MEMORY_BUCKETS: [(u64, &str); 10] = [
    (1 << 20, "1048576"),
    (4 << 20, "4194304"),
    (16 << 20, "16777216"),
    (64 << 20, "67108864"),
    (256 << 20, "268435456"),
    (1 << 30, "1073741824"),
    (4 << 30, "4294967296"),
    (16 << 30, "17179869184"),
    (32 << 30, "34359738368"),
    (64 << 30, "68719476736"),
];
/// The sources of a peak, each its own series: they measure different
/// things (a cgroup's charged memory, or one process's resident set).
const MEMORY_SOURCES: [&str; 3] = [MEMORY_CGROUP2, MEMORY_CGROUP1, MEMORY_RUSAGE];
use crate::limits::METRICS_DENIED_SERIES_MAX as DENIED_SERIES_MAX;

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO_ROW: [AtomicU64; CAUSES.len()] = [ZERO; CAUSES.len()];
#[allow(clippy::declare_interior_mutable_const)]
const ZERO_MEMORY: [AtomicU64; MEMORY_BUCKETS.len() + 1] = [ZERO; MEMORY_BUCKETS.len() + 1];

struct Counters {
    ended: [[AtomicU64; CAUSES.len()]; END_STATES.len()],
    rungs: [AtomicU64; RUNGS.len()],
    spawns: AtomicU64,
    handed_at_birth: AtomicU64,
    spawn_failures: AtomicU64,
    /// Non-cumulative counts per bucket; the last is +Inf.
    spawn_buckets: [AtomicU64; SPAWN_BUCKETS.len() + 1],
    spawn_micros_sum: AtomicU64,
    /// Per task: CPU time buckets (non-cumulative; the last is +Inf).
    cpu_buckets: [AtomicU64; CPU_BUCKETS.len() + 1],
    cpu_micros_sum: AtomicU64,
    /// Per task and source of the peak: memory buckets, as above.
    memory_buckets: [[AtomicU64; MEMORY_BUCKETS.len() + 1]; MEMORY_SOURCES.len()],
    memory_bytes_sum: [AtomicU64; MEMORY_SOURCES.len()],
    conns_accepted: AtomicU64,
    conns_refused: AtomicU64,
    task_resyncs: AtomicU64,
    events_resyncs: AtomicU64,
    /// (transport, id) → count; a cold path (a refused peer).
    denied: Mutex<Vec<(&'static str, String, u64)>>,
}

static C: Counters = Counters {
    ended: [ZERO_ROW; END_STATES.len()],
    rungs: [ZERO; RUNGS.len()],
    spawns: ZERO,
    handed_at_birth: ZERO,
    spawn_failures: ZERO,
    spawn_buckets: [ZERO; SPAWN_BUCKETS.len() + 1],
    spawn_micros_sum: ZERO,
    cpu_buckets: [ZERO; CPU_BUCKETS.len() + 1],
    cpu_micros_sum: ZERO,
    memory_buckets: [ZERO_MEMORY; MEMORY_SOURCES.len()],
    memory_bytes_sum: [ZERO; MEMORY_SOURCES.len()],
    conns_accepted: ZERO,
    conns_refused: ZERO,
    task_resyncs: ZERO,
    events_resyncs: ZERO,
    denied: Mutex::new(Vec::new()),
};

/// A task reached a terminal state for `cause`.
pub fn task_ended(state: TaskState, cause: Cause) {
    let s = END_STATES.iter().position(|x| *x == state);
    let c = CAUSES.iter().position(|x| *x == cause);
    if let (Some(s), Some(c)) = (s, c) {
        C.ended[s][c].fetch_add(1, Relaxed);
    }
}

/// The kill ladder reached `rung` (cancel, SIGTERM, SIGKILL, exit_grace).
pub fn ladder_rung(rung: &str) {
    if let Some(i) = RUNGS.iter().position(|r| *r == rung) {
        C.rungs[i].fetch_add(1, Relaxed);
    }
}

/// A worker process was started.
pub fn worker_spawned() {
    C.spawns.fetch_add(1, Relaxed);
}

/// A worker was started with its task already in its pipe.
pub fn task_handed_at_birth() {
    C.handed_at_birth.fetch_add(1, Relaxed);
}

/// A worker could not be started.
pub fn worker_spawn_failed() {
    C.spawn_failures.fetch_add(1, Relaxed);
}

/// The fork server answered with a worker's pid this long after procman
/// asked for it.
pub fn worker_forked_after(d: Duration) {
    let micros = d.as_micros().min(u64::MAX as u128) as u64;
    C.spawn_buckets[bucket(&SPAWN_BUCKETS, micros)].fetch_add(1, Relaxed);
    C.spawn_micros_sum.fetch_add(micros, Relaxed);
}

/// What a task that ran cost: its CPU time and its peak memory.
pub fn task_cost(cost: &Cost) {
    if let Some(cpu) = cost.cpu {
        let micros = cpu.user_usec.saturating_add(cpu.system_usec);
        C.cpu_buckets[bucket(&CPU_BUCKETS, micros)].fetch_add(1, Relaxed);
        C.cpu_micros_sum.fetch_add(micros, Relaxed);
    }
    if let Some(m) = cost.memory {
        if let Some(s) = MEMORY_SOURCES.iter().position(|x| *x == m.source) {
            C.memory_buckets[s][bucket(&MEMORY_BUCKETS, m.peak_bytes)].fetch_add(1, Relaxed);
            C.memory_bytes_sum[s].fetch_add(m.peak_bytes, Relaxed);
        }
    }
}

/// The bucket `v` falls in (the last: over every bound).
fn bucket(bounds: &[(u64, &str)], v: u64) -> usize {
    bounds.iter().position(|(b, _)| v <= *b).unwrap_or(bounds.len())
}

/// A connection passed the gate and was served.
pub fn connection_accepted() {
    C.conns_accepted.fetch_add(1, Relaxed);
}

/// A connection was refused at the cap (503).
pub fn connection_refused() {
    C.conns_refused.fetch_add(1, Relaxed);
}

/// The gate turned a peer away: `transport` is `unix` (id = uid) or
/// `vsock` (id = CID), or `unknown` when its credentials were unreadable.
pub fn peer_denied(transport: &'static str, id: String) {
    let mut denied = C.denied.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = denied.iter_mut().find(|(t, i, _)| *t == transport && *i == id) {
        e.2 += 1;
        return;
    }
    let id = if denied.len() >= DENIED_SERIES_MAX {
        "other".to_string()
    } else {
        id
    };
    match denied.iter_mut().find(|(t, i, _)| *t == transport && *i == id) {
        Some(e) => e.2 += 1,
        None => denied.push((transport, id, 1)),
    }
}

/// A task stream fell behind the retained log and got a snapshot instead.
pub fn task_stream_resynced() {
    C.task_resyncs.fetch_add(1, Relaxed);
}

/// An events-feed subscriber fell off the ring and was told to resync.
pub fn events_resynced() {
    C.events_resyncs.fetch_add(1, Relaxed);
}

/// What the counters cannot know: read from their owners at render time.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gauges {
    pub tasks_queued: usize,
    pub tasks_running: usize,
    pub tasks_retained_finished: usize,
    pub tasks_retained_bytes: usize,
    pub connections_open: usize,
    pub max_running: usize,
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One histogram series: its buckets made cumulative, +Inf, the sum (as
/// text, in the family's unit) and the count. `labels` go before `le`
/// (`source="…",` or nothing).
fn histogram(out: &mut String, name: &str, labels: &str, bounds: &[(u64, &str)], counts: &[AtomicU64], sum: &str) {
    let mut cumulative = 0;
    for (i, (_, le)) in bounds.iter().enumerate() {
        cumulative += counts[i].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{le}\"}} {cumulative}");
    }
    cumulative += counts[bounds.len()].load(Relaxed);
    let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {cumulative}");
    let labels = labels.trim_end_matches(',');
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{braces} {sum}");
    let _ = writeln!(out, "{name}_count{braces} {cumulative}");
}

/// Microseconds as seconds with six decimals (integers only: no float
/// formatting is linked in).
fn seconds(micros: u64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// The whole exposition.
pub fn render(g: &Gauges) -> String {
    let mut out = String::with_capacity(4096);
    family(
        &mut out,
        "agentd_tasks_ended_total",
        "counter",
        "Tasks that reached a terminal state, by state and terminal cause.",
    );
    for (s, state) in END_STATES.iter().enumerate() {
        for (c, cause) in CAUSES.iter().enumerate() {
            let n = C.ended[s][c].load(Relaxed);
            // Every state's own cause always, so a dashboard has a series
            // from the first scrape; the rest once they happen.
            let natural = matches!(
                (state, cause),
                (TaskState::Completed, Cause::Completed)
                    | (TaskState::Failed, Cause::Failed)
                    | (TaskState::Canceled, Cause::Canceled)
                    | (TaskState::Rejected, Cause::Refused)
            );
            if n > 0 || natural {
                let _ = writeln!(
                    out,
                    "agentd_tasks_ended_total{{state=\"{}\",cause=\"{}\"}} {n}",
                    state.short_name(),
                    cause.as_str()
                );
            }
        }
    }
    let stalls: u64 = (0..END_STATES.len())
        .map(|s| C.ended[s][CAUSES.iter().position(|c| *c == Cause::Stalled).unwrap_or(0)].load(Relaxed))
        .sum();
    family(
        &mut out,
        "agentd_task_stalls_total",
        "counter",
        "Tasks stopped because their worker stopped answering pings (tasks.stall_timeout_ms).",
    );
    let _ = writeln!(out, "agentd_task_stalls_total {stalls}");
    for (name, help, v) in [
        (
            "agentd_tasks_running",
            "Tasks with a worker (working, input-required, auth-required).",
            g.tasks_running,
        ),
        (
            "agentd_tasks_queued",
            "Tasks submitted and waiting under tasks.max_running.",
            g.tasks_queued,
        ),
        ("agentd_tasks_max_running", "The running cap in force.", g.max_running),
        (
            "agentd_tasks_retained_finished",
            "Finished tasks still retained (tasks.retain_max, tasks.retain_ms).",
            g.tasks_retained_finished,
        ),
        (
            "agentd_tasks_retained_bytes",
            "Estimated bytes the retained finished tasks hold (bounded by tasks.retain_bytes).",
            g.tasks_retained_bytes,
        ),
        (
            "agentd_connections_open",
            "Client connections being served now.",
            g.connections_open,
        ),
    ] {
        family(&mut out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
    family(
        &mut out,
        "agentd_worker_spawns_total",
        "counter",
        "Worker processes started (pooled and on demand).",
    );
    let _ = writeln!(out, "agentd_worker_spawns_total {}", C.spawns.load(Relaxed));
    family(
        &mut out,
        "agentd_worker_spawns_with_task_total",
        "counter",
        "Of those, workers born with their task already in their pipe (no idle worker was ready).",
    );
    let _ = writeln!(
        out,
        "agentd_worker_spawns_with_task_total {}",
        C.handed_at_birth.load(Relaxed)
    );
    family(
        &mut out,
        "agentd_worker_spawn_failures_total",
        "counter",
        "Worker processes that could not be started.",
    );
    let _ = writeln!(
        out,
        "agentd_worker_spawn_failures_total {}",
        C.spawn_failures.load(Relaxed)
    );
    family(
        &mut out,
        "agentd_worker_spawn_seconds",
        "histogram",
        "From asking the fork server for a worker to its pid.",
    );
    histogram(
        &mut out,
        "agentd_worker_spawn_seconds",
        "",
        &SPAWN_BUCKETS,
        &C.spawn_buckets,
        &seconds(C.spawn_micros_sum.load(Relaxed)),
    );
    family(
        &mut out,
        "agentd_task_cpu_seconds",
        "histogram",
        "CPU time (user + system) each task that ran used, read when it ended (source: the task's metadata).",
    );
    histogram(
        &mut out,
        "agentd_task_cpu_seconds",
        "",
        &CPU_BUCKETS,
        &C.cpu_buckets,
        &seconds(C.cpu_micros_sum.load(Relaxed)),
    );
    family(
        &mut out,
        "agentd_task_memory_peak_bytes",
        "histogram",
        "Peak memory of each task that ran, by source: a cgroup's charged memory, or the largest single process (ru_maxrss).",
    );
    for (s, source) in MEMORY_SOURCES.iter().enumerate() {
        // A source is a series once a task was measured by it.
        if C.memory_buckets[s].iter().any(|b| b.load(Relaxed) > 0) {
            histogram(
                &mut out,
                "agentd_task_memory_peak_bytes",
                &format!("source=\"{source}\","),
                &MEMORY_BUCKETS,
                &C.memory_buckets[s],
                &C.memory_bytes_sum[s].load(Relaxed).to_string(),
            );
        }
    }
    family(
        &mut out,
        "agentd_kill_ladder_rungs_total",
        "counter",
        "Kill-ladder rungs reached: the cancel frame, SIGTERM, SIGKILL, and SIGKILL after a worker's exit grace.",
    );
    for (i, rung) in RUNGS.iter().enumerate() {
        let _ = writeln!(
            out,
            "agentd_kill_ladder_rungs_total{{rung=\"{rung}\"}} {}",
            C.rungs[i].load(Relaxed)
        );
    }
    family(
        &mut out,
        "agentd_connections_accepted_total",
        "counter",
        "Connections that passed the peer gate and were served.",
    );
    let _ = writeln!(
        out,
        "agentd_connections_accepted_total {}",
        C.conns_accepted.load(Relaxed)
    );
    family(
        &mut out,
        "agentd_connections_refused_total",
        "counter",
        "Connections answered 503 at a2a.max_connections.",
    );
    let _ = writeln!(
        out,
        "agentd_connections_refused_total {}",
        C.conns_refused.load(Relaxed)
    );
    family(
        &mut out,
        "agentd_peers_denied_total",
        "counter",
        "Peers closed by the gate before a byte was read: unix by uid, vsock by CID.",
    );
    {
        let denied = C.denied.lock().unwrap_or_else(|p| p.into_inner());
        for (transport, id, n) in denied.iter() {
            let key = if *transport == "vsock" { "cid" } else { "uid" };
            let _ = writeln!(
                out,
                "agentd_peers_denied_total{{transport=\"{transport}\",{key}=\"{id}\"}} {n}"
            );
        }
    }
    family(
        &mut out,
        "agentd_stream_resyncs_total",
        "counter",
        "Streams that fell behind what is retained: a task stream sent a snapshot, an events subscriber a resync.",
    );
    let _ = writeln!(
        out,
        "agentd_stream_resyncs_total{{stream=\"task\"}} {}",
        C.task_resyncs.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "agentd_stream_resyncs_total{{stream=\"events\"}} {}",
        C.events_resyncs.load(Relaxed)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_move_and_render() {
        task_ended(TaskState::Failed, Cause::Deadline);
        ladder_rung("SIGTERM");
        worker_forked_after(Duration::from_millis(3));
        peer_denied("unix", "1000".into());
        task_cost(&Cost {
            wall_ms: 700,
            cpu: Some(crate::cost::Cpu {
                user_usec: 400_000,
                system_usec: 100_000,
                source: crate::cost::CPU_RUSAGE,
            }),
            memory: Some(crate::cost::Memory {
                peak_bytes: 70 << 20,
                source: MEMORY_RUSAGE,
            }),
        });
        let text = render(&Gauges {
            tasks_running: 2,
            ..Gauges::default()
        });
        assert!(text.contains("agentd_tasks_ended_total{state=\"failed\",cause=\"deadline\"} "));
        assert!(text.contains("agentd_tasks_ended_total{state=\"completed\",cause=\"completed\"} "));
        assert!(text.contains("agentd_tasks_running 2\n"));
        // (uid 1000, or `other` once the bounded test below filled the series)
        assert!(text.contains("agentd_peers_denied_total{transport=\"unix\",uid=\""));
        assert!(text.contains("agentd_worker_spawn_seconds_bucket{le=\"0.005\"} "));
        assert!(text.contains("agentd_worker_spawn_seconds_bucket{le=\"+Inf\"} "));
        // 0.5 s of CPU lands at le="0.5"; 70 MiB just over 64 MiB.
        let count = |prefix: &str| -> u64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(
            count("agentd_task_cpu_seconds_bucket{le=\"0.5\"}") > count("agentd_task_cpu_seconds_bucket{le=\"0.1\"}")
        );
        let mem = "agentd_task_memory_peak_bytes_bucket{source=\"wait4:ru_maxrss\",le=";
        assert!(count(&format!("{mem}\"268435456\"}}")) > count(&format!("{mem}\"67108864\"}}")));
        assert!(text.contains("agentd_task_memory_peak_bytes_count{source=\"wait4:ru_maxrss\"} "));
        // The sum is seconds with six decimals; at least the 3 ms above.
        let sum = text
            .lines()
            .find_map(|l| l.strip_prefix("agentd_worker_spawn_seconds_sum "))
            .unwrap();
        let (whole, micros) = sum.split_once('.').unwrap();
        assert_eq!(micros.len(), 6, "{sum}");
        assert!(whole.parse::<u64>().unwrap() * 1_000_000 + micros.parse::<u64>().unwrap() >= 3_000);
        // Every line is a comment or `name{labels} value`.
        for line in text.lines() {
            assert!(line.starts_with("# ") || line.split(' ').count() == 2, "{line}");
        }
    }

    #[test]
    fn denied_series_are_bounded() {
        for uid in 0..(DENIED_SERIES_MAX as u32 * 3) {
            peer_denied("vsock", format!("{}", 100_000 + uid));
        }
        let series = C.denied.lock().unwrap().len();
        // At most the bound plus one `other` per transport.
        assert!(series <= DENIED_SERIES_MAX + 3, "{series}");
    }
}
