//! The driver against a scripted kernel: workers are real pipes (cheap, no
//! process behind them), and everything else — exits, process groups that
//! linger, cgroups and their counters, agentd's children — is what the fake
//! [`Kernel`] is told to say. Each test is a short script and the verdict
//! the task table ends up with, plus what the driver did to the kernel.
//! The fake's cgroup counters behave as the kernel's: CPU time cumulative
//! over every task of a slot, a peak reset after each read.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;

use super::super::fake::{Kernel, Slot};
use super::*;
use crate::control::{self, Outcome};
use crate::cost::{CpuTimes, COST_KEY};
use crate::principal::Principal;
use crate::tasks::TableLimits;
use crate::wire::{Part, Role};
use serde_json::{json, Value};

const MS: Duration = Duration::from_millis(1);
const FRAME_MAX: usize = 1 << 20;

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
        take_within: 500 * MS,
    }
}

/// The worker's side of its two pipes.
struct WorkerEnds {
    /// Where it writes its frames (None: it hung up).
    says: Option<File>,
    /// Where it reads procman's.
    hears: File,
}

struct Harness {
    d: Driver<Kernel>,
    ends: HashMap<i32, WorkerEnds>,
    t0: Instant,
    /// The pool's helpers, as the driver is told of them.
    fork_servers: Vec<i32>,
    unnamed: usize,
}

/// The helpers the harness plays the pool's part for.
macro_rules! hp {
    ($h:expr) => {
        Helpers {
            fork_servers: &$h.fork_servers,
            unnamed: $h.unnamed,
        }
    };
}

impl Harness {
    fn new() -> Harness {
        let t0 = Instant::now();
        let table = Arc::new(TaskTable::new(TableLimits {
            max_running: 8,
            max_queued: 8,
            queued_max_bytes: 1 << 20,
            retain_max: 100,
            retain_ms: 600_000,
            retain_bytes: 1 << 30,
        }));
        Harness {
            d: Driver::new(Kernel::at(t0), table, timing(), StartLimits::default()),
            ends: HashMap::new(),
            t0,
            fork_servers: Vec::new(),
            unnamed: 0,
        }
    }

    /// A new idle worker, in cgroup `slot` if given.
    fn worker(&mut self, pid: i32, slot: Option<u32>) {
        let (from_worker, worker_writes) = crate::sys::pipe().unwrap();
        let (worker_reads, to_worker) = crate::sys::pipe().unwrap();
        crate::sys::set_pipe_nonblocking(worker_reads.as_raw_fd()).unwrap();
        let chan = Channel::new(from_worker.into(), to_worker.into(), FRAME_MAX).unwrap();
        self.d.add(pid, chan, slot.map(Slot));
        let ends = WorkerEnds {
            says: Some(worker_writes.into()),
            hears: worker_reads.into(),
        };
        self.ends.insert(pid, ends);
    }

    /// A task in SUBMITTED, given to the worker.
    fn task_on(&mut self, pid: i32) -> String {
        let message = Message {
            message_id: "m".into(),
            context_id: None,
            task_id: None,
            role: Role::User,
            parts: vec![Part::text("hi")],
            metadata: None,
            extensions: vec![],
            reference_task_ids: vec![],
        };
        let task = self
            .d
            .tasks
            .create(&operator(), message.clone(), None)
            .unwrap()
            .render();
        let spawn = ToWorker::Spawn {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            message: std::sync::Arc::new(message),
            runner: std::sync::Arc::new(crate::control::RunnerSpec::Echo),
            trace: None,
        };
        self.submit(&task.id);
        self.d.assign(hp!(self), pid, task.id.as_str().into(), &spawn, None);
        task.id
    }

    /// The task enters the start path (procman's `Start`).
    fn submit(&mut self, id: &str) {
        self.d.start_event(hp!(self), StartEvent::Submitted(id.into()));
    }

    fn cancel(&mut self, id: &str) {
        self.d.start_event(hp!(self), StartEvent::Cancel(id.into()));
    }

    fn reap(&mut self) {
        self.d.reap(hp!(self));
    }

    fn read_from(&mut self, pid: i32) {
        self.d.read_from(hp!(self), pid);
    }

    /// Where the task is on its way (None: it ended, or is not known).
    fn way(&self, id: &str) -> Option<Way> {
        self.d.start.way(id).cloned()
    }

