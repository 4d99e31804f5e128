//! Containment, tested from outside: programs that leave their process
//! group (`setsid`, `setpgrp`, a double fork) still die with their task —
//! on cancel, on completion, and when agentd itself is SIGKILLed — with
//! cgroups (cgroup.kill from the worker's parent-death path; a restarted
//! agentd kills and removes a dead one's slots) and without (the worker is
//! its task's subreaper). Slots: one a kill was written in is removed,
//! not reused; the pids and memory limits land where the host enforces
//! them (tasks.pids_max=auto limits nothing where cgroup v2 cannot).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{alive, user_message, wait_for, Daemon};
use serde_json::json;

/// A task program that starts three escapees — `setsid`, perl's `setpgrp`,
/// and a double-forked `setsid` (orphaned at once) — records their pids and
/// its own in a `*.ready` file of its own in `dir`, then runs `then`.
fn escapee_script(dir: &Path, then: &str) -> PathBuf {
    common::script(
        dir,
        "escape.sh",
        &format!(
            "f=$(mktemp {d}/esc.XXXXXX)\n\
             setsid sh -c 'echo $$ >> '\"$f\"'; exec sleep 300' &\n\
             perl -e 'setpgrp(0, 0); open(my $o, \">>\", $ARGV[0]); print $o \"$$\\n\"; close $o; sleep 300' \"$f\" &\n\
             ( setsid sh -c 'echo $$ >> '\"$f\"'; exec sleep 300' & )\n\
             while [ $(wc -l < $f) -lt 3 ]; do sleep 0.02; done\n\
             echo $$ >> $f\n\
             mv $f $f.ready\n\
             {then}",
            d = dir.display()
        ),
    )
}

/// Waits for `n` tasks' ready files in `dir`; returns every pid in them.
fn task_pids(dir: &Path, n: usize) -> Vec<i32> {
    let ready = || -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "ready"))
            .collect()
    };
    assert!(
        wait_for(Duration::from_secs(10), || ready().len() >= n),
        "{n} tasks never got their escapees going"
    );
    let pids: Vec<i32> = ready()
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .split_whitespace()
                .map(|s| s.parse::<i32>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(pids.len(), 4 * n, "three escapees and the program per task: {pids:?}");
    assert!(pids.iter().all(|p| alive(*p)), "all running: {pids:?}");
    pids
}

fn survivors(pids: &[i32]) -> Vec<i32> {
    pids.iter().copied().filter(|p| alive(*p)).collect()
}

/// SIGKILLs agentd with two tasks running escapees; returns how long it
/// took until none of their processes was left, or, when agentd's
/// isolation is not `want_isolation`, Err(the isolation it reported):
/// the caller decides whether that is a skip or a failure.
fn kill9_with_escapees(args: &[&str], want_isolation: &str) -> Result<Duration, String> {
    let tmp = common::TempDir::new("contain");
    let prog = escapee_script(&tmp.0, "while :; do sleep 1; done");
    let mut all_args = vec!["--exec", prog.to_str().unwrap()];
    all_args.extend(args);
    let mut d = Daemon::start(&all_args);
    let iso = common::isolation(&d);
    if !iso.contains(want_isolation) {
        return Err(iso);
    }
    d.send_async("x");
    d.send_async("x");
    let mut pids = task_pids(&tmp.0, 2);
    pids.extend(common::children(d.pid()));
    // Two programs, six escapees, two workers (and the pool): a run that
    // killed nothing cannot pass.
    assert!(pids.len() >= 10, "{pids:?}");
    let dead = d.pid();
    d.kill9();
    let killed = Instant::now();
    let gone = wait_for(Duration::from_secs(5), || survivors(&pids).is_empty());
    let took = killed.elapsed();
    assert!(gone, "left 5 s after kill -9 ({iso}): {:?}", survivors(&pids));
    eprintln!(
        "kill -9 with escapees ({iso}): {} processes gone in {took:?}",
        pids.len()
    );
    // The dead daemon's (empty) slots go at the next start.
    if let Some(base) = args.iter().find_map(|a| a.strip_prefix("tasks.cgroup=/")) {
        let parent = Path::new("/").join(base).join(format!("agentd-{dead}"));
        assert!(parent.join("slot-2").exists(), "kill -9 leaves the slots behind");
        // Named as the manual names them (FILES, Cgroups): slot-N.
        for slot in std::fs::read_dir(&parent)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
        {
            let name = slot.file_name().to_string_lossy().into_owned();
            assert!(
                name.strip_prefix("slot-").is_some_and(|n| n.parse::<u32>().is_ok()),
                "{name}: not slot-N"
            );
        }
        let _d2 = Daemon::start(&all_args);
        assert!(
            wait_for(Duration::from_secs(5), || !parent.exists()),
            "the restart left {}",
            parent.display()
        );
    }
    Ok(took)
}

