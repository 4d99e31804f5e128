//! The load: many clients at once, each drawing what to do next from its
//! own seeded generator — blocking, streaming, subscribe and resubscribe
//! with Last-Event-ID, cancels at random moments, multi-turn input, jsonl
//! floods, messages at the body limit, clients that vanish, slow readers —
//! plus a latency probe. (The MCP bridge client is in mcp.rs.) Every task
//! goes into the ledger before it is sent, under a contextId of the
//! client's own, so a call that breaks can still find what it created.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::env::SHORT;
pub use crate::env::{Env, CALL_TIMEOUT};
use crate::http::{self, CallError, Progress};
use crate::ledger::{short_state, Kind, Via, View};
use crate::rng::Rng;
use crate::stream::{drain_stream, subscribe, Assembly};

pub fn user_message(text: &str, ctx: &str, task: Option<&str>) -> Value {
    let mut m = json!({"messageId": crate::common::new_id(), "role": "ROLE_USER", "contextId": ctx,
                       "parts": [{"text": text}]});
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    m
}

/// A `sleep`/`child` text: ticks of `per` seconds, a working status each.
fn ticks_text(word: &str, rng: &mut Rng, ticks: (u64, u64), per_ms: (u64, u64)) -> (String, u64) {
    let n = rng.range(ticks.0, ticks.1);
    let per = rng.range(per_ms.0, per_ms.1);
    (format!("{word} {}.{:03} {n}", per / 1000, per % 1000), n * per)
}

/// The text for a task of `kind`, and how long it runs when left alone (ms).
fn text_for(kind: Kind, rng: &mut Rng) -> (String, u64) {
    match kind {
        Kind::Ok => ("ok".into(), 0),
        Kind::Fail => ("fail".into(), 0),
        Kind::Reject => ("reject".into(), 0),
        Kind::Sleep => ticks_text("sleep", rng, (3, 7), (400, 900)),
        Kind::Child => ticks_text("child", rng, (3, 6), (400, 900)),
        Kind::Flood => (format!("flood {}", rng.range(20, 400)), 0),
        Kind::Ask => (format!("ask {}", rng.range(1, 4)), 0),
        Kind::AskIdle => ("askidle".into(), 0),
        Kind::Hang => ("hang".into(), 0),
        Kind::Grow => ("grow".into(), 3000),
        Kind::Hog => ("hog".into(), 0),
        Kind::Big => unreachable!("near_limit builds its own"),
    }
}

/// The budget that makes a task a target of the injector: kinds that run
/// long enough for it (0: not a target).
fn target_budget(kind: Kind, ms: u64) -> u64 {
    if matches!(kind, Kind::Sleep | Kind::Child | Kind::Grow) {
        ms
    } else {
        0
    }
}

/// One load client: operations until the run stops.
pub fn client(env: Arc<Env>, who: String, mut rng: Rng) {
    while !env.stopping() {
        let Some((epoch, _)) = env.daemon.wait_up(Duration::from_secs(60)) else {
            continue;
        };
        let via = rng.weighted(&[
            (Via::Blocking, 30),
            (Via::Streaming, 16),
            (Via::Resubscribe, 8),
            (Via::Cancel, 10),
            (Via::MultiTurn, 6),
            (Via::VanishCall, 5),
            (Via::VanishStream, 4),
            (Via::SlowReader, 3),
            (Via::NearLimit, 3),
        ]);
        let ctx = env.new_ctx(&who);
        match via {
            Via::Blocking => {
                let mut kinds = vec![
                    (Kind::Ok, 20),
                    (Kind::Fail, 6),
                    (Kind::Reject, 4),
                    (Kind::Sleep, 20),
                    (Kind::Child, 10),
                    (Kind::Flood, 8),
                    (Kind::Hang, 2),
                    (Kind::AskIdle, 2),
                ];
                if env.memory {
                    kinds.extend([(Kind::Grow, 10), (Kind::Hog, 1)]);
                }
                let kind = env
                    .take_wanted()
                    .filter(|k| *k != Kind::Grow || env.memory)
                    .unwrap_or_else(|| rng.weighted(&kinds));
                blocking(&env, &ctx, epoch, kind, &mut rng)
            }
            Via::Streaming => {
                let kind = rng.weighted(&[
                    (Kind::Sleep, 4),
                    (Kind::Child, 2),
                    (Kind::Flood, 3),
                    (Kind::Ok, 2),
                    (Kind::Fail, 1),
                ]);
                streaming(&env, &ctx, epoch, kind, &mut rng)
            }
            Via::Resubscribe => resubscribe(&env, &ctx, epoch, &mut rng),
            Via::Cancel => cancel(&env, &ctx, epoch, &mut rng),
            Via::MultiTurn => multi_turn(&env, &ctx, epoch, &mut rng),
            Via::VanishCall => vanish_call(&env, &ctx, epoch, &mut rng),
            Via::VanishStream => vanish_stream(&env, &ctx, epoch, &mut rng),
            Via::SlowReader => slow_reader(&env, &ctx, epoch, &mut rng),
            Via::NearLimit => near_limit(&env, &ctx, epoch, &mut rng),
            Via::Mcp | Via::Probe => unreachable!(),
        }
        env.ledger.count(&format!("via.{via:?}"));
    }
}

