//! A2A 1.0 wire types (ProtoJSON of `a2a.proto`): camelCase out; camelCase
//! and snake_case in; unknown fields ignored; `null` means "not set".
//! Enums are written as their proto names and read as names, numbers, or
//! the 0.3 lowercase spellings.

use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

mod long_text;
mod part;
pub use long_text::{JoinedText, LongText, LONG_TEXT_MIN_BYTES};
pub use part::{Part, PartContent};

/// JSON `null` or absent → empty; otherwise the value.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A nested A2A object must be a JSON object: serde's derive would also
/// take a JSON array of the fields in order, which no A2A peer means. Read
/// straight into `T` through the object's own members (no `Value` tree in
/// between: messages are read this way on every request and frame).
pub(crate) fn object<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Members<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Members<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(Members(std::marker::PhantomData))
}

/// `object`, boxed.
pub(crate) fn object_boxed<'de, D, T>(d: D) -> Result<Box<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    object(d).map(Box::new)
}

/// `object`, shared: what procman sends is the table's own message, not a
/// copy of it.
pub(crate) fn object_arc<'de, D, T>(d: D) -> Result<std::sync::Arc<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    object(d).map(std::sync::Arc::new)
}

/// `object`, for optional fields (`null` = unset).
fn object_opt<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Object<T>(T);
    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            object(d).map(Object)
        }
    }
    Ok(Option::<Object<T>>::deserialize(d)?.map(|o| o.0))
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    Submitted,
    Working,
    Completed,
    Failed,
    Canceled,
    InputRequired,
    Rejected,
    AuthRequired,
}

impl TaskState {
    pub const ALL: [TaskState; 8] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::InputRequired,
        TaskState::Rejected,
        TaskState::AuthRequired,
    ];

    pub fn wire_name(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }

    fn number(self) -> i64 {
        match self {
            TaskState::Submitted => 1,
            TaskState::Working => 2,
            TaskState::Completed => 3,
            TaskState::Failed => 4,
            TaskState::Canceled => 5,
            TaskState::InputRequired => 6,
            TaskState::Rejected => 7,
            TaskState::AuthRequired => 8,
        }
    }

    /// The short lowercase name (0.3's spelling, and the jsonl protocol's).
    pub fn short_name(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
            TaskState::InputRequired => "input-required",
            TaskState::Rejected => "rejected",
            TaskState::AuthRequired => "auth-required",
        }
    }

    /// Reads a proto name, a short name, or (from JSON) a number.
    /// `TASK_STATE_UNSPECIFIED` / 0 is `None`: it means "no state".
    pub fn parse(s: &str) -> Option<TaskState> {
        TaskState::ALL
            .into_iter()
            .find(|st| st.wire_name() == s || st.short_name() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// Waiting on the client (input or auth): the turn is over, the task is not.
    pub fn is_interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

impl Serialize for TaskState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.wire_name())
    }
}

/// Deserializes to `Option<TaskState>`: UNSPECIFIED (name or 0) is `None`.
pub fn task_state_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TaskState>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) if s == "TASK_STATE_UNSPECIFIED" || s.is_empty() => Ok(None),
        Value::String(s) => TaskState::parse(&s)
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("unknown task state `{s}`"))),
        Value::Number(n) => match n.as_i64() {
            Some(0) => Ok(None),
            Some(i) => TaskState::ALL
                .into_iter()
                .find(|st| st.number() == i)
                .map(Some)
                .ok_or_else(|| D::Error::custom(format!("unknown task state {i}"))),
            None => Err(D::Error::custom("task state must be an integer")),
        },
        _ => Err(D::Error::custom("task state must be a string")),
    }
}