#[test]
fn kill9_leaves_no_escapee_with_cgroups() {
    let test = "kill9_leaves_no_escapee_with_cgroups";
    if let Err(iso) = kill9_with_escapees(&[], "cgroup") {
        common::skip_or_fail(
            test,
            &format!(
                "agentd reports isolation={iso}, no task cgroups; needs {}",
                common::CGROUP_HOST
            ),
        );
    }
}

/// A cgroup v2 tree of the test's own (no other daemon removes its slots
/// first), or the test is skipped (failed under CI) where none can be made.
fn private_cgroup(test: &str) -> Option<common::PrivateCgroup> {
    let what = format!(
        "a cgroup v2 directory beside this test's own (needs {})",
        common::CGROUP_HOST
    );
    common::needed(&what, test, common::PrivateCgroup::new("agentd-test"))
}

#[test]
fn kill9_leaves_no_escapee_and_a_restart_removes_the_slots() {
    let test = "kill9_leaves_no_escapee_and_a_restart_removes_the_slots";
    // In a cgroup tree of our own: no other daemon removes the slots first.
    let Some(base) = private_cgroup(test) else { return };
    let set = format!("tasks.cgroup={}", base.0.display());
    if let Err(iso) = kill9_with_escapees(&["--set", &set], "cgroup2") {
        panic!(
            "tasks.cgroup={} is a writable cgroup v2 directory, yet isolation={iso}",
            base.0.display()
        );
    }
}

#[test]
fn kill9_leaves_no_escapee_without_cgroups() {
    if let Err(iso) = kill9_with_escapees(&["--set", "tasks.cgroup=off"], "subreaper") {
        panic!("tasks.cgroup=off always means the subreaper path, yet isolation={iso}");
    }
}

#[test]
fn a_restart_kills_and_removes_a_dead_daemons_slots() {
    // What a SIGKILLed agentd whose workers could not clean up leaves
    // behind: `agentd-PID/slot-N` cgroups, PID gone, processes inside —
    // made here by hand, in a cgroup tree of this test's own.
    let Some(base) = private_cgroup("a_restart_kills_and_removes_a_dead_daemons_slots") else {
        return;
    };
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let dead = gone.id();
    let mut planted = Vec::new();
    let mut sleepers = Vec::new();
    for n in [1, 2] {
        let slot = base.0.join(format!("agentd-{dead}")).join(format!("slot-{n}"));
        std::fs::create_dir_all(&slot).unwrap();
        let sleeper = std::process::Command::new("sleep").arg("300").spawn().unwrap();
        std::fs::write(slot.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
        planted.push(slot);
        sleepers.push(sleeper);
    }
    let pids: Vec<i32> = sleepers.iter().map(|c| c.id() as i32).collect();

    let set = format!("tasks.cgroup={}", base.0.display());
    let d = Daemon::start(&["--set", &set]);
    // Our children: reap them as they die, or they stay zombies.
    assert!(
        wait_for(Duration::from_secs(5), || sleepers
            .iter_mut()
            .all(|c| c.try_wait().unwrap().is_some())),
        "the restart left {:?} alive",
        survivors(&pids)
    );
    let parent = planted[0].parent().unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || !parent.exists()),
        "{} still there",
        parent.display()
    );
    assert!(wait_for(Duration::from_secs(5), || d.log_text().contains("isolation=")));
    let log = d.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("cgroup.stale_slot")).collect();
    for slot in &planted {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!("path={} ", slot.display())))
            .unwrap_or_else(|| panic!("no cgroup.stale_slot line for {}:\n{log}", slot.display()));
        assert!(line.contains("killed=1 removed=true"), "{line}");
    }
    eprintln!("stale slots killed and removed: {planted:?}");
}

