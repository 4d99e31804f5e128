//! The start path's machine alone, without a kernel: the order of the
//! line, the counts, the back-off. (Every way a task takes to a worker,
//! against the scripted kernel, is pool/tests.rs.)

use super::*;

const MS: Duration = Duration::from_millis(1);

fn path() -> StartPath {
    StartPath::new(StartLimits::default())
}

fn ev(p: &mut StartPath, e: StartEvent, now: Instant) -> Vec<StartAction> {
    p.step(e, now)
}

/// The task first in line, and which worker in a row it goes to.
fn front(p: &StartPath) -> Option<(&str, u32)> {
    p.front().map(|(id, attempt)| (&**id, attempt))
}

fn ended(actions: &[StartAction]) -> Vec<(&str, TaskState, Cause)> {
    actions
        .iter()
        .filter_map(|a| match a {
            StartAction::End { task, ending } => Some((&**task, ending.state, ending.cause)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_task_given_back_starts_before_the_queue_and_one_taken_back_at_its_front() {
    let t = Instant::now();
    let mut p = path();
    for id in ["a", "b", "c"] {
        ev(&mut p, StartEvent::Submitted(id.into()), t);
    }
    assert_eq!(front(&p), Some(("a", 1)));
    ev(
        &mut p,
        StartEvent::Bound {
            task: "a".into(),
            pid: 10,
        },
        t,
    );
    ev(&mut p, StartEvent::Asked("b".into()), t);
    assert_eq!((p.queued(), p.started()), (1, 2));
    ev(&mut p, StartEvent::GivenBack("a".into()), t);
    assert_eq!(
        front(&p),
        Some(("a", 2)),
        "given back: first, its next worker the second"
    );
    ev(
        &mut p,
        StartEvent::NotBorn {
            task: "b".into(),
            taken_back: true,
        },
        t,
    );
    assert_eq!(p.way("b"), Some(&Way::Queued { attempts: 0 }));
    assert_eq!(front(&p), Some(("a", 2)));
    ev(
        &mut p,
        StartEvent::Bound {
            task: "a".into(),
            pid: 11,
        },
        t,
    );
    assert_eq!(front(&p), Some(("b", 1)), "taken back: before c, which came after it");
    assert_eq!(p.worker_of("a"), Some(11));
}

#[test]
fn a_cancel_for_a_task_not_on_its_way_ends_it_if_it_still_waits() {
    let t = Instant::now();
    let mut p = path();
    let out = ev(&mut p, StartEvent::Cancel("x".into()), t);
    assert_eq!(ended(&out), vec![("x", TaskState::Canceled, Cause::Canceled)]);
    ev(&mut p, StartEvent::Submitted("y".into()), t);
    ev(
        &mut p,
        StartEvent::Bound {
            task: "y".into(),
            pid: 7,
        },
        t,
    );
    let out = ev(&mut p, StartEvent::Cancel("y".into()), t);
    assert_eq!(
        out,
        vec![StartAction::StopWorker {
            pid: 7,
            stop: Stop::new(Cause::Canceled)
        }],
        "a bound task's worker decides"
    );
}

#[test]
fn the_drain_ends_what_waits_and_marks_what_is_asked() {
    let t = Instant::now();
    let mut p = path();
    for id in ["q", "a"] {
        ev(&mut p, StartEvent::Submitted(id.into()), t);
    }
    ev(&mut p, StartEvent::Asked("a".into()), t);
    let out = ev(&mut p, StartEvent::Drain, t);
    assert_eq!(ended(&out), vec![("q", TaskState::Canceled, Cause::Shutdown)]);
    assert!(!p.is_open());
    assert_eq!(
        p.way("a"),
        Some(&Way::Asked {
            attempt: 1,
            stop: Some(Stop::new(Cause::Shutdown))
        })
    );
    let out = ev(&mut p, StartEvent::Submitted("late".into()), t);
    assert_eq!(ended(&out), vec![("late", TaskState::Canceled, Cause::Shutdown)]);
    assert_eq!(p.way("late"), None);
}

#[test]
fn lost_helpers_hold_asks_back_and_count_only_past_the_bound() {
    let t = Instant::now();
    let mut p = path();
    ev(&mut p, StartEvent::Submitted("t".into()), t);
    for n in 1..=5 {
        let out = ev(&mut p, StartEvent::HelperLost("gone".into()), t + n * MS);
        assert!(out.is_empty());
    }
    assert!(!p.may_ask(t + 5 * MS), "the back-off holds");
    assert!(p.may_ask(t + 21 * MS), "…for FORK_RETRY_MS from the first loss");
    // Past five, each loss is a failed ask: the third fails the task.
    assert!(ev(&mut p, StartEvent::HelperLost("gone".into()), t).is_empty());
    assert!(ev(&mut p, StartEvent::HelperLost("gone".into()), t).is_empty());
    let out = ev(&mut p, StartEvent::HelperLost("gone".into()), t);
    assert_eq!(ended(&out), vec![("t", TaskState::Failed, Cause::Crashed)]);
}

#[test]
fn a_worker_made_ends_the_failures_in_a_row() {
    let t = Instant::now();
    let mut p = path();
    ev(&mut p, StartEvent::Submitted("t".into()), t);
    ev(&mut p, StartEvent::NoWorker("EAGAIN".into()), t);
    ev(&mut p, StartEvent::NoWorker("EAGAIN".into()), t);
    ev(&mut p, StartEvent::Forked, t);
    assert!(ended(&ev(&mut p, StartEvent::NoWorker("EAGAIN".into()), t)).is_empty());
    assert!(ended(&ev(&mut p, StartEvent::NoWorker("EAGAIN".into()), t)).is_empty());
    assert_eq!(ended(&ev(&mut p, StartEvent::NoWorker("EAGAIN".into()), t)).len(), 1);
}

#[test]
fn a_back_off_that_passed_is_forgotten() {
    let t = Instant::now();
    let mut p = path();
    ev(&mut p, StartEvent::Busy, t);
    assert_eq!(p.next_due(), Some(t + 20 * MS));
    ev(&mut p, StartEvent::Busy, t + 10 * MS);
    assert_eq!(p.next_due(), Some(t + 20 * MS), "a second Busy does not push it on");
    p.forget_passed_retry(t + 19 * MS);
    assert!(p.next_due().is_some());
    p.forget_passed_retry(t + 20 * MS);
    assert_eq!(p.next_due(), None);
}

#[test]
fn a_hold_whose_time_passed_is_renewed_by_the_next_busy_or_loss() {
    let t = Instant::now();
    let mut p = path();
    ev(&mut p, StartEvent::Busy, t);
    // The turn that finds the hold passed asks, finds the fork server busy
    // or gone, and must not be free to ask again at once.
    ev(&mut p, StartEvent::Busy, t + 30 * MS);
    assert!(!p.may_ask(t + 30 * MS));
    assert_eq!(p.next_due(), Some(t + 50 * MS));
    ev(&mut p, StartEvent::HelperLost("gone".into()), t + 60 * MS);
    assert!(!p.may_ask(t + 60 * MS));
    assert_eq!(p.next_due(), Some(t + 80 * MS));
}
