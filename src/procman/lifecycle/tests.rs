//! Table tests of the lifecycle: every path a worker can take, as scripts
//! of (ms, event), without a process.

use super::*;
use crate::control::{Outcome, Progress};
use crate::wire::TaskState;

type Action = WorkerAction;
type Life = WorkerLife;
type Phase = WorkerPhase;

/// Any frame: it is alive (and read its spawn).
fn heard() -> WorkerEvent {
    Said(FromWorker::Pong)
}

/// It asks for input.
fn asked() -> WorkerEvent {
    Said(FromWorker::Status {
        state: Progress::InputRequired,
        text: None,
    })
}

/// It says it works again.
fn resumed() -> WorkerEvent {
    Said(FromWorker::Status {
        state: Progress::Working,
        text: None,
    })
}

/// Its `done` frame, carrying `e`.
fn reported(e: Ending) -> WorkerEvent {
    let outcome = match e.state {
        TaskState::Completed => Outcome::Completed,
        TaskState::Rejected => Outcome::Rejected,
        TaskState::Canceled => Outcome::Canceled,
        _ => Outcome::Failed,
    };
    Said(FromWorker::Done {
        outcome,
        cause: e.cause,
        text: e.text,
    })
}

/// Its exit (whether its channel is still open is filled in by `walk`).
fn exited(exit: ExitStatus) -> WorkerEvent {
    Exited {
        exit,
        channel_open: true,
    }
}

const MS: Duration = Duration::from_millis(1);

fn timing() -> Timing {
    Timing {
        cancel_grace: 1000 * MS,
        term_grace: 2000 * MS,
        ping_every: 5000 * MS,
        stall_after: 15000 * MS,
        input_idle: 60000 * MS,
        exit_grace: 1000 * MS,
        drain: 1000 * MS,
        group_poll: 20 * MS,
        // Far away, so scripts that do not test it need no `Took`.
        take_within: 1_000_000 * MS,
    }
}

fn assigned() -> WorkerEvent {
    Assigned {
        task: "t".into(),
        deadline: None,
    }
}

/// The sweep that finds nothing left (no cgroup).
fn empty() -> WorkerEvent {
    Swept {
        left: false,
        counters: None,
    }
}

fn ok() -> Ending {
    Ending::reported(Outcome::Completed, Cause::Completed, None)
}

fn stop(cause: Cause) -> super::Stop {
    super::Stop { cause, why: None }
}

fn ending(state: TaskState, cause: Cause, text: Option<&str>) -> Option<Ending> {
    Some(Ending {
        state,
        cause,
        text: text.map(String::from),
    })
}

/// Walks a script of (ms after start, event) and returns every action
/// with the time it was asked for, plus the final phase.
fn walk(script: &[(u64, WorkerEvent)]) -> (Vec<(u64, Action)>, Life) {
    walk_with_deadline(script, None)
}

/// The same, for a task with a wall-clock budget of `deadline_ms` (given
/// to its `Assigned`).
fn walk_with_deadline(script: &[(u64, WorkerEvent)], deadline_ms: Option<u64>) -> (Vec<(u64, Action)>, Life) {
    walk_life(script, deadline_ms, false)
}

/// `contained`: the worker has a cgroup of its own.
fn walk_life(script: &[(u64, WorkerEvent)], deadline_ms: Option<u64>, contained: bool) -> (Vec<(u64, Action)>, Life) {
    let t0 = Instant::now();
    let mut life = Life::idle(1, contained, t0, timing());
    let mut out = Vec::new();
    // The channel's own flag, as the driver reads it for an exit.
    let mut open = true;
    for (ms, ev) in script {
        let now = t0 + Duration::from_millis(*ms);
        let ev = match ev {
            Assigned { task, .. } => Assigned {
                task: task.clone(),
                deadline: deadline_ms.map(|d| t0 + Duration::from_millis(d)),
            },
            ChannelClosed { broken } => {
                open = false;
                ChannelClosed { broken: *broken }
            }
            Exited { exit, .. } => Exited {
                exit: *exit,
                channel_open: open,
            },
            other => other.clone(),
        };
        let assigned = matches!(ev, Assigned { .. });
        for a in life.step(ev, now) {
            out.push((*ms, a));
        }
        if assigned {
            // The worker read its task (the take path has tests of its own).
            assert_eq!(life.step(Took, now), vec![]);
        }
    }
    (out, life)
}

