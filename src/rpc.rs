//! The JSON-RPC 2.0 envelope: decoding a request body, the error model
//! (`code`, `message`, `data: [ErrorInfo, …]`), encoding responses, and the
//! HTTP status each error travels with (the binding text: -31401 → 401,
//! -31403 → 403, everything else 200).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::append::Appender;
use crate::limits;

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
        RpcError::error_info(code, reason, domain, message.into(), metadata)
    }

    // Not generic, so that it is compiled once, not per message type.
    fn error_info(code: i32, reason: &str, domain: &str, message: String, metadata: &[(&str, &str)]) -> RpcError {
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
            message,
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
        RpcError::bad_request(field, description.into())
    }

    fn bad_request(field: &str, description: String) -> RpcError {
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

/// A request id exactly as the client wrote it: a string, a number or
/// null, kept as its JSON text so that a 30- or 100-digit number comes back
/// byte for byte (JSON-RPC 2.0 §5: "the same value"), never rounded through
/// an `f64`.
#[derive(Debug, Clone)]
pub struct Id(Box<RawValue>);

impl Id {
    /// `null`: the id of errors found before the id could be read.
    pub fn null() -> Id {
        Id(serde_json::value::to_raw_value(&Value::Null).unwrap_or_else(|_| unreachable!("null is JSON")))
    }

    /// The id's JSON text, as received.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    pub fn is_null(&self) -> bool {
        self.as_json() == "null"
    }

    pub fn is_string(&self) -> bool {
        self.as_json().starts_with('"')
    }

    pub fn is_number(&self) -> bool {
        self.as_json().starts_with(|c: char| c == '-' || c.is_ascii_digit())
    }

    /// Whether JSON-RPC allows this value as an id (string, number, null).
    fn is_valid(&self) -> bool {
        self.is_null() || self.is_string() || self.is_number()
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.as_json() == other.as_json()
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// One decoded JSON-RPC request.
#[derive(Debug, Clone)]
pub struct Request {
    /// String, number or null, echoed unchanged (its very text).
    pub id: Id,
    pub method: String,
    /// Always an object's text; an absent or null `params` is `{}`. Kept as
    /// text so each handler reads it straight into its request type.
    pub params: Box<RawValue>,
}

/// The request object's members, as read in one pass. `id` keeps its raw
/// text; a present `null` id is `Some(null)`, an absent one `None`.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
}

/// Deserializes a present member as `Some`, even when it is `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// Decodes a request body. On failure returns the id to answer with (null
/// when it could not be read) and the error.
///
/// Nesting is bounded before anything is built: a body deeper than
/// [`limits::JSON_DEPTH_MAX`] is a -32700, so no handler, task or worker
/// frame ever holds a value that is near serde_json's own recursion limit
/// or deep enough to exhaust a connection thread's stack.
pub fn decode(body: &[u8]) -> Result<Request, (Id, RpcError)> {
    let parse_error = |why: String| {
        (
            Id::null(),
            RpcError::new(PARSE_ERROR, format!("Invalid JSON payload: {why}")),
        )
    };
    if let Some(at) = too_deep(body, limits::JSON_DEPTH_MAX) {
        return Err(parse_error(format!(
            "nested deeper than {} levels (at byte {at})",
            limits::JSON_DEPTH_MAX
        )));
    }
    let invalid = |id: Id, why: &str| {
        (
            id,
            RpcError::new(INVALID_REQUEST, format!("Request payload validation error: {why}")),
        )
    };
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        // Not an object: say what it is, if it is JSON at all.
        return match serde_json::from_slice::<Value>(body) {
            Err(e) => Err(parse_error(e.to_string())),
            Ok(Value::Array(_)) => Err(invalid(Id::null(), "batch requests are not supported")),
            Ok(_) => Err(invalid(Id::null(), "the request must be a JSON object")),
        };
    }
    let env: Envelope = serde_json::from_slice(body).map_err(|e| match e.classify() {
        // Well-formed JSON with a member of the wrong shape (a duplicate
        // `id`, say): the request is invalid, not the JSON.
        serde_json::error::Category::Data => invalid(Id::null(), &e.to_string()),
        _ => parse_error(e.to_string()),
    })?;
    let id = match env.id {
        None => return Err(invalid(Id::null(), "`id` is missing (notifications are not supported)")),
        Some(raw) => Id(raw),
    };
    // The raw text skipped what a full parse checks (a lone surrogate in a
    // string, a number beyond f64): such an id is as unreadable as before,
    // and could not be echoed as JSON every client parses.
    if let Err(e) = serde_json::from_slice::<Value>(id.as_json().as_bytes()) {
        return Err(parse_error(format!("the id: {e}")));
    }
    if !id.is_valid() {
        return Err(invalid(Id::null(), "`id` must be a string, a number or null"));
    }
    if env.jsonrpc != Some(Value::String("2.0".into())) {
        return Err(invalid(id, "`jsonrpc` must be \"2.0\""));
    }
    let method = match env.method {
        Some(Value::String(m)) if !m.is_empty() => m,
        _ => return Err(invalid(id, "`method` must be a non-empty string")),
    };
    let params = match env.params {
        None => empty_params(),
        Some(p) if p.get() == "null" => empty_params(),
        Some(p) if p.get().starts_with('{') => p,
        Some(_) => return Err((id, RpcError::invalid_params("params", "must be an object"))),
    };
    Ok(Request { id, method, params })
}

