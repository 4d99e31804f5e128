//! The run's own gates, beside the invariants: a soak that broke little,
//! sent little, or whose judges judged nothing, proves little.

use std::collections::BTreeMap;

use crate::faults::{floor, Fault};
use crate::judge::{NotCreated, Tally};
use crate::ledger::{self, Ledger};

/// The floors a run must reach: each kind of fault it planned applied at
/// least `faults::floor` times; each kill followed by a restart whose
/// daemon the clients found (a task of each later epoch ended). Returns
/// what fell short.
pub fn floors(
    planned: &BTreeMap<Fault, u64>,
    counters: &BTreeMap<String, u64>,
    ended_per_epoch: &BTreeMap<u32, u64>,
    epochs: u32,
) -> Vec<String> {
    let mut short = Vec::new();
    for (fault, n) in planned {
        let applied = counters.get(&format!("fault.{}", fault.name())).copied().unwrap_or(0);
        if applied < floor(*n) {
            short.push(format!(
                "{}: applied {applied} of {n} planned (at least {})",
                fault.name(),
                floor(*n)
            ));
        }
    }
    let kills = planned.get(&Fault::KillDaemon).copied().unwrap_or(0);
    let restarts = counters.get("restarts").copied().unwrap_or(0);
    if restarts < kills {
        short.push(format!("{restarts} restart(s) of {kills} daemon kill(s) planned"));
    }
    for epoch in 2..=epochs {
        if ended_per_epoch.get(&epoch).copied().unwrap_or(0) == 0 {
            short.push(format!(
                "no client saw a task of epoch {epoch} end: the restarted daemon went unused"
            ));
        }
    }
    short
}

/// The run's own gates, beside the invariants: what it fell short of. A
/// soak that broke little or sent little proves little: each kind of fault
/// it planned applied (`floors`), a task a second. A request that made no
/// task is a 413 the client counted, or one that a kill broke — at most two
/// of each client thread per kill (the one in flight, and one that raced
/// the kill); every other is an invariant's. And an invariant that judged
/// nothing could not have fired, unless the run says why it cannot here.
pub fn gates(
    ledger: &Ledger,
    tally: &Tally,
    planned: &BTreeMap<Fault, u64>,
    final_epoch: u32,
    secs: u64,
    client_threads: u64,
    unjudgeable: &BTreeMap<&'static str, String>,
) -> Vec<String> {
    let counters = ledger.counters();
    let mut gates = floors(planned, &counters, &tally.ended_per_epoch, final_epoch);
    if tally.sent < secs {
        gates.push(format!("only {} tasks in {secs} s", tally.sent));
    }
    let of = |k: NotCreated| tally.not_created.get(&k).copied().unwrap_or(0);
    let refused_413 = counters.get("near_limit.refused_413").copied().unwrap_or(0);
    if of(NotCreated::Refused413) != refused_413 {
        gates.push(format!(
            "{} requests refused, {refused_413} of them with 413",
            of(NotCreated::Refused413)
        ));
    }
    let by_kill = of(NotCreated::UnsentByKill) + of(NotCreated::LostWithKilledDaemon);
    let kills = counters.get("restarts").copied().unwrap_or(0);
    if by_kill > 2 * kills * client_threads {
        gates.push(format!(
            "{by_kill} requests made no task for a kill, over 2 per client thread per kill \
             ({kills} kills, {client_threads} threads)"
        ));
    }
    let judged = ledger.judged_counts();
    let unjudged: Vec<&str> = ledger::INVARIANTS
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| judged.get(*n).copied().unwrap_or(0) == 0)
        .filter(|n| !unjudgeable.contains_key(n.trim_start_matches("violation.")))
        .collect();
    if !unjudged.is_empty() {
        gates.push(format!("invariants that judged nothing: {unjudged:?}"));
    }
    gates
}