/// The `Finish` the script ends with, if any.
fn finish_of(actions: &[(u64, Action)]) -> Option<Option<Ending>> {
    actions.iter().find_map(|(_, a)| match a {
        Action::Finish { ended, .. } => Some(ended.as_ref().map(|(_, e)| e.clone())),
        _ => None,
    })
}

use WorkerEvent::*;

#[test]
fn every_path_ends_with_the_right_verdict() {
    let exit0 = exited(ExitStatus::Code(0));
    let closed = ChannelClosed { broken: false };
    type Row = (&'static str, Vec<(u64, WorkerEvent)>, Option<Ending>);
    let rows: Vec<Row> = vec![
        (
            "completed",
            vec![
                (0, assigned()),
                (5, reported(ok())),
                (6, closed.clone()),
                (7, exit0.clone()),
                (8, empty()),
            ],
            Some(ok()),
        ),
        (
            "failed, reported",
            vec![
                (0, assigned()),
                (
                    5,
                    reported(Ending::reported(Outcome::Failed, Cause::Failed, Some("no".into()))),
                ),
                (7, exited(ExitStatus::Code(0))),
                (8, closed.clone()),
                (9, empty()),
            ],
            ending(TaskState::Failed, Cause::Failed, Some("no")),
        ),
        (
            "rejected",
            vec![
                (0, assigned()),
                (1, reported(Ending::reported(Outcome::Rejected, Cause::Refused, None))),
                (2, closed.clone()),
                (3, exit0.clone()),
                (4, empty()),
            ],
            ending(TaskState::Rejected, Cause::Refused, None),
        ),
        (
            "cancelled at the first rung (the worker obeys the frame)",
            vec![
                (0, assigned()),
                (10, Stop(stop(Cause::Canceled))),
                (20, reported(Ending::reported(Outcome::Canceled, Cause::Canceled, None))),
                (21, closed.clone()),
                (22, exit0.clone()),
                (23, empty()),
            ],
            ending(TaskState::Canceled, Cause::Canceled, None),
        ),
        (
            "cancelled at SIGTERM",
            vec![
                (0, assigned()),
                (10, Stop(stop(Cause::Canceled))),
                (1010, Tick),
                (1500, exited(ExitStatus::Signal(15))),
                (1501, closed.clone()),
                (1502, empty()),
            ],
            ending(TaskState::Canceled, Cause::Canceled, None),
        ),
        (
            "cancelled at SIGKILL",
            vec![
                (0, assigned()),
                (10, Stop(stop(Cause::Canceled))),
                (1010, Tick),
                (3010, Tick),
                (3011, exited(ExitStatus::Signal(9))),
                (3012, closed.clone()),
                (3013, empty()),
            ],
            ending(TaskState::Canceled, Cause::Canceled, None),
        ),
        (
            "deadline",
            vec![
                (0, assigned()),
                (100, Tick),
                (101, exit0.clone()),
                (102, closed.clone()),
                (103, empty()),
            ],
            ending(TaskState::Failed, Cause::Deadline, None),
        ),
        (
            "stalled: a ping, then silence",
            vec![
                (0, assigned()),
                (5000, Tick),
                (20000, Tick),
                (20001, closed.clone()),
                (20002, exited(ExitStatus::Signal(9))),
                (20003, empty()),
            ],
            ending(TaskState::Failed, Cause::Stalled, None),
        ),
        (
            "crashed: exit without a result",
            vec![
                (0, assigned()),
                (5, exited(ExitStatus::Signal(11))),
                (6, closed.clone()),
                (7, empty()),
            ],
            ending(
                TaskState::Failed,
                Cause::Crashed,
                Some("the worker ended without a result: killed by signal 11 (SIGSEGV, exit status 139)"),
            ),
        ),
        (
            "exhausted (the cgroup said so)",
            vec![
                (0, assigned()),
                (
                    9,
                    Stop(super::Stop {
                        cause: Cause::Exhausted,
                        why: Some("hit tasks.pids_max".into()),
                    }),
                ),
                (10, exit0.clone()),
                (11, closed.clone()),
                (12, empty()),
            ],
            ending(TaskState::Failed, Cause::Exhausted, Some("hit tasks.pids_max")),
        ),
        (
            "shutdown",
            vec![
                (0, assigned()),
                (1, Stop(stop(Cause::Shutdown))),
                (2, exit0.clone()),
                (3, closed.clone()),
                (4, empty()),
            ],
            ending(TaskState::Canceled, Cause::Shutdown, None),
        ),
        (
            "broken channel: killed at once, crashed",
            vec![
                (0, assigned()),
                (3, ChannelClosed { broken: true }),
                (4, exited(ExitStatus::Signal(9))),
                (5, empty()),
            ],
            ending(
                TaskState::Failed,
                Cause::Crashed,
                Some("the worker ended without a result: killed by signal 9 (SIGKILL, exit status 137)"),
            ),
        ),
        (
            "exit before done: the done still read from the channel wins",
            vec![
                (0, assigned()),
                (5, exit0.clone()),
                (6, reported(ok())),
                (7, closed.clone()),
                (8, empty()),
            ],
            Some(ok()),
        ),
        (
            "exit after done, channel never closes: drained by time",
            vec![
                (0, assigned()),
                (5, reported(ok())),
                (6, exit0.clone()),
                (1006, Tick),
                (1007, empty()),
            ],
            Some(ok()),
        ),
        (
            "a stop after done changes nothing",
            vec![
                (0, assigned()),
                (5, reported(ok())),
                (6, Stop(stop(Cause::Canceled))),
                (7, exit0.clone()),
                (8, closed.clone()),
                (9, empty()),
            ],
            Some(ok()),
        ),
        (
            "input-required, a follow-up, then completed",
            vec![
                (0, assigned()),
                (5, asked()),
                (59000, Tick),
                (59001, resumed()),
                (59002, reported(ok())),
                (59003, closed.clone()),
                (59004, exit0.clone()),
                (59005, empty()),
            ],
            Some(ok()),
        ),
        (
            "nobody answers the question: idle",
            vec![
                (0, assigned()),
                (5, asked()),
                (60005, Tick),
                (60006, exit0.clone()),
                (60007, closed.clone()),
                (60008, empty()),
            ],
            ending(TaskState::Failed, Cause::Idle, None),
        ),
        (
            "it stops reading its channel: stalled, SIGTERM at once",
            vec![
                (0, assigned()),
                (1, Unwritable),
                (2, exited(ExitStatus::Signal(15))),
                (3, closed.clone()),
                (4, empty()),
            ],
            ending(
                TaskState::Failed,
                Cause::Stalled,
                Some("failed: the worker stopped reading its control channel"),
            ),
        ),
        (
            "an idle worker that dies has no task",
            vec![(0, exited(ExitStatus::Code(1))), (1, closed.clone()), (2, empty())],
            None,
        ),
    ];
    for (name, script, want) in rows {
        let mut script = script;
        script.insert(0, (0, Tick)); // an idle tick is a no-op
                                     // The deadline row's budget is 100 ms; the others have none.
        let deadline = (name == "deadline").then_some(100);
        let (actions, life) = walk_with_deadline(&script, deadline);
        assert_eq!(finish_of(&actions), Some(want), "{name}: actions {actions:?}");
        assert!(life.is_finished(), "{name}: ends Finished, is {:?}", life.phase());
    }
}

#[test]
fn the_ladder_climbs_on_time() {
    let (actions, _) = walk(&[
        (0, assigned()),
        (10, Stop(stop(Cause::Canceled))),
        (500, Tick),
        (1010, Tick),
        (2000, Tick),
        (3010, Tick),
        (3030, Tick),
    ]);
    let rungs: Vec<(u64, Action)> = actions
        .into_iter()
        .filter(|(_, a)| !matches!(a, Action::Note(_)))
        .collect();
    assert_eq!(
        rungs,
        vec![
            (10, Action::SendCancel),
            (1010, Action::Terminate),
            (3010, Action::Kill),
            (3030, Action::Kill),
        ]
    );
}

#[test]
fn any_frame_is_life() {
    let t0 = Instant::now();
    let mut life = Life::idle(1, false, t0, timing());
    life.step(assigned(), t0);
    life.step(Took, t0);
    // A busy worker whose pong is late but whose artifacts keep coming
    // is never stalled.
    assert_eq!(life.step(Tick, t0 + 5000 * MS), vec![Action::SendPing]);
    for s in 6..40 {
        life.step(heard(), t0 + s * 1000 * MS);
        assert!(!life
            .step(Tick, t0 + s * 1000 * MS + 500 * MS)
            .contains(&Action::SendCancel));
    }
    assert!(life.is_running());
    // One ping per silence, not one per tick.
    let mut life = Life::idle(1, false, t0, timing());
    life.step(assigned(), t0);
    life.step(Took, t0);
    assert_eq!(life.step(Tick, t0 + 5000 * MS), vec![Action::SendPing]);
    assert_eq!(life.step(Tick, t0 + 6000 * MS), vec![]);
    assert_eq!(life.next_due(), Some(t0 + 20000 * MS));
}

#[test]
fn a_second_sigterm_skips_to_sigkill() {
    let (actions, life) = walk(&[
        (0, assigned()),
        (1, Stop(stop(Cause::Shutdown))),
        (2, KillNow(stop(Cause::Shutdown))),
    ]);
    assert_eq!(actions.last(), Some(&(2, Action::Kill)));
    assert!(matches!(life.phase(), Phase::Stopping { rung: Rung::Killed, .. }));
}

#[test]
fn a_lingering_group_is_killed_until_empty() {
    let (actions, life) = walk(&[
        (0, assigned()),
        (1, reported(ok())),
        (2, ChannelClosed { broken: false }),
        (3, exited(ExitStatus::Code(0))),
        (23, Tick),
        (43, Tick),
    ]);
    let sweeps = actions
        .iter()
        .filter(|(_, a)| *a == Action::Sweep { adopted: false })
        .count();
    assert_eq!(sweeps, 3);
    assert!(matches!(life.phase(), Phase::Emptying { .. }));
}

#[test]
fn a_worker_that_reports_but_never_exits_is_killed() {
    let (actions, _) = walk(&[(0, assigned()), (1, reported(ok())), (500, Tick), (1001, Tick)]);
    assert_eq!(actions, vec![(1001, Action::Note("exit_grace")), (1001, Action::Kill)]);
}

#[test]
fn next_due_follows_the_phase() {
    let t0 = Instant::now();
    let mut life = Life::idle(1, false, t0, timing());
    assert_eq!(life.next_due(), None);
    life.step(assigned(), t0);
    assert_eq!(
        life.next_due(),
        Some(t0 + 1_000_000 * MS),
        "until it reads: the take check"
    );
    life.step(heard(), t0);
    assert_eq!(life.next_due(), Some(t0 + 5000 * MS), "once it has: the ping");
    let mut life = Life::idle(1, false, t0, timing());
    let deadline = Some(t0 + 100 * MS);
    life.step(
        Assigned {
            task: "t".into(),
            deadline,
        },
        t0,
    );
    assert_eq!(life.next_due(), deadline, "the deadline came with the task");
    life.step(Stop(stop(Cause::Canceled)), t0 + 10 * MS);
    assert_eq!(life.next_due(), Some(t0 + 1010 * MS));
}

fn counters(pids_refused: u64, out_of_memory: bool) -> Option<super::Counters> {
    Some(super::Counters {
        pids_refused,
        pids_max: 64,
        out_of_memory,
    })
}

#[test]
fn the_final_sweep_decides_with_the_cgroup_counters() {
    let exit0 = exited(ExitStatus::Code(0));
    let closed = ChannelClosed { broken: false };
    let swept = |c| Swept {
        left: false,
        counters: c,
    };
    let bomb = "the task hit tasks.pids_max (64 processes) 3 time(s): a fork bomb?";
    let oom = "out of memory: the task went over tasks.memory_max_bytes";
    type Row = (&'static str, Vec<(u64, WorkerEvent)>, Option<Ending>);
    let rows: Vec<Row> = vec![
        (
            "completed, counters clean",
            vec![
                (0, assigned()),
                (1, reported(ok())),
                (2, closed.clone()),
                (3, exit0.clone()),
                (4, swept(counters(0, false))),
            ],
            Some(ok()),
        ),
        (
            "completed, but forks were refused",
            vec![
                (0, assigned()),
                (1, reported(ok())),
                (2, closed.clone()),
                (3, exit0.clone()),
                (4, swept(counters(3, false))),
            ],
            ending(TaskState::Failed, Cause::Exhausted, Some(bomb)),
        ),
        (
            "cancelled: refused forks change nothing",
            vec![
                (0, assigned()),
                (1, Stop(stop(Cause::Canceled))),
                (2, exit0.clone()),
                (3, closed.clone()),
                (4, swept(counters(3, false))),
            ],
            ending(TaskState::Canceled, Cause::Canceled, None),
        ),
        (
            "cancelled, but the OOM killer struck: out of memory wins",
            vec![
                (0, assigned()),
                (1, Stop(stop(Cause::Canceled))),
                (2, exit0.clone()),
                (3, closed.clone()),
                (4, swept(counters(0, true))),
            ],
            ending(TaskState::Failed, Cause::Exhausted, Some(oom)),
        ),
        (
            "out of memory over refused forks",
            vec![
                (0, assigned()),
                (1, exit0.clone()),
                (2, closed.clone()),
                (3, swept(counters(3, true))),
            ],
            ending(TaskState::Failed, Cause::Exhausted, Some(oom)),
        ),
        (
            "a fork bomb seen while running: stopped through the ladder",
            vec![
                (0, assigned()),
                (250, Counters(counters(3, false).unwrap())),
                (
                    251,
                    reported(Ending::reported(Outcome::Canceled, Cause::Canceled, None)),
                ),
                (252, closed.clone()),
                (253, exit0.clone()),
                (254, swept(counters(3, false))),
            ],
            ending(TaskState::Failed, Cause::Exhausted, Some(bomb)),
        ),
    ];
    for (name, script, want) in rows {
        let (actions, life) = walk_life(&script, None, true);
        assert_eq!(finish_of(&actions), Some(want), "{name}: actions {actions:?}");
        assert!(life.is_finished(), "{name}: {:?}", life.phase());
    }
}

#[test]
fn counters_while_running_stop_a_fork_bomb_and_nothing_else() {
    let (actions, life) = walk_life(
        &[(0, assigned()), (250, Counters(counters(0, false).unwrap()))],
        None,
        true,
    );
    assert!(actions.is_empty(), "clean counters: {actions:?}");
    assert!(life.is_running());
    let (actions, life) = walk_life(
        &[(0, assigned()), (250, Counters(counters(2, false).unwrap()))],
        None,
        true,
    );
    assert_eq!(actions, vec![(250, Action::SendCancel)]);
    match life.phase() {
        Phase::Stopping {
            task: Some((_, stop)), ..
        } => {
            assert_eq!(stop.cause, Cause::Exhausted);
            assert!(stop.why.as_deref().unwrap().contains("2 time(s)"), "{stop:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn something_left_at_a_sweep_is_killed_and_swept_again() {
    let (actions, life) = walk(&[
        (0, assigned()),
        (1, reported(ok())),
        (2, ChannelClosed { broken: false }),
        (3, exited(ExitStatus::Code(0))),
        (
            4,
            Swept {
                left: true,
                counters: None,
            },
        ),
        (24, Tick),
        (25, empty()),
    ]);
    let after_exit: Vec<&Action> = actions.iter().filter(|(ms, _)| *ms >= 3).map(|(_, a)| a).collect();
    assert_eq!(
        after_exit[..3],
        [
            &Action::Sweep { adopted: false },
            &Action::Kill,
            &Action::Sweep { adopted: false },
        ]
    );
    assert_eq!(after_exit.len(), 4);
    assert_eq!(finish_of(&actions), Some(Some(ok())));
    assert!(life.is_finished());
}

#[test]
fn escapees_are_looked_for_only_without_a_cgroup_after_a_sigkill() {
    let killed = |contained| {
        let (actions, _) = walk_life(
            &[
                (0, assigned()),
                (1, ChannelClosed { broken: false }),
                (2, exited(ExitStatus::Signal(libc::SIGKILL))),
            ],
            None,
            contained,
        );
        actions.last().cloned()
    };
    assert_eq!(killed(false), Some((2, Action::Sweep { adopted: true })));
    assert_eq!(killed(true), Some((2, Action::Sweep { adopted: false })));
    let (actions, _) = walk(&[
        (0, assigned()),
        (1, ChannelClosed { broken: false }),
        (2, exited(ExitStatus::Code(3))),
    ]);
    assert_eq!(
        actions.last(),
        Some(&(2, Action::Sweep { adopted: false })),
        "it exited itself"
    );
}

#[test]
fn a_task_the_worker_never_read_goes_back_and_the_worker_ends_without_it() {
    let mut t = timing();
    t.take_within = 1000 * MS;
    let t0 = Instant::now();
    let mut life = Life::idle(7, false, t0, t);
    life.step(assigned(), t0);
    assert_eq!(life.next_due(), Some(t0 + 1000 * MS), "the take check comes first");
    assert_eq!(life.step(Tick, t0 + 1000 * MS), vec![Action::CheckTaken]);
    assert_eq!(
        life.step(Untouched, t0 + 1000 * MS),
        vec![Action::GiveBack("t".into()), Action::Kill]
    );
    assert_eq!(life.task(), None, "the task is no longer this worker's");
    life.step(exited(ExitStatus::Signal(9)), t0 + 1001 * MS);
    life.step(ChannelClosed { broken: false }, t0 + 1002 * MS);
    let last = life.step(empty(), t0 + 1003 * MS);
    assert_eq!(
        last,
        vec![Action::Finish {
            ended: None,
            exit: ExitStatus::Signal(9)
        }]
    );
}

#[test]
fn a_worker_that_read_its_task_is_not_asked_again() {
    let mut t = timing();
    t.take_within = 1000 * MS;
    let t0 = Instant::now();
    // Told so by the driver.
    let mut life = Life::idle(7, false, t0, t);
    life.step(assigned(), t0);
    assert_eq!(life.step(Tick, t0 + 1000 * MS), vec![Action::CheckTaken]);
    assert_eq!(life.step(Took, t0 + 1000 * MS), vec![]);
    assert!(matches!(life.phase(), Phase::Running { taken: true, .. }));
    assert_eq!(life.next_due(), Some(t0 + 5000 * MS), "only the ping is due");
    // Or it spoke: any frame means it read its spawn.
    let mut life = Life::idle(7, false, t0, t);
    life.step(assigned(), t0);
    life.step(heard(), t0 + 10 * MS);
    assert!(matches!(life.phase(), Phase::Running { taken: true, .. }));
    assert_eq!(life.step(Tick, t0 + 1000 * MS), vec![]);
    // Untouched after it took the task is nonsense and changes nothing.
    assert_eq!(life.step(Untouched, t0 + 1001 * MS), vec![]);
    assert!(life.is_running());
}

#[test]
fn an_idle_worker_that_is_stopped_is_no_longer_idle() {
    let (actions, life) = walk(&[(0, Stop(stop(Cause::Shutdown)))]);
    assert_eq!(actions, vec![(0, Action::Kill)]);
    assert!(!life.is_idle(), "a retired worker must not be given a task");
    let (actions, life) = walk(&[(0, Stop(stop(Cause::Shutdown))), (1, assigned())]);
    assert_eq!(
        actions,
        vec![(0, Action::Kill)],
        "and an assignment then changes nothing"
    );
    assert_eq!(life.task(), None);
}

#[test]
fn kill_now_while_running_kills_at_once() {
    let (actions, life) = walk(&[(0, assigned()), (5, KillNow(stop(Cause::Shutdown)))]);
    assert_eq!(actions, vec![(5, Action::Kill)]);
    assert!(matches!(life.phase(), Phase::Stopping { rung: Rung::Killed, .. }));
}

#[test]
fn unexpected_events_change_nothing() {
    for (phase_script, event) in [
        (vec![], reported(ok())),
        (vec![], empty()),
        (vec![(0, assigned())], empty()),
        (vec![(0, assigned()), (1, reported(ok()))], asked()),
    ] {
        let (_, mut life) = walk(&phase_script);
        let before = life.phase().clone();
        let actions = life.step(event.clone(), Instant::now());
        assert_eq!(actions, vec![], "{event:?} in {before:?}");
        assert_eq!(life.phase(), &before, "{event:?} in {before:?}");
    }
}

#[test]
fn a_worker_that_has_not_read_its_task_is_never_stalled_only_asked() {
    // Pings and stalls faster than take_within (as the chaos soak runs):
    // the take check still waits for take_within (a worker only slow to be
    // scheduled is not killed at a 1 ms ping interval), and no stall is judged.
    let mut t = timing();
    t.take_within = 1000 * MS;
    t.ping_every = MS;
    t.stall_after = MS;
    let t0 = Instant::now();
    let mut life = Life::idle(7, false, t0, t);
    life.step(assigned(), t0);
    assert_eq!(life.next_due(), Some(t0 + 1000 * MS));
    for ms in [1, 2, 500, 999] {
        assert_eq!(life.step(Tick, t0 + ms * MS), vec![], "{ms} ms");
    }
    assert_eq!(life.step(Tick, t0 + 1000 * MS), vec![Action::CheckTaken]);
    for ms in [1500, 2000, 5000] {
        let actions = life.step(Tick, t0 + ms * MS);
        assert!(
            !actions.contains(&Action::SendCancel) && !actions.contains(&Action::SendPing),
            "{ms} ms: {actions:?}"
        );
    }
    assert_eq!(
        life.step(Untouched, t0 + 5000 * MS),
        vec![Action::GiveBack("t".into()), Action::Kill]
    );
}

/// A life in each phase (and the sub-states that decide differently),
/// reached by the events that lead there, at t0.
fn lives(t0: Instant) -> Vec<(&'static str, Life)> {
    let walk_to = |events: Vec<WorkerEvent>| {
        let mut life = Life::idle(1, false, t0, timing());
        for e in events {
            life.step(e, t0);
        }
        life
    };
    let run = || vec![assigned(), Took];
    let with = |mut base: Vec<WorkerEvent>, more: Vec<WorkerEvent>| {
        base.extend(more);
        base
    };
    let open_exit = Exited {
        exit: ExitStatus::Code(0),
        channel_open: true,
    };
    vec![
        ("idle", walk_to(vec![])),
        ("running, spawn unread", walk_to(vec![assigned()])),
        ("running", walk_to(run())),
        ("waiting for input", walk_to(with(run(), vec![asked()]))),
        ("reported", walk_to(with(run(), vec![reported(ok())]))),
        ("stopping", walk_to(with(run(), vec![Stop(stop(Cause::Canceled))]))),
        ("killing", walk_to(with(run(), vec![KillNow(stop(Cause::Shutdown))]))),
        ("retiring", walk_to(vec![Retire])),
        ("draining", walk_to(with(run(), vec![open_exit.clone()]))),
        (
            "draining, reported",
            walk_to(with(run(), vec![reported(ok()), open_exit.clone()])),
        ),
        (
            "emptying",
            walk_to(with(run(), vec![open_exit.clone(), ChannelClosed { broken: false }])),
        ),
        (
            "finished",
            walk_to(with(run(), vec![open_exit, ChannelClosed { broken: false }, empty()])),
        ),
    ]
}

/// One sample of every event, in the forms that decide differently.
fn events() -> Vec<(&'static str, WorkerEvent)> {
    let status = |state| {
        Said(FromWorker::Status {
            state,
            text: Some("s".into()),
        })
    };
    let artifact = crate::wire::Artifact {
        artifact_id: "a".into(),
        name: None,
        description: None,
        parts: vec![crate::wire::Part::text("out")],
        metadata: None,
        extensions: Vec::new(),
    };
    let message = crate::wire::Message {
        message_id: "m".into(),
        context_id: None,
        task_id: None,
        role: crate::wire::Role::User,
        parts: vec![crate::wire::Part::text("more")],
        metadata: None,
        extensions: vec![],
        reference_task_ids: vec![],
    };
    let counters = |pids_refused| super::Counters {
        pids_refused,
        pids_max: 64,
        out_of_memory: false,
    };
    vec![
        ("assigned", assigned()),
        ("hello", Said(FromWorker::Hello { pid: 1 })),
        ("pong", Said(FromWorker::Pong)),
        ("status working", status(Progress::Working)),
        ("status input-required", status(Progress::InputRequired)),
        (
            "artifact",
            Said(FromWorker::Artifact {
                artifact: Box::new(artifact),
                append: false,
                last_chunk: true,
            }),
        ),
        (
            "reply",
            Said(FromWorker::Reply {
                message: Box::new(message.clone()),
            }),
        ),
        ("done", reported(ok())),
        ("input", Input(Box::new(message))),
        ("stop", Stop(stop(Cause::Canceled))),
        ("kill-now", KillNow(stop(Cause::Shutdown))),
        ("retire", Retire),
        ("channel closed", ChannelClosed { broken: false }),
        ("channel broken", ChannelClosed { broken: true }),
        ("unwritable", Unwritable),
        ("unsendable", Unsendable("too big".into())),
        (
            "exited, channel open",
            Exited {
                exit: ExitStatus::Code(0),
                channel_open: true,
            },
        ),
        (
            "exited, channel closed",
            Exited {
                exit: ExitStatus::Code(0),
                channel_open: false,
            },
        ),
        ("took", Took),
        ("untouched", Untouched),
        ("counters clean", Counters(counters(0))),
        ("counters refused", Counters(counters(3))),
        ("swept empty", empty()),
        (
            "swept left",
            Swept {
                left: true,
                counters: None,
            },
        ),
        ("tick", Tick),
    ]
}

/// Which variant an event is: no wildcard, so a new event does not
/// compile here (nor in `step`) until it is given a decision and samples.
fn variant(e: &WorkerEvent) -> usize {
    match e {
        Assigned { .. } => 0,
        Said(_) => 1,
        Input(_) => 2,
        Stop(_) => 3,
        KillNow(_) => 4,
        Retire => 5,
        ChannelClosed { .. } => 6,
        Unwritable => 7,
        Unsendable(_) => 8,
        Exited { .. } => 9,
        Took => 10,
        Untouched => 11,
        Counters(_) => 12,
        Swept { .. } => 13,
        Tick => 14,
    }
}

/// The pairs that change nothing, on purpose, by phase: a frame that is
/// only life, an order or a frame that comes after the task's course is
/// set, input for a worker that no longer runs, an answer nobody asked
/// for, counters that are clean. A tick is here too: nothing is due at t0.
const IGNORED: &[(&str, &[&str])] = &[
    (
        "idle",
        &[
            "hello",
            "pong",
            "status working",
            "status input-required",
            "artifact",
            "reply",
            "done",
            "input",
            "unsendable",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "running, spawn unread",
        &["assigned", "counters clean", "swept empty", "swept left", "tick"],
    ),
    (
        "running",
        &[
            "assigned",
            "hello",
            "pong",
            "took",
            "untouched",
            "counters clean",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "waiting for input",
        &[
            "assigned",
            "hello",
            "pong",
            "took",
            "untouched",
            "counters clean",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "reported",
        &[
            "assigned",
            "hello",
            "pong",
            "status working",
            "status input-required",
            "done",
            "input",
            "stop",
            "retire",
            "channel closed",
            "unwritable",
            "unsendable",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "stopping",
        &[
            "assigned",
            "hello",
            "pong",
            "status working",
            "status input-required",
            "done",
            "input",
            "stop",
            "retire",
            "channel closed",
            "unsendable",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "killing",
        &[
            "assigned",
            "hello",
            "pong",
            "status working",
            "status input-required",
            "done",
            "input",
            "stop",
            "kill-now",
            "retire",
            "channel closed",
            "channel broken",
            "unwritable",
            "unsendable",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "retiring",
        &[
            "assigned",
            "hello",
            "pong",
            "status working",
            "status input-required",
            "artifact",
            "reply",
            "done",
            "input",
            "stop",
            "kill-now",
            "retire",
            "channel closed",
            "channel broken",
            "unwritable",
            "unsendable",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "draining",
        &[
            "assigned",
            "hello",
            "pong",
            "input",
            "stop",
            "kill-now",
            "retire",
            "unwritable",
            "unsendable",
            "exited, channel open",
            "exited, channel closed",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "draining, reported",
        &[
            "assigned",
            "hello",
            "pong",
            "status working",
            "status input-required",
            "done",
            "input",
            "stop",
            "kill-now",
            "retire",
            "unwritable",
            "unsendable",
            "exited, channel open",
            "exited, channel closed",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
    (
        "emptying",
        &[
            "assigned",
            "hello",
            "pong",
            "status working",
            "status input-required",
            "artifact",
            "reply",
            "done",
            "input",
            "stop",
            "kill-now",
            "retire",
            "channel closed",
            "channel broken",
            "unwritable",
            "unsendable",
            "exited, channel open",
            "exited, channel closed",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "tick",
        ],
    ),
    (
        "finished",
        &[
            "assigned",
            "hello",
            "pong",
            "status working",
            "status input-required",
            "artifact",
            "reply",
            "done",
            "input",
            "stop",
            "kill-now",
            "retire",
            "channel closed",
            "channel broken",
            "unwritable",
            "unsendable",
            "exited, channel open",
            "exited, channel closed",
            "took",
            "untouched",
            "counters clean",
            "counters refused",
            "swept empty",
            "swept left",
            "tick",
        ],
    ),
];

#[test]
fn every_phase_and_event_pair_is_decided_or_ignored_on_purpose() {
    let t0 = Instant::now();
    let samples = events();
    let mut seen: Vec<usize> = samples.iter().map(|(_, e)| variant(e)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, (0..15).collect::<Vec<_>>(), "a sample of every event");
    let mut no_ops = Vec::new();
    for (phase, life) in lives(t0) {
        for (name, event) in &samples {
            let mut after = life.clone();
            let actions = after.step(event.clone(), t0);
            if actions.is_empty() && after.phase() == life.phase() {
                no_ops.push((phase, *name));
            }
        }
    }
    let listed: Vec<(&str, &str)> = IGNORED
        .iter()
        .flat_map(|(phase, events)| events.iter().map(move |e| (*phase, *e)))
        .collect();
    let missing: Vec<_> = no_ops.iter().filter(|p| !listed.contains(p)).collect();
    let stale: Vec<_> = listed.iter().filter(|p| !no_ops.contains(p)).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ignored without being listed: {missing:#?}\nlisted but decided: {stale:#?}"
    );
}
