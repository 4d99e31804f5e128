//! Every A2A 1.0 method over the real socket: results, shapes, and the
//! error codes a client will see.

mod common;

use common::{user_message, Daemon};
use serde_json::{json, Value};

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";

fn assert_error(err: &Value, code: i64, reason: &str) {
    assert_eq!(err["code"], code, "{err}");
    let info = &err["data"][0];
    assert_eq!(info["@type"], ERROR_INFO, "{err}");
    assert_eq!(info["reason"], reason, "{err}");
    assert!(info["domain"].is_string(), "{err}");
    for (_, v) in info["metadata"].as_object().expect("metadata") {
        assert!(v.is_string(), "ErrorInfo metadata values are strings: {err}");
    }
}

#[test]
fn card_is_valid_and_cacheable() {
    let d = Daemon::start(&[
        "--set",
        "a2a.advertise=JSONRPC http://127.0.0.1:8080/",
        "--set",
        "card.name=tester",
    ]);
    let resp = d.get("/.well-known/agent-card.json");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("Content-Type"), Some("application/json"));
    assert!(resp.header("Cache-Control").unwrap().contains("max-age="));
    let etag = resp.header("ETag").expect("ETag").to_string();
    let card = resp.json();
    assert_eq!(card["name"], "tester");
    for key in [
        "description",
        "version",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    ] {
        assert!(card.get(key).is_some(), "card lacks {key}: {card}");
    }
    let ifaces = card["supportedInterfaces"].as_array().unwrap();
    assert_eq!(
        ifaces[0]["protocolBinding"],
        "https://agentd.dev/a2a/binding/jsonrpc-unix"
    );
    assert_eq!(ifaces[0]["url"], format!("unix://{}", d.socket.display()));
    assert_eq!(ifaces[0]["protocolVersion"], "1.0");
    assert_eq!(
        ifaces[1],
        json!({"url": "http://127.0.0.1:8080/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"})
    );
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    assert!(
        card.get("securitySchemes").is_none(),
        "a unix listener declares no security scheme"
    );
    assert!(!card["skills"][0]["tags"].as_array().unwrap().is_empty());

    let again = d.raw(
        format!("GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
}

#[test]
fn blocking_send_returns_the_completed_task() {
    let d = Daemon::start(&[]);
    let r = d.ok("SendMessage", json!({"message": user_message("hello there")}));
    let task = &r["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "hello there");
    assert!(task["contextId"].is_string());
    let history = task["history"].as_array().unwrap();
    assert_eq!(history[0]["role"], "ROLE_USER");
    assert_eq!(history[0]["taskId"], task["id"]);
    assert_eq!(history[0]["contextId"], task["contextId"]);
    let ts = task["status"]["timestamp"].as_str().unwrap();
    assert!(ts.ends_with('Z') && ts.len() == 24, "millisecond UTC timestamp: {ts}");

    // historyLength 0 omits history; snake_case keys are accepted too.
    let r = d.ok(
        "SendMessage",
        json!({"message": user_message("x"), "configuration": {"history_length": 0}}),
    );
    assert!(r["task"].get("history").is_none(), "{r}");
    // A reused messageId is not an error: a new task each time.
    let m = user_message("same id");
    let a = d.ok("SendMessage", json!({"message": m.clone()}));
    let b = d.ok("SendMessage", json!({"message": m}));
    assert_ne!(a["task"]["id"], b["task"]["id"]);
    // A client-given contextId is kept.
    let mut m = user_message("ctx");
    m["contextId"] = json!("my-context");
    let r = d.ok("SendMessage", json!({"message": m}));
    assert_eq!(r["task"]["contextId"], "my-context");
}

#[test]
fn get_list_and_their_errors() {
    let d = Daemon::start(&[]);
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut m = user_message(&format!("n{i}"));
        m["contextId"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        ids.push(
            d.ok("SendMessage", json!({"message": m}))["task"]["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let t = d.ok("GetTask", json!({"id": ids[0], "historyLength": 1}));
    assert_eq!(t["id"], ids[0]);
    assert_eq!(t["history"].as_array().unwrap().len(), 1);
    assert_error(
        &d.err("GetTask", json!({"id": "no-such-task"})),
        -32001,
        "TASK_NOT_FOUND",
    );
    assert_error(&d.err("GetTask", json!({})), -32602, "INVALID_PARAMS");
    assert_error(
        &d.err("GetTask", json!({"id": ids[0], "historyLength": -1})),
        -32602,
        "INVALID_PARAMS",
    );

    let all = d.ok("ListTasks", json!({}));
    assert_eq!(all["totalSize"], 5);
    assert_eq!(all["pageSize"], 50);
    assert_eq!(all["nextPageToken"], "");
    assert!(
        all["tasks"][0].get("artifacts").is_none(),
        "artifacts only with includeArtifacts"
    );
    let stamps: Vec<&str> = all["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["timestamp"].as_str().unwrap())
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] >= w[1]), "newest first: {stamps:?}");

    let even = d.ok("ListTasks", json!({"contextId": "even", "includeArtifacts": true}));
    assert_eq!(even["totalSize"], 3);
    assert!(even["tasks"][0]["artifacts"].is_array());
    let done = d.ok("ListTasks", json!({"status": "TASK_STATE_COMPLETED"}));
    assert_eq!(done["totalSize"], 5);
    let none = d.ok("ListTasks", json!({"status": "TASK_STATE_WORKING"}));
    assert_eq!(none["totalSize"], 0);
    assert_eq!(none["tasks"], json!([]));
    let later = d.ok("ListTasks", json!({"statusTimestampAfter": "2999-01-01T00:00:00Z"}));
    assert_eq!(later["totalSize"], 0);

    // Paging: 2 + 2 + 1, every task once.
    let mut seen = Vec::new();
    let mut token = String::new();
    for _ in 0..3 {
        let page = d.ok("ListTasks", json!({"pageSize": 2, "pageToken": token}));
        seen.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_string()),
        );
        token = page["nextPageToken"].as_str().unwrap().to_string();
    }
    assert_eq!(token, "");
    seen.sort();
    ids.sort();
    assert_eq!(seen, ids);

    assert_error(&d.err("ListTasks", json!({"pageSize": 0})), -32602, "INVALID_PARAMS");
    assert_error(&d.err("ListTasks", json!({"pageSize": 101})), -32602, "INVALID_PARAMS");
    assert_error(
        &d.err("ListTasks", json!({"pageToken": "garbage!"})),
        -32602,
        "INVALID_PARAMS",
    );
    assert_error(
        &d.err("ListTasks", json!({"status": "TASK_STATE_NOPE"})),
        -32602,
        "INVALID_PARAMS",
    );
    assert_error(
        &d.err("ListTasks", json!({"statusTimestampAfter": "yesterday"})),
        -32602,
        "INVALID_PARAMS",
    );
}

#[test]
fn finished_tasks_refuse_cancel_and_follow_ups() {
    let d = Daemon::start(&[]);
    let task = d.ok("SendMessage", json!({"message": user_message("done soon")}))["task"].clone();
    let id = task["id"].as_str().unwrap();
    assert_error(&d.err("CancelTask", json!({"id": id})), -32002, "TASK_NOT_CANCELABLE");
    assert_error(&d.err("CancelTask", json!({"id": "nope"})), -32001, "TASK_NOT_FOUND");
    let mut follow = user_message("more");
    follow["taskId"] = json!(id);
    assert_error(
        &d.err("SendMessage", json!({"message": follow})),
        -32004,
        "UNSUPPORTED_OPERATION",
    );
    let mut unknown = user_message("more");
    unknown["taskId"] = json!("no-such-task");
    assert_error(
        &d.err("SendMessage", json!({"message": unknown})),
        -32001,
        "TASK_NOT_FOUND",
    );
}

#[test]
fn invalid_messages_are_refused_with_field_violations() {
    let d = Daemon::start(&[]);
    let cases = [
        (json!({}), "message"),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}),
            "message.parts",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}}),
            "message.role",
        ),
        (
            json!({"message": {"messageId": "", "role": "ROLE_USER", "parts": [{"text": "x"}]}}),
            "message.messageId",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x", "url": "y"}]}}),
            "params",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_BOSS", "parts": [{"text": "x"}]}}),
            "params",
        ),
        (
            json!({"message": user_message("x"), "configuration": {"historyLength": -2}}),
            "configuration.historyLength",
        ),
    ];
    for (params, field) in cases {
        let err = d.err("SendMessage", params.clone());
        assert_error(&err, -32602, "INVALID_PARAMS");
        let violation = err["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["@type"] == "type.googleapis.com/google.rpc.BadRequest")
            .unwrap_or_else(|| panic!("no BadRequest for {params}: {err}"));
        assert_eq!(violation["fieldViolations"][0]["field"], field, "{params}: {err}");
    }
    // Nothing was created by any of them.
    assert_eq!(d.ok("ListTasks", json!({}))["totalSize"], 0);
}

