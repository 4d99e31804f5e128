//! The start path against the scripted kernel: the pool asks a fake fork
//! server for workers, the test plays the fork server and the workers
//! (real pipes, no process), and every row walks one way a task can take
//! to a worker — the transitions start.rs's doc draws — to the verdict
//! the task table ends up with. Each row is a script over a [`Rig`].

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::fake::{Kernel, Said, Slot};
use super::super::start::Way;
use super::Supervisor;
use crate::config::Config;
use crate::control::{self, Cause, ForkReply, FromWorker, Outcome, ToWorker};
use crate::principal::Principal;
use crate::sys::ExitStatus;
use crate::tasks::{TableLimits, TaskTable};
use crate::wire::{Message, Part, Role, TaskState};

const FRAME_MAX: usize = 1 << 20;

/// A worker as the test plays it: where it writes, where it reads.
struct Ends {
    says: Option<File>,
    hears: File,
}

/// What the rest of agentd asks of procman, as the loop passes it on.
enum Req {
    Start(String),
    Cancel(String),
    Shutdown,
    KillAll,
}

struct Rig {
    sup: Supervisor<Kernel>,
    t0: Instant,
    /// Workers made so far, by pid.
    workers: HashMap<i32, Ends>,
    /// The answer a silent fork owes: (fork server, pid).
    pending_reply: Option<(u32, i32)>,
}

fn operator() -> Principal {
    Principal::Unix { uid: 0, pid: 1 }
}

impl Rig {
    /// No idle pool (tasks.prespawn=0), no cgroup slots, room for 8.
    fn new() -> Rig {
        Rig::with(|_| {}, 8)
    }

    fn with(tune: impl FnOnce(&mut Config), max_running: usize) -> Rig {
        let t0 = Instant::now();
        let mut cfg = Config::default();
        cfg.tasks.prespawn = Some(0);
        tune(&mut cfg);
        let table = Arc::new(TaskTable::new(TableLimits {
            max_running,
            max_queued: 64,
            queued_max_bytes: 1 << 20,
            retain_max: 100,
            retain_ms: 600_000,
            retain_bytes: 1 << 30,
        }));
        Rig {
            sup: Supervisor::new(Arc::new(cfg), Kernel::at(t0), table),
            t0,
            workers: HashMap::new(),
            pending_reply: None,
        }
    }

    fn kernel(&mut self) -> &mut Kernel {
        &mut self.sup.driver.os
    }

    /// A new task, created SUBMITTED and given to procman.
    fn submit(&mut self) -> String {
        let id = self.create();
        self.tell(Req::Start(id.clone()));
        id
    }

    /// A task in the table only (its `Start` not yet sent).
    fn create(&mut self) -> String {
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
        let task = self.sup.driver.tasks.create(&operator(), message, None).unwrap();
        task.id().to_string()
    }

    /// A request to procman, then the rest of its turn.
    fn tell(&mut self, req: Req) {
        match req {
            Req::Start(id) => self.sup.submit(id.into()),
            Req::Cancel(id) => self.sup.cancel(id.into()),
            Req::Shutdown => self.sup.drain(),
            Req::KillAll => self.sup.kill_all(),
        }
        self.turn();
    }

    /// One turn of procman's loop, as if every worker's descriptor were
    /// ready; the fork server's socket is ready when it has said something,
    /// as poll would have it.
    fn turn(&mut self) {
        let k = self.kernel();
        let readable = k.said.get(&k.fork_servers).is_some_and(|q| !q.is_empty());
        if self.sup.fork_answers_due(readable) {
            self.sup.take_fork_answers();
        }
        let orphans: Vec<u64> = self.sup.orphan_pipes().map(|(_, n)| n).collect();
        for n in orphans {
            self.sup.hear_orphan(n);
        }
        let pids: Vec<i32> = self.sup.driver.pipes().filter(|p| !p.2).map(|p| p.1).collect();
        for pid in pids {
            let h = super::helpers(&self.sup.pool);
            self.sup.driver.read_from(h, pid);
        }
        self.sup.reap();
        self.sup.turn_end();
    }

    fn at(&mut self, ms: u64) {
        self.kernel().now = Some(self.t0 + Duration::from_millis(ms));
        self.turn();
    }

    /// The fork server makes worker `pid` for its oldest request and says
    /// so; returns whether the request carried a task.
    fn fork(&mut self, pid: i32) -> bool {
        let handed = self.forked_silently(pid);
        self.answer();
        handed
    }

