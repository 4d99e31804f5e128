//! Streaming, tested from outside with a strict SSE client: which events a
//! stream carries and in which order, one event per chunk, `id:` the
//! per-task sequence, several subscribers, Last-Event-ID, keep-alives, and
//! a thousand streams that must leave no thread, fd or process behind.

mod common;

use std::time::{Duration, Instant};

use common::{user_message, wait_for, Daemon, SseEvent, SseStream};
use serde_json::{json, Value};

const TERMINAL: [&str; 4] = [
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
];

fn send_stream(d: &Daemon, id: Value, text: &str) -> SseStream {
    d.stream_with_id(id, "SendStreamingMessage", json!({"message": user_message(text)}), &[])
}

fn subscribe(d: &Daemon, task_id: &str, headers: &[(&str, &str)]) -> SseStream {
    d.stream("SubscribeToTask", json!({"id": task_id}), headers)
}

fn state_of(d: &Daemon, id: &str) -> String {
    d.ok("GetTask", json!({"id": id}))["status"]["state"]
        .as_str()
        .unwrap()
        .to_string()
}

fn append(e: &SseEvent) -> bool {
    e.body()["append"].as_bool().unwrap_or(false)
}

fn last_chunk(e: &SseEvent) -> bool {
    e.body()["lastChunk"].as_bool().unwrap_or(false)
}

fn artifact_text(e: &SseEvent) -> String {
    e.body()["artifact"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap_or(""))
        .collect()
}

/// A whole task stream: a `task` first, updates in between, a terminal
/// statusUpdate last; every event answers `req_id`; `id:`s strictly
/// increase; every update names the task and its context.
fn check_task_stream(events: &[SseEvent], req_id: &Value) {
    let show = || events.iter().map(|e| e.raw.as_str()).collect::<String>();
    assert!(events.len() >= 2, "too few events:\n{}", show());
    let first = &events[0];
    assert_eq!(first.kind(), "task", "first event:\n{}", show());
    assert!(
        matches!(first.state(), Some("TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING")),
        "first state:\n{}",
        show()
    );
    let task_id = first.body()["id"].as_str().unwrap();
    let context_id = first.body()["contextId"].as_str().unwrap();
    assert!(!task_id.is_empty() && !context_id.is_empty());
    for e in &events[1..] {
        assert!(
            matches!(e.kind(), "statusUpdate" | "artifactUpdate"),
            "unexpected event kind:\n{}",
            e.raw
        );
        assert_eq!(e.body()["taskId"], task_id, "{}", e.raw);
        assert_eq!(e.body()["contextId"], context_id, "{}", e.raw);
    }
    let last = events.last().unwrap();
    assert!(last.is_terminal_status(), "last event:\n{}", show());
    assert_eq!(last.state(), Some("TASK_STATE_COMPLETED"), "{}", last.raw);
    assert_eq!(
        events.iter().filter(|e| e.is_terminal_status()).count(),
        1,
        "one terminal event:\n{}",
        show()
    );
    for e in events {
        assert_eq!(&e.data["id"], req_id, "JSON-RPC id: {}", e.raw);
    }
    let ids: Vec<u64> = events
        .iter()
        .map(|e| e.id.unwrap_or_else(|| panic!("task events carry id: {}", e.raw)))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids not increasing: {ids:?}");
}

#[test]
fn send_streaming_echo() {
    let d = Daemon::start(&[]);
    for req_id in [json!("req-ü-1"), json!(42)] {
        let mut s = send_stream(&d, req_id.clone(), "hello stream");
        assert_eq!(s.header("Cache-Control"), Some("no-cache"));
        let events = s.collect();
        assert!(s.ended());
        check_task_stream(&events, &req_id);
        let arts: Vec<&SseEvent> = events.iter().filter(|e| e.kind() == "artifactUpdate").collect();
        assert!(!arts.is_empty(), "the echo comes back as an artifact");
        let echoed: String = arts.iter().map(|e| artifact_text(e)).collect();
        assert_eq!(echoed, "hello stream");
    }
}

