//! The task-annotations extension: labels a client attaches to a task at
//! send time, in the message's metadata under the extension URI:
//!
//! ```json
//! {"message": {…, "metadata": {"https://agentd.dev/a2a/ext/task-annotations":
//!                               {"team": "search", "run": "42"}}}}
//! ```
//! They are kept on the task (in its metadata under the same URI), merged
//! by follow-up messages, returned only to clients that activated the
//! extension, and usable as a ListTasks filter by equality:
//! `params.metadata["https://agentd.dev/a2a/ext/task-annotations"] = {"team": "search"}`.

use serde_json::{Map, Value};

use super::ANNOTATIONS;
use crate::rpc::RpcError;
use crate::wire::{Message, Part, StreamResponse, Task};

use crate::limits::{
    ANNOTATION_KEY_MAX_BYTES as MAX_KEY_BYTES, ANNOTATION_LABELS_MAX as MAX_LABELS,
    ANNOTATION_VALUE_MAX_BYTES as MAX_VALUE_BYTES,
};

pub type Labels = Map<String, Value>;

/// The labels in a metadata map, validated; `None` when there are none.
pub fn parse(metadata: Option<&Map<String, Value>>, field: &str) -> Result<Option<Labels>, RpcError> {
    let Some(v) = metadata.and_then(|m| m.get(ANNOTATIONS)) else {
        return Ok(None);
    };
    let field = format!("{field}[\"{ANNOTATIONS}\"]");
    let Value::Object(labels) = v else {
        return Err(RpcError::invalid_params(
            &field,
            "labels must be an object of string values",
        ));
    };
    if labels.len() > MAX_LABELS {
        return Err(RpcError::invalid_params(&field, format!("at most {MAX_LABELS} labels")));
    }
    for (k, v) in labels {
        let key_ok = !k.is_empty()
            && k.len() <= MAX_KEY_BYTES
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
        if !key_ok {
            return Err(RpcError::invalid_params(
                &field,
                format!("label key `{k}`: 1–{MAX_KEY_BYTES} bytes of a-z, A-Z, 0-9, `.`, `_`, `-`, `/`"),
            ));
        }
        match v {
            Value::String(s) if s.len() <= MAX_VALUE_BYTES => {}
            Value::String(_) => {
                return Err(RpcError::invalid_params(
                    &field,
                    format!("label `{k}`: values are at most {MAX_VALUE_BYTES} bytes"),
                ))
            }
            _ => {
                return Err(RpcError::invalid_params(
                    &field,
                    format!("label `{k}`: values are strings"),
                ))
            }
        }
    }
    Ok(Some(labels.clone()).filter(|l| !l.is_empty()))
}

/// Whether `more` fits beside the labels a task already has.
pub fn check_fits(task_metadata: Option<&Map<String, Value>>, more: &Labels) -> Result<(), RpcError> {
    let existing = task_metadata
        .and_then(|m| m.get(ANNOTATIONS))
        .and_then(Value::as_object);
    let added = more
        .keys()
        .filter(|k| existing.is_none_or(|e| !e.contains_key(*k)))
        .count();
    if existing.map_or(0, Map::len) + added > MAX_LABELS {
        return Err(RpcError::invalid_params(
            "message.metadata",
            format!("a task carries at most {MAX_LABELS} labels"),
        ));
    }
    Ok(())
}