#[test]
fn unoffered_methods_answer_their_codes() {
    let d = Daemon::start(&[]);
    for m in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        assert_error(
            &d.err(m, json!({"taskId": "t", "id": "c", "url": "http://x/"})),
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        );
    }
    assert_error(
        &d.err("GetExtendedAgentCard", json!({})),
        -32004,
        "UNSUPPORTED_OPERATION",
    );
    let err = d.err(
        "SendMessage",
        json!({"message": user_message("x"), "configuration": {"taskPushNotificationConfig": {"url": "http://x/"}}}),
    );
    assert_error(&err, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED");
    let err = d.err("message/send", json!({}));
    assert_error(&err, -32601, "METHOD_NOT_FOUND");
    assert!(
        err["message"].as_str().unwrap().contains("SendMessage"),
        "hint at the 1.0 name: {err}"
    );
}

#[test]
fn ids_keep_their_type_and_extensions_are_ignored_not_refused() {
    let d = Daemon::start(&[]);
    let body = json!({"jsonrpc": "2.0", "id": "req-7", "method": "ListTasks", "params": {}}).to_string();
    let resp = d.post(
        &body,
        &[
            ("A2A-Version", "1.0"),
            (
                "A2A-Extensions",
                "https://example.com/ext/v1, https://example.com/ext/v2",
            ),
        ],
    );
    assert_eq!(resp.status, 200);
    let v = resp.json();
    assert_eq!(v["id"], "req-7");
    assert!(v["result"].is_object());
    assert!(
        resp.header("A2A-Extensions").is_none(),
        "nothing activated, nothing echoed"
    );
    let body = json!({"jsonrpc": "2.0", "id": 12.5, "method": "ListTasks"}).to_string();
    assert_eq!(d.post(&body, &[("A2A-Version", "1.0.3")]).json()["id"], 12.5);
}