    fn at(&mut self, ms: u64) {
        self.d.os.now = Some(self.t0 + Duration::from_millis(ms));
        self.d.tick(hp!(self));
    }

    /// Every frame procman sent the worker so far (the worker reads them).
    fn heard(&mut self, pid: i32) -> Vec<ToWorker> {
        let mut bytes = Vec::new();
        let _ = self.ends.get_mut(&pid).unwrap().hears.read_to_end(&mut bytes);
        let mut frames = Vec::new();
        let mut at = 0;
        while let Some((frame, used)) = control::decode::<ToWorker>(&bytes[at..], FRAME_MAX).unwrap() {
            frames.push(frame);
            at += used;
        }
        frames
    }

    fn say(&mut self, pid: i32, frame: &FromWorker) {
        self.say_unheard(pid, frame);
        self.read_from(pid);
    }

    /// The worker writes `frame`; procman has not read it yet.
    fn say_unheard(&mut self, pid: i32, frame: &FromWorker) {
        let bytes = control::encode(frame, FRAME_MAX).unwrap();
        let ends = self.ends.get_mut(&pid).unwrap();
        ends.says.as_mut().unwrap().write_all(&bytes).unwrap();
    }

    fn done(&mut self, pid: i32, outcome: Outcome, cause: Cause) {
        let text = None;
        self.say(pid, &FromWorker::Done { outcome, cause, text });
    }

    fn hang_up(&mut self, pid: i32) {
        self.ends.get_mut(&pid).unwrap().says = None;
        self.read_from(pid);
    }

    fn exit(&mut self, pid: i32, status: ExitStatus) {
        self.d.os.exits.push_back((pid, status));
        self.reap();
    }

    /// The worker is gone: it hangs up and exits with `status`.
    fn dies(&mut self, pid: i32, status: ExitStatus) {
        self.hang_up(pid);
        self.exit(pid, status);
    }

    /// (state, `agentd.dev/terminal` cause, status text) of a task.
    fn verdict(&self, id: &str) -> (TaskState, Option<String>, Option<String>) {
        let task = self.d.tasks.get(&operator(), id, None).unwrap();
        let message = task.status.message.as_ref();
        let cause = message
            .and_then(|m| m.metadata.as_ref())
            .and_then(|m| m.get("agentd.dev/terminal"))
            .and_then(|v| v.as_str())
            .map(String::from);
        let text = message
            .and_then(|m| m.parts.first())
            .and_then(|p| p.as_text().map(String::from));
        (task.status.state, cause, text)
    }

    /// The task's cost, as its metadata carries it (Null: none).
    fn cost(&self, id: &str) -> Value {
        let task = self.d.tasks.get(&operator(), id, None).unwrap();
        task.metadata
            .and_then(|m| m.get(COST_KEY).cloned())
            .unwrap_or(Value::Null)
    }

    /// A task on worker `pid` that completes after `ms` and leaves.
    fn completes_after(&mut self, pid: i32, ms: u64) -> String {
        let id = self.task_on(pid);
        self.heard(pid); // it read its task
        self.at(ms);
        self.done(pid, Outcome::Completed, Cause::Completed);
        self.dies(pid, ExitStatus::Code(0));
        assert_eq!(self.verdict(&id).0, TaskState::Completed);
        id
    }

    fn signals_to(&self, pid: i32) -> Vec<libc::c_int> {
        let k = &self.d.os;
        k.group_signals
            .iter()
            .filter(|(g, _)| *g == pid)
            .map(|(_, s)| *s)
            .collect()
    }
}

fn operator() -> Principal {
    Principal::Unix { uid: 0, pid: 1 }
}

fn cause(c: &str) -> Option<String> {
    Some(c.to_string())
}

#[test]
fn a_task_that_completes_ends_completed_and_its_worker_leaves() {
    let mut h = Harness::new();
    h.worker(10, Some(1));
    let id = h.task_on(10);
    assert!(matches!(h.heard(10).as_slice(), [ToWorker::Spawn { .. }]));
    assert_eq!(h.d.tasks.state(&id), Some(TaskState::Working));
    h.done(10, Outcome::Completed, Cause::Completed);
    assert_eq!(h.d.tasks.state(&id), Some(TaskState::Working), "not before it is gone");
    h.dies(10, ExitStatus::Code(0));
    assert_eq!(h.verdict(&id).0, TaskState::Completed);
    assert!(h.d.is_empty(), "the worker left the table");
    assert_eq!(h.d.start.started(), 0);
    assert_eq!(h.way(&id), None, "the start path let it go");
    assert_eq!(h.d.os.released, vec![Slot(1)], "its slot is free again");
    assert!(h.signals_to(10).is_empty(), "nothing had to be killed");
    // The exit's reap (one exit, then nothing): the sweep found the group and
    // the cgroup empty and did not reap again.
    assert_eq!(h.d.os.reap_calls, 2);
}

