use super::list::encode_cursor;
use super::*;
use crate::wire::{Part, Role, StreamResponse};

fn limits() -> TableLimits {
    TableLimits {
        max_running: 0,
        max_queued: 3,
        queued_max_bytes: 1 << 30,
        retain_max: 100,
        retain_ms: 60_000,
        retain_bytes: 1 << 30,
    }
}

fn table(retain_max: usize) -> TaskTable {
    TaskTable::new(TableLimits { retain_max, ..limits() })
}

fn op() -> Principal {
    Principal::Unix { uid: 0, pid: 1 }
}

fn msg(text: &str) -> Message {
    Message {
        message_id: "m".into(),
        context_id: None,
        task_id: None,
        role: Role::User,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: vec![],
        reference_task_ids: vec![],
    }
}

fn chunk(id: &str, text: &str) -> Artifact {
    Artifact {
        artifact_id: id.into(),
        name: None,
        description: None,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: vec![],
    }
}

/// A task whose worker has started (artifacts come from a worker).
fn started(t: &TaskTable) -> String {
    let id = t.create(&op(), msg("x"), None).unwrap().id().to_string();
    t.set_progress(&id, TaskState::Working, None);
    id
}

/// A task that ran and finished with `artifact_text` as its one artifact.
fn finished(t: &TaskTable, artifact_text: &str) -> String {
    let id = started(t);
    t.add_artifact(&id, chunk("out", artifact_text), false, true);
    t.finish(&id, TaskState::Completed, Cause::Completed, None);
    id
}

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Observer for Recorder {
    fn notice(&self, about: About<'_>, notice: &Notice<'_>) {
        let principal = about.principal;
        // The shared names are the task's own.
        if let Notice::Created { task_id, context_id }
        | Notice::State {
            task_id, context_id, ..
        } = notice
        {
            assert_eq!((&**about.task_id, &**about.context_id), (*task_id, *context_id));
        }
        let line = match notice {
            Notice::Created { .. } => "created".to_string(),
            Notice::State { state, .. } => format!("state {}", state.short_name()),
            Notice::Artifact {
                artifact_id, append, ..
            } => format!("artifact {artifact_id} {append}"),
            Notice::Terminal { state, cause, .. } => {
                format!("terminal {} {:?}", state.short_name(), cause.map(Cause::as_str))
            }
            Notice::WorkerSpawn { pid, .. } => format!("spawn {pid}"),
            Notice::WorkerExit { pid, cause, .. } => format!("exit {pid} {}", cause.as_str()),
        };
        self.0.lock().unwrap().push(format!("{principal}: {line}"));
    }
}

#[test]
fn queue_cap_refuses_without_creating() {
    let t = table(10);
    for _ in 0..3 {
        t.create(&op(), msg("x"), None).unwrap();
    }
    assert_eq!(
        t.create(&op(), msg("x"), None).err(),
        Some(CreateError::QueueFull { max: 3 })
    );
    assert_eq!(t.counts(), (3, 0, 0));
}

#[test]
fn queued_bytes_are_bounded_and_freed_when_a_task_starts() {
    let t = TaskTable::new(TableLimits {
        max_queued: 100,
        queued_max_bytes: 10_000,
        ..limits()
    });
    let big = "b".repeat(6_000);
    // One message alone always fits, whatever its size.
    let first = t
        .create(&op(), msg(&"h".repeat(20_000)), None)
        .unwrap()
        .id()
        .to_string();
    assert_eq!(
        t.create(&op(), msg(&big), None).err(),
        Some(CreateError::QueueBytes { max_bytes: 10_000 })
    );
    assert_eq!(t.counts(), (1, 0, 0), "nothing was created");
    t.set_progress(&first, TaskState::Working, None);
    let second = t.create(&op(), msg(&big), None).unwrap().id().to_string();
    assert!(
        t.create(&op(), msg(&big), None).is_err(),
        "6,000 + 6,000 bytes > 10,000"
    );
    t.finish(&second, TaskState::Canceled, Cause::Canceled, None);
    assert!(
        t.create(&op(), msg(&big), None).is_ok(),
        "a cancelled queued task frees its bytes"
    );
}