/// JSON that no serde_json::Value holds but RFC 8259 lets a parser refuse —
/// a number past f64's range, a lone UTF-16 surrogate escape (found by the
/// jsonrpc fuzz target): where a member is read it is invalid params with an
/// ErrorInfo, where it is not it is ignored, in the id it is a parse error.
/// Never a panic, and the daemon serves on.
#[test]
fn json_a_value_cannot_hold_is_refused_where_it_is_read() {
    let d = Daemon::start(&[]);
    let post = |body: &str| d.post(body, &[("A2A-Version", "1.0")]).json();
    let bad_text = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":
        {"role":"ROLE_USER","messageId":"m1","parts":[{"text":"a\uD800b"}]}}}"#;
    assert_error(&post(bad_text)["error"], -32602, "INVALID_PARAMS");
    let bad_size = r#"{"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{"pageSize":1e4325}}"#;
    assert_error(&post(bad_size)["error"], -32602, "INVALID_PARAMS");
    for unread in [r#"{"x":1e4325}"#, r#"{"x":"\uDC00"}"#, r#"{"x":"\uD9DDD"}"#] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":3,"method":"ListTasks","params":{unread}}}"#);
        let v = post(&body);
        assert!(v["result"]["tasks"].is_array(), "a member nobody reads is ignored: {v}");
    }
    let bad_id = r#"{"jsonrpc":"2.0","id":1e4325,"method":"ListTasks","params":{}}"#;
    let v = post(bad_id);
    assert_error(&v["error"], -32700, "PARSE_ERROR");
    assert!(v["id"].is_null(), "{v}");
    let ok = d.ok("SendMessage", json!({"message": user_message("still here")}));
    assert_eq!(ok["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{ok}");
}