impl<'de> Deserialize<'de> for TaskState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        task_state_opt(d)?.ok_or_else(|| D::Error::custom("task state must not be unspecified"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Agent,
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            Role::User => "ROLE_USER",
            Role::Agent => "ROLE_AGENT",
        })
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => match s.as_str() {
                "ROLE_USER" | "user" => Ok(Role::User),
                "ROLE_AGENT" | "agent" => Ok(Role::Agent),
                _ => Err(D::Error::custom(format!(
                    "unknown role `{s}` (expected ROLE_USER or ROLE_AGENT)"
                ))),
            },
            Value::Number(n) if n.as_i64() == Some(1) => Ok(Role::User),
            Value::Number(n) if n.as_i64() == Some(2) => Ok(Role::Agent),
            _ => Err(D::Error::custom("role must be ROLE_USER or ROLE_AGENT")),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(default, alias = "message_id")]
    pub message_id: String,
    #[serde(default, alias = "context_id", skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, alias = "task_id", skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub role: Role,
    #[serde(default, deserialize_with = "null_as_default")]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(
        default,
        alias = "reference_task_ids",
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    /// An agent message with one text part.
    pub fn agent_text(text: impl Into<String>, task_id: &str, context_id: &str) -> Message {
        Message {
            message_id: crate::ids::new_id(),
            context_id: Some(context_id.to_string()),
            task_id: Some(task_id.to_string()),
            role: Role::Agent,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        }
    }

    /// The text parts joined with newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self.parts.iter().filter_map(Part::as_text).collect();
        texts.join("\n")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    #[serde(default, alias = "artifact_id")]
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    /// Shared with the task's history, where the same message is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Arc<Message>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    #[serde(default, alias = "context_id")]
    pub context_id: String,
    pub status: TaskStatus,
    /// `None` = key absent (ListTasks without includeArtifacts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<Artifact>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<Message>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    #[serde(alias = "task_id")]
    pub task_id: String,
    #[serde(alias = "context_id")]
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    #[serde(alias = "task_id")]
    pub task_id: String,
    #[serde(alias = "context_id")]
    pub context_id: String,
    /// Shared with the task that holds it: a chunk of a program's output
    /// goes to every stream without a copy.
    pub artifact: Arc<Artifact>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub append: bool,
    #[serde(default, alias = "last_chunk", skip_serializing_if = "is_false")]
    pub last_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// SendMessage's result, and every SSE event's `result`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    Message(Message),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    #[serde(default, alias = "accepted_output_modes", deserialize_with = "null_as_default")]
    pub accepted_output_modes: Vec<String>,
    #[serde(default, alias = "task_push_notification_config")]
    pub task_push_notification_config: Option<Value>,
    #[serde(default, alias = "history_length")]
    pub history_length: Option<i32>,
    #[serde(default, alias = "return_immediately", deserialize_with = "null_as_default")]
    pub return_immediately: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(deserialize_with = "object")]
    pub message: Message,
    #[serde(default, deserialize_with = "object_opt")]
    pub configuration: Option<SendMessageConfiguration>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub id: String,
    #[serde(default, alias = "history_length")]
    pub history_length: Option<i32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeToTaskRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub id: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default, alias = "context_id")]
    pub context_id: Option<String>,
    #[serde(default, deserialize_with = "task_state_opt")]
    pub status: Option<TaskState>,
    #[serde(default, alias = "page_size")]
    pub page_size: Option<i32>,
    #[serde(default, alias = "page_token")]
    pub page_token: Option<String>,
    #[serde(default, alias = "history_length")]
    pub history_length: Option<i32>,
    #[serde(default, alias = "status_timestamp_after")]
    pub status_timestamp_after: Option<String>,
    #[serde(default, alias = "include_artifacts")]
    pub include_artifacts: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    pub tasks: Vec<Task>,
    pub next_page_token: String,
    pub page_size: i32,
    pub total_size: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_reads_snake_and_camel_and_ignores_unknown() {
        let m: Message = serde_json::from_value(json!({
            "message_id": "m1", "contextId": "c1", "role": "ROLE_USER",
            "parts": [{"text": "hi"}], "tckUnknownField": 1, "extensions": null
        }))
        .unwrap();
        assert_eq!(m.message_id, "m1");
        assert_eq!(m.context_id.as_deref(), Some("c1"));
        assert_eq!(m.text(), "hi");
    }

    #[test]
    fn part_needs_exactly_one_content() {
        assert!(serde_json::from_value::<Part>(json!({"text": "a", "url": "b"})).is_err());
        assert!(serde_json::from_value::<Part>(json!({"mediaType": "text/plain"})).is_err());
        let p: Part = serde_json::from_value(json!({"data": null})).unwrap();
        assert_eq!(p.content, PartContent::Data(Value::Null));
        assert_eq!(serde_json::to_value(&p).unwrap(), json!({"data": null}));
    }

    #[test]
    fn states_round_trip_and_accept_numbers() {
        let s: TaskState = serde_json::from_value(json!(6)).unwrap();
        assert_eq!(s, TaskState::InputRequired);
        assert_eq!(serde_json::to_value(s).unwrap(), json!("TASK_STATE_INPUT_REQUIRED"));
        assert!(serde_json::from_value::<TaskState>(json!("TASK_STATE_UNSPECIFIED")).is_err());
    }

    #[test]
    fn stream_response_is_one_key() {
        let t = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: None,
            },
            artifacts: None,
            history: None,
            metadata: None,
        };
        let v = serde_json::to_value(StreamResponse::Task(t)).unwrap();
        assert_eq!(
            v,
            json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
        );
    }
}