#[test]
fn finish_is_final_and_retention_is_bounded() {
    let t = table(2);
    let ids: Vec<String> = (0..3)
        .map(|_| t.create(&op(), msg("x"), None).unwrap().id().to_string())
        .collect();
    for id in &ids {
        t.set_progress(id, TaskState::Working, None);
        t.finish(id, TaskState::Completed, Cause::Completed, None);
        t.finish(id, TaskState::Failed, Cause::Crashed, None);
    }
    assert!(t.get(&op(), &ids[0], None).is_none(), "oldest pruned");
    let last = t.get(&op(), &ids[2], None).unwrap();
    assert_eq!(last.status.state, TaskState::Completed);
    let md = last.status.message.as_ref().unwrap().metadata.clone().unwrap();
    assert_eq!(md[TERMINAL_KEY], "completed");
    assert_eq!(t.counts(), (0, 0, 2));
}

#[test]
fn appended_chunks_join() {
    let t = table(2);
    let id = started(&t);
    t.add_artifact(&id, chunk("a", "hel"), false, false);
    t.add_artifact(&id, chunk("a", "lo"), true, true);
    let task = t.get(&op(), &id, Some(0)).unwrap();
    assert!(task.history.is_none());
    assert_eq!(task.artifacts.unwrap()[0].parts, vec![Part::text("hello")]);
}

#[test]
fn chunk_semantics_replace_append_and_keep_order() {
    let t = table(2);
    let id = started(&t);
    let mut named = chunk("a", "one");
    named.name = Some("first".into());
    t.add_artifact(&id, named, false, false);
    t.add_artifact(&id, chunk("b", "bee"), true, false); // append to nothing starts it
    let mut data = chunk("a", "");
    data.parts = vec![Part {
        content: crate::wire::PartContent::Data(serde_json::json!({"k": 1})),
        metadata: None,
        filename: None,
        media_type: None,
    }];
    t.add_artifact(&id, data, true, false); // a non-text part is its own part
    let mut renamed = chunk("a", " two");
    renamed.name = Some("ignored on append".into());
    t.add_artifact(&id, renamed, true, false); // text after data: a new part
    t.add_artifact(&id, chunk("b", "replaced"), false, true);
    let arts = t.get(&op(), &id, None).unwrap().artifacts.unwrap();
    assert_eq!(arts.len(), 2);
    assert_eq!(arts[0].artifact_id, "a");
    assert_eq!(arts[0].name.as_deref(), Some("first"));
    assert_eq!(arts[0].parts.len(), 3);
    assert_eq!(arts[0].parts[0], Part::text("one"));
    assert_eq!(arts[0].parts[2], Part::text(" two"));
    assert_eq!(arts[1].artifact_id, "b", "a replaced artifact keeps its place");
    assert_eq!(arts[1].parts, vec![Part::text("replaced")]);
}

#[test]
fn artifacts_are_found_by_id_before_and_after_the_index_is_made() {
    let t = table(2);
    let id = started(&t);
    // Up to the scanned few no index is made; each later one joins it.
    for n in 0..12 {
        t.add_artifact(&id, chunk(&format!("a-{n}"), "x"), false, false);
        let slot = t.find(&id).unwrap();
        let e = slot.lock();
        let indexed = if n + 1 > entry::ARTIFACTS_SCANNED { n + 1 } else { 0 };
        assert_eq!(e.by_id_len(), indexed, "after {} artifacts", n + 1);
        for m in 0..=n {
            assert_eq!(e.position_of(&format!("a-{m}")), Some(m), "after {} artifacts", n + 1);
        }
        assert_eq!(e.position_of("a-none"), None);
    }
    // An append and a replacement land on theirs either way.
    t.add_artifact(&id, chunk("a-3", "y"), true, true);
    t.add_artifact(&id, chunk("a-10", "z"), false, true);
    let arts = t.get(&op(), &id, Some(0)).unwrap().artifacts.unwrap();
    assert_eq!(arts.len(), 12);
    assert_eq!(arts[3].parts, vec![Part::text("xy")]);
    assert_eq!(arts[10].parts, vec![Part::text("z")]);
}

