//! Table tests of the lifecycle: every path a worker can take, as scripts
//! of (ms, event), without a process.

use super::*;

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
fn walk(script: &[(u64, Event)]) -> (Vec<(u64, Action)>, Life) {
    walk_with_deadline(script, None)
}

fn walk_with_deadline(script: &[(u64, Event)], deadline_ms: Option<u64>) -> (Vec<(u64, Action)>, Life) {
    let t0 = Instant::now();
    let mut life = Life::idle(t0, timing());
    life.set_deadline(deadline_ms.map(|ms| t0 + Duration::from_millis(ms)));
    let mut out = Vec::new();
    for (ms, ev) in script {
        let now = t0 + Duration::from_millis(*ms);
        for a in life.step(ev.clone(), now) {
            out.push((*ms, a));
        }
    }
    (out, life)
}

/// The `Finish` the script ends with, if any.
fn finish_of(actions: &[(u64, Action)]) -> Option<Option<Ending>> {
    actions.iter().find_map(|(_, a)| match a {
        Action::Finish(e) => Some(e.clone()),
        _ => None,
    })
}

use Event::*;

#[test]
fn every_path_ends_with_the_right_verdict() {
    let exit0 = Exited(ExitStatus::Code(0));
    let closed = ChannelClosed { broken: false };
    type Row = (&'static str, Vec<(u64, Event)>, Option<Ending>);
    let rows: Vec<Row> = vec![
        (
            "completed",
            vec![
                (0, Assigned),
                (5, Reported(ok())),
                (6, closed.clone()),
                (7, exit0.clone()),
                (8, GroupEmpty),
            ],
            Some(ok()),
        ),
        (
            "failed, reported",
            vec![
                (0, Assigned),
                (
                    5,
                    Reported(Ending::reported(Outcome::Failed, Cause::Failed, Some("no".into()))),
                ),
                (7, Exited(ExitStatus::Code(0))),
                (8, closed.clone()),
                (9, GroupEmpty),
            ],
            ending(TaskState::Failed, Cause::Failed, Some("no")),
        ),
        (
            "rejected",
            vec![
                (0, Assigned),
                (1, Reported(Ending::reported(Outcome::Rejected, Cause::Refused, None))),
                (2, closed.clone()),
                (3, exit0.clone()),
                (4, GroupEmpty),
            ],
            ending(TaskState::Rejected, Cause::Refused, None),
        ),
        (
            "cancelled at the first rung (the worker obeys the frame)",
            vec![
                (0, Assigned),
                (10, Stop(stop(Cause::Cancelled))),
                (
                    20,
                    Reported(Ending::reported(Outcome::Canceled, Cause::Cancelled, None)),
                ),
                (21, closed.clone()),
                (22, exit0.clone()),
                (23, GroupEmpty),
            ],
            ending(TaskState::Canceled, Cause::Cancelled, None),
        ),
        (
            "cancelled at SIGTERM",
            vec![
                (0, Assigned),
                (10, Stop(stop(Cause::Cancelled))),
                (1010, Tick),
                (1500, Exited(ExitStatus::Signal(15))),
                (1501, closed.clone()),
                (1502, GroupEmpty),
            ],
            ending(TaskState::Canceled, Cause::Cancelled, None),
        ),
        (
            "cancelled at SIGKILL",
            vec![
                (0, Assigned),
                (10, Stop(stop(Cause::Cancelled))),
                (1010, Tick),
                (3010, Tick),
                (3011, Exited(ExitStatus::Signal(9))),
                (3012, closed.clone()),
                (3013, GroupEmpty),
            ],
            ending(TaskState::Canceled, Cause::Cancelled, None),
        ),
        (
            "deadline",
            vec![
                (0, Assigned),
                (100, Tick),
                (101, exit0.clone()),
                (102, closed.clone()),
                (103, GroupEmpty),
            ],
            ending(TaskState::Failed, Cause::Deadline, None),
        ),
        (
            "stalled: a ping, then silence",
            vec![
                (0, Assigned),
                (5000, Tick),
                (20000, Tick),
                (20001, closed.clone()),
                (20002, Exited(ExitStatus::Signal(9))),
                (20003, GroupEmpty),
            ],
            ending(TaskState::Failed, Cause::Stalled, None),
        ),
        (
            "crashed: exit without a result",
            vec![
                (0, Assigned),
                (5, Exited(ExitStatus::Signal(11))),
                (6, closed.clone()),
                (7, GroupEmpty),
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
                (0, Assigned),
                (
                    9,
                    Stop(super::Stop {
                        cause: Cause::Exhausted,
                        why: Some("hit tasks.pids_max".into()),
                    }),
                ),
                (10, exit0.clone()),
                (11, closed.clone()),
                (12, GroupEmpty),
            ],
            ending(TaskState::Failed, Cause::Exhausted, Some("hit tasks.pids_max")),
        ),
        (
            "shutdown",
            vec![
                (0, Assigned),
                (1, Stop(stop(Cause::Shutdown))),
                (2, exit0.clone()),
                (3, closed.clone()),
                (4, GroupEmpty),
            ],
            ending(TaskState::Canceled, Cause::Shutdown, None),
        ),
        (
            "broken channel: killed at once, crashed",
            vec![
                (0, Assigned),
                (3, ChannelClosed { broken: true }),
                (4, Exited(ExitStatus::Signal(9))),
                (5, GroupEmpty),
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
                (0, Assigned),
                (5, exit0.clone()),
                (6, Reported(ok())),
                (7, closed.clone()),
                (8, GroupEmpty),
            ],
            Some(ok()),
        ),
        (
            "exit after done, channel never closes: drained by time",
            vec![
                (0, Assigned),
                (5, Reported(ok())),
                (6, exit0.clone()),
                (1006, Tick),
                (1007, GroupEmpty),
            ],
            Some(ok()),
        ),
        (
            "a stop after done changes nothing",
            vec![
                (0, Assigned),
                (5, Reported(ok())),
                (6, Stop(stop(Cause::Cancelled))),
                (7, exit0.clone()),
                (8, closed.clone()),
                (9, GroupEmpty),
            ],
            Some(ok()),
        ),
        (
            "input-required, a follow-up, then completed",
            vec![
                (0, Assigned),
                (5, Asked),
                (59000, Tick),
                (59001, Resumed),
                (59002, Reported(ok())),
                (59003, closed.clone()),
                (59004, exit0.clone()),
                (59005, GroupEmpty),
            ],
            Some(ok()),
        ),
        (
            "nobody answers the question: idle",
            vec![
                (0, Assigned),
                (5, Asked),
                (60005, Tick),
                (60006, exit0.clone()),
                (60007, closed.clone()),
                (60008, GroupEmpty),
            ],
            ending(TaskState::Failed, Cause::Idle, None),
        ),
        (
            "it stops reading its channel: stalled, SIGTERM at once",
            vec![
                (0, Assigned),
                (1, Unwritable),
                (2, Exited(ExitStatus::Signal(15))),
                (3, closed.clone()),
                (4, GroupEmpty),
            ],
            ending(
                TaskState::Failed,
                Cause::Stalled,
                Some("failed: the worker stopped reading its control channel"),
            ),
        ),
        (
            "an idle worker that dies has no task",
            vec![(0, Exited(ExitStatus::Code(1))), (1, closed.clone()), (2, GroupEmpty)],
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
        assert!(life.is_finished(), "{name}: ends Finished, is {:?}", life.phase);
    }
}

#[test]
fn the_ladder_climbs_on_time() {
    let (actions, _) = walk(&[
        (0, Assigned),
        (10, Stop(stop(Cause::Cancelled))),
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
    let mut life = Life::idle(t0, timing());
    life.step(Assigned, t0);
    // A busy worker whose pong is late but whose artifacts keep coming
    // is never stalled.
    assert_eq!(life.step(Tick, t0 + 5000 * MS), vec![Action::SendPing]);
    for s in 6..40 {
        life.step(Heard, t0 + s * 1000 * MS);
        assert!(!life
            .step(Tick, t0 + s * 1000 * MS + 500 * MS)
            .contains(&Action::SendCancel));
    }
    assert!(life.is_running());
    // One ping per silence, not one per tick.
    let mut life = Life::idle(t0, timing());
    life.step(Assigned, t0);
    assert_eq!(life.step(Tick, t0 + 5000 * MS), vec![Action::SendPing]);
    assert_eq!(life.step(Tick, t0 + 6000 * MS), vec![]);
    assert_eq!(life.next_due(), Some(t0 + 20000 * MS));
}

#[test]
fn a_second_sigterm_skips_to_sigkill() {
    let (actions, life) = walk(&[
        (0, Assigned),
        (1, Stop(stop(Cause::Shutdown))),
        (2, KillNow(stop(Cause::Shutdown))),
    ]);
    assert_eq!(actions.last(), Some(&(2, Action::Kill)));
    assert!(matches!(life.phase, Phase::Stopping { rung: Rung::Killed, .. }));
}

#[test]
fn a_lingering_group_is_killed_until_empty() {
    let (actions, life) = walk(&[
        (0, Assigned),
        (1, Reported(ok())),
        (2, ChannelClosed { broken: false }),
        (3, Exited(ExitStatus::Code(0))),
        (23, Tick),
        (43, Tick),
    ]);
    let sweeps = actions.iter().filter(|(_, a)| *a == Action::Sweep).count();
    assert_eq!(sweeps, 3);
    assert!(matches!(life.phase, Phase::Emptying { .. }));
}

#[test]
fn a_worker_that_reports_but_never_exits_is_killed() {
    let (actions, _) = walk(&[(0, Assigned), (1, Reported(ok())), (500, Tick), (1001, Tick)]);
    assert_eq!(actions, vec![(1001, Action::Note("exit_grace")), (1001, Action::Kill)]);
}

#[test]
fn next_due_follows_the_phase() {
    let t0 = Instant::now();
    let mut life = Life::idle(t0, timing());
    assert_eq!(life.next_due(), None);
    life.step(Assigned, t0);
    assert_eq!(life.next_due(), Some(t0 + 5000 * MS));
    life.set_deadline(Some(t0 + 100 * MS));
    assert_eq!(life.next_due(), Some(t0 + 100 * MS));
    life.step(Stop(stop(Cause::Cancelled)), t0 + 10 * MS);
    assert_eq!(life.next_due(), Some(t0 + 1010 * MS));
}
