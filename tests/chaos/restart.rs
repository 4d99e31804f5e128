//! The daemon's kill -9 and restart, and what must hold after: nothing of
//! the dead daemon outlives it, nothing is left once the next one has
//! cleared its slots, and the slots themselves are gone.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::env::Env;
use crate::procs::{self, Proc};

/// kill -9 of the daemon, then its restart on the same socket: every
/// process it had must be gone before the restart. Returns what was done,
/// and the checks after the restart, which wait on their own.
pub fn kill_and_restart(env: Arc<Env>) -> Result<(String, JoinHandle<()>), String> {
    let (_, pid) = env.daemon.current().ok_or("the daemon is down")?;
    let slots = procs::daemon_cgroups(pid);
    let table = procs::scan();
    let mut before: Vec<Proc> = table
        .values()
        .filter(|p| procs::descends(&table, p.pid, pid))
        .cloned()
        .collect();
    let mut outlier = None;
    if env.breaks.take("process_outlived_daemon") {
        // A process of the soak's own, counted as the daemon's.
        outlier = std::process::Command::new("sleep").arg("30").spawn().ok();
        if let Some(p) = outlier.as_ref().and_then(|c| procs::stat(c.id() as i32)) {
            before.push(p);
        }
    }
    let mut outlived: Vec<Proc> = Vec::new();
    let killed = env
        .daemon
        .kill_and_restart(|_| {
            // Its processes die with it (their parent-death signal), before
            // any restart could clean up after it.
            crate::common::wait_for(Duration::from_secs(5), || living(&before).is_empty());
            outlived = living(&before);
        })
        .map_err(|e| {
            env.ledger.violation(
                "violation.daemon_died",
                format!("the restart after kill -9 failed: {e}"),
            );
            e
        })?;
    env.ledger.judged("violation.process_outlived_daemon", 1);
    if !outlived.is_empty() {
        env.ledger.violation(
            "violation.process_outlived_daemon",
            format!(
                "5 s after kill -9 of agentd {}, {} of its {} processes live: {outlived:?}",
                killed.old_pid,
                outlived.len(),
                before.len()
            ),
        );
    }
    if let Some(c) = outlier {
        crate::breaks::end(c);
    }
    env.ledger.count("restarts");
    let what = format!(
        "kill -9 agentd {} (epoch {}, {} processes), all gone; restarted and serving in {:?}",
        killed.old_pid,
        killed.old_epoch,
        before.len(),
        killed.ready_in
    );
    let (old_epoch, old_pid) = (killed.old_epoch, killed.old_pid);
    let checks = std::thread::spawn(move || left_after_restart(&env, old_epoch, old_pid, &before, &slots));
    Ok((what, checks))
}

/// After the restart, which kills and removes what is left in the dead
/// daemon's slots: nothing of the dead daemon may live 5 s on — found
/// afresh, not only among its processes seen at the kill: a process in one
/// of its slots, or marked as one of its tasks' (CHAOS_RUN and the
/// CHAOS_CTX of a task sent to it); and its slots must be gone in 10 s.
pub fn left_after_restart(env: &Env, old_epoch: u32, old_pid: i32, before: &[Proc], slots: &[PathBuf]) {
    let mut planted = None;
    if env.breaks.take("process_left_after_restart") {
        let ctx = env
            .ledger
            .ctxs_in_epoch(old_epoch)
            .into_iter()
            .next()
            .unwrap_or_default();
        let dir = env.pids.parent().unwrap_or(&env.pids).to_path_buf();
        planted = crate::breaks::start_named(
            &dir,
            "chaos-left",
            "/bin/sleep",
            &["30"],
            &[("CHAOS_RUN", env.run_id.as_str()), ("CHAOS_CTX", ctx.as_str())],
        );
    }
    let mut recreated = None;
    if !slots.is_empty() && env.breaks.take("cgroup_slot_left_after_restart") {
        recreated = std::fs::create_dir(&slots[0]).ok().map(|()| slots[0].clone());
    }
    let ctxs = env.ledger.ctxs_in_epoch(old_epoch);
    let mut theirs: Vec<Proc> = before.to_vec();
    theirs.extend(procs::in_cgroups(slots));
    theirs.extend(procs::marked(&env.run_id, |ctx| ctxs.contains(ctx)));
    env.ledger.judged("violation.process_left_after_restart", 1);
    crate::common::wait_for(Duration::from_secs(5), || living(&theirs).is_empty());
    let left = living(&theirs);
    if !left.is_empty() {
        env.ledger.violation(
            "violation.process_left_after_restart",
            format!(
                "5 s after the restart, {} processes of agentd {old_pid} live: {left:?}",
                left.len()
            ),
        );
    }
    if let Some(c) = planted {
        crate::breaks::end(c);
    }
    if !slots.is_empty() {
        env.ledger.judged("violation.cgroup_slot_left_after_restart", 1);
        let clean = crate::common::wait_for(Duration::from_secs(10), || procs::daemon_cgroups(old_pid).is_empty());
        if !clean {
            env.ledger.violation(
                "violation.cgroup_slot_left_after_restart",
                format!(
                    "10 s after the restart, agentd {old_pid}'s cgroups remain: {:?}",
                    procs::daemon_cgroups(old_pid)
                ),
            );
        }
    }
    if let Some(dir) = recreated {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Those of `ps` still alive (the same process: same start time).
fn living(ps: &[Proc]) -> Vec<Proc> {
    let mut seen = HashSet::new();
    ps.iter()
        .filter(|p| seen.insert((p.pid, p.start)))
        .filter(|p| procs::stat(p.pid).is_some_and(|now| now.start == p.start && now.state != 'Z'))
        .cloned()
        .collect()
}