#[test]
fn frames_a_worker_left_in_its_pipe_are_heard_at_its_reap_before_its_exit() {
    let mut h = Harness::new();
    h.worker(19, None);
    let id = h.task_on(19);
    h.heard(19);
    // It said `done`, hung up and exited between two of procman's polls:
    // nothing of it has been read when its exit is reaped.
    let done = FromWorker::Done {
        outcome: Outcome::Completed,
        cause: Cause::Completed,
        text: None,
    };
    h.say_unheard(19, &done);
    h.ends.get_mut(&19).unwrap().says = None;
    h.exit(19, ExitStatus::Code(0));
    assert_eq!(
        h.verdict(&id).0,
        TaskState::Completed,
        "decided at the reap, as it spoke"
    );
    assert!(h.d.is_empty(), "the worker left the table at once");
    assert!(h.signals_to(19).is_empty());
}

#[test]
fn a_worker_killed_mid_task_fails_it_as_crashed_with_the_signal() {
    let mut h = Harness::new();
    h.worker(11, None);
    let id = h.task_on(11);
    h.say(11, &FromWorker::Pong);
    h.dies(11, ExitStatus::Signal(libc::SIGKILL));
    let (state, c, text) = h.verdict(&id);
    assert_eq!((state, c), (TaskState::Failed, cause("crashed")));
    assert!(text.unwrap().contains("SIGKILL"));
}