pub fn send_params(text: &str, ctx: &str, immediately: bool) -> Value {
    json!({"message": user_message(text, ctx, None),
           "configuration": {"returnImmediately": immediately, "historyLength": 0}})
}

/// A blocking SendMessage of `kind`; input-required ends a blocking call
/// too, so an `askidle` is then followed until its idle timeout.
fn blocking(env: &Env, ctx: &str, epoch: u32, kind: Kind, rng: &mut Rng) {
    let (text, ms) = text_for(kind, rng);
    env.ledger
        .register(ctx, kind, Via::Blocking, epoch, target_budget(kind, ms));
    match env.create_rpc(epoch, ctx, "SendMessage", &send_params(&text, ctx, false), CALL_TIMEOUT) {
        Ok(r) => {
            let task = &r["task"];
            if let Some(id) = task["id"].as_str() {
                env.ledger.set_task(ctx, id);
            }
            let view = View::of_task(task);
            env.ledger.judged("violation.stream_protocol", 1);
            if view.terminal() {
                env.finish(ctx, epoch, view);
            } else if kind == Kind::AskIdle && view.state == "INPUT_REQUIRED" {
                env.follow(ctx, epoch, CALL_TIMEOUT);
            } else {
                env.ledger.violation(
                    "violation.stream_protocol",
                    format!("ctx={ctx}: a blocking {kind:?} answered {}", short_state(&view.state)),
                );
                env.follow(ctx, epoch, CALL_TIMEOUT);
            }
        }
        Err(e) => {
            env.trouble(epoch, ctx, &format!("blocking {kind:?}"), &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

fn streaming(env: &Env, ctx: &str, epoch: u32, kind: Kind, rng: &mut Rng) {
    let (text, ms) = text_for(kind, rng);
    env.ledger
        .register(ctx, kind, Via::Streaming, epoch, target_budget(kind, ms));
    let mut a = Assembly::new(ctx);
    let got = env
        .create_stream(epoch, ctx, "SendStreamingMessage", send_params(&text, ctx, false), None)
        .and_then(|mut s| drain_stream(env, ctx, &mut a, &mut s, Duration::ZERO));
    a.report(env);
    match (got, a.result()) {
        (Ok(()), Some(v)) => env.finish(ctx, epoch, v),
        (Ok(()), None) => {
            env.ledger.violation(
                "violation.stream_protocol",
                format!("ctx={ctx}: the stream ended before the task did"),
            );
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
        (Err(e), _) => {
            env.trouble(epoch, ctx, &format!("streaming {kind:?}"), &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// returnImmediately, then SubscribeToTask, dropped after a few events and
/// resumed with Last-Event-ID, until the task ends.
fn resubscribe(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let kind = if rng.chance(70) { Kind::Sleep } else { Kind::Child };
    let (text, ms) = text_for(kind, rng);
    env.ledger.register(ctx, kind, Via::Resubscribe, epoch, ms);
    let id = match env.create_rpc(epoch, ctx, "SendMessage", &send_params(&text, ctx, true), SHORT) {
        Ok(r) => match r["task"]["id"].as_str() {
            Some(id) => id.to_string(),
            None => {
                env.ledger.violation(
                    "violation.stream_protocol",
                    format!("ctx={ctx}: returnImmediately without a task: {r}"),
                );
                return;
            }
        },
        Err(e) => {
            env.trouble(epoch, ctx, "returnImmediately", &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
            return;
        }
    };
    env.ledger.set_task(ctx, &id);
    let mut a = Assembly::new(ctx);
    for round in 0..8 {
        let last = a.last_id.map(|n| n.to_string());
        let mut headers = Vec::new();
        if let Some(l) = last.as_deref() {
            headers.push(("Last-Event-ID", l));
        }
        let stop_after = (round < 7).then(|| rng.range(1, 4) as usize);
        let r = subscribe(env, &id, &headers).and_then(|mut s| a.read(&mut s, stop_after, Duration::ZERO));
        match r {
            Ok(true) => break,
            Ok(false) => continue,
            // The task ended between two subscriptions.
            Err(CallError::Rpc(e)) if e["code"] == -32004 => break,
            Err(e) => {
                env.trouble(epoch, ctx, "SubscribeToTask", &e);
                break;
            }
        }
    }
    a.report(env);
    match a.result() {
        Some(v) => env.finish(ctx, epoch, v),
        None => env.follow(ctx, epoch, CALL_TIMEOUT),
    }
}

/// A sleeper cancelled at a random moment (queued, running, or finished).
fn cancel(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let kind = if rng.chance(80) { Kind::Sleep } else { Kind::Hang };
    let (text, _) = text_for(kind, rng);
    env.ledger.register(ctx, kind, Via::Cancel, epoch, 0);
    let id = match env.create_rpc(epoch, ctx, "SendMessage", &send_params(&text, ctx, true), SHORT) {
        Ok(r) => r["task"]["id"].as_str().unwrap_or("").to_string(),
        Err(e) => {
            env.trouble(epoch, ctx, "returnImmediately", &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
            return;
        }
    };
    env.ledger.set_task(ctx, &id);
    std::thread::sleep(Duration::from_millis(rng.range(0, 5000)));
    match env.rpc("CancelTask", json!({"id": id}), CALL_TIMEOUT) {
        Ok(task) => {
            let v = View::of_task(&task);
            env.ledger.judged("violation.stream_protocol", 1);
            // The answer is the task once terminal: CANCELED, or — when the
            // task ended by itself while the ladder ran — how it ended.
            let canceled = v.state == "CANCELED";
            if !canceled {
                env.ledger.count("cancel.raced_the_end");
            }
            env.ledger.with(ctx, |r| r.cancel = Some(canceled));
            if v.terminal() {
                env.finish(ctx, epoch, v);
            } else {
                env.ledger.violation(
                    "violation.stream_protocol",
                    format!("ctx={ctx}: CancelTask answered {} (not terminal)", v.state),
                );
                env.follow(ctx, epoch, CALL_TIMEOUT);
            }
        }
        Err(e) if e.code() == Some(-32002) => {
            env.ledger.with(ctx, |r| r.cancel = Some(false));
            env.ledger.count("cancel.already_ended");
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
        Err(e) => {
            env.trouble(epoch, ctx, "CancelTask", &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// `ask N`: N input-required turns answered on the same task.
fn multi_turn(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let (text, _) = text_for(Kind::Ask, rng);
    let turns: usize = text[4..].parse().unwrap_or(1);
    env.ledger.register(ctx, Kind::Ask, Via::MultiTurn, epoch, 0);
    let mut task_id: Option<String> = None;
    let mut answers = Vec::new();
    for turn in 0..=turns {
        let msg = if turn == 0 {
            user_message(&text, ctx, None)
        } else {
            answers.push(format!("a{turn}"));
            user_message(&format!("a{turn}"), ctx, task_id.as_deref())
        };
        let params = json!({"message": msg, "configuration": {"historyLength": 0}});
        // The first turn creates the task; the others go to it.
        let r = if turn == 0 {
            env.create_rpc(epoch, ctx, "SendMessage", &params, CALL_TIMEOUT)
        } else {
            env.rpc("SendMessage", params, CALL_TIMEOUT)
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                env.trouble(epoch, ctx, &format!("turn {turn}"), &e);
                env.follow(ctx, epoch, CALL_TIMEOUT);
                return;
            }
        };
        let task = &r["task"];
        if let Some(id) = task["id"].as_str() {
            task_id = Some(id.to_string());
            env.ledger.set_task(ctx, id);
        }
        let v = View::of_task(task);
        let want = if turn < turns { "INPUT_REQUIRED" } else { "COMPLETED" };
        env.ledger.judged("violation.stream_protocol", 1);
        if v.state != want {
            if v.terminal() {
                // An outcome the judge will weigh (a fault, or a bug).
                env.finish(ctx, epoch, v);
            } else {
                env.ledger.violation(
                    "violation.stream_protocol",
                    format!("ctx={ctx}: turn {turn} answered {}, not {want}", v.state),
                );
                env.follow(ctx, epoch, CALL_TIMEOUT);
            }
            return;
        }
        if turn == turns {
            let want_text = format!("answers: {}", answers.join(" "));
            if v.text != want_text {
                env.ledger.violation(
                    "violation.unexpected_outcome",
                    format!("ctx={ctx}: multi-turn said {:?}, not {want_text:?}", v.text),
                );
            }
            env.finish(ctx, epoch, v);
        }
    }
}

/// A blocking call whose client hangs up mid-call: the task goes on.
fn vanish_call(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let kind = if rng.chance(70) { Kind::Sleep } else { Kind::Child };
    let (text, ms) = text_for(kind, rng);
    env.ledger.register(ctx, kind, Via::VanishCall, epoch, ms);
    let bytes = http::post_bytes(&http::request_body("SendMessage", &send_params(&text, ctx, false)), &[]);
    match env.connect(epoch, SHORT) {
        Ok(mut s) => {
            let wrote = s.write_all(&bytes);
            let progress = if wrote.is_ok() {
                Progress::Written
            } else {
                Progress::Unsent
            };
            env.ledger.request(ctx, progress);
            let _ = s.set_read_timeout(Some(Duration::from_millis(rng.range(20, 800))));
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf);
            drop(s);
        }
        Err(e) => {
            env.ledger.request(ctx, Progress::Unsent);
            env.trouble(epoch, ctx, "connect", &e);
        }
    }
    env.follow(ctx, epoch, CALL_TIMEOUT);
}

/// A stream whose reader hangs up after its first event or two.
fn vanish_stream(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let kind = rng.weighted(&[(Kind::Sleep, 3), (Kind::Flood, 2)]);
    let (text, ms) = text_for(kind, rng);
    env.ledger
        .register(ctx, kind, Via::VanishStream, epoch, target_budget(kind, ms));
    let mut a = Assembly::new(ctx);
    let n = rng.range(1, 3) as usize;
    let r = env
        .create_stream(epoch, ctx, "SendStreamingMessage", send_params(&text, ctx, false), None)
        .and_then(|mut s| {
            let mut seen = 0;
            while seen < n {
                match s.next()? {
                    Some(ev) => {
                        if ev.kind() == "task" {
                            if let Some(id) = ev.body()["id"].as_str() {
                                env.ledger.set_task(ctx, id);
                            }
                        }
                        a.feed(&ev);
                        seen += 1;
                    }
                    None => break,
                }
            }
            Ok(())
        });
    if let Err(e) = r {
        env.trouble(epoch, ctx, "streaming (vanishing)", &e);
    }
    a.report(env);
    env.follow(ctx, epoch, CALL_TIMEOUT);
}

/// A flood read slowly through a small receive buffer.
fn slow_reader(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let text = format!("flood {}", rng.range(300, 1500));
    env.ledger.register(ctx, Kind::Flood, Via::SlowReader, epoch, 0);
    let mut a = Assembly::new(ctx);
    let pause = Duration::from_millis(rng.range(1, 4));
    let got = env
        .create_stream(
            epoch,
            ctx,
            "SendStreamingMessage",
            send_params(&text, ctx, false),
            Some(4096),
        )
        .and_then(|mut s| drain_stream(env, ctx, &mut a, &mut s, pause));
    a.report(env);
    match (got, a.result()) {
        (Ok(()), Some(v)) => env.finish(ctx, epoch, v),
        (Ok(()), None) => {
            env.ledger.violation(
                "violation.stream_protocol",
                format!("ctx={ctx}: the slow stream ended before the task did"),
            );
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
        (Err(e), _) => {
            env.trouble(epoch, ctx, "slow stream", &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// A request body a little under http.body_max_bytes (answered, and the
/// agent got every byte), or a little over it (413, nothing created).
fn near_limit(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let over = rng.chance(30);
    let target = if over {
        env.body_max + rng.range(1, 1024) as usize
    } else {
        env.body_max - rng.range(0, 1024) as usize
    };
    let body_with = |k: usize| {
        http::request_body(
            "SendMessage",
            &send_params(&format!("big {}", "z".repeat(k)), ctx, false),
        )
    };
    let k = target - body_with(0).len();
    let body = body_with(k);
    env.ledger.register(ctx, Kind::Big, Via::NearLimit, epoch, 0);
    match env.create(epoch, ctx, &http::post_bytes(&body, &[]), CALL_TIMEOUT) {
        Ok(resp) if over => {
            if resp.status != 413 {
                env.ledger.violation(
                    "violation.client_error",
                    format!(
                        "ctx={ctx}: a body of {} bytes (limit {}) got {}",
                        body.len(),
                        env.body_max,
                        resp.status
                    ),
                );
            }
            env.ledger.count("near_limit.refused_413");
            env.ledger.refused(ctx);
            match env.find_by_ctx(ctx) {
                Ok(None) => {}
                Ok(Some(id)) => {
                    env.ledger.violation(
                        "violation.unknown_task",
                        format!("ctx={ctx}: a 413 request created task {id}"),
                    );
                    env.ledger.set_task(ctx, &id);
                    env.follow(ctx, epoch, CALL_TIMEOUT);
                }
                Err(e) => env.trouble(epoch, ctx, "ListTasks after 413", &e),
            }
        }
        Ok(resp) => match http::result_of(&resp) {
            Ok(r) => {
                if let Some(id) = r["task"]["id"].as_str() {
                    env.ledger.set_task(ctx, id);
                }
                let v = View::of_task(&r["task"]);
                let want = format!("big {k}");
                if v.state == "COMPLETED" && v.text != want {
                    env.ledger.violation(
                        "violation.unexpected_outcome",
                        format!("ctx={ctx}: the agent saw {:?}, not {want:?}", v.text),
                    );
                }
                env.ledger.count("near_limit.served");
                env.finish(ctx, epoch, v);
            }
            Err(e) => {
                env.trouble(epoch, ctx, &format!("a {}-byte body", body.len()), &e);
                env.follow(ctx, epoch, CALL_TIMEOUT);
            }
        },
        Err(e) => {
            env.trouble(epoch, ctx, &format!("a {}-byte body", body.len()), &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// The probe: a blocking `ok` every `every`, its latency kept unless the
/// daemon's kill broke it.
pub fn probe(env: Arc<Env>, every: Duration, timeout: Duration) {
    // One probe in forty (from the fifth) taking 5 s puts the p99 over its
    // bound: over 1% of the calls, even if a kill breaks one of them.
    let mut calls = 0u64;
    while !env.stopping() {
        let Some((epoch, _)) = env.daemon.wait_up(Duration::from_secs(60)) else {
            continue;
        };
        let ctx = env.new_ctx("probe");
        if env.breaks.take("unknown_task") {
            // A task the ledger never hears of.
            let _ = env.rpc(
                "SendMessage",
                send_params("ok", &env.new_ctx("unregistered"), false),
                timeout,
            );
        }
        if env.break_pending("client_error") {
            // A call no kill or squeeze explains: the method does not exist.
            if let Err(e) = env.rpc("GetTaskk", json!({"id": ctx}), timeout) {
                env.trouble(epoch, &ctx, "a call to a method that does not exist", &e);
            }
        }
        calls += 1;
        let (kind, text, limit) = if calls % 40 == 5 && env.breaks.asked("probe_p99") {
            (Kind::Sleep, "sleep 1.000 5", timeout)
        } else if calls > 1 && env.break_pending("probe_timeout") {
            // An answer that comes after 3 s, waited for 1 s.
            (Kind::Sleep, "sleep 1.000 3", Duration::from_secs(1))
        } else {
            (Kind::Ok, "ok", timeout)
        };
        env.ledger.register(&ctx, kind, Via::Probe, epoch, 0);
        let t = Instant::now();
        let r = env.create_rpc(epoch, &ctx, "SendMessage", &send_params(text, &ctx, false), limit);
        let took = t.elapsed();
        env.ledger.judged("violation.probe_timeout", 1);
        match r {
            Ok(r) => {
                if let Some(id) = r["task"]["id"].as_str() {
                    env.ledger.set_task(&ctx, id);
                }
                env.probe.lock().unwrap().push(took);
                env.finish(&ctx, epoch, View::of_task(&r["task"]));
            }
            Err(e) if env.daemon.disrupted_since(epoch) => {
                env.ledger.count("probe.broken_by_restart");
                let _ = e;
            }
            Err(e) if e.is_timeout() => {
                env.probe.lock().unwrap().push(took);
                env.ledger.violation(
                    "violation.probe_timeout",
                    format!("ctx={ctx}: no answer to a blocking `{text}` within {limit:?}"),
                );
                env.follow(&ctx, epoch, CALL_TIMEOUT);
            }
            Err(e) => {
                env.trouble(epoch, &ctx, "probe", &e);
                env.follow(&ctx, epoch, CALL_TIMEOUT);
            }
        }
        std::thread::sleep(every);
    }
}