#[test]
fn a_stop_kills_what_is_left_in_a_slot_and_removes_every_slot() {
    // What the daemon's exit must never leave: a process in one of its
    // slots, and the slot directories. A sleeper is put by hand into a slot
    // the first task left free (the pool's idle worker holds another).
    let test = "a_stop_kills_what_is_left_in_a_slot_and_removes_every_slot";
    let Some(base) = private_cgroup(test) else { return };
    let set = format!("tasks.cgroup={}", base.0.display());
    let mut d = Daemon::start(&["--set", &set, "--set", "tasks.prespawn=1", "--log-level", "debug"]);
    let r = d.ok("SendMessage", json!({"message": user_message("x")}));
    assert_eq!(r["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let parent = base.0.join(format!("agentd-{}", d.pid()));
    let slots = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&parent)
            .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let procs = |slot: &Path| std::fs::read_to_string(slot.join("cgroup.procs")).unwrap_or_default();
    // The task's slot is given back once its worker is reaped and swept.
    let mut free = None;
    assert!(
        wait_for(Duration::from_secs(5), || {
            free = slots().into_iter().find(|s| procs(s).trim().is_empty());
            free.is_some() && slots().len() >= 2
        }),
        "no free slot beside the idle worker's: {:?}",
        slots()
    );
    let free = free.unwrap();
    let mut sleeper = std::process::Command::new("sleep").arg("300").spawn().unwrap();
    std::fs::write(free.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
    assert_eq!(d.stop(), Some(0), "{}", d.log_text());
    assert!(
        wait_for(Duration::from_secs(5), || sleeper.try_wait().unwrap().is_some()),
        "the sleeper left in {} outlived the daemon",
        free.display()
    );
    assert!(!parent.exists(), "left behind: {:?}", slots());
    let log = d.log_text();
    // One line, the slot's: the rest of the exit is as quiet as ever.
    let exit_lines: Vec<&str> = log.lines().filter(|l| l.contains("cgroup.exit")).collect();
    assert_eq!(exit_lines.len(), 1, "{exit_lines:#?}");
    let line = exit_lines[0];
    assert!(line.contains(&format!("slot={} ", free.display())), "{line}");
    assert!(line.contains(&format!("pids=[{}]", sleeper.id())), "{line}");
    assert!(line.contains("killed=1 removed=true"), "{line}");
}

#[test]
fn escapees_die_on_cancel_and_on_completion() {
    for mode in ["auto", "off"] {
        let set = format!("tasks.cgroup={mode}");
        // Completion: the program exits at once, its escapees still running.
        let tmp = common::TempDir::new("done");
        let prog = escapee_script(&tmp.0, "echo finished");
        let d = Daemon::start(&["--exec", prog.to_str().unwrap(), "--set", &set]);
        let r = d.ok("SendMessage", json!({"message": user_message("x")}));
        assert_eq!(r["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{mode}: {r}");
        let pids = task_pids_any(&tmp.0);
        assert_eq!(survivors(&pids), Vec::<i32>::new(), "{mode}: outlived a completed task");

        // Cancel.
        let tmp = common::TempDir::new("cancel");
        let prog = escapee_script(&tmp.0, "while :; do sleep 1; done");
        let d = Daemon::start(&[
            "--exec",
            prog.to_str().unwrap(),
            "--set",
            &set,
            "--set",
            "tasks.cancel_grace_ms=100",
        ]);
        let id = d.send_async("x");
        let pids = task_pids(&tmp.0, 1);
        let t = d.ok("CancelTask", json!({"id": id}));
        assert_eq!(t["status"]["state"], "TASK_STATE_CANCELED", "{mode}: {t}");
        assert_eq!(survivors(&pids), Vec::<i32>::new(), "{mode}: outlived a cancelled task");
    }
}

/// The pids of a finished task's ready file (its processes may be gone).
fn task_pids_any(dir: &Path) -> Vec<i32> {
    let ready: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ready"))
        .collect();
    assert_eq!(ready.len(), 1, "one ready file");
    let pids: Vec<i32> = std::fs::read_to_string(&ready[0])
        .unwrap()
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 4, "{pids:?}");
    pids
}

#[test]
fn escapees_of_a_worker_killed_by_the_ladder_die_without_cgroups() {
    // The program ignores SIGTERM, so the worker waits for it until the
    // ladder's SIGKILL takes the whole group, worker included: the worker
    // cannot kill its escapees, which re-parent to agentd. agentd kills them.
    let tmp = common::TempDir::new("ladder");
    let prog = escapee_script(&tmp.0, "trap '' TERM\nwhile :; do sleep 1; done");
    let d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        "tasks.cgroup=off",
        "--set",
        "tasks.cancel_grace_ms=100",
        "--set",
        "tasks.term_grace_ms=200",
    ]);
    let id = d.send_async("x");
    let pids = task_pids(&tmp.0, 1);
    let t = d.ok("CancelTask", json!({"id": id}));
    assert_eq!(t["status"]["state"], "TASK_STATE_CANCELED", "{t}");
    assert_eq!(survivors(&pids), Vec::<i32>::new(), "outlived a cancelled task");
    assert!(d.log_text().contains("procman.adopted"), "{}", d.log_text());
}

