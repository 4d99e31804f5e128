//! The JSON-RPC 2.0 envelope: decoding a request body, the error model
//! (`code`, `message`, `data: [ErrorInfo, …]`), encoding responses, and the
//! HTTP status each error travels with (the binding text: -31401 → 401,
//! -31403 → 403, everything else 200).

use serde_json::{json, Map, Value};

pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const METHOD_NOT_FOUND: i32 = -32601;
pub const INVALID_PARAMS: i32 = -32602;
pub const INTERNAL_ERROR: i32 = -32603;
pub const TASK_NOT_FOUND: i32 = -32001;
pub const TASK_NOT_CANCELABLE: i32 = -32002;
pub const PUSH_NOT_SUPPORTED: i32 = -32003;
pub const UNSUPPORTED_OPERATION: i32 = -32004;
pub const CONTENT_TYPE_NOT_SUPPORTED: i32 = -32005;
pub const EXTENSION_SUPPORT_REQUIRED: i32 = -32008;
pub const VERSION_NOT_SUPPORTED: i32 = -32009;
pub const UNAUTHENTICATED: i32 = -31401;
pub const FORBIDDEN: i32 = -31403;

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST: &str = "type.googleapis.com/google.rpc.BadRequest";
/// ErrorInfo domain of the errors A2A defines.
pub const A2A_DOMAIN: &str = "a2a-protocol.org";
/// ErrorInfo domain of the reasons agentd adds (QUEUE_FULL, …).
pub const AGENTD_DOMAIN: &str = "agentd.dev";

/// A JSON-RPC error object. `data` always holds an ErrorInfo first.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    pub data: Vec<Value>,
}

impl RpcError {
    /// An error with an ErrorInfo whose reason is the code's standard one.
    pub fn new(code: i32, message: impl Into<String>) -> RpcError {
        RpcError::with_reason(code, standard_reason(code), A2A_DOMAIN, message, &[])
    }

    /// An error with an explicit ErrorInfo reason, domain and metadata.
    pub fn with_reason(
        code: i32,
        reason: &str,
        domain: &str,
        message: impl Into<String>,
        metadata: &[(&str, &str)],
    ) -> RpcError {
        let mut md = Map::new();
        for (k, v) in metadata {
            md.insert((*k).to_string(), Value::String((*v).to_string()));
        }
        md.insert(
            "timestamp".into(),
            Value::String(crate::clock::format_ms(crate::clock::now_ms())),
        );
        RpcError {
            code,
            message: message.into(),
            data: vec![json!({
                "@type": ERROR_INFO,
                "reason": reason,
                "domain": domain,
                "metadata": md,
            })],
        }
    }

    /// -32602 with a google.rpc.BadRequest naming the offending field.
    pub fn invalid_params(field: &str, description: impl Into<String>) -> RpcError {
        let description = description.into();
        let mut e = RpcError::new(INVALID_PARAMS, format!("Invalid parameters: {field}: {description}"));
        e.data.push(json!({
            "@type": BAD_REQUEST,
            "fieldViolations": [{"field": field, "description": description}],
        }));
        e
    }

    pub fn task_not_found(id: &str) -> RpcError {
        RpcError::with_reason(
            TASK_NOT_FOUND,
            "TASK_NOT_FOUND",
            A2A_DOMAIN,
            format!("Task not found: {id}"),
            &[("taskId", id)],
        )
    }

    pub fn unsupported(message: impl Into<String>, metadata: &[(&str, &str)]) -> RpcError {
        RpcError::with_reason(
            UNSUPPORTED_OPERATION,
            "UNSUPPORTED_OPERATION",
            A2A_DOMAIN,
            message,
            metadata,
        )
    }

    /// The HTTP status this error is delivered with.
    pub fn http_status(&self) -> u16 {
        match self.code {
            UNAUTHENTICATED => 401,
            FORBIDDEN => 403,
            _ => 200,
        }
    }

    pub fn to_value(&self) -> Value {
        json!({"code": self.code, "message": self.message, "data": self.data})
    }
}