#[test]
fn artifacts_are_found_by_id_among_50000() {
    let t = table(2);
    let id = started(&t);
    for n in 0..50_000 {
        t.add_artifact(&id, chunk(&format!("a-{n}"), "x"), false, false);
    }
    // An append to one in the middle lands on it through the index.
    t.add_artifact(&id, chunk("a-25000", "y"), true, true);
    t.add_artifact(&id, chunk("a-49999", "z"), false, true);
    let slot = t.find(&id).unwrap();
    {
        let e = slot.lock();
        assert_eq!(e.by_id_len(), 50_000);
        assert_eq!(e.position_of("a-25000"), Some(25_000));
        assert_eq!(
            e.position_of("a-0"),
            Some(0),
            "the first ones, scanned before the index was made"
        );
    }
    let arts = t.get(&op(), &id, Some(0)).unwrap().artifacts.unwrap();
    assert_eq!(arts.len(), 50_000);
    assert_eq!(arts[25_000].parts, vec![Part::text("xy")]);
    assert_eq!(arts[49_999].parts, vec![Part::text("z")]);
    assert_eq!(arts[0].artifact_id, "a-0");
}

#[test]
fn a_snapshot_taken_before_an_append_does_not_see_it() {
    let t = table(2);
    let id = started(&t);
    t.add_artifact(&id, chunk("a", "1"), false, false);
    let slot = t.find(&id).unwrap();
    let view = slot.lock().view(None, true);
    t.add_artifact(&id, chunk("a", "2"), true, true);
    assert_eq!(slot.render(view).artifacts.unwrap()[0].parts, vec![Part::text("1")]);
    assert_eq!(
        t.get(&op(), &id, None).unwrap().artifacts.unwrap()[0].parts,
        vec![Part::text("12")]
    );
}

#[test]
fn finished_log_keeps_only_the_final_status() {
    let t = table(10);
    let id = t.create(&op(), msg("x"), None).unwrap().id().to_string();
    t.set_progress(&id, TaskState::Working, None);
    for n in 0..10 {
        t.add_artifact(&id, chunk("a", &n.to_string()), n > 0, n == 9);
    }
    let late = t.watch(&op(), &id).unwrap();
    // Caught up to just before the end: the final status still comes.
    let (_, before_end) = late.snapshot(None);
    drop(late);
    t.finish(&id, TaskState::Completed, Cause::Completed, None);
    assert_eq!(t.find(&id).unwrap().lock().events_len(), 1);
    let w = t.watch(&op(), &id).unwrap();
    match w.next_events(before_end, Duration::ZERO) {
        Next::Events(ev) => {
            assert_eq!(ev.len(), 1);
            assert!(matches!(&ev[0].event, StreamResponse::StatusUpdate(s) if s.status.state == TaskState::Completed));
        }
        other => panic!("expected the final status, got {other:?}"),
    }
    // Further behind: a snapshot of the finished task.
    match w.next_events(1, Duration::ZERO) {
        Next::Resync(task, seq) => {
            assert_eq!(task.status.state, TaskState::Completed);
            assert_eq!(seq, before_end + 1);
        }
        other => panic!("expected a resync, got {other:?}"),
    }
}

#[test]
fn a_watched_task_keeps_its_log_until_the_stream_ends() {
    let t = table(10);
    let id = t.create(&op(), msg("x"), None).unwrap().id().to_string();
    let w = t.watch(&op(), &id).unwrap();
    t.set_progress(&id, TaskState::Working, None);
    t.add_artifact(&id, chunk("a", "1"), false, true);
    t.finish(&id, TaskState::Completed, Cause::Completed, None);
    match w.next_events(0, Duration::ZERO) {
        Next::Events(ev) => assert_eq!(ev.len(), 3, "working, the artifact, completed"),
        other => panic!("expected every event, got {other:?}"),
    }
    let slot = t.find(&id).unwrap();
    assert_eq!(slot.lock().events_len(), 3);
    drop(w);
    assert_eq!(slot.lock().events_len(), 1);
}