fn empty_params() -> Box<RawValue> {
    RawValue::from_string("{}".into()).expect("{} is JSON")
}

/// The byte offset where `body` first opens more than `max` arrays and
/// objects at once, strings skipped; `None` if it never does. A scan, not a
/// parse: malformed JSON within the bound is left to serde_json to explain.
fn too_deep(body: &[u8], max: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in body.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

#[derive(Serialize)]
struct Success<'a, T: Serialize + ?Sized> {
    jsonrpc: &'static str,
    id: &'a Id,
    result: &'a T,
}

#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: &'static str,
    id: &'a Id,
    error: Value,
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` as compact bytes.
pub fn success<T: Serialize + ?Sized>(id: &Id, result: &T) -> Vec<u8> {
    success_sized(id, result, 0)
}

/// [`success`] for a result of about `hint` bytes: the buffer starts that
/// large, so a large answer is not copied as it grows.
pub fn success_sized<T: Serialize + ?Sized>(id: &Id, result: &T, hint: usize) -> Vec<u8> {
    // serde_json's own start of 128 bytes would grow, and copy, four times
    // on the way to a task's answer.
    let start = crate::limits::RPC_ANSWER_START_BYTES.saturating_add(hint);
    let mut out = Vec::with_capacity(start);
    match success_to(Appender(&mut out), id, result) {
        Ok(()) => out,
        Err(_) => b"{}".to_vec(),
    }
}

/// [`success`] appended to `out` (an SSE event's data line, written in
/// place).
pub fn success_append<T: Serialize + ?Sized>(out: &mut Vec<u8>, id: &Id, result: &T) {
    let at = out.len();
    if success_to(Appender(&mut *out), id, result).is_err() {
        out.truncate(at);
        out.extend_from_slice(b"{}");
    }
}

/// [`success`] written onto `w` as it is produced (a large answer, straight
/// onto the connection).
pub fn success_to<T: Serialize + ?Sized>(w: impl std::io::Write, id: &Id, result: &T) -> std::io::Result<()> {
    let answer = Success {
        jsonrpc: "2.0",
        id,
        result,
    };
    serde_json::to_writer(w, &answer).map_err(std::io::Error::from)
}

/// `{"jsonrpc":"2.0","id":…,"error":…}` as compact bytes.
pub fn failure(id: &Id, err: &RpcError) -> Vec<u8> {
    serde_json::to_vec(&Failure {
        jsonrpc: "2.0",
        id,
        error: err.to_value(),
    })
    .unwrap_or_else(|_| b"{}".to_vec())
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
                assert_eq!(id.as_json(), $id);
                assert_eq!(err.data[0]["@type"], ERROR_INFO);
            }
        };
    }

    bad!(not_json, b"{'a':1}", PARSE_ERROR, "null");
    bad!(empty_body, b"", PARSE_ERROR, "null");
    bad!(batch, b"[]", INVALID_REQUEST, "null");
    bad!(scalar, b"7", INVALID_REQUEST, "null");
    bad!(
        no_id,
        br#"{"jsonrpc":"2.0","method":"GetTask"}"#,
        INVALID_REQUEST,
        "null"
    );
    bad!(
        object_id,
        br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
        INVALID_REQUEST,
        "null"
    );
    bad!(
        wrong_version,
        br#"{"jsonrpc":"1.0","id":3,"method":"x"}"#,
        INVALID_REQUEST,
        "3"
    );
    bad!(no_method, br#"{"jsonrpc":"2.0","id":"a"}"#, INVALID_REQUEST, r#""a""#);
    bad!(
        array_params,
        br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[]}"#,
        INVALID_PARAMS,
        "1"
    );

    #[test]
    fn decodes_and_defaults_params() {
        let r = decode(br#"{"jsonrpc":"2.0","id":7,"method":"GetExtendedAgentCard"}"#).unwrap();
        assert_eq!(r.id.as_json(), "7");
        assert_eq!(r.params.get(), "{}");
        let r = decode(br#"{"jsonrpc":"2.0","id":7,"method":"x","params":null}"#).unwrap();
        assert_eq!(r.params.get(), "{}");
        let r = decode(br#"{"jsonrpc":"2.0","id":7,"method":"x","params": {"a":1} }"#).unwrap();
        assert_eq!(r.params.get(), r#"{"a":1}"#);
    }

    bad!(
        duplicate_id,
        br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#,
        INVALID_REQUEST,
        "null"
    );
    bad!(
        bool_id,
        br#"{"jsonrpc":"2.0","id":true,"method":"x"}"#,
        INVALID_REQUEST,
        "null"
    );
    bad!(truncated, br#"{"jsonrpc":"2.0","id":1"#, PARSE_ERROR, "null");
    bad!(
        lone_surrogate_id,
        br#"{"jsonrpc":"2.0","id":"\ud800","method":"x"}"#,
        PARSE_ERROR,
        "null"
    );
    bad!(
        out_of_range_id,
        br#"{"jsonrpc":"2.0","id":1e999,"method":"x"}"#,
        PARSE_ERROR,
        "null"
    );

    #[test]
    fn ids_come_back_as_their_very_text() {
        let hundred = "1".repeat(100);
        for id in [
            hundred.as_str(),
            "123456789012345678901234567890",
            "-0.10e+99",
            r#""x\u00e9""#,
            "null",
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0", "id": {id} ,"method":"m"}}"#);
            let r = decode(body.as_bytes()).unwrap();
            assert_eq!(r.id.as_json(), id);
            let out = String::from_utf8(success(&r.id, &json!(1))).unwrap();
            assert_eq!(out, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#));
        }
    }

    #[test]
    fn nesting_is_bounded_before_parsing() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let at = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"a":{}}}}}"#,
                nest(n)
            )
        };
        // Two levels are the envelope and params.
        let max = limits::JSON_DEPTH_MAX - 2;
        assert!(decode(at(max).as_bytes()).is_ok());
        let (id, err) = decode(at(max + 1).as_bytes()).unwrap_err();
        assert_eq!((id.as_json(), err.code), ("null", PARSE_ERROR));
        assert!(err.message.contains("nested deeper"), "{}", err.message);
        // Brackets inside strings do not count.
        let quoted = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"a":"{}\"{}"}}}}"#,
            "[".repeat(500),
            "{".repeat(500)
        );
        assert!(decode(quoted.as_bytes()).is_ok());
    }

    #[test]
    fn http_status_mapping() {
        assert_eq!(RpcError::new(UNAUTHENTICATED, "x").http_status(), 401);
        assert_eq!(RpcError::new(FORBIDDEN, "x").http_status(), 403);
        assert_eq!(RpcError::task_not_found("t").http_status(), 200);
    }
}