    /// The fork server makes worker `pid` but has not answered yet.
    fn forked_silently(&mut self, pid: i32) -> bool {
        let ask = self.kernel().asks.pop_front().expect("a request to the fork server");
        let handed = ask.request.placed_only;
        crate::sys::set_pipe_nonblocking(ask.hears.as_raw_fd()).unwrap();
        self.kernel().children.push(pid);
        self.workers.insert(
            pid,
            Ends {
                says: Some(ask.says),
                hears: ask.hears,
            },
        );
        // What the fork server will say once it answers.
        self.pending_reply = Some((ask.server, pid));
        handed
    }

    /// The fork server dies before it read what it was asked, and procman
    /// takes its turn.
    fn fork_server_lost_unread(&mut self) {
        self.kernel().asks.clear();
        self.kernel().fork_server_dies();
        self.turn();
    }

    /// The answer to the last silent fork arrives.
    fn answer(&mut self) {
        if let Some((server, pid)) = self.pending_reply.take() {
            let reply = ForkReply::Forked {
                pid,
                placement_errno: 0,
            };
            self.kernel()
                .said
                .entry(server)
                .or_default()
                .push_back(Said::Reply(reply));
        }
        self.turn();
    }

    /// Frames procman sent worker `pid` so far (the worker reads them).
    fn reads(&mut self, pid: i32) -> Vec<ToWorker> {
        let mut bytes = Vec::new();
        let _ = self.workers.get_mut(&pid).unwrap().hears.read_to_end(&mut bytes);
        let mut frames = Vec::new();
        let mut at = 0;
        while let Some((frame, used)) = control::decode::<ToWorker>(&bytes[at..], FRAME_MAX).unwrap() {
            frames.push(frame);
            at += used;
        }
        frames
    }

    fn says(&mut self, pid: i32, frame: &FromWorker) {
        let bytes = control::encode(frame, FRAME_MAX).unwrap();
        let ends = self.workers.get_mut(&pid).unwrap();
        ends.says.as_mut().unwrap().write_all(&bytes).unwrap();
    }

    /// Worker `pid` says who it is and that its task completed, hangs up
    /// and exits 0 (its exit reaped in the same turn).
    fn completes(&mut self, pid: i32) {
        self.says(pid, &FromWorker::Hello { pid });
        self.says(
            pid,
            &FromWorker::Done {
                outcome: Outcome::Completed,
                cause: Cause::Completed,
                text: None,
            },
        );
        self.dies(pid, ExitStatus::Code(0));
    }

    /// Worker `pid` hangs up and exits with `status`.
    fn dies(&mut self, pid: i32, status: ExitStatus) {
        self.workers.get_mut(&pid).unwrap().says = None;
        self.kernel().exits.push_back((pid, status));
        self.kernel().children.retain(|c| *c != pid);
        self.turn();
    }

    fn way(&self, id: &str) -> Option<Way> {
        self.sup.driver.start.way(id).cloned()
    }