#[test]
fn retained_bytes_are_bounded_oldest_evicted_first() {
    let budget = 100_000;
    let t = TaskTable::new(TableLimits {
        retain_bytes: budget,
        ..limits()
    });
    let ids: Vec<String> = (0..10).map(|_| finished(&t, &"x".repeat(30_000))).collect();
    let retained = t.retained_bytes();
    assert!(retained <= budget, "{retained} > {budget}");
    assert!(retained >= 60_000, "the text is counted: {retained}");
    let kept: Vec<bool> = ids.iter().map(|id| t.get(&op(), id, None).is_some()).collect();
    let first_kept = kept.iter().position(|k| *k).unwrap();
    assert!(first_kept >= 7, "about three 30 KB tasks fit in 100 KB: {kept:?}");
    assert!(kept[first_kept..].iter().all(|k| *k), "only the oldest go: {kept:?}");
    assert_eq!(t.counts().2, 10 - first_kept);
}

#[test]
fn a_waiter_gets_its_task_even_if_it_is_evicted_at_once() {
    let t = Arc::new(TaskTable::new(TableLimits {
        retain_bytes: 1,
        ..limits()
    }));
    let id = t.create(&op(), msg("x"), None).unwrap().id().to_string();
    // `done` runs under the task's lock: once it has, the waiter is
    // waiting (or about to, with the lock held) and sees every change.
    let asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiter = {
        let (t, id, asked) = (t.clone(), id.clone(), asked.clone());
        std::thread::spawn(move || {
            t.wait_until(&op(), &id, None, None, |s| {
                asked.store(true, Ordering::SeqCst);
                s.is_terminal()
            })
        })
    };
    while !asked.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    t.set_progress(&id, TaskState::Working, None);
    t.add_artifact(&id, chunk("a", "result"), false, true);
    t.finish(&id, TaskState::Completed, Cause::Completed, None);
    assert!(t.get(&op(), &id, None).is_none(), "over a 1-byte budget: evicted");
    let task = waiter
        .join()
        .unwrap()
        .expect("the waiter still gets the result")
        .render();
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(task.artifacts.unwrap()[0].parts, vec![Part::text("result")]);
}

#[test]
fn expire_drops_tasks_past_retain_ms_and_says_when_the_next_is_due() {
    let t = TaskTable::new(TableLimits {
        retain_ms: 200,
        ..limits()
    });
    assert_eq!(t.expire(), None, "nothing finished, nothing due");
    let id = finished(&t, "x");
    let due = t.expire().expect("one finished task: a due time");
    assert!(due <= Duration::from_millis(201), "{due:?}");
    assert!(t.get(&op(), &id, None).is_some(), "not yet");
    let deadline = Instant::now() + Duration::from_secs(5);
    while t.get(&op(), &id, None).is_some() && Instant::now() < deadline {
        std::thread::sleep(t.expire().unwrap_or(Duration::from_millis(10)));
    }
    assert!(t.get(&op(), &id, None).is_none(), "expired");
    assert_eq!(t.expire(), None);
    assert_eq!((t.counts().2, t.retained_bytes()), (0, 0));
}

/// The texts of a task's history, oldest first.
fn history_texts(t: &TaskTable, id: &str) -> Vec<String> {
    let task = t.get(&op(), id, None).unwrap();
    task.history.unwrap_or_default().iter().map(|m| m.text()).collect()
}

#[test]
fn history_is_bounded_by_bytes_oldest_dropped_first() {
    use crate::limits::TASK_HISTORY_MAX_BYTES;
    let t = table(2);
    let id = started(&t);
    // Sized from the bound, whatever it is: three fit, the fourth does not.
    let text = |n: usize| format!("{n}{}", "h".repeat(TASK_HISTORY_MAX_BYTES / 4));
    for n in 0..5 {
        t.set_progress(&id, TaskState::Working, Some(text(n)));
    }
    let history = history_texts(&t, &id);
    let bytes: usize = history.iter().map(String::len).sum();
    assert!(bytes <= TASK_HISTORY_MAX_BYTES, "{bytes}");
    // Four texts of a quarter of the bound each are over it.
    assert!((1..=3).contains(&history.len()), "{}", history.len());
    assert!(!history.contains(&"x".to_string()), "the first message went first");
    let newest: Vec<String> = (5 - history.len()..5).map(text).collect();
    assert_eq!(history, newest, "what stays is the newest, in order");
}