/// Merges `more` into the labels kept in a task's metadata (bounded; on
/// error nothing changes).
pub fn merge_into(task_metadata: &mut Option<Map<String, Value>>, more: &Labels) -> Result<(), RpcError> {
    check_fits(task_metadata.as_ref(), more)?;
    let md = task_metadata.get_or_insert_with(Map::new);
    let entry = md
        .entry(ANNOTATIONS.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(labels) = entry {
        for (k, v) in more {
            labels.insert(k.clone(), v.clone());
        }
    }
    Ok(())
}

/// Whether a task's metadata carries every label of `filter`.
pub fn matches(task_metadata: Option<&Map<String, Value>>, filter: &Labels) -> bool {
    let labels = task_metadata
        .and_then(|m| m.get(ANNOTATIONS))
        .and_then(Value::as_object);
    filter.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// [`strip`] for a typed result, where labels can be: the metadata of the
/// task, of its messages (status and history), of its artifacts and of
/// every part.
pub fn strip_task(task: &mut Task) {
    strip_metadata(&mut task.metadata);
    if let Some(m) = task.status.message.as_mut() {
        strip_shared_message(m);
    }
    task.history.iter_mut().flatten().for_each(strip_message);
    for a in task.artifacts.iter_mut().flatten() {
        strip_metadata(&mut a.metadata);
        a.parts.iter_mut().for_each(|p| strip_metadata(&mut p.metadata));
    }
}

/// [`strip_task`] for SendMessage's result or an event.
pub fn strip_response(r: &mut StreamResponse) {
    match r {
        StreamResponse::Task(t) => strip_task(t),
        StreamResponse::Message(m) => strip_message(m),
        StreamResponse::StatusUpdate(e) => {
            strip_metadata(&mut e.metadata);
            if let Some(m) = e.status.message.as_mut() {
                strip_shared_message(m);
            }
        }
        StreamResponse::ArtifactUpdate(e) => {
            strip_metadata(&mut e.metadata);
            // The artifact is shared with the task: copied only when it
            // has labels to lose.
            if labelled(&e.artifact.metadata, &e.artifact.parts) {
                let artifact = std::sync::Arc::make_mut(&mut e.artifact);
                strip_metadata(&mut artifact.metadata);
                artifact.parts.iter_mut().for_each(|p| strip_metadata(&mut p.metadata));
            }
        }
    }
}

/// [`strip_task`] for a message.
pub fn strip_message(m: &mut Message) {
    strip_metadata(&mut m.metadata);
    m.parts.iter_mut().for_each(|p| strip_metadata(&mut p.metadata));
}

/// [`strip_message`] for a message shared with the task (a status
/// message): copied only when it has labels to lose.
fn strip_shared_message(m: &mut std::sync::Arc<Message>) {
    if labelled(&m.metadata, &m.parts) {
        strip_message(std::sync::Arc::make_mut(m));
    }
}

/// Whether an object's metadata or any of its parts' carries labels.
fn labelled(md: &Option<Map<String, Value>>, parts: &[Part]) -> bool {
    let has = |md: &Option<Map<String, Value>>| md.as_ref().is_some_and(|m| m.contains_key(ANNOTATIONS));
    has(md) || parts.iter().any(|p| has(&p.metadata))
}

/// The labels out of one metadata map; a map left empty goes too.
fn strip_metadata(md: &mut Option<Map<String, Value>>) {
    if let Some(m) = md {
        if m.remove(ANNOTATIONS).is_some() && m.is_empty() {
            *md = None;
        }
    }
}

/// Removes the labels from every object in a result — tasks and the
/// messages in their history alike (for clients that did not activate the
/// extension: to them it does not exist).
pub fn strip(v: &mut Value) {
    match v {
        Value::Object(obj) => {
            if let Some(Value::Object(md)) = obj.get_mut("metadata") {
                if md.remove(ANNOTATIONS).is_some() && md.is_empty() {
                    obj.remove("metadata");
                }
            }
            for (_, child) in obj.iter_mut() {
                if child.is_object() || child.is_array() {
                    strip(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn md(labels: Value) -> Map<String, Value> {
        Map::from_iter([(ANNOTATIONS.to_string(), labels)])
    }

    #[test]
    fn validates_bounds() {
        assert_eq!(parse(None, "m").unwrap(), None);
        let ok = parse(Some(&md(json!({"team": "a", "run": "1"}))), "m")
            .unwrap()
            .unwrap();
        assert_eq!(ok.len(), 2);
        for bad in [
            json!("x"),
            json!({"team": 1}),
            json!({"": "x"}),
            json!({"sp ace": "x"}),
            json!({"k": "v".repeat(MAX_VALUE_BYTES + 1)}),
            Value::Object((0..=MAX_LABELS).map(|i| (format!("k{i}"), json!("v"))).collect()),
        ] {
            let e = parse(Some(&md(bad.clone())), "m").unwrap_err();
            assert_eq!(e.code, crate::rpc::INVALID_PARAMS, "{bad}");
        }
        let at_limit = Value::Object((0..MAX_LABELS).map(|i| (format!("k{i}"), json!("v"))).collect());
        assert!(parse(Some(&md(at_limit)), "m").is_ok());
    }

    #[test]
    fn an_artifact_event_loses_its_labels_and_the_task_keeps_them() {
        use crate::wire::{Artifact, TaskArtifactUpdateEvent};
        use std::sync::Arc;
        let mut part = Part::text("out");
        part.metadata = Some(md(json!({"team": "a"})));
        let artifact = |parts: Vec<Part>, metadata| Artifact {
            artifact_id: "a".into(),
            name: None,
            description: None,
            parts,
            metadata,
            extensions: Vec::new(),
        };
        let labelled = Arc::new(artifact(vec![part], Some(md(json!({"team": "a"})))));
        let plain = Arc::new(artifact(vec![Part::text("out")], None));
        let event = |artifact: &Arc<Artifact>| {
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: "t".into(),
                context_id: "c".into(),
                artifact: Arc::clone(artifact),
                append: false,
                last_chunk: false,
                metadata: None,
            })
        };
        let mut stripped = event(&labelled);
        strip_response(&mut stripped);
        let StreamResponse::ArtifactUpdate(e) = &stripped else {
            unreachable!()
        };
        assert_eq!(e.artifact.metadata, None);
        assert_eq!(e.artifact.parts[0].metadata, None);
        assert!(
            labelled.metadata.is_some() && labelled.parts[0].metadata.is_some(),
            "the task's copy keeps its labels"
        );

        let mut untouched = event(&plain);
        strip_response(&mut untouched);
        let StreamResponse::ArtifactUpdate(e) = &untouched else {
            unreachable!()
        };
        assert!(
            Arc::ptr_eq(&e.artifact, &plain),
            "nothing to strip: still shared, not copied"
        );
    }

    #[test]
    fn a_status_message_shared_with_the_history_is_copied_only_to_lose_labels() {
        use crate::wire::{TaskState, TaskStatus, TaskStatusUpdateEvent};
        use std::sync::Arc;
        let mut labelled = Message::agent_text("done", "t", "c");
        labelled.metadata = Some(md(json!({"team": "a"})));
        let labelled = Arc::new(labelled);
        let plain = Arc::new(Message::agent_text("done", "t", "c"));
        let event = |m: &Arc<Message>| {
            StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: "t".into(),
                context_id: "c".into(),
                status: TaskStatus {
                    state: TaskState::Completed,
                    message: Some(Arc::clone(m)),
                    timestamp: None,
                },
                metadata: None,
            })
        };
        let mut stripped = event(&labelled);
        strip_response(&mut stripped);
        let StreamResponse::StatusUpdate(e) = &stripped else {
            unreachable!()
        };
        assert_eq!(e.status.message.as_ref().unwrap().metadata, None);
        assert!(labelled.metadata.is_some(), "the history's copy keeps its labels");

        let mut untouched = event(&plain);
        strip_response(&mut untouched);
        let StreamResponse::StatusUpdate(e) = &untouched else {
            unreachable!()
        };
        assert!(
            Arc::ptr_eq(e.status.message.as_ref().unwrap(), &plain),
            "nothing to strip: not copied"
        );
    }

    #[test]
    fn merges_matches_and_strips() {
        let mut task_md = None;
        merge_into(
            &mut task_md,
            &parse(Some(&md(json!({"team": "a"}))), "m").unwrap().unwrap(),
        )
        .unwrap();
        merge_into(
            &mut task_md,
            &parse(Some(&md(json!({"run": "2"}))), "m").unwrap().unwrap(),
        )
        .unwrap();
        let filter = |v: Value| v.as_object().unwrap().clone();
        assert!(matches(task_md.as_ref(), &filter(json!({"team": "a", "run": "2"}))));
        assert!(!matches(task_md.as_ref(), &filter(json!({"team": "b"}))));
        let mut result = json!({"tasks": [{"id": "t", "status": {}, "metadata": task_md}]});
        strip(&mut result);
        assert_eq!(result, json!({"tasks": [{"id": "t", "status": {}}]}));
    }

    #[test]
    fn strips_keep_agentds_own_keys_such_as_the_cost() {
        let cost = json!({"wallMs": 3, "cpu": {"userUsec": 1, "systemUsec": 1, "source": "wait4:rusage"}});
        let task = json!({
            "id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
            "metadata": {ANNOTATIONS: {"team": "a"}, crate::cost::COST_KEY: cost},
        });
        let mut typed: Task = serde_json::from_value(task.clone()).unwrap();
        strip_task(&mut typed);
        let mut tree = task;
        strip(&mut tree);
        let want = json!({ crate::cost::COST_KEY: cost });
        assert_eq!(tree["metadata"], want);
        assert_eq!(serde_json::to_value(&typed).unwrap()["metadata"], want);
    }

    #[test]
    fn the_typed_strip_removes_what_the_tree_strip_removes() {
        let labels = json!({"team": "a"});
        let with = |extra: Option<(&str, Value)>| {
            let mut m = md(labels.clone());
            if let Some((k, v)) = extra {
                m.insert(k.into(), v);
            }
            Value::Object(m)
        };
        let message = json!({"messageId": "m", "role": "ROLE_USER",
            "parts": [{"text": "hi", "metadata": with(None)}], "metadata": with(Some(("keep", json!(1))))});
        let task = json!({
            "id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED", "message": message},
            "history": [message, message],
            "artifacts": [{"artifactId": "a", "parts": [{"text": "x", "metadata": with(None)}], "metadata": with(None)}],
            "metadata": with(Some(("other", json!("x")))),
        });
        let mut typed: Task = serde_json::from_value(task.clone()).unwrap();
        strip_task(&mut typed);
        let mut tree = task;
        strip(&mut tree);
        assert_eq!(serde_json::to_value(&typed).unwrap(), tree);
        assert!(!tree.to_string().contains(ANNOTATIONS), "{tree}");
        assert!(tree.to_string().contains("keep") && tree.to_string().contains("other"));

        let mut reply = StreamResponse::Message(serde_json::from_value(message.clone()).unwrap());
        strip_response(&mut reply);
        let mut tree = json!({ "message": message });
        strip(&mut tree);
        assert_eq!(serde_json::to_value(&reply).unwrap(), tree);
    }
}
