//! The events extension: one feed of every task's lifecycle across the
//! daemon. Each record has a daemon-wide sequence number; the last
//! `ext.events_ring` records are kept so a client can resume from a
//! sequence without gaps or duplicates.
//!
//! ```text
//!  hello  {"hello":  {"seq": N, "ringStart": M, "pid": …, "version": …}}
//!  event  {"event":  {"seq", "time", "kind", "taskId", "contextId", …}}   (SSE id = seq)
//!         kind: task.created | task.state | task.artifact | task.terminal
//!               | worker.spawn | worker.exit
//!  resync {"resync": {"from": F, "ringStart": M}}    F fell off the ring
//!  bye    {"goodbye": {"seq": N, "reason": "shutdown"}}   then the stream ends
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::control::Cause;
use crate::principal::Principal;
use crate::tasks::{About, Notice, Observer};
use crate::wire::{StreamResponse, TaskState};

/// What an SSE stream writes next (the task streams of `a2a::stream` and
/// this feed alike).
pub enum Emit {
    /// One SSE event: its sequence (`id:`) if it has one, and the
    /// JSON to put in the JSON-RPC `result` (this feed's records).
    Event(Option<u64>, Value),
    /// One SSE event of a task stream: its sequence if it has one, and the
    /// StreamResponse, written as it is (no `Value` tree in between: an
    /// artifact chunk of a large output is escaped once, straight out).
    Response(Option<u64>, Box<StreamResponse>),
    /// Nothing happened for a while: a comment keeps the connection alive
    /// and finds out whether the client is still there.
    KeepAlive,
}

/// One record of the ring. It keeps what happened, not its JSON: a record
/// is written for every change of every task and read only by subscribers,
/// so the JSON is made when one reads it ([`Record::body`]).
#[derive(Debug, Clone)]
pub struct Record {
    pub seq: u64,
    /// Who owns the task (for visibility), empty for daemon-wide records.
    pub principal: Arc<str>,
    time_ms: u64,
    fact: Fact,
}

/// A task table notice, owned. The strings are shared: a task's ids come
/// round in several records, and each is one allocation fewer per record
/// ([`Names`]).
#[derive(Debug, Clone)]
enum Fact {
    Created {
        task_id: Arc<str>,
        context_id: Arc<str>,
    },
    State {
        task_id: Arc<str>,
        context_id: Arc<str>,
        state: TaskState,
    },
    Terminal {
        task_id: Arc<str>,
        context_id: Arc<str>,
        state: TaskState,
        cause: Option<Cause>,
    },
    Artifact {
        task_id: Arc<str>,
        context_id: Arc<str>,
        artifact_id: Arc<str>,
        append: bool,
        last_chunk: bool,
    },
    WorkerSpawn {
        task_id: Arc<str>,
        pid: i32,
    },
    WorkerExit {
        task_id: Arc<str>,
        pid: i32,
        exit_code: i32,
        exit: Arc<str>,
        cause: Cause,
    },
}

impl Record {
    /// `{"seq", "time", "kind", …fields}`.
    pub fn body(&self) -> Value {
        let (kind, fields) = self.fact.render();
        let mut body = Map::new();
        body.insert("seq".into(), json!(self.seq));
        body.insert("time".into(), json!(crate::clock::format_ms(self.time_ms)));
        body.insert("kind".into(), json!(kind));
        body.extend(fields);
        Value::Object(body)
    }
}

struct Inner {
    seq: u64,
    ring: VecDeque<Record>,
    names: Names,
    closed: bool,
    /// Subscribers blocked in `next`: nobody to wake, no wake-up to pay.
    waiting: usize,
}

pub struct Feed {
    inner: Mutex<Inner>,
    changed: Condvar,
    ring_max: usize,
}

/// What a subscriber gets when it asks for records after a sequence.
pub enum Next {
    Records(Vec<Record>),
    /// The records after the requested sequence are gone; the ring now
    /// starts at this sequence.
    FellBehind(u64),
    Timeout,
    Closed,
}