/// On a kernel without `/proc/…/children` (CONFIG_PROC_CHILDREN), which a
/// debug build is made to believe with AGENTD_TEST_NO_CHILDREN_FILE, agentd
/// says so at start and finds children by their parent pid in every
/// `/proc/N/stat`: escapees still die with their task — those its worker
/// kills as their subreaper when the program ends, and those that come
/// to agentd when the ladder's SIGKILL takes the worker too.
#[test]
fn without_the_children_file_escapees_still_die_with_their_task() {
    for (what, then, expect) in [
        ("completed", "echo finished", "TASK_STATE_COMPLETED"),
        (
            "killed by the ladder",
            "trap '' TERM\nwhile :; do sleep 1; done",
            "TASK_STATE_CANCELED",
        ),
    ] {
        let tmp = common::TempDir::new("nochildren");
        let prog = escapee_script(&tmp.0, then);
        let socket = tmp.0.join("a.sock");
        let d = Daemon::start_env(
            common::TempDir::new("nochildren-d"),
            socket,
            &[
                "--exec",
                prog.to_str().unwrap(),
                "--set",
                "tasks.cgroup=off",
                "--set",
                "tasks.cancel_grace_ms=100",
                "--set",
                "tasks.term_grace_ms=200",
            ],
            &[("RUST_LOG", "debug"), ("AGENTD_TEST_NO_CHILDREN_FILE", "1")],
        );
        assert!(
            wait_for(Duration::from_secs(5), || d
                .log_text()
                .contains("procman.containment children=proc-scan")),
            "the start-up log names the fallback:\n{}",
            d.log_text()
        );
        let t = if expect == "TASK_STATE_COMPLETED" {
            d.ok("SendMessage", json!({"message": user_message("x")}))["task"].clone()
        } else {
            let id = d.send_async("x");
            task_pids(&tmp.0, 1);
            d.ok("CancelTask", json!({"id": id}))
        };
        assert_eq!(t["status"]["state"], expect, "{what}: {t}");
        let pids = task_pids_any(&tmp.0);
        assert_eq!(
            survivors(&pids),
            Vec::<i32>::new(),
            "{what}: escapees outlived their task with children found by /proc scan; log:\n{}",
            d.log_text()
        );
    }
}

