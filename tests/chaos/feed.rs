//! The events feed (`agentd.events/SubscribeToEvents`) of each daemon,
//! followed from its first record: a witness, beside the clients, of every
//! task a daemon created and of every end it gave one. The judge compares
//! the two: an end the feed tells twice, or otherwise than the client saw
//! it, is a second terminal state; a task the feed tells of that no client
//! sent is unknown; a request the feed saw become a task was not lost.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::env::Env;
use crate::http::{CallError, Opened, Sse};
use crate::ledger::{short_state, Ledger, Outcome, Rec};

const EVENTS_URI: &str = "https://agentd.dev/a2a/ext/events";

/// What the feed told of one task.
#[derive(Clone, Debug, Default)]
pub struct FedTask {
    pub epoch: u32,
    pub ctx: String,
    /// Every `task.terminal` record, in order (one, unless a bug).
    pub ends: Vec<Outcome>,
}

#[derive(Default)]
pub struct FeedLog {
    /// Task id → what the feed told of it.
    pub tasks: HashMap<String, FedTask>,
    /// Epochs whose feed was read from its first record.
    pub followed: BTreeSet<u32>,
    /// Epochs whose feed was not read whole (a resync, a hole in the
    /// numbers, or a start after records were dropped): a task missing
    /// from it proves nothing.
    pub gaps: BTreeSet<u32>,
}

impl FeedLog {
    /// Whether the feed of `epoch` was read whole (up to its end).
    pub fn whole(&self, epoch: u32) -> bool {
        self.followed.contains(&epoch) && !self.gaps.contains(&epoch)
    }

    /// contextId → task ids the feed saw created for it.
    pub fn by_ctx(&self) -> HashMap<&str, Vec<&str>> {
        let mut out: HashMap<&str, Vec<&str>> = HashMap::new();
        for (id, t) in &self.tasks {
            out.entry(t.ctx.as_str()).or_default().push(id.as_str());
        }
        out
    }

    /// One record of `epoch`'s feed.
    pub fn record(&mut self, epoch: u32, body: &serde_json::Value) {
        let id = body["taskId"].as_str().unwrap_or("").to_string();
        match body["kind"].as_str() {
            Some("task.created") => {
                let t = self.tasks.entry(id).or_default();
                t.epoch = epoch;
                t.ctx = body["contextId"].as_str().unwrap_or("").to_string();
            }
            Some("task.terminal") => {
                let t = self.tasks.entry(id).or_default();
                t.epoch = epoch;
                if t.ctx.is_empty() {
                    t.ctx = body["contextId"].as_str().unwrap_or("").to_string();
                }
                t.ends.push(Outcome::new(
                    short_state(body["state"].as_str().unwrap_or("")),
                    body["cause"].as_str().unwrap_or(""),
                ));
            }
            _ => {}
        }
    }
}