#[test]
fn history_is_bounded_by_count_oldest_dropped_first() {
    use crate::limits::TASK_HISTORY_MAX;
    let t = table(2);
    let id = started(&t);
    for n in 0..TASK_HISTORY_MAX + 2 {
        t.set_progress(&id, TaskState::Working, Some(n.to_string()));
    }
    let history = history_texts(&t, &id);
    assert_eq!(history.len(), TASK_HISTORY_MAX);
    assert_eq!(history.first().map(String::as_str), Some("2"), "x, 0 and 1 went");
    assert_eq!(history.last(), Some(&(TASK_HISTORY_MAX + 1).to_string()));
}

#[test]
fn observers_hear_every_change_in_order() {
    let rec = Arc::new(Recorder::default());
    let mut t = table(10);
    t.subscribe(rec.clone());
    let id = t.create(&op(), msg("x"), None).unwrap().id().to_string();
    t.worker_notice(&Notice::WorkerSpawn { task_id: &id, pid: 7 });
    t.set_progress(&id, TaskState::Working, None);
    t.add_artifact(&id, chunk("a", "1"), false, false);
    t.add_artifact(&id, chunk("a", "2"), true, true);
    t.finish(&id, TaskState::Failed, Cause::Deadline, None);
    t.worker_notice(&Notice::WorkerExit {
        task_id: &id,
        pid: 7,
        exit_code: 137,
        exit: "was killed by SIGKILL",
        cause: Cause::Deadline,
    });
    t.finish(&id, TaskState::Completed, Cause::Completed, None); // ignored: already final
    let who = op().name();
    let want: Vec<String> = [
        "created",
        "spawn 7",
        "state working",
        "artifact a false",
        "artifact a true",
        "terminal failed Some(\"deadline\")",
        "exit 7 deadline",
    ]
    .iter()
    .map(|l| format!("{who}: {l}"))
    .collect();
    assert_eq!(*rec.0.lock().unwrap(), want);
}

#[test]
fn counts_follow_each_task_through_its_life() {
    let t = table(10);
    let (a, b) = (
        t.create(&op(), msg("a"), None).unwrap().id().to_string(),
        t.create(&op(), msg("b"), None).unwrap().id().to_string(),
    );
    assert_eq!(t.counts(), (2, 0, 0));
    t.set_progress(&a, TaskState::Working, None);
    assert_eq!(t.counts(), (1, 1, 0));
    t.set_progress(&a, TaskState::InputRequired, Some("which?".into()));
    t.set_progress(&a, TaskState::Working, None);
    assert_eq!(t.counts(), (1, 1, 0), "moves within a stage count nothing");
    t.finish(&b, TaskState::Canceled, Cause::Canceled, None);
    assert_eq!(t.counts(), (0, 1, 1));
    t.finish(&a, TaskState::Completed, Cause::Completed, None);
    t.finish(&a, TaskState::Failed, Cause::Crashed, None);
    t.set_progress(&a, TaskState::Working, None);
    assert_eq!(t.counts(), (0, 0, 2), "a finished task stays counted once");
    assert_eq!(t.state(&a), Some(TaskState::Completed));
}

#[test]
fn a_worker_speaks_only_once_started() {
    let t = table(10);
    let id = t.create(&op(), msg("x"), None).unwrap().id().to_string();
    t.add_artifact(&id, chunk("a", "early"), false, true);
    t.set_direct_reply(&id, msg("early"));
    let task = t.get(&op(), &id, None).unwrap();
    assert!(task.artifacts.is_none(), "no worker runs a queued task");
    assert_eq!(t.direct_reply(&id), None);
    assert_eq!(task.history.unwrap().len(), 1);
    t.set_progress(&id, TaskState::Working, None);
    let w = t.watch(&op(), &id).unwrap();
    assert!(matches!(w.opening(Duration::ZERO), Opening::Waiting), "started, silent");
    t.set_direct_reply(&id, msg("hello"));
    t.set_direct_reply(&id, msg("again"));
    assert!(matches!(w.opening(Duration::ZERO), Opening::Reply(m) if m.text() == "hello"));
    t.finish(&id, TaskState::Completed, Cause::Completed, None);
    assert_eq!(
        t.direct_reply(&id).map(|m| m.text()),
        Some("hello".into()),
        "kept once finished"
    );
}