#[test]
fn chunked_artifacts() {
    let d = Daemon::start(&["--exec", "sh -c 'for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done'"]);
    let mut s = send_stream(&d, json!(7), "");
    let events = s.collect();
    check_task_stream(&events, &json!(7));
    let arts: Vec<&SseEvent> = events.iter().filter(|e| e.kind() == "artifactUpdate").collect();
    assert!(arts.len() >= 2, "streamed in chunks: {}", arts.len());
    let aid = &arts[0].body()["artifact"]["artifactId"];
    assert!(aid.as_str().is_some_and(|s| !s.is_empty()));
    for (i, e) in arts.iter().enumerate() {
        assert_eq!(&e.body()["artifact"]["artifactId"], aid, "one artifact: {}", e.raw);
        assert_eq!(append(e), i > 0, "append on every chunk after the first: {}", e.raw);
        assert_eq!(
            last_chunk(e),
            i == arts.len() - 1,
            "lastChunk only on the last: {}",
            e.raw
        );
    }
    let text: String = arts.iter().map(|e| artifact_text(e)).collect();
    assert_eq!(text, "line1\nline2\nline3\nline4\nline5\n");

    let task_id = events[0].body()["id"].as_str().unwrap();
    let task = d.ok("GetTask", json!({"id": task_id}));
    let artifacts = task["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 1, "{task}");
    assert_eq!(&artifacts[0]["artifactId"], aid);
    let whole: String = artifacts[0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(whole, text);
}

/// Reads a subscription to its end on another thread.
fn read_all_async(mut s: SseStream) -> std::thread::JoinHandle<Vec<SseEvent>> {
    std::thread::spawn(move || {
        let events = s.collect();
        assert!(s.ended());
        events
    })
}

/// A subscription: a snapshot, then consecutive sequence numbers, then the
/// terminal statusUpdate.
fn check_subscription(events: &[SseEvent], task_id: &str) {
    let show = || events.iter().map(|e| e.raw.as_str()).collect::<String>();
    assert!(events.len() >= 2, "{}", show());
    assert_eq!(events[0].kind(), "task", "starts with a snapshot:\n{}", show());
    assert_eq!(events[0].body()["id"], task_id);
    assert!(!TERMINAL.contains(&events[0].state().unwrap()), "{}", show());
    let ids: Vec<u64> = events.iter().map(|e| e.id.expect("an id")).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "events after the snapshot are the next sequences, none lost: {ids:?}"
    );
    assert!(events[1..].iter().all(|e| e.kind() != "task"), "{}", show());
    let last = events.last().unwrap();
    assert!(last.is_terminal_status(), "ends with the terminal status:\n{}", show());
    assert_eq!(last.state(), Some("TASK_STATE_COMPLETED"));
}

#[test]
fn two_subscribers_same_events() {
    // The program writes nothing until both subscriptions have their
    // snapshot (the test then creates `go`): every tick comes after both
    // attached, so each must see every one, the same, in the same order.
    let tmp = common::TempDir::new("two");
    let go = tmp.0.join("go");
    let prog = common::script(
        &tmp.0,
        "ticks.sh",
        &format!(
            "while [ ! -e {go} ]; do sleep 0.02; done\n\
             for i in 1 2 3 4 5 6 7 8 9 10; do echo tick$i; sleep 0.05; done",
            go = go.display()
        ),
    );
    let d = Daemon::start(&["--exec", prog.to_str().unwrap()]);
    let id = d.send_async("go");
    let mut sa = subscribe(&d, &id, &[]);
    let snap_a = sa.next_event().expect("a's snapshot");
    let mut sb = subscribe(&d, &id, &[]);
    let snap_b = sb.next_event().expect("b's snapshot");
    std::fs::write(&go, "").unwrap();
    let (a, b) = (read_all_async(sa), read_all_async(sb));
    let a: Vec<SseEvent> = std::iter::once(snap_a).chain(a.join().unwrap()).collect();
    let b: Vec<SseEvent> = std::iter::once(snap_b).chain(b.join().unwrap()).collect();
    check_subscription(&a, &id);
    check_subscription(&b, &id);
    // From the later snapshot on, the two streams are one.
    let from = a[0].id.unwrap().max(b[0].id.unwrap());
    let after = |evs: &[SseEvent]| -> Vec<(u64, Value)> {
        evs[1..]
            .iter()
            .filter(|e| e.id.unwrap() > from)
            .map(|e| (e.id.unwrap(), e.data.clone()))
            .collect()
    };
    let (ea, eb) = (after(&a), after(&b));
    assert_eq!(ea, eb, "the subscribers saw different events after sequence {from}");
    let text = |evs: &[SseEvent]| -> String {
        evs.iter()
            .filter(|e| e.kind() == "artifactUpdate")
            .map(artifact_text)
            .collect()
    };
    let all_ticks: String = (1..=10).map(|i| format!("tick{i}\n")).collect();
    assert_eq!(text(&a), all_ticks, "a saw every tick");
    assert_eq!(text(&b), all_ticks, "b saw every tick");
    let artifacts = ea
        .iter()
        .filter(|(_, v)| v["result"]["artifactUpdate"].is_object())
        .count();
    assert!(artifacts >= 1, "the shared events hold the output: {ea:?}");
    eprintln!(
        "subscriber a: {} events, b: {} events, {} shared after sequence {from} ({artifacts} artifact updates)",
        a.len(),
        b.len(),
        ea.len()
    );
    assert_eq!(state_of(&d, &id), "TASK_STATE_COMPLETED");
}

#[test]
fn subscriber_leaving_disturbs_nobody() {
    let d = Daemon::start(&[
        "--exec",
        "sh -c 'for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do echo tick$i; sleep 0.1; done'",
    ]);
    let id = d.send_async("go");
    let mut leaver = subscribe(&d, &id, &[]);
    let stayer = read_all_async(subscribe(&d, &id, &[]));
    let first = leaver.next_event().expect("a first event");
    assert_eq!(first.kind(), "task");
    drop(leaver);
    let events = stayer.join().unwrap();
    check_subscription(&events, &id);
    assert_eq!(state_of(&d, &id), "TASK_STATE_COMPLETED");
    // And the daemon still serves new streams.
    let events = send_stream(&d, json!(1), "still here").collect();
    assert_eq!(events.last().unwrap().state(), Some("TASK_STATE_COMPLETED"));
}

#[test]
fn subscribe_errors() {
    let d = Daemon::start(&[]);
    let code = |v: &Value| v["error"]["code"].as_i64();

    let v = d
        .stream_or_json("SubscribeToTask", json!({"id": "no-such-task"}), &[])
        .json();
    assert_eq!(code(&v), Some(-32001), "{v}");
    assert_eq!(v["id"], 1);

    let done = d.ok("SendMessage", json!({"message": user_message("x")}));
    assert_eq!(done["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    let v = d
        .stream_or_json("SubscribeToTask", json!({"id": done["task"]["id"]}), &[])
        .json();
    assert_eq!(code(&v), Some(-32004), "{v}");

    let v = d.stream_or_json("SubscribeToTask", json!({}), &[]).json();
    assert_eq!(code(&v), Some(-32602), "{v}");
}

#[test]
fn last_event_id_replays() {
    let planner = format!("python3 {}/examples/agents/trip_planner.py", env!("CARGO_MANIFEST_DIR"));
    let d = Daemon::start(&["--exec", &planner, "--exec-protocol", "jsonl"]);
    let r = d.ok("SendMessage", json!({"message": user_message("Lisbon")}));
    assert_eq!(r["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    let id = r["task"]["id"].as_str().unwrap();

    // Without the header: the snapshot first, at the latest sequence.
    let mut plain = subscribe(&d, id, &[]);
    let snap = plain.next_event().unwrap();
    assert_eq!(snap.kind(), "task", "{}", snap.raw);
    assert_eq!(snap.state(), Some("TASK_STATE_INPUT_REQUIRED"));
    let last_seq = snap.id.expect("the snapshot carries its sequence");
    assert!(last_seq > 3, "the planner produced several events: {last_seq}");
    drop(plain);

    // With Last-Event-ID: 2, the retained events 3..=last, no snapshot.
    let mut replay = subscribe(&d, id, &[("Last-Event-ID", "2")]);
    let mut got = Vec::new();
    while got.last().map(|e: &SseEvent| e.id) != Some(Some(last_seq)) {
        let e = replay.next_event().expect("the replay reaches the latest event");
        assert_ne!(e.kind(), "task", "no snapshot on a replay: {}", e.raw);
        got.push(e);
    }
    let ids: Vec<u64> = got.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(ids, (3..=last_seq).collect::<Vec<_>>());
    assert!(got.iter().any(|e| e.kind() == "artifactUpdate"));
    assert_eq!(got.last().unwrap().state(), Some("TASK_STATE_INPUT_REQUIRED"));
    assert!(!replay.ended(), "a subscription stays open through input-required");
}

#[test]
fn keepalive_comments() {
    const EVERY: Duration = Duration::from_millis(200);
    let d = Daemon::start(&[
        "--set",
        &format!("http.sse_keepalive_ms={}", EVERY.as_millis()),
        "--exec",
        "sh -c 'sleep 1; echo late'",
    ]);
    let opened = Instant::now();
    let mut s = send_stream(&d, json!(1), "");
    let mut events = Vec::new();
    let seen_before_artifact = loop {
        let e = s.next_event().expect("an artifact before the end");
        let is_artifact = e.kind() == "artifactUpdate";
        events.push(e);
        if is_artifact {
            break s.keepalives();
        }
    };
    let silent_for = opened.elapsed();
    events.extend(s.collect());
    check_task_stream(&events, &json!(1));
    println!("keep-alives before the first artifact, {silent_for:?} after the stream opened: {seen_before_artifact}");
    // Each keep-alive comes after EVERY of silence, so no more than
    // fit in the time before the artifact (a storm of them fails), and
    // not fewer than that less two: a loaded 2-core machine may wake the
    // stream's timer late, but not by two intervals over one second.
    let fit = (silent_for.as_millis() / EVERY.as_millis()) as usize;
    assert!(
        seen_before_artifact <= fit,
        "{seen_before_artifact} keep-alives in {silent_for:?}, at most one per {EVERY:?}"
    );
    assert!(
        seen_before_artifact + 2 >= fit && seen_before_artifact >= 2,
        "{seen_before_artifact} keep-alives in {silent_for:?}: one is due every {EVERY:?}"
    );
}

/// Waits until the daemon has no children and its counts hold still.
fn settled_counts(d: &Daemon) -> (usize, usize) {
    let mut last = (0, 0);
    let mut same = 0;
    assert!(
        wait_for(Duration::from_secs(10), || {
            let now = common::thread_and_fd_counts(d.pid());
            same = if now == last { same + 1 } else { 0 };
            last = now;
            common::task_workers(d.pid()).is_empty() && same >= 10
        }),
        "the daemon did not settle: {last:?}, children {:?}",
        common::task_workers(d.pid())
    );
    last
}

#[test]
fn thousand_short_streams_leak_nothing() {
    let d = Daemon::start(&[]);
    let run = |n: usize| {
        for i in 0..n {
            let events = send_stream(&d, json!(i), "ping").collect();
            assert_eq!(
                events.last().and_then(|e| e.state()),
                Some("TASK_STATE_COMPLETED"),
                "stream {i}"
            );
        }
    };
    run(10);
    let base = settled_counts(&d);
    println!("after warm-up: threads {} fds {}", base.0, base.1);

    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| run(250));
        }
    });
    println!("1000 streams in {:?}", started.elapsed());

    let mut now = (0, 0);
    let back = wait_for(Duration::from_secs(10), || {
        now = common::thread_and_fd_counts(d.pid());
        now.0 <= base.0 + 3 && now.1 <= base.1 + 3 && common::task_workers(d.pid()).is_empty()
    });
    println!("after 1000 streams: threads {} fds {}", now.0, now.1);
    assert!(
        back,
        "leak: threads {} → {}, fds {} → {}, children {:?}",
        base.0,
        now.0,
        base.1,
        now.1,
        common::task_workers(d.pid())
    );
}

/// The SSE client itself, against a fake server speaking canned bytes: it
/// accepts good framing and refuses what agentd must never send.
#[test]
fn sse_client_is_strict() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    fn chunk(data: &str) -> String {
        format!("{:x}\r\n{data}\r\n", data.len())
    }

    fn serve_once(body: String) -> Result<Vec<SseEvent>, String> {
        let dir = common::TempDir::new("fake");
        let socket = dir.0.join("fake.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
            let _ = s.write_all(format!("{head}{body}").as_bytes());
        });
        let fake = Daemon {
            child: None,
            killed: None,
            log: dir.0.join("log"),
            socket,
            dir,
        };
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fake.stream("SubscribeToTask", json!({"id": "t"}), &[]).collect()
        }))
        .map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        });
        server.join().unwrap();
        got
    }

    let event = "id: 4\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
    let keepalive = ": keep-alive\n\n";
    let ok = serve_once(format!("{}{}0\r\n\r\n", chunk(keepalive), chunk(event))).unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].id, Some(4));
    let (head, tail) = event.split_at(20);
    for (body, needle) in [
        (format!("zz\r\n{keepalive}\r\n0\r\n\r\n"), "not hex"),
        (format!("e\n{keepalive}\r\n0\r\n\r\n"), "does not end in CRLF"),
        (
            format!("{:x}\r\n{keepalive}XX0\r\n\r\n", keepalive.len()),
            "not followed by CRLF",
        ),
        (
            format!("{}{}0\r\n\r\n", chunk(head), chunk(tail)),
            "split across chunks",
        ),
        (
            format!("{}0\r\n\r\n", chunk(&format!("{event}{event}"))),
            "exactly one event",
        ),
        (format!("{}0\r\n\r\n", chunk("id: 4\n\n")), "id without data"),
        (chunk(keepalive), "closed before the zero chunk"),
    ] {
        let err = serve_once(body).expect_err(needle);
        assert!(err.contains(needle), "{needle}: {err}");
    }
}