impl Feed {
    pub fn new(ring_max: usize) -> Feed {
        Feed {
            inner: Mutex::new(Inner {
                seq: 0,
                ring: VecDeque::new(),
                names: Names::default(),
                closed: false,
                waiting: 0,
            }),
            changed: Condvar::new(),
            ring_max: ring_max.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one record for `notice`, stamped with the next sequence and
    /// the time.
    fn publish(&self, about: About<'_>, notice: &Notice<'_>) {
        let mut inner = self.lock();
        let fact = Fact::from_notice(notice, about, &mut inner.names);
        let principal = about.principal.clone();
        inner.seq += 1;
        let seq = inner.seq;
        // Room first, then the record: the ring never holds one more than
        // ring_max, so it never grows to twice its room (VecDeque doubles),
        // and the slots it cycles through are half as many.
        while inner.ring.len() >= self.ring_max {
            inner.ring.pop_front();
        }
        inner.ring.push_back(Record {
            seq,
            principal,
            time_ms: crate::clock::now_ms(),
            fact,
        });
        let wake = inner.waiting > 0;
        drop(inner);
        if wake {
            self.changed.notify_all();
        }
    }

    /// (last sequence, first sequence still in the ring).
    pub fn position(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.seq, inner.ring.front().map_or(inner.seq + 1, |r| r.seq))
    }

    /// Records after `after`, waiting up to `timeout` for the first.
    pub fn next(&self, after: u64, timeout: Duration) -> Next {
        let deadline = std::time::Instant::now() + timeout;
        let mut inner = self.lock();
        loop {
            if inner.seq > after {
                let start = inner.ring.front().map_or(inner.seq + 1, |r| r.seq);
                if start > after + 1 {
                    return Next::FellBehind(start);
                }
                return Next::Records(inner.ring.iter().filter(|r| r.seq > after).cloned().collect());
            }
            if inner.closed {
                return Next::Closed;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Next::Timeout;
            }
            inner.waiting += 1;
            inner = self
                .changed
                .wait_timeout(inner, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            inner.waiting -= 1;
        }
    }

    /// The daemon is stopping: every subscriber says goodbye.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

/// The feed subscribes to the task table: each notice becomes one record.
impl Observer for Feed {
    fn notice(&self, about: About<'_>, notice: &Notice<'_>) {
        self.publish(about, notice);
    }
}

/// The strings of the last few records that are not a task's own names
/// (artifact ids, exits), shared by the next ones that carry the
/// same: a streamed artifact's id comes round chunk after chunk.
#[derive(Default)]
struct Names {
    recent: [Option<Arc<str>>; 8],
    next: usize,
}

impl Names {
    fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(hit) = self.recent.iter().flatten().find(|n| ***n == *s) {
            return hit.clone();
        }
        let name: Arc<str> = Arc::from(s);
        self.recent[self.next] = Some(name.clone());
        self.next = (self.next + 1) % self.recent.len();
        name
    }
}

impl Fact {
    /// The notice, owned: the task's ids are the table's shared strings
    /// (`about`), the rest through `names`.
    fn from_notice(notice: &Notice<'_>, about: About<'_>, names: &mut Names) -> Fact {
        let mut n = |s: &str| names.get(s);
        let (task_id, context_id) = (about.task_id.clone(), about.context_id.clone());
        match *notice {
            Notice::Created { .. } => Fact::Created { task_id, context_id },
            Notice::State { state, .. } => Fact::State {
                task_id,
                context_id,
                state,
            },
            Notice::Terminal { state, cause, .. } => Fact::Terminal {
                task_id,
                context_id,
                state,
                cause,
            },
            Notice::Artifact {
                artifact_id,
                append,
                last_chunk,
                ..
            } => Fact::Artifact {
                task_id,
                context_id,
                artifact_id: n(artifact_id),
                append,
                last_chunk,
            },
            Notice::WorkerSpawn { pid, .. } => Fact::WorkerSpawn { task_id, pid },
            Notice::WorkerExit {
                pid,
                exit_code,
                exit,
                cause,
                ..
            } => Fact::WorkerExit {
                task_id,
                pid,
                exit_code,
                exit: n(exit),
                cause,
            },
        }
    }
}

impl Fact {
    /// The record's kind and fields (after `seq`, `time` and `kind`).
    fn render(&self) -> (&'static str, Map<String, Value>) {
        let ids = |task_id: &str, context_id: &str| {
            Map::from_iter([
                ("taskId".to_string(), json!(task_id)),
                ("contextId".to_string(), json!(context_id)),
            ])
        };
        match self {
            Fact::Created { task_id, context_id } => ("task.created", ids(task_id, context_id)),
            Fact::State {
                task_id,
                context_id,
                state,
            } => {
                let mut f = ids(task_id, context_id);
                f.insert("state".into(), json!(state));
                ("task.state", f)
            }
            Fact::Terminal {
                task_id,
                context_id,
                state,
                cause,
            } => {
                let mut f = ids(task_id, context_id);
                f.insert("state".into(), json!(state));
                f.insert("cause".into(), json!(cause.map(Cause::as_str)));
                ("task.terminal", f)
            }
            Fact::Artifact {
                task_id,
                context_id,
                artifact_id,
                append,
                last_chunk,
            } => {
                let mut f = ids(task_id, context_id);
                f.insert("artifactId".into(), json!(&**artifact_id));
                f.insert("append".into(), json!(append));
                f.insert("lastChunk".into(), json!(last_chunk));
                ("task.artifact", f)
            }
            Fact::WorkerSpawn { task_id, pid } => (
                "worker.spawn",
                Map::from_iter([
                    ("taskId".to_string(), json!(&**task_id)),
                    ("pid".to_string(), json!(pid)),
                ]),
            ),
            Fact::WorkerExit {
                task_id,
                pid,
                exit_code,
                exit,
                cause,
            } => (
                "worker.exit",
                Map::from_iter([
                    ("taskId".to_string(), json!(&**task_id)),
                    ("pid".to_string(), json!(pid)),
                    ("exitCode".to_string(), json!(exit_code)),
                    ("exit".to_string(), json!(&**exit)),
                    ("cause".to_string(), json!(cause.as_str())),
                ]),
            ),
        }
    }
}

/// Runs one `SubscribeToEvents` stream. `from`: resume after this sequence
/// (the `fromSeq` param or `Last-Event-ID`); `None` = only new records.
pub fn pump(
    feed: &Feed,
    principal: &Principal,
    from: Option<u64>,
    keepalive: Duration,
    sink: &mut dyn FnMut(Emit) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let (seq, ring_start) = feed.position();
    sink(Emit::Event(
        None,
        json!({"hello": {"seq": seq, "ringStart": ring_start, "pid": std::process::id(), "version": env!("CARGO_PKG_VERSION")}}),
    ))?;
    let mut after = from.unwrap_or(seq).min(seq);
    let own = principal.name();
    loop {
        match feed.next(after, keepalive) {
            Next::Records(records) => {
                for r in records {
                    after = r.seq;
                    if principal.is_operator() || *r.principal == *own {
                        sink(Emit::Event(Some(r.seq), json!({ "event": r.body() })))?;
                    }
                }
            }
            Next::FellBehind(start) => {
                crate::metrics::events_resynced();
                sink(Emit::Event(
                    None,
                    json!({"resync": {"from": after, "ringStart": start}}),
                ))?;
                after = start - 1;
            }
            Next::Timeout => sink(Emit::KeepAlive)?,
            Next::Closed => {
                let (seq, _) = feed.position();
                return sink(Emit::Event(
                    None,
                    json!({"goodbye": {"seq": seq, "reason": "shutdown"}}),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> Principal {
        Principal::Unix { uid: 0, pid: 1 }
    }

    /// Tells the feed as the task table would: `principal`'s task, the
    /// notice's ids.
    fn tell(feed: &Feed, principal: &str, notice: &Notice<'_>) {
        let (task_id, context_id) = match *notice {
            Notice::Created { task_id, context_id }
            | Notice::State {
                task_id, context_id, ..
            }
            | Notice::Terminal {
                task_id, context_id, ..
            }
            | Notice::Artifact {
                task_id, context_id, ..
            } => (task_id, context_id),
            Notice::WorkerSpawn { task_id, .. } | Notice::WorkerExit { task_id, .. } => (task_id, ""),
        };
        let (p, t, c): (Arc<str>, Arc<str>, Arc<str>) = (principal.into(), task_id.into(), context_id.into());
        let about = About {
            principal: &p,
            task_id: &t,
            context_id: &c,
        };
        feed.notice(about, notice);
    }

    fn created(task_id: &str) -> Notice<'_> {
        Notice::Created {
            task_id,
            context_id: "c",
        }
    }

    #[test]
    fn a_record_is_rendered_when_read() {
        let feed = Feed::new(4);
        tell(
            &feed,
            "p",
            &Notice::Terminal {
                task_id: "t",
                context_id: "c",
                state: TaskState::Canceled,
                cause: Some(Cause::Canceled),
            },
        );
        let Next::Records(r) = feed.next(0, Duration::ZERO) else {
            panic!("expected a record")
        };
        let body = r[0].body();
        assert_eq!(body["seq"], 1);
        assert_eq!(body["kind"], "task.terminal");
        assert_eq!(
            (&body["taskId"], &body["contextId"], &body["state"], &body["cause"]),
            (
                &json!("t"),
                &json!("c"),
                &json!("TASK_STATE_CANCELED"),
                &json!("canceled")
            )
        );
        assert!(body["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{body}");
    }

    #[test]
    fn a_full_ring_keeps_its_room_and_never_doubles_it() {
        let feed = Feed::new(64);
        for i in 0..1000 {
            tell(&feed, "p", &created(&i.to_string()));
        }
        assert_eq!(feed.position(), (1000, 937), "the last 64 records");
        let ring = &feed.lock().ring;
        assert_eq!(ring.len(), 64);
        assert!(ring.capacity() < 128, "a ring of 64 held room for {}", ring.capacity());
    }

    #[test]
    fn resumes_without_gaps_and_resyncs_when_behind() {
        let feed = Feed::new(3);
        for i in 0..5 {
            tell(&feed, "p", &created(&i.to_string()));
        }
        assert_eq!(feed.position(), (5, 3));
        match feed.next(3, Duration::ZERO) {
            Next::Records(r) => assert_eq!(r.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![4, 5]),
            _ => panic!("expected records"),
        }
        assert!(matches!(feed.next(1, Duration::ZERO), Next::FellBehind(3)));
        assert!(matches!(feed.next(5, Duration::ZERO), Next::Timeout));
        feed.close();
        assert!(matches!(feed.next(5, Duration::ZERO), Next::Closed));
    }

    #[test]
    fn pump_says_hello_resyncs_and_goodbye() {
        let feed = Feed::new(2);
        for _ in 0..4 {
            tell(&feed, "unix:uid=0", &created("t"));
        }
        feed.close();
        let mut seen = Vec::new();
        pump(&feed, &op(), Some(0), Duration::from_millis(10), &mut |e| {
            if let Emit::Event(id, v) = e {
                seen.push((id, v));
            }
            Ok(())
        })
        .unwrap();
        assert!(seen[0].1.get("hello").is_some());
        assert_eq!(seen[1].1["resync"]["from"], 0);
        assert_eq!(seen[2].0, Some(3));
        assert_eq!(seen[3].0, Some(4));
        assert!(seen[4].1.get("goodbye").is_some());
    }

    #[test]
    fn non_operators_see_only_their_own_records() {
        let feed = Feed::new(10);
        tell(&feed, "vsock:cid=3", &created("a"));
        tell(&feed, "vsock:cid=4", &created("b"));
        feed.close();
        let mut ids = Vec::new();
        let me = Principal::Vsock {
            cid: 4,
            operator: false,
        };
        pump(&feed, &me, Some(0), Duration::from_millis(10), &mut |e| {
            if let Emit::Event(Some(id), _) = e {
                ids.push(id);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(ids, vec![2]);
    }

    #[test]
    fn names_are_shared_while_recent_and_always_right() {
        let mut names = Names::default();
        let a = names.get("task-a");
        assert!(
            Arc::ptr_eq(&a, &names.get("task-a")),
            "a recent name is the same allocation"
        );
        // Push it out with as many other names as are kept.
        for i in 0..names.recent.len() {
            assert_eq!(&*names.get(&format!("other-{i}")), format!("other-{i}"));
        }
        let again = names.get("task-a");
        assert_eq!(&*again, "task-a");
        assert!(!Arc::ptr_eq(&a, &again), "an old one is made anew");
    }
}