    /// (state, `agentd.dev/terminal` cause, status text) of a task.
    fn verdict(&self, id: &str) -> (TaskState, Option<String>, Option<String>) {
        let task = self.sup.driver.tasks.get(&operator(), id, None).unwrap();
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

    fn state(&self, id: &str) -> TaskState {
        self.verdict(id).0
    }
}

/// A task's verdict: (state, cause).
type Verdict = (TaskState, &'static str);

/// (what the row walks, the script: a rig and the task it judges, the
/// verdict that task must end with).
type Row = (&'static str, fn() -> (Rig, String), Verdict);

const COMPLETED: Verdict = (TaskState::Completed, "completed");

fn shutdown(r: &mut Rig) {
    r.tell(Req::Shutdown);
}

/// Every transition of the start path (start.rs's picture), each to its end.
fn rows() -> Vec<Row> {
    vec![
        (
            "submitted, no idle worker: handed to the worker asked for it, which completes it",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                assert_eq!(r.way(&id), Some(Way::Asked { attempt: 1, stop: None }));
                assert!(r.fork(101), "the task went with the request");
                assert!(matches!(r.reads(101).as_slice(), [ToWorker::Spawn { .. }]));
                assert_eq!(r.way(&id), Some(Way::Bound { pid: 101, attempt: 1 }));
                r.completes(101);
                assert_eq!(r.way(&id), None, "released with its worker");
                (r, id)
            },
            COMPLETED,
        ),
        (
            "submitted, an idle worker waits: it takes the task",
            || {
                let mut r = Rig::with(|c| c.tasks.prespawn = Some(1), 8);
                r.turn();
                assert!(!r.fork(100), "the pool's worker comes without a task");
                let id = r.submit();
                assert_eq!(r.way(&id), Some(Way::Bound { pid: 100, attempt: 1 }));
                assert!(matches!(r.reads(100).as_slice(), [ToWorker::Spawn { .. }]));
                r.completes(100);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "no room under tasks.max_running: queued until a task ends",
            || {
                let mut r = Rig::with(|_| {}, 1);
                let first = r.submit();
                let id = r.submit();
                assert_eq!(r.way(&id), Some(Way::Queued { attempts: 0 }));
                r.fork(101);
                assert_eq!(r.way(&id), Some(Way::Queued { attempts: 0 }), "the first still runs");
                r.completes(101);
                assert_eq!(r.state(&first), TaskState::Completed);
                assert_eq!(r.way(&id), Some(Way::Asked { attempt: 1, stop: None }));
                r.fork(102);
                r.completes(102);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "the fork failed: the frame is taken back and the task asks again first",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.kernel().fork_failed(libc::EAGAIN);
                r.turn();
                assert_eq!(
                    r.way(&id),
                    Some(Way::Queued { attempts: 0 }),
                    "not a worker that never read it"
                );
                assert!(r.kernel().asks.is_empty(), "the back-off holds the next ask");
                r.at(25);
                r.fork(102);
                r.completes(102);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "three forks in a row fail: the task first in line fails",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                for (i, ms) in [25, 50, 75].into_iter().enumerate() {
                    r.kernel().fork_failed(libc::EAGAIN);
                    r.turn();
                    if i < 2 {
                        assert_eq!(r.state(&id), TaskState::Submitted, "after {} failures", i + 1);
                        r.at(ms);
                    }
                }
                let text = r.verdict(&id).2.unwrap();
                assert!(text.starts_with("agentd could not start a worker"), "{text}");
                (r, id)
            },
            (TaskState::Failed, "crashed"),
        ),
        (
            "the fork server dies owing the answer, its frame unread: the next fork server runs it",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.fork_server_lost_unread();
                assert_eq!(r.way(&id), Some(Way::Queued { attempts: 0 }));
                r.at(25);
                assert_eq!(r.kernel().fork_servers, 2, "a new fork server");
                r.fork(102);
                r.completes(102);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "the fork server is late, its frame unread: given up on at the deadline, the task asks again",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.kernel().asks.clear(); // stopped before it read the request
                r.at(999);
                assert_eq!(
                    r.way(&id),
                    Some(Way::Asked { attempt: 1, stop: None }),
                    "not before its deadline"
                );
                r.at(1000);
                assert!(
                    r.kernel().killed_pids.contains(&Kernel::fork_server_pid(1)),
                    "the late one is killed"
                );
                assert_eq!(r.way(&id), Some(Way::Queued { attempts: 0 }));
                r.at(1025);
                r.fork(102);
                r.completes(102);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "an answer that came at the deadline is read before the fork server is given up on",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.forked_silently(101);
                r.kernel().now = Some(r.t0 + Duration::from_millis(1000));
                r.answer();
                assert_eq!(r.way(&id), Some(Way::Bound { pid: 101, attempt: 1 }));
                assert!(r.kernel().killed_pids.is_empty(), "it answered: it is kept");
                r.reads(101);
                r.completes(101);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "the fork server is late after it made the worker, which read its task: the worker is adopted",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.forked_silently(101);
                assert!(
                    matches!(r.reads(101).as_slice(), [ToWorker::Spawn { .. }]),
                    "it read its task"
                );
                r.at(1000);
                assert_eq!(r.way(&id), Some(Way::Adopting { attempt: 1, stop: None }));
                assert_eq!(r.reads(101), vec![ToWorker::Ping], "asked to say who it is");
                r.completes(101);
                assert!(
                    !r.kernel().killed_pids.contains(&101),
                    "never killed for its helper's sake"
                );
                assert!(!r.kernel().group_signals.iter().any(|(g, _)| *g == 101));
                (r, id)
            },
            COMPLETED,
        ),
        (
            "the fork server dies after it made the worker: the worker is adopted",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.forked_silently(101);
                r.reads(101);
                r.kernel().fork_server_dies();
                r.turn();
                assert_eq!(r.way(&id), Some(Way::Adopting { attempt: 1, stop: None }));
                r.completes(101);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "adopted: an exit reaped before the worker said who it is still counts",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.forked_silently(101);
                r.reads(101);
                r.says(101, &FromWorker::Hello { pid: 101 });
                r.says(
                    101,
                    &FromWorker::Done {
                        outcome: Outcome::Completed,
                        cause: Cause::Completed,
                        text: None,
                    },
                );
                r.workers.get_mut(&101).unwrap().says = None;
                r.kernel().exits.push_back((101, ExitStatus::Code(0)));
                r.sup.reap(); // reaped while its fork server still owed its name
                r.at(1000);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "adopting: the worker ends without a word",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.forked_silently(101);
                r.reads(101);
                r.workers.get_mut(&101).unwrap().says = None;
                r.at(1000);
                let text = r.verdict(&id).2.unwrap();
                assert!(text.contains("ended without a word"), "{text}");
                (r, id)
            },
            (TaskState::Failed, "crashed"),
        ),
        (
            "adopting: the worker stays silent past tasks.stall_timeout_ms",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.forked_silently(101);
                r.reads(101);
                r.at(1000);
                r.at(15_999);
                assert_eq!(r.way(&id), Some(Way::Adopting { attempt: 1, stop: None }));
                r.at(16_000);
                (r, id)
            },
            (TaskState::Failed, "stalled"),
        ),
        (
            "cancelled while queued",
            || {
                let mut r = Rig::with(|_| {}, 1);
                r.submit();
                let id = r.submit();
                r.tell(Req::Cancel(id.clone()));
                assert_eq!(r.way(&id), None);
                (r, id)
            },
            (TaskState::Canceled, "canceled"),
        ),
        (
            "cancelled while asked, and the worker not had: it never runs",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.tell(Req::Cancel(id.clone()));
                assert_eq!(
                    r.state(&id),
                    TaskState::Submitted,
                    "waits for the worker to be named or not had"
                );
                r.kernel().fork_failed(libc::EAGAIN);
                r.turn();
                (r, id)
            },
            (TaskState::Canceled, "canceled"),
        ),
        (
            "cancelled while asked, then named: the ladder on its worker",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.tell(Req::Cancel(id.clone()));
                r.fork(101);
                assert!(matches!(
                    r.reads(101).as_slice(),
                    [ToWorker::Spawn { .. }, ToWorker::Cancel]
                ));
                r.dies(101, ExitStatus::Code(0));
                (r, id)
            },
            (TaskState::Canceled, "canceled"),
        ),
        (
            "cancelled while its worker is being adopted: stopped once it says who it is",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.forked_silently(101);
                r.reads(101);
                r.at(1000);
                r.tell(Req::Cancel(id.clone()));
                assert!(matches!(r.way(&id), Some(Way::Adopting { stop: Some(_), .. })));
                r.says(101, &FromWorker::Hello { pid: 101 });
                r.turn();
                assert_eq!(r.reads(101), vec![ToWorker::Ping, ToWorker::Cancel]);
                r.dies(101, ExitStatus::Code(0));
                (r, id)
            },
            (TaskState::Canceled, "canceled"),
        ),
        (
            "cancelled before its Start reached procman: it never starts",
            || {
                let mut r = Rig::new();
                let id = r.create();
                r.tell(Req::Cancel(id.clone()));
                assert_eq!(r.state(&id), TaskState::Canceled);
                r.tell(Req::Start(id.clone()));
                assert_eq!(r.way(&id), None, "dropped: it no longer waits");
                assert!(r.kernel().asks.is_empty(), "no worker asked for it");
                (r, id)
            },
            (TaskState::Canceled, "canceled"),
        ),
        (
            "a task that ended in the table before procman took it is dropped",
            || {
                let mut r = Rig::new();
                let id = r.create();
                r.sup
                    .driver
                    .tasks
                    .finish(&id, TaskState::Rejected, Cause::Refused, None);
                r.tell(Req::Start(id.clone()));
                assert_eq!(r.way(&id), None);
                assert!(r.kernel().asks.is_empty());
                (r, id)
            },
            (TaskState::Rejected, "refused"),
        ),
        (
            "the daemon stops with the task queued",
            || {
                let mut r = Rig::with(|_| {}, 1);
                r.submit();
                let id = r.submit();
                shutdown(&mut r);
                (r, id)
            },
            (TaskState::Canceled, "shutdown"),
        ),
        (
            "the daemon stops while the task is asked: stopped once its worker is named",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                shutdown(&mut r);
                r.fork(101);
                assert!(matches!(
                    r.reads(101).as_slice(),
                    [ToWorker::Spawn { .. }, ToWorker::Cancel]
                ));
                r.dies(101, ExitStatus::Code(0));
                (r, id)
            },
            (TaskState::Canceled, "shutdown"),
        ),
        (
            "submitted after the daemon began to stop",
            || {
                let mut r = Rig::new();
                shutdown(&mut r);
                let id = r.submit();
                assert!(r.kernel().asks.is_empty());
                (r, id)
            },
            (TaskState::Canceled, "shutdown"),
        ),
        (
            "the second SIGTERM while the task is asked: its worker is killed as it is named",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                shutdown(&mut r);
                r.tell(Req::KillAll);
                r.fork(101);
                assert!(
                    r.kernel().group_signals.contains(&(101, libc::SIGKILL)),
                    "at once, no ladder"
                );
                r.dies(101, ExitStatus::Signal(libc::SIGKILL));
                (r, id)
            },
            (TaskState::Canceled, "shutdown"),
        ),
        (
            "its worker never read it: given back, it starts first on a fresh worker",
            || {
                let mut r = Rig::with(|c| c.tasks.prespawn = Some(1), 8);
                r.turn();
                r.fork(100);
                let id = r.submit();
                assert_eq!(r.way(&id), Some(Way::Bound { pid: 100, attempt: 1 }));
                assert!(!r.fork(101), "the pool is refilled");
                r.at(1000); // a stopped idle worker: its spawn frame unread
                assert!(r.kernel().group_signals.contains(&(100, libc::SIGKILL)));
                assert_eq!(
                    r.way(&id),
                    Some(Way::Bound { pid: 101, attempt: 2 }),
                    "given back, it went to the next worker at once"
                );
                r.dies(100, ExitStatus::Signal(libc::SIGKILL));
                assert!(matches!(r.reads(101).as_slice(), [ToWorker::Spawn { .. }]));
                r.completes(101);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "three workers in a row never read it: it fails",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                let mut ms = 0;
                for pid in [101, 102, 103] {
                    r.fork(pid);
                    ms += 1000;
                    r.at(ms);
                    r.dies(pid, ExitStatus::Signal(libc::SIGKILL));
                }
                let text = r.verdict(&id).2.unwrap();
                assert_eq!(text, "agentd could not start a worker: 3 in a row never read the task");
                (r, id)
            },
            (TaskState::Failed, "crashed"),
        ),
        (
            "the fork server's queue is full: the task waits, nothing fails",
            || {
                let mut r = Rig::new();
                r.kernel().requests_full = true;
                let id = r.submit();
                assert_eq!(r.way(&id), Some(Way::Queued { attempts: 0 }));
                r.kernel().requests_full = false;
                r.at(25);
                r.fork(101);
                r.completes(101);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "no fork server can be started, three times: the task fails with the reason",
            || {
                let mut r = Rig::new();
                r.kernel().fork_server_start_fails = Some(libc::EAGAIN);
                let id = r.submit();
                r.at(25);
                assert_eq!(r.state(&id), TaskState::Submitted);
                r.at(50);
                let text = r.verdict(&id).2.unwrap();
                assert!(text.starts_with("agentd could not start a worker: "), "{text}");
                (r, id)
            },
            (TaskState::Failed, "crashed"),
        ),
        (
            "fork servers lost again and again: only past five in a row do losses count as failures",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                let mut ms = 0;
                for loss in 1..=8 {
                    r.fork_server_lost_unread();
                    if loss < 8 {
                        assert_eq!(r.state(&id), TaskState::Submitted, "after {loss} losses");
                        ms += 25;
                        r.at(ms);
                    }
                }
                let text = r.verdict(&id).2.unwrap();
                assert!(text.contains("fork servers in a row were lost"), "{text}");
                (r, id)
            },
            (TaskState::Failed, "crashed"),
        ),
        (
            "a fork server found gone by a send is counted before the next is started",
            || {
                let mut r = Rig::new();
                // The eighth is gone before the task's request reaches it:
                // it says nothing more, and poll has no fd of it.
                r.kernel().broken.insert(8);
                let id = r.submit();
                let mut ms = 0;
                for _ in 1..=7 {
                    r.fork_server_lost_unread();
                    ms += 25;
                    r.at(ms);
                }
                assert_eq!(r.kernel().fork_servers, 8);
                r.turn();
                let text = r.verdict(&id).2.unwrap();
                assert_eq!(r.kernel().fork_servers, 8, "a ninth was started first: {text}");
                assert!(text.contains("8 fork servers in a row were lost"), "{text}");
                (r, id)
            },
            (TaskState::Failed, "crashed"),
        ),
        (
            "fork servers dead before a request reached them: each a loss, not a failed ask too",
            || {
                let mut r = Rig::new();
                // Every fork server's socket breaks before the first send.
                r.kernel().broken.extend(1..=20);
                let id = r.submit();
                let mut ms = 0;
                while r.state(&id) == TaskState::Submitted && ms < 1000 {
                    ms += 25;
                    r.at(ms);
                }
                let text = r.verdict(&id).2.unwrap();
                assert_eq!(
                    r.kernel().fork_servers,
                    8,
                    "fork servers lost before the task failed: {text}"
                );
                assert!(text.contains("8 fork servers in a row were lost"), "{text}");
                (r, id)
            },
            (TaskState::Failed, "crashed"),
        ),
        (
            "the fork server answers nonsense: it is replaced, the task asks the next one",
            || {
                let mut r = Rig::new();
                let id = r.submit();
                r.kernel().asks.clear();
                r.kernel()
                    .said
                    .entry(1)
                    .or_default()
                    .push_back(Said::Garbage(b"??".to_vec()));
                r.turn();
                assert_eq!(r.way(&id), Some(Way::Queued { attempts: 0 }));
                r.at(25);
                r.fork(102);
                r.completes(102);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "the kernel will not place a handed worker in its cgroup: moved in after birth instead, no failure",
            || {
                let mut r = Rig::new();
                r.kernel().slots = true;
                r.kernel().whole = true;
                let id = r.submit();
                assert!(r.kernel().asks[0].request.placed_only);
                r.kernel().fork_failed(libc::EBUSY);
                r.turn();
                assert!(!r.kernel().whole, "from now on workers are moved in");
                assert_eq!(r.way(&id), Some(Way::Queued { attempts: 0 }));
                r.at(25);
                assert!(!r.fork(102), "asked without the task: it is to be moved in first");
                assert_eq!(r.kernel().entered, vec![(102, Slot(1))]);
                assert!(matches!(r.reads(102).as_slice(), [ToWorker::Spawn { .. }]));
                r.completes(102);
                (r, id)
            },
            COMPLETED,
        ),
        (
            "a worker that cannot be put in its slot is killed, never run uncontained; the task waits",
            || {
                let mut r = Rig::new();
                r.kernel().slots = true;
                r.kernel().enter_refused = true;
                let id = r.submit();
                r.fork(101);
                assert!(r.kernel().group_signals.contains(&(101, libc::SIGKILL)));
                assert_eq!(r.way(&id), Some(Way::Queued { attempts: 0 }));
                r.kernel().enter_refused = false;
                r.dies(101, ExitStatus::Signal(libc::SIGKILL));
                r.at(25);
                r.fork(102);
                r.reads(102);
                r.completes(102);
                (r, id)
            },
            COMPLETED,
        ),
    ]
}

#[test]
fn every_way_to_a_worker_ends_with_the_right_verdict() {
    let rows = rows();
    assert!(rows.len() >= 26, "as many rows as the worker machine's: {}", rows.len());
    for (name, script, (state, cause)) in rows {
        let (r, id) = script();
        let (got, got_cause, text) = r.verdict(&id);
        assert_eq!((got, got_cause.as_deref()), (state, Some(cause)), "{name}: {text:?}");
        assert_eq!(r.way(&id), None, "{name}: the task is no longer on its way");
    }
}

#[test]
fn the_loop_is_settled_only_when_no_worker_or_answer_is_owed() {
    let mut r = Rig::new();
    let id = r.submit();
    shutdown(&mut r);
    assert!(!r.sup.settled(), "a worker is being asked for");
    r.forked_silently(101);
    r.reads(101);
    r.at(1000);
    assert!(!r.sup.settled(), "an orphan is waited for");
    r.completes(101);
    assert!(r.sup.settled());
    assert_eq!(r.state(&id), TaskState::Canceled);
}