#[test]
fn cancel_climbs_the_ladder_on_time_and_ends_canceled() {
    let mut h = Harness::new();
    h.worker(12, None);
    let id = h.task_on(12);
    h.say(12, &FromWorker::Pong);
    h.heard(12);
    h.cancel(&id);
    assert_eq!(h.heard(12), vec![ToWorker::Cancel], "the first rung is the frame");
    h.at(999);
    assert!(h.signals_to(12).is_empty(), "not before cancel_grace");
    h.at(1000);
    assert_eq!(h.signals_to(12), vec![libc::SIGTERM, libc::SIGCONT]);
    h.at(3000);
    assert_eq!(h.signals_to(12), vec![libc::SIGTERM, libc::SIGCONT, libc::SIGKILL]);
    h.dies(12, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(h.verdict(&id).0, TaskState::Canceled);
    assert_eq!(h.verdict(&id).1, cause("canceled"));
}

#[test]
fn a_group_that_outlives_its_worker_is_killed_until_empty_before_the_verdict() {
    let mut h = Harness::new();
    h.worker(13, None);
    let id = h.task_on(13);
    h.done(13, Outcome::Completed, Cause::Completed);
    h.d.os.lingering_groups.insert(13, 2);
    h.dies(13, ExitStatus::Code(0));
    assert_eq!(
        h.d.tasks.state(&id),
        Some(TaskState::Working),
        "grandchildren still run"
    );
    assert_eq!(h.signals_to(13), vec![libc::SIGKILL]);
    h.at(20);
    assert_eq!(h.signals_to(13), vec![libc::SIGKILL, libc::SIGKILL]);
    assert_eq!(h.d.tasks.state(&id), Some(TaskState::Working));
    h.at(40);
    assert_eq!(
        h.verdict(&id).0,
        TaskState::Completed,
        "the result stands once all is gone"
    );
    assert_eq!(h.signals_to(13).len(), 2);
}

#[test]
fn a_cgroup_that_is_not_empty_is_killed_and_the_slot_freed_only_when_it_is() {
    let mut h = Harness::new();
    h.worker(14, Some(4));
    let id = h.task_on(14);
    h.done(14, Outcome::Completed, Cause::Completed);
    h.d.os.lingering_slots.insert(Slot(4), 1);
    h.dies(14, ExitStatus::Code(0));
    assert_eq!(
        h.d.os.killed_slots,
        vec![Slot(4)],
        "a setsid escapee is still in the cgroup"
    );
    assert!(h.d.os.released.is_empty());
    h.at(20);
    assert_eq!(h.verdict(&id).0, TaskState::Completed);
    assert_eq!(h.d.os.released, vec![Slot(4)]);
}

#[test]
fn refused_forks_counted_by_the_cgroup_fail_a_completed_task_as_exhausted() {
    let mut h = Harness::new();
    h.worker(15, Some(5));
    let id = h.task_on(15);
    h.done(15, Outcome::Completed, Cause::Completed);
    h.d.os.refused.insert(Slot(5), 7);
    h.dies(15, ExitStatus::Code(0));
    let (state, c, text) = h.verdict(&id);
    assert_eq!((state, c), (TaskState::Failed, cause("exhausted")));
    assert_eq!(
        text.as_deref(),
        Some("the task hit tasks.pids_max (64 processes) 7 time(s): a fork bomb?")
    );
}

#[test]
fn the_oom_killer_fails_the_task_as_exhausted_even_when_cancelled() {
    let mut h = Harness::new();
    h.worker(16, Some(6));
    let id = h.task_on(16);
    h.cancel(&id);
    h.d.os.oom.insert(Slot(6));
    h.dies(16, ExitStatus::Signal(libc::SIGKILL));
    let (state, c, text) = h.verdict(&id);
    assert_eq!((state, c), (TaskState::Failed, cause("exhausted")));
    assert!(text.unwrap().starts_with("out of memory"));
}

#[test]
fn a_fork_bomb_seen_while_running_is_stopped_through_the_ladder() {
    let mut h = Harness::new();
    h.worker(17, Some(7));
    let id = h.task_on(17);
    h.heard(17);
    h.at(1); // the first counters check
    assert!(h.heard(17).is_empty(), "clean counters: nothing happens");
    h.d.os.refused.insert(Slot(7), 1);
    h.at(limits::CGROUP_CHECK_MS - 1);
    assert!(h.heard(17).is_empty(), "between two checks");
    h.at(limits::CGROUP_CHECK_MS + 1);
    assert_eq!(h.heard(17), vec![ToWorker::Cancel]);
    h.dies(17, ExitStatus::Code(0));
    assert_eq!(h.verdict(&id).1, cause("exhausted"));
}

#[test]
fn escapees_of_a_sigkilled_worker_without_a_cgroup_are_killed_before_the_verdict() {
    let mut h = Harness::new();
    h.worker(18, None);
    let id = h.task_on(18);
    h.say(18, &FromWorker::Pong);
    h.d.os.children = vec![18, 900, 901];
    h.fork_servers = vec![901];
    h.dies(18, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(h.d.os.killed_pids, vec![900], "not the worker, not the fork server");
    assert_eq!(
        h.d.tasks.state(&id),
        Some(TaskState::Working),
        "not over while one was left"
    );
    h.d.os.children = vec![901];
    h.at(20);
    assert_eq!(h.verdict(&id).1, cause("crashed"));
    assert_eq!(h.d.os.killed_pids, vec![900]);
}

#[test]
fn unknown_children_are_left_alone_while_a_worker_is_being_forked() {
    let mut h = Harness::new();
    h.worker(19, None);
    let id = h.task_on(19);
    h.say(19, &FromWorker::Pong);
    h.d.os.children = vec![950];
    h.unnamed = 1; // 950 may be that worker
    h.dies(19, ExitStatus::Signal(libc::SIGKILL));
    assert!(h.d.os.killed_pids.is_empty());
    assert_eq!(h.d.tasks.state(&id), Some(TaskState::Working), "looked at again later");
    h.unnamed = 0;
    h.d.os.children.clear();
    h.at(20);
    assert_eq!(h.verdict(&id).0, TaskState::Failed);
}

#[test]
fn with_a_cgroup_no_escapee_hunt_is_needed() {
    let mut h = Harness::new();
    h.worker(20, Some(2));
    let id = h.task_on(20);
    h.say(20, &FromWorker::Pong);
    h.d.os.children = vec![960];
    h.dies(20, ExitStatus::Signal(libc::SIGKILL));
    assert!(h.d.os.killed_pids.is_empty(), "the cgroup holds whatever escaped");
    assert_eq!(h.verdict(&id).0, TaskState::Failed);
}

#[test]
fn a_task_its_worker_never_read_is_given_back_not_failed() {
    let mut h = Harness::new();
    h.worker(21, None);
    let id = h.task_on(21);
    // It died before it read a byte of its spawn frame.
    h.dies(21, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(h.way(&id), Some(Way::Queued { attempts: 1 }), "back in line, first");
    assert_eq!(
        h.d.tasks.state(&id),
        Some(TaskState::Working),
        "still waiting, not failed"
    );
    assert_eq!(h.d.start.started(), 0, "it holds no running slot");
    assert!(h.d.is_empty(), "the worker ended without it");
}

#[test]
fn a_worker_that_never_reads_its_task_is_killed_and_the_task_given_back() {
    let mut h = Harness::new();
    h.worker(22, None);
    let id = h.task_on(22);
    h.at(499);
    assert!(matches!(h.way(&id), Some(Way::Bound { pid: 22, .. })));
    h.at(500); // take_within: a stopped idle worker
    assert_eq!(h.way(&id), Some(Way::Queued { attempts: 1 }));
    assert_eq!(h.signals_to(22), vec![libc::SIGKILL]);
    h.dies(22, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(h.d.tasks.state(&id), Some(TaskState::Working));
}

#[test]
fn a_worker_that_read_its_task_and_died_fails_it() {
    let mut h = Harness::new();
    h.worker(23, None);
    let id = h.task_on(23);
    h.heard(23); // it read the spawn frame, then died silently
    h.at(500);
    assert!(
        matches!(h.way(&id), Some(Way::Bound { .. })),
        "the take check found it read"
    );
    h.dies(23, ExitStatus::Signal(libc::SIGSEGV));
    assert_eq!(h.way(&id), None, "the program may have run: never twice");
    assert_eq!(h.verdict(&id).1, cause("crashed"));
}

#[test]
fn exits_that_are_no_workers_are_left_for_the_pool() {
    let mut h = Harness::new();
    h.worker(24, None);
    h.d.os
        .exits
        .extend([(777, ExitStatus::Code(0)), (24, ExitStatus::Code(1))]);
    h.reap();
    assert_eq!(h.d.unclaimed, vec![(777, ExitStatus::Code(0))]);
    h.hang_up(24);
    assert!(h.d.is_empty(), "an idle worker that died just leaves");
}

#[test]
fn a_retired_idle_worker_is_killed_and_never_given_a_task() {
    let mut h = Harness::new();
    h.worker(25, Some(9));
    h.worker(26, None);
    h.d.retire(hp!(h), 25);
    assert_eq!(h.signals_to(25), vec![libc::SIGKILL]);
    assert_eq!(h.d.os.killed_slots, vec![Slot(9)]);
    let idle: Vec<i32> = h.d.idle().map(|(pid, _)| pid).collect();
    assert_eq!(idle, vec![26]);
    h.dies(25, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(h.d.os.released, vec![Slot(9)]);
}

#[test]
fn a_silent_worker_is_pinged_then_stopped_as_stalled() {
    let mut h = Harness::new();
    h.worker(27, None);
    let id = h.task_on(27);
    h.heard(27);
    h.say(27, &FromWorker::Pong); // it took the task, then went quiet
    h.at(5000);
    assert_eq!(h.heard(27), vec![ToWorker::Ping]);
    h.at(19_999);
    assert!(h.heard(27).is_empty());
    h.at(20_000);
    assert_eq!(h.heard(27), vec![ToWorker::Cancel]);
    h.dies(27, ExitStatus::Code(0));
    assert_eq!(h.verdict(&id).1, cause("stalled"));
}

#[test]
fn the_deadline_comes_with_the_task_and_stops_it() {
    let mut h = Harness::new();
    h.worker(28, None);
    let message = crate::wire::Message {
        message_id: "m".into(),
        context_id: None,
        task_id: None,
        role: Role::User,
        parts: vec![Part::text("slow")],
        metadata: None,
        extensions: vec![],
        reference_task_ids: vec![],
    };
    let task = h.d.tasks.create(&operator(), message.clone(), None).unwrap().render();
    let spawn = ToWorker::Spawn {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        message: std::sync::Arc::new(message),
        runner: std::sync::Arc::new(crate::control::RunnerSpec::Echo),
        trace: None,
    };
    h.submit(&task.id);
    h.d.assign(hp!(h), 28, task.id.as_str().into(), &spawn, Some(h.t0 + 300 * MS));
    h.heard(28);
    h.at(299);
    assert!(h.heard(28).is_empty());
    h.at(300);
    assert_eq!(h.heard(28), vec![ToWorker::Cancel]);
    h.dies(28, ExitStatus::Code(0));
    assert_eq!(h.verdict(&task.id).1, cause("deadline"));
}

#[test]
fn shutdown_ladders_every_worker_and_a_second_one_kills_at_once() {
    let mut h = Harness::new();
    h.worker(29, None);
    h.worker(30, None);
    let id = h.task_on(29);
    h.heard(29);
    h.d.start_event(hp!(h), StartEvent::Drain);
    h.d.stop_all(hp!(h), false);
    assert_eq!(h.heard(29), vec![ToWorker::Cancel]);
    assert_eq!(
        h.signals_to(30),
        vec![libc::SIGKILL],
        "an idle worker has nothing to ask"
    );
    h.d.start_event(hp!(h), StartEvent::KillAll);
    h.d.stop_all(hp!(h), true);
    assert_eq!(h.signals_to(29), vec![libc::SIGKILL]);
    h.dies(29, ExitStatus::Signal(libc::SIGKILL));
    let (state, c, text) = h.verdict(&id);
    assert_eq!((state, c), (TaskState::Canceled, cause("shutdown")));
    assert_eq!(text.as_deref(), Some("canceled: agentd is shutting down"));
}

#[test]
fn status_and_artifact_frames_reach_the_table_and_input_resumes() {
    let mut h = Harness::new();
    h.worker(31, None);
    let id = h.task_on(31);
    h.heard(31);
    let ask = FromWorker::Status {
        state: Progress::InputRequired,
        text: Some("which city?".into()),
    };
    h.say(31, &ask);
    assert_eq!(h.d.tasks.state(&id), Some(TaskState::InputRequired));
    let reply = Message {
        message_id: "m2".into(),
        context_id: None,
        task_id: Some(id.clone()),
        role: Role::User,
        parts: vec![Part::text("Oslo")],
        metadata: None,
        extensions: vec![],
        reference_task_ids: vec![],
    };
    assert!(h.d.input(hp!(h), &id, reply));
    assert!(matches!(h.heard(31).as_slice(), [ToWorker::Input { .. }]));
    let stray = Message {
        message_id: "m3".into(),
        context_id: None,
        task_id: None,
        role: Role::User,
        parts: vec![Part::text("?")],
        metadata: None,
        extensions: vec![],
        reference_task_ids: vec![],
    };
    assert!(
        !h.d.input(hp!(h), "no-such-task", stray),
        "no worker: the caller is told"
    );
}

fn cpu(user_usec: u64, system_usec: u64) -> CpuTimes {
    CpuTimes { user_usec, system_usec }
}

fn rusage(user_usec: u64, system_usec: u64, maxrss_bytes: u64) -> Rusage {
    Rusage {
        user_usec,
        system_usec,
        maxrss_bytes,
    }
}

#[test]
fn without_a_cgroup_a_task_costs_what_wait4_counted_for_its_worker() {
    let mut h = Harness::new();
    h.worker(40, None);
    h.d.os.rusage.insert(40, rusage(480_000, 20_000, 70 << 20));
    let id = h.completes_after(40, 700);
    assert_eq!(
        h.cost(&id),
        json!({"wallMs": 700,
            "cpu": {"userUsec": 480000, "systemUsec": 20000, "source": "wait4:rusage"},
            "memory": {"peakBytes": 73400320, "source": "wait4:ru_maxrss"}})
    );
}

#[test]
fn a_reused_slot_charges_each_task_only_what_it_counted_since_the_last() {
    let mut h = Harness::new();
    h.worker(41, Some(1));
    h.d.os.slot_cpu.insert(Slot(1), cpu(300_000, 10_000));
    // What wait4 says is not used where the cgroup says it.
    h.d.os.rusage.insert(41, rusage(1, 1, 8 << 20));
    let first = h.completes_after(41, 100);
    assert_eq!(
        h.cost(&first)["cpu"],
        json!({"userUsec": 300000, "systemUsec": 10000, "source": "cgroup2:cpu.stat"})
    );
    // No memory controller in the slot (a hybrid host): the peak is wait4's.
    assert_eq!(h.cost(&first)["memory"]["source"], "wait4:ru_maxrss");
    assert_eq!(h.d.os.released, vec![Slot(1)]);

    // The same slot for the next worker: its cpu.stat goes on counting.
    h.worker(42, Some(1));
    h.d.os.slot_cpu.insert(Slot(1), cpu(500_000, 30_000));
    let second = h.completes_after(42, 400);
    assert_eq!(
        h.cost(&second)["cpu"],
        json!({"userUsec": 200000, "systemUsec": 20000, "source": "cgroup2:cpu.stat"})
    );
    assert_eq!(h.cost(&second)["wallMs"], 300, "from the task's start on its worker");
    assert_eq!(
        h.d.os.usage_reads,
        vec![Slot(1), Slot(1)],
        "one reading per task, at its end"
    );
    assert_eq!(
        h.cost(&first)["cpu"]["userUsec"],
        300000,
        "the first task's cost stays as it was"
    );
}

#[test]
fn a_cgroup_peak_is_the_tasks_own_and_wins_over_the_largest_process() {
    let mut h = Harness::new();
    h.worker(43, Some(3));
    h.d.os.slot_peak.insert(Slot(3), 96 << 20);
    h.d.os.rusage.insert(43, rusage(0, 0, 70 << 20));
    let id = h.completes_after(43, 10);
    assert_eq!(
        h.cost(&id)["memory"],
        json!({"peakBytes": 100663296, "source": "cgroup2:memory.peak"})
    );
    // The read reset it: the next task in the slot starts from nothing.
    h.worker(44, Some(3));
    h.d.os.slot_peak.insert(Slot(3), 2 << 20);
    let next = h.completes_after(44, 20);
    assert_eq!(h.cost(&next)["memory"]["peakBytes"], 2 << 20);
}

#[test]
fn a_worker_that_leaves_without_a_task_moves_its_slots_baseline_on() {
    let mut h = Harness::new();
    h.worker(45, Some(5));
    h.d.os.slot_cpu.insert(Slot(5), cpu(40_000, 5_000)); // it started, idle
    h.hang_up(45);
    h.exit(45, ExitStatus::Code(0));
    assert!(h.d.is_empty());
    h.worker(46, Some(5));
    h.d.os.slot_cpu.insert(Slot(5), cpu(70_000, 6_000));
    let id = h.completes_after(46, 10);
    assert_eq!(h.cost(&id)["cpu"]["userUsec"], 30000, "not the idle worker's time");
    assert_eq!(h.cost(&id)["cpu"]["systemUsec"], 1000);
}

#[test]
fn a_cancelled_task_has_a_cost_too() {
    let mut h = Harness::new();
    h.worker(47, None);
    h.d.os.rusage.insert(47, rusage(5_000, 1_000, 4 << 20));
    let id = h.task_on(47);
    h.heard(47);
    h.cancel(&id);
    h.at(50);
    h.dies(47, ExitStatus::Signal(libc::SIGTERM));
    assert_eq!(h.verdict(&id).0, TaskState::Canceled);
    assert_eq!(h.cost(&id)["cpu"]["userUsec"], 5000);
    assert_eq!(h.cost(&id)["wallMs"], 50);
}

#[test]
fn status_frames_written_before_the_exit_count_when_read_after_it() {
    let mut h = Harness::new();
    h.worker(40, None);
    let id = h.task_on(40);
    h.heard(40);
    // The worker wrote its last progress and its result, then exited; the
    // exit is reaped before its pipe is read (a loaded procman's order).
    let frames = [
        FromWorker::Status {
            state: Progress::Working,
            text: Some("step 1".into()),
        },
        FromWorker::Status {
            state: Progress::Working,
            text: Some("step 2".into()),
        },
        FromWorker::Done {
            outcome: Outcome::Completed,
            cause: Cause::Completed,
            text: None,
        },
    ];
    let bytes: Vec<u8> = frames
        .iter()
        .flat_map(|f| control::encode(f, FRAME_MAX).unwrap())
        .collect();
    let ends = h.ends.get_mut(&40).unwrap();
    ends.says.as_mut().unwrap().write_all(&bytes).unwrap();
    ends.says = None;
    h.exit(40, ExitStatus::Code(0));
    h.read_from(40);
    assert_eq!(h.verdict(&id).0, TaskState::Completed);
    let task = h.d.tasks.get(&operator(), &id, None).unwrap();
    let said: Vec<String> = task
        .history
        .iter()
        .flatten()
        .filter_map(|m| m.parts.first().and_then(|p| p.as_text()).map(String::from))
        .collect();
    assert!(
        said.iter().any(|t| t == "step 1") && said.iter().any(|t| t == "step 2"),
        "both steps are in the history: {said:?}"
    );
}