/// The ErrorInfo reason for a code when nothing more specific is known.
pub fn standard_reason(code: i32) -> &'static str {
    match code {
        PARSE_ERROR => "PARSE_ERROR",
        INVALID_REQUEST => "INVALID_REQUEST",
        METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
        INVALID_PARAMS => "INVALID_PARAMS",
        TASK_NOT_FOUND => "TASK_NOT_FOUND",
        TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
        PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
        UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
        CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
        -32006 => "INVALID_AGENT_RESPONSE",
        -32007 => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        EXTENSION_SUPPORT_REQUIRED => "EXTENSION_SUPPORT_REQUIRED",
        VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
        UNAUTHENTICATED => "UNAUTHENTICATED",
        FORBIDDEN => "PERMISSION_DENIED",
        _ => "INTERNAL_ERROR",
    }
}

/// One decoded JSON-RPC request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// String, number or null, echoed unchanged (type preserved).
    pub id: Value,
    pub method: String,
    /// Always an object; an absent `params` is `{}`.
    pub params: Value,
}

/// Decodes a request body. On failure returns the id to answer with (null
/// when it could not be read) and the error.
pub fn decode(body: &[u8]) -> Result<Request, (Value, RpcError)> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        (
            Value::Null,
            RpcError::new(PARSE_ERROR, format!("Invalid JSON payload: {e}")),
        )
    })?;
    let invalid = |id: Value, why: &str| {
        (
            id,
            RpcError::new(INVALID_REQUEST, format!("Request payload validation error: {why}")),
        )
    };
    let mut obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => return Err(invalid(Value::Null, "batch requests are not supported")),
        _ => return Err(invalid(Value::Null, "the request must be a JSON object")),
    };
    let id = match obj.remove("id") {
        None => {
            return Err(invalid(
                Value::Null,
                "`id` is missing (notifications are not supported)",
            ))
        }
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id,
        Some(_) => return Err(invalid(Value::Null, "`id` must be a string, a number or null")),
    };
    if obj.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err(invalid(id, "`jsonrpc` must be \"2.0\""));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) if !m.is_empty() => m,
        _ => return Err(invalid(id, "`method` must be a non-empty string")),
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => return Err((id, RpcError::invalid_params("params", "must be an object"))),
    };
    Ok(Request { id, method, params })
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` as compact bytes.
pub fn success(id: &Value, result: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap_or_else(|_| b"{}".to_vec())
}

/// `{"jsonrpc":"2.0","id":…,"error":…}` as compact bytes.
pub fn failure(id: &Value, err: &RpcError) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "error": err.to_value()})).unwrap_or_else(|_| b"{}".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! bad {
        ($name:ident, $body:expr, $code:expr, $id:expr) => {
            #[test]
            fn $name() {
                let (id, err) = decode($body).unwrap_err();
                assert_eq!(err.code, $code, "{}", err.message);
                assert_eq!(id, $id);
                assert_eq!(err.data[0]["@type"], ERROR_INFO);
            }
        };
    }

    bad!(not_json, b"{'a':1}", PARSE_ERROR, Value::Null);
    bad!(empty_body, b"", PARSE_ERROR, Value::Null);
    bad!(batch, b"[]", INVALID_REQUEST, Value::Null);
    bad!(scalar, b"7", INVALID_REQUEST, Value::Null);
    bad!(
        no_id,
        br#"{"jsonrpc":"2.0","method":"GetTask"}"#,
        INVALID_REQUEST,
        Value::Null
    );
    bad!(
        object_id,
        br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
        INVALID_REQUEST,
        Value::Null
    );
    bad!(
        wrong_version,
        br#"{"jsonrpc":"1.0","id":3,"method":"x"}"#,
        INVALID_REQUEST,
        json!(3)
    );
    bad!(no_method, br#"{"jsonrpc":"2.0","id":"a"}"#, INVALID_REQUEST, json!("a"));
    bad!(
        array_params,
        br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[]}"#,
        INVALID_PARAMS,
        json!(1)
    );

    #[test]
    fn decodes_and_defaults_params() {
        let r = decode(br#"{"jsonrpc":"2.0","id":7,"method":"GetExtendedAgentCard"}"#).unwrap();
        assert_eq!(r.id, json!(7));
        assert_eq!(r.params, json!({}));
    }

    #[test]
    fn http_status_mapping() {
        assert_eq!(RpcError::new(UNAUTHENTICATED, "x").http_status(), 401);
        assert_eq!(RpcError::new(FORBIDDEN, "x").http_status(), 403);
        assert_eq!(RpcError::task_not_found("t").http_status(), 200);
    }
}
