//! The command extension: operator operations carried as one data part of
//! a message that lists the extension in `message.extensions`:
//!
//! ```json
//! {"message": {"messageId": "…", "role": "ROLE_USER",
//!              "extensions": ["https://agentd.dev/a2a/ext/command"],
//!              "parts": [{"data": {"op": "limits", "maxRunning": 8}}]}}
//! ```
//! The answer is a direct Message with one data part (no task is created).
//! Ops: `status`; `drain` (no new tasks; running ones finish); `resume`;
//! `limits` (read, or set `maxRunning` at run time). Only operators may
//! send commands; anyone else gets -31403 (HTTP 403).

use serde_json::{json, Map, Value};

use crate::rpc::{self, RpcError};
use crate::wire::{Message, Part, PartContent, Role};

/// A parsed operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Status,
    Drain,
    Resume,
    Limits { max_running: Option<usize> },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Status => "status",
            Op::Drain => "drain",
            Op::Resume => "resume",
            Op::Limits { .. } => "limits",
        }
    }
}

const FIELD: &str = "message.parts[0].data";

/// Whether `m` is a command message (it names the extension).
pub fn is_command(m: &Message) -> bool {
    m.extensions.iter().any(|e| e == super::COMMAND)
}

/// Parses the one data part of a command message.
pub fn parse(m: &Message) -> Result<Op, RpcError> {
    let [Part {
        content: PartContent::Data(Value::Object(data)),
        ..
    }] = m.parts.as_slice()
    else {
        return Err(RpcError::invalid_params(
            "message.parts",
            "a command is exactly one data part: {\"data\": {\"op\": \"status\"}}",
        ));
    };
    let op = data.get("op").and_then(Value::as_str).unwrap_or("");
    let known = |keys: &[&str]| -> Result<(), RpcError> {
        match data.keys().find(|k| k.as_str() != "op" && !keys.contains(&k.as_str())) {
            Some(k) => Err(RpcError::invalid_params(
                &format!("{FIELD}.{k}"),
                format!("`{op}` takes no `{k}`"),
            )),
            None => Ok(()),
        }
    };
    match op {
        "status" => known(&[]).map(|()| Op::Status),
        "drain" => known(&[]).map(|()| Op::Drain),
        "resume" => known(&[]).map(|()| Op::Resume),
        "limits" => {
            known(&["maxRunning"])?;
            let max_running = match data.get("maxRunning") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().filter(|n| (1..=100_000).contains(n)).ok_or_else(|| {
                    RpcError::invalid_params(&format!("{FIELD}.maxRunning"), "a whole number from 1 to 100000")
                })? as usize),
            };
            Ok(Op::Limits { max_running })
        }
        "" => Err(RpcError::invalid_params(
            &format!("{FIELD}.op"),
            "missing: one of status, drain, resume, limits",
        )),
        other => Err(RpcError::invalid_params(
            &format!("{FIELD}.op"),
            format!("unknown op `{other}` (expected status, drain, resume or limits)"),
        )),
    }
}

/// The reply Message: one data part holding `body`.
pub fn reply(body: Map<String, Value>, context_id: Option<String>) -> Message {
    Message {
        message_id: crate::ids::new_id(),
        context_id: Some(context_id.unwrap_or_else(crate::ids::new_id)),
        task_id: None,
        role: Role::Agent,
        parts: vec![Part {
            content: PartContent::Data(Value::Object(body)),
            metadata: None,
            filename: None,
            media_type: Some("application/json".into()),
        }],
        metadata: None,
        extensions: vec![super::COMMAND.to_string()],
        reference_task_ids: Vec::new(),
    }
}

/// Only operators may run commands.
pub fn forbidden(principal: &str) -> RpcError {
    RpcError::with_reason(
        rpc::FORBIDDEN,
        "PERMISSION_DENIED",
        rpc::AGENTD_DOMAIN,
        format!("{principal} is not an operator: commands are for operators (a2a.vsock_operator_cids)"),
        &[("principal", principal)],
    )
}

/// `{"op": …}` as a JSON value, for tests and the client.
pub fn data(op: &str, extra: &[(&str, Value)]) -> Value {
    let mut m = Map::new();
    m.insert("op".into(), json!(op));
    for (k, v) in extra {
        m.insert((*k).to_string(), v.clone());
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(parts: Value) -> Message {
        serde_json::from_value(json!({"messageId": "m", "role": "ROLE_USER", "parts": parts,
            "extensions": [super::super::COMMAND]}))
        .unwrap()
    }

    #[test]
    fn parses_ops_and_names_the_bad_field() {
        assert!(is_command(&msg(json!([{"data": {"op": "status"}}]))));
        assert_eq!(parse(&msg(json!([{"data": {"op": "status"}}]))).unwrap(), Op::Status);
        assert_eq!(
            parse(&msg(json!([{"data": {"op": "limits", "maxRunning": 3}}]))).unwrap(),
            Op::Limits { max_running: Some(3) }
        );
        let field = |parts: Value| {
            let e = parse(&msg(parts)).unwrap_err();
            e.data[1]["fieldViolations"][0]["field"].as_str().unwrap().to_string()
        };
        assert_eq!(field(json!([{"text": "status"}])), "message.parts");
        assert_eq!(field(json!([{"data": {"op": "reboot"}}])), "message.parts[0].data.op");
        assert_eq!(field(json!([{"data": {}}])), "message.parts[0].data.op");
        assert_eq!(
            field(json!([{"data": {"op": "limits", "maxRunning": 0}}])),
            "message.parts[0].data.maxRunning"
        );
        assert_eq!(
            field(json!([{"data": {"op": "drain", "now": true}}])),
            "message.parts[0].data.now"
        );
    }
}