#[test]
fn follow_ups_are_refused_with_the_reason() {
    let t = table(10);
    let id = started(&t);
    let follow_up = |context: Option<&str>| {
        let mut m = msg("more");
        m.context_id = context.map(String::from);
        m
    };
    assert_eq!(
        t.continue_with(&op(), &id, &mut follow_up(None)).unwrap_err(),
        ContinueError::Busy(TaskState::Working)
    );
    t.set_progress(&id, TaskState::InputRequired, Some("which?".into()));
    let context = t.get(&op(), &id, None).unwrap().context_id;
    assert_eq!(
        t.continue_with(&op(), &id, &mut follow_up(Some("other"))).unwrap_err(),
        ContinueError::ContextMismatch {
            task_context: context.clone()
        }
    );
    let mut m = follow_up(Some(&context));
    let (task, seq) = t.continue_with(&op(), &id, &mut m).unwrap();
    let task = task.render();
    assert_eq!(task.status.state, TaskState::Working);
    assert_eq!(m.task_id.as_deref(), Some(id.as_str()), "the message names its task");
    assert_eq!(task.history.unwrap().last().map(|m| m.text()), Some("more".into()));
    assert_eq!(t.snapshot(&op(), &id, None).unwrap().1, seq);
    t.finish(&id, TaskState::Failed, Cause::Failed, None);
    assert_eq!(
        t.continue_with(&op(), &id, &mut follow_up(None)).unwrap_err(),
        ContinueError::Terminal(TaskState::Failed)
    );
    assert_eq!(
        t.continue_with(&op(), "missing", &mut follow_up(None)).unwrap_err(),
        ContinueError::NotFound
    );
}

#[test]
fn metadata_updates_apply_or_leave_it_alone() {
    let t = table(2);
    let id = t.create(&op(), msg("x"), None).unwrap().id().to_string();
    t.update_metadata(&op(), &id, |md| {
        md.get_or_insert_with(Map::new).insert("k".into(), Value::from("v"));
        Ok::<(), String>(())
    })
    .unwrap();
    let err = t.update_metadata(&op(), &id, |md| {
        md.take();
        Err("no".to_string())
    });
    assert_eq!(err, Err("no".to_string()));
    assert_eq!(t.get(&op(), &id, None).unwrap().metadata.unwrap()["k"], "v");
    assert_eq!(t.update_metadata(&op(), "missing", |_| Err("never called")), Ok(()));
    // Another peer's task is as missing: `f` never runs, so its error
    // cannot tell that the task exists.
    let stranger = Principal::Vsock {
        cid: 3,
        operator: false,
    };
    assert_eq!(t.update_metadata(&stranger, &id, |_| Err("never called")), Ok(()));
    assert_eq!(t.get(&op(), &id, None).unwrap().metadata.unwrap()["k"], "v");
}

#[test]
fn cursor_round_trips_and_rejects_junk() {
    assert_eq!(decode_cursor(&encode_cursor(12, "ab-c")), Some((12, "ab-c".into())));
    assert_eq!(decode_cursor("zz"), None);
    assert_eq!(decode_cursor("abc"), None);
}