/// Follows each daemon's feed until `stop` is set and the last one said
/// goodbye (or died). Reconnects within a life from the last record seen.
pub fn follow(env: Arc<Env>, stop: Arc<AtomicBool>, log: Arc<Mutex<FeedLog>>) {
    // (epoch, the last sequence number read in it)
    let mut at: Option<(u32, u64)> = None;
    loop {
        let Some((epoch, pid)) = env.daemon.wait_up(Duration::from_millis(500)) else {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            continue;
        };
        let from = match at {
            Some((e, seq)) if e == epoch => seq,
            _ => 0,
        };
        match read_feed(&env, &log, epoch, pid, from, &mut at) {
            Ok(true) if stop.load(Ordering::SeqCst) => return,
            Ok(_) => {}
            Err(_) if stop.load(Ordering::SeqCst) && env.daemon.current().is_none() => return,
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Reads one subscription; Ok(true) when the daemon said goodbye.
fn read_feed(
    env: &Env,
    log: &Mutex<FeedLog>,
    epoch: u32,
    pid: i32,
    from: u64,
    at: &mut Option<(u32, u64)>,
) -> Result<bool, CallError> {
    let s = env.connect(epoch, Duration::from_secs(5))?;
    let params = json!({"fromSeq": from});
    let (_, opened) = Sse::open_on(
        s,
        "agentd.events/SubscribeToEvents",
        params,
        &[("A2A-Extensions", EVENTS_URI)],
        None,
    );
    let mut feed = match opened? {
        Opened::Stream(s) => s,
        Opened::Json(e) => return Err(CallError::Rpc(e)),
    };
    loop {
        let Some(ev) = feed.next()? else {
            return Ok(false);
        };
        let mut log = log.lock().unwrap();
        match ev.kind() {
            "hello" => {
                let hello = ev.body();
                log.followed.insert(epoch);
                if hello["pid"].as_i64() != Some(i64::from(pid)) {
                    // Not the daemon the epoch names: it proves nothing.
                    log.gaps.insert(epoch);
                }
                if from == 0 && hello["ringStart"].as_u64() != Some(1) {
                    log.gaps.insert(epoch);
                }
            }
            "event" => {
                let body = ev.body().clone();
                let seq = body["seq"].as_u64().unwrap_or(0);
                let last = at.filter(|(e, _)| *e == epoch).map_or(0, |(_, s)| s);
                if seq != last + 1 {
                    log.gaps.insert(epoch);
                }
                *at = Some((epoch, seq));
                log.record(epoch, &body);
                if body["kind"] == "task.terminal" && env.breaks.take("two_terminal_states") {
                    // The same end told again, otherwise.
                    let mut again = body.clone();
                    again["state"] = json!("TASK_STATE_FAILED");
                    again["cause"] = json!(if body["cause"] == "crashed" {
                        "stalled"
                    } else {
                        "crashed"
                    });
                    log.record(epoch, &again);
                }
            }
            "resync" => {
                log.gaps.insert(epoch);
            }
            "goodbye" => return Ok(true),
            other => {
                drop(log);
                return Err(CallError::Protocol(format!("an events frame {other:?}: {}", ev.data)));
            }
        }
    }
}

/// Weighs the feed against the clients' records: each task the feed ended
/// more than once, or otherwise than its client saw; each task it created
/// that no client sent, or more than one for a message.
pub fn judge(ledger: &Ledger, feed: &FeedLog, recs: &[(String, Rec)]) {
    let by_ctx: HashMap<&str, &Rec> = recs.iter().map(|(c, r)| (c.as_str(), r)).collect();
    let mut ids: Vec<&String> = feed.tasks.keys().collect();
    ids.sort();
    for id in ids {
        let t = &feed.tasks[id];
        if let [first, second, ..] = &t.ends[..] {
            ledger.violation(
                "violation.two_terminal_states",
                format!(
                    "epoch {} task {id} ctx={}: the events feed ended it {} and then {}",
                    t.epoch,
                    t.ctx,
                    first.key(),
                    second.key()
                ),
            );
        }
        let Some(end) = t.ends.first() else { continue };
        ledger.judged("violation.two_terminal_states", 1);
        let Some(view) = by_ctx.get(t.ctx.as_str()).and_then(|r| r.view.as_ref()) else {
            continue;
        };
        ledger.judged("violation.two_terminal_states", 1);
        if view.outcome() != *end {
            ledger.violation(
                "violation.two_terminal_states",
                format!(
                    "epoch {} task {id} ctx={}: its client saw it end {}, the events feed {}",
                    t.epoch,
                    t.ctx,
                    view.outcome().key(),
                    end.key()
                ),
            );
        }
    }
    let mut made: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (ctx, tasks) in feed.by_ctx() {
        made.insert(ctx, tasks);
    }
    ledger.judged("violation.unknown_task", feed.tasks.len() as u64);
    for (ctx, tasks) in made {
        if !by_ctx.contains_key(ctx) {
            ledger.violation(
                "violation.unknown_task",
                format!("the events feed has task(s) {tasks:?} of ctx={ctx}, which no client sent"),
            );
        } else if tasks.len() > 1 {
            ledger.violation(
                "violation.unknown_task",
                format!("ctx={ctx}: one message made tasks {tasks:?} (the events feed)"),
            );
        }
    }
}