/// The slot number (`slot-N`) a task's program found itself in: the
/// first line of its output, its cgroup v2 path.
fn slot_of(task: &serde_json::Value) -> u32 {
    let text = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap_or("");
    let line = text.lines().next().unwrap_or("");
    line.rsplit_once("/slot-")
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no slot in the program's output: {task}"))
}

/// "A slot in which something was left to kill when its task ended (an
/// escapee, a process the ladder's SIGKILL found) is removed instead, and
/// the next worker gets a new slot-N": a slot is reused after a task that
/// ended by itself; after a task whose program ignored SIGTERM and left an
/// escapee in another session, the ladder's SIGKILL to the process group
/// leaves the escapee for the cgroup's kill (cgroup.kill written in the
/// slot): that slot is gone, and the next task runs in a new one.
#[test]
fn a_slot_the_ladder_killed_in_is_removed_and_the_next_worker_gets_a_new_one() {
    let test = "a_slot_the_ladder_killed_in_is_removed_and_the_next_worker_gets_a_new_one";
    let Some(base) = private_cgroup(test) else { return };
    let tmp = common::TempDir::new("slots");
    let prog = common::script(
        &tmp.0,
        "slot.sh",
        "read l\ngrep '^0::' /proc/self/cgroup\n\
         case \"$l\" in stubborn) trap '' TERM; setsid sleep 600 & echo \"ready $!\"; \
         while :; do sleep 0.05; done ;; esac",
    );
    let set = format!("tasks.cgroup={}", base.0.display());
    let d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        &set,
        // Workers take their slot when asked for: no idle worker holds one.
        "--set",
        "tasks.prespawn=0",
        "--set",
        "tasks.cancel_grace_ms=100",
        "--set",
        "tasks.term_grace_ms=200",
    ]);
    let parent = base.0.join(format!("agentd-{}", d.pid()));
    let slot_dir = |n: u32| parent.join(format!("slot-{n}"));
    let plain = || {
        let r = d.ok("SendMessage", json!({"message": user_message("plain")}));
        assert_eq!(r["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        slot_of(&r["task"])
    };
    let first = plain();
    assert_eq!(plain(), first, "a slot left empty is reused");

    let id = d.send_async("stubborn");
    let mut task = json!(null);
    assert!(
        wait_for(Duration::from_secs(10), || {
            task = d.ok("GetTask", json!({"id": id}));
            task["artifacts"][0]["parts"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("ready"))
        }),
        "the stubborn program never said ready: {task}"
    );
    let killed_in = slot_of(&task);
    let text = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap_or("");
    let escapee: i32 = text
        .lines()
        .find_map(|l| l.strip_prefix("ready "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no escapee pid: {text}"));
    assert!(alive(escapee));
    assert_eq!(killed_in, first, "the stubborn task reuses the free slot too");
    let t = d.ok("CancelTask", json!({"id": id}));
    assert_eq!(t["status"]["state"], "TASK_STATE_CANCELED", "{t}");
    let log = d.log_text();
    assert!(
        log.contains(&format!("task.ladder task={id}")) && log.contains("rung=SIGKILL"),
        "the program that ignores SIGTERM met no SIGKILL:\n{log}"
    );
    // Its slot is removed by the time the task is CANCELED: nothing of it
    // is left, and no worker is put in it again.
    assert!(!slot_dir(killed_in).exists(), "slot-{killed_in} is still there:\n{log}");
    assert!(
        log.contains(&format!("cgroup.retire slot={killed_in} (killed in)")),
        "{log}"
    );
    assert!(
        wait_for(Duration::from_secs(5), || !alive(escapee)),
        "the escapee {escapee} outlived its task"
    );

    let next = plain();
    assert_ne!(
        next, killed_in,
        "the next worker went into the slot a kill was written in"
    );
    assert!(
        next > first,
        "the next worker gets a new slot-N, not an old one: slot-{next}"
    );
    assert!(slot_dir(next).is_dir(), "{}", slot_dir(next).display());
    eprintln!("slot-{first} used twice, killed in, removed; the next task ran in slot-{next}");
}

/// A program (python) that starts as many threads as its first line asks,
/// says how many it had, and prints its cgroups first.
fn threads_program(dir: &Path) -> PathBuf {
    let py = dir.join("threads.py");
    std::fs::write(
        &py,
        r#"import sys, threading
threading.stack_size(64 * 1024)
want = int(sys.stdin.readline())
go = threading.Event()
started = []
try:
    for _ in range(want):
        t = threading.Thread(target=go.wait)
        t.start()
        started.append(t)
    print("threads", len(started), flush=True)
except RuntimeError as e:
    print("threads stopped at", len(started), e, flush=True)
go.set()
for t in started:
    t.join()
"#,
    )
    .unwrap();
    common::script(
        dir,
        "threads.sh",
        &format!(
            "grep -E '^[0-9]+:(pids|memory):|^0::' /proc/self/cgroup\nexec python3 {}",
            py.display()
        ),
    )
}

/// The cgroup directory a program named for `controller` in its output
/// (`N:pids:/path`, `0::/path` for v2), joined to that hierarchy's mount.
fn program_cgroup(output: &str, controller: &str) -> Option<PathBuf> {
    let rel = output.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, c, p) = (f.next()?, f.next()?, f.next()?);
        (c == controller).then(|| p.trim_start_matches('/').to_string())
    })?;
    let own = common::own_cgroup(controller)?;
    // Our own cgroup in that hierarchy, minus its path: the mount.
    let own_rel = std::fs::read_to_string("/proc/self/cgroup")
        .ok()?
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, c, p) = (f.next()?, f.next()?, f.next()?);
            (c == controller).then(|| p.trim_start_matches('/').to_string())
        })?;
    let mut mount = own;
    for _ in Path::new(&own_rel).components() {
        mount.pop();
    }
    Some(mount.join(rel))
}