#[test]
fn pages_cover_everything_once() {
    let t = TaskTable::new(TableLimits {
        max_queued: 100,
        ..limits()
    });
    let mut ids: Vec<String> = (0..7)
        .map(|_| t.create(&op(), msg("x"), None).unwrap().id().to_string())
        .collect();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = t.list(
            &op(),
            &ListQuery {
                context_id: None,
                status: None,
                after_ms: None,
                page_size: 3,
                cursor: cursor.clone(),
                history_length: None,
                include_artifacts: false,
                metadata: None,
            },
        );
        assert_eq!(page.total_size, 7);
        seen.extend(page.tasks.iter().map(|t| t.id.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        cursor = decode_cursor(&page.next_page_token);
    }
    ids.sort();
    seen.sort();
    assert_eq!(ids, seen);
}

#[test]
fn list_filters_by_a_metadata_predicate() {
    let t = TaskTable::new(TableLimits {
        max_queued: 100,
        ..limits()
    });
    let tagged = Map::from_iter([("team".to_string(), Value::from("a"))]);
    let a = t.create(&op(), msg("x"), Some(tagged)).unwrap().id().to_string();
    t.create(&op(), msg("x"), None).unwrap();
    let page = t.list(
        &op(),
        &ListQuery {
            context_id: None,
            status: None,
            after_ms: None,
            page_size: 10,
            cursor: None,
            history_length: None,
            include_artifacts: false,
            metadata: Some(Box::new(|md| {
                md.is_some_and(|m| m.get("team") == Some(&Value::from("a")))
            })),
        },
    );
    assert_eq!(
        page.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        vec![a.as_str()]
    );
    assert_eq!(page.total_size, 1);
}

#[test]
fn the_cost_comes_with_the_verdict_and_only_agentd_writes_its_key() {
    use crate::cost::{Cost, Cpu, COST_KEY, CPU_RUSAGE};
    let t = table(10);
    // A client's own value under agentd's key is not kept.
    let spoof = Map::from_iter([
        (COST_KEY.to_string(), Value::String("free".into())),
        ("mine".to_string(), Value::Bool(true)),
    ]);
    let id = t.create(&op(), msg("x"), Some(spoof)).unwrap().id().to_string();
    t.set_progress(&id, TaskState::Working, None);
    let working = t.get(&op(), &id, None).unwrap().metadata.unwrap();
    assert_eq!(working.get(COST_KEY), None);
    assert_eq!(working["mine"], true, "the rest of it is");
    let w = t.watch(&op(), &id).unwrap();
    let (_, seq) = w.snapshot(None);
    let cost = Cost {
        wall_ms: 9,
        cpu: Some(Cpu {
            user_usec: 7,
            system_usec: 2,
            source: CPU_RUSAGE,
        }),
        memory: None,
    };
    t.finish_with_cost(&id, TaskState::Completed, Cause::Completed, None, Some(cost));
    let md = t.get(&op(), &id, None).unwrap().metadata.unwrap();
    assert_eq!(md[COST_KEY], cost.to_json());
    assert_eq!(md["mine"], true);
    // The stream's last event carries it too; none before it did.
    match w.next_events(seq, Duration::ZERO) {
        Next::Events(ev) => {
            let last = ev.last().map(|e| &e.event);
            let Some(StreamResponse::StatusUpdate(s)) = last else {
                panic!("{ev:?}")
            };
            assert_eq!(s.metadata.as_ref().unwrap()[COST_KEY], cost.to_json());
        }
        other => panic!("expected the final status, got {other:?}"),
    }
    // A task that never ran (canceled while queued) has none.
    let queued = t.create(&op(), msg("y"), None).unwrap().id().to_string();
    t.finish(&queued, TaskState::Canceled, Cause::Canceled, None);
    assert_eq!(t.get(&op(), &queued, None).unwrap().metadata, None);
}

/// The JSON written from a snapshot is the rendered task's JSON: for a task
/// with metadata on both sides of the cost key (and a client's own value
/// under it, which is not kept), a cost, a history, an artifact of several
/// chunks and one of one, and a status message with metadata.
#[test]
fn a_snapshot_writes_the_json_of_the_task_it_renders() {
    use serde_json::json;
    let t = table(10);
    let metadata = json!({"a.first": 1, COST_KEY: "mine", "z.last": {"deep": [1, 2]}});
    let mut first = msg("hello \"quoted\" \u{2603}");
    first.metadata = json!({"k": "v"}).as_object().cloned();
    let id = t
        .create(&op(), first, metadata.as_object().cloned())
        .unwrap()
        .id()
        .to_string();
    t.set_progress(&id, TaskState::Working, Some("on it".into()));
    t.add_artifact(&id, chunk("joined", "one "), false, false);
    t.add_artifact(&id, chunk("joined", "two"), true, true);
    t.add_artifact(&id, chunk("single", "only"), false, true);
    let cost = Cost {
        wall_ms: 12,
        cpu: Some(crate::cost::Cpu {
            user_usec: 3,
            system_usec: 4,
            source: crate::cost::CPU_RUSAGE,
        }),
        memory: None,
    };
    t.finish_with_cost(
        &id,
        TaskState::Completed,
        Cause::Completed,
        Some("done".into()),
        Some(cost),
    );
    for history in [None, Some(1), Some(0)] {
        let snap = t.peek(&op(), &id, history).unwrap();
        let written: serde_json::Value = serde_json::from_slice(&serde_json::to_vec(&snap.json()).unwrap()).unwrap();
        let rendered = serde_json::to_value(snap.render()).unwrap();
        assert_eq!(written, rendered, "history {history:?}");
        assert_eq!(written["metadata"][COST_KEY]["wallMs"], 12);
        assert_eq!(written["artifacts"][0]["parts"][0]["text"], "one two");
    }
    // Metadata holding only a client's cost key, and no cost: none at all.
    let bare = t
        .create(&op(), msg("x"), json!({COST_KEY: 1}).as_object().cloned())
        .unwrap();
    let written = serde_json::to_value(bare.json()).unwrap();
    assert_eq!(written, serde_json::to_value(bare.render()).unwrap());
    assert!(written.get("metadata").is_none(), "{written}");
}

/// An artifact of many chunks is written without joining them, and the
/// JSON is what the joined artifact renders to: text runs joined (escapes
/// across chunk boundaries included), a part with metadata or a data part
/// on its own, and the first chunk's name, description, metadata and
/// extensions.
#[test]
fn an_artifact_of_many_chunks_is_written_as_it_renders() {
    use serde_json::json;
    let t = table(10);
    let id = started(&t);
    let mut head = chunk("a", "first \"line\"\n");
    head.name = Some("output".into());
    head.description = Some("what it wrote".into());
    head.metadata = json!({"m": 1}).as_object().cloned();
    head.extensions = vec!["https://example.com/ext".into()];
    head.parts.push(Part::text("a second part of the first chunk"));
    t.add_artifact(&id, head, false, false);
    t.add_artifact(&id, chunk("a", "\u{2603} then a tab\t"), true, false);
    let mut labelled = chunk("a", "labelled: its own part");
    labelled.parts[0].metadata = json!({"label": "x"}).as_object().cloned();
    t.add_artifact(&id, labelled, true, false);
    t.add_artifact(&id, chunk("a", " joined onto the labelled one"), true, false);
    let mut data = chunk("a", "");
    data.parts = vec![
        Part {
            content: crate::wire::PartContent::Data(json!({"k": [1, 2]})),
            metadata: None,
            filename: None,
            media_type: Some("application/json".into()),
        },
        Part::text("after data"),
    ];
    t.add_artifact(&id, data, true, false);
    t.add_artifact(&id, chunk("a", ", and the end"), true, true);
    let snap = t.peek(&op(), &id, None).unwrap();
    let written: serde_json::Value = serde_json::from_slice(&serde_json::to_vec(&snap.json()).unwrap()).unwrap();
    let rendered = serde_json::to_value(snap.render()).unwrap();
    assert_eq!(written, rendered);
    let texts: Vec<&str> = written["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap_or("<data>"))
        .collect();
    assert_eq!(
        texts,
        [
            "first \"line\"\n",
            "a second part of the first chunk\u{2603} then a tab\t",
            "labelled: its own part joined onto the labelled one",
            "<data>",
            "after data, and the end",
        ]
    );
}

#[test]
fn a_snapshot_knows_which_metadata_keys_it_holds() {
    use serde_json::json;
    let t = table(10);
    let id = started(&t);
    let snap = t.peek(&op(), &id, None).unwrap();
    assert!(!snap.mentions("label"));
    let mut labelled = chunk("a", "x");
    labelled.parts[0].metadata = json!({"label": 1}).as_object().cloned();
    t.add_artifact(&id, labelled, false, true);
    assert!(
        t.peek(&op(), &id, None).unwrap().mentions("label"),
        "an artifact part's"
    );
    let mut m = msg("x");
    m.metadata = json!({"other": 1}).as_object().cloned();
    let id = t
        .create(&op(), m, json!({"task": 1}).as_object().cloned())
        .unwrap()
        .id()
        .to_string();
    let snap = t.peek(&op(), &id, None).unwrap();
    assert!(snap.mentions("task") && snap.mentions("other") && !snap.mentions("label"));
}