/// `tasks.pids_max`: "auto is 1024 where agentd's cgroup v2 slots enforce
/// it (the pids controller delegated to them) and no limit elsewhere, so a
/// hybrid host pays no cgroup v1 move unless asked; a number applies
/// everywhere". A program asks for 1100 threads. Where v2 offers no pids
/// controller (this hybrid host, CI's too), `auto` limits nothing: no v1
/// move (isolation without cgroup1-pids, the program in no slot of the v1
/// pids hierarchy), and all 1100 start. Where it does, `auto` means 1024 in
/// the v2 slot, and the program is stopped (exhausted). The number 1024
/// applies here too, through a v1 pids slot (with the memory limit through
/// a v1 memory slot), and stops the same program.
#[test]
fn pids_max_auto_limits_only_where_v2_enforces_it_and_a_number_applies_everywhere() {
    let test = "pids_max_auto_limits_only_where_v2_enforces_it_and_a_number_applies_everywhere";
    if std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_err()
    {
        return common::skip_or_fail(test, "python3 is not installed");
    }
    let tmp = common::TempDir::new("pids-auto");
    let prog = threads_program(&tmp.0);
    let run = |d: &Daemon| {
        let r = d.ok("SendMessage", json!({"message": user_message("1100")}));
        let task = r["task"].clone();
        let text = task["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string();
        (task, text)
    };

    let d = Daemon::start(&["--exec", prog.to_str().unwrap(), "--set", "tasks.prespawn=0"]);
    let isolation = common::isolation(&d);
    if !isolation.contains("cgroup2") {
        return common::skip_or_fail(test, &format!("agentd makes no cgroup v2 slots here ({isolation})"));
    }
    let v2_parent = common::own_cgroup("").unwrap().join(format!("agentd-{}", d.pid()));
    let delegated = std::fs::read_to_string(v2_parent.join("cgroup.subtree_control")).unwrap_or_default();
    let (task, text) = run(&d);
    let v2_slot = program_cgroup(&text, "").unwrap_or_else(|| panic!("no v2 cgroup in: {text}"));
    assert!(
        v2_slot.starts_with(&v2_parent),
        "{} not in {}",
        v2_slot.display(),
        v2_parent.display()
    );
    if delegated.split_whitespace().any(|c| c == "pids") {
        // A pure v2 host with pids delegated: auto is 1024, in the slot.
        assert_eq!(
            std::fs::read_to_string(v2_slot.join("pids.max"))
                .unwrap_or_default()
                .trim(),
            "1024"
        );
        assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
        assert_eq!(common::terminal_cause(&task), "exhausted", "{task}");
    } else {
        // No v2 pids controller: auto limits nothing and moves nothing.
        assert!(!isolation.contains("cgroup1-pids"), "{isolation}");
        assert!(!v2_slot.join("pids.max").exists(), "{}", v2_slot.display());
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
        assert!(text.contains("threads 1100"), "auto limited the threads: {text}");
        let v1 = program_cgroup(&text, "pids").unwrap_or_else(|| panic!("no pids cgroup in: {text}"));
        assert!(
            !v1.to_string_lossy().contains("agentd-"),
            "auto moved the worker into a v1 pids slot: {}",
            v1.display()
        );
    }
    drop(d);

    // A number applies everywhere: here through the v1 pids hierarchy.
    const MEMORY: u64 = 256 * 1024 * 1024;
    let d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        "tasks.prespawn=0",
        "--set",
        "tasks.pids_max=1024",
        "--set",
        &format!("tasks.memory_max_bytes={MEMORY}"),
    ]);
    let isolation = common::isolation(&d);
    let (task, text) = run(&d);
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert_eq!(common::terminal_cause(&task), "exhausted", "{task}");
    assert!(
        common::status_text(&task).contains("1024"),
        "the limit in force is named: {task}"
    );
    let stopped = text.lines().find(|l| l.starts_with("threads stopped at "));
    assert!(stopped.is_some(), "the program was not refused a thread: {text}");
    if !delegated.split_whitespace().any(|c| c == "pids") {
        assert!(isolation.contains("cgroup1-pids"), "{isolation}");
        assert!(isolation.contains("cgroup1-memory"), "{isolation}");
        let pids = program_cgroup(&text, "pids").unwrap_or_else(|| panic!("no pids cgroup in: {text}"));
        assert!(
            pids.to_string_lossy().contains(&format!("agentd-{}/slot-", d.pid())),
            "{}",
            pids.display()
        );
        let memory = program_cgroup(&text, "memory").unwrap_or_else(|| panic!("no memory cgroup in: {text}"));
        assert!(
            memory.to_string_lossy().contains(&format!("agentd-{}/slot-", d.pid())),
            "{}",
            memory.display()
        );
        // The slots live on (reused): their limits are still there to read.
        assert_eq!(std::fs::read_to_string(pids.join("pids.max")).unwrap().trim(), "1024");
        assert_eq!(
            std::fs::read_to_string(memory.join("memory.limit_in_bytes"))
                .unwrap()
                .trim(),
            MEMORY.to_string()
        );
    }
    eprintln!("isolation {isolation}; {}", stopped.unwrap_or(""));
}
