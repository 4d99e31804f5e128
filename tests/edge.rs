//! The edge, tried as an attacker and as odd-but-legal clients would:
//! JSON-RPC ids and nesting, HTTP/1.x request forms and versions, the card's
//! validators, abandoned blocking calls, the fd limit, and the socket's
//! directory.

mod common;

use common::{user_message, Daemon};
use serde_json::{json, Value};

/// POSTs `body` raw (no re-serialization on our side) and returns the body text.
fn post_raw(d: &Daemon, body: &str) -> String {
    let resp = d.post(body, &[("A2A-Version", "1.0")]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.text()
}

#[test]
fn a_hundred_digit_id_comes_back_byte_for_byte() {
    let d = Daemon::start(&[]);
    let id = "1234567890".repeat(10);
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"GetTask","params":{{"id":"nope"}}}}"#);
    let text = post_raw(&d, &body);
    assert!(
        text.contains(&format!(r#""id":{id},"#)),
        "id not echoed exactly: {text}"
    );
    let thirty = "123456789012345678901234567890";
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{thirty},"method":"SendMessage","params":{{"message":{}}}}}"#,
        user_message("hi")
    );
    let text = post_raw(&d, &body);
    assert!(text.contains(&format!(r#""id":{thirty},"#)), "{text}");
    assert!(text.contains("TASK_STATE_COMPLETED"), "{text}");
    // An error found before the id is known still answers with null.
    let text = post_raw(&d, r#"{"jsonrpc":"2.0","id":1"#);
    assert!(text.contains(r#""id":null"#) && text.contains("-32700"), "{text}");
}

/// `{"a":{"a":…{}…}}`, `levels` objects deep.
fn nested(levels: usize) -> String {
    format!("{}{{}}{}", r#"{"a":"#.repeat(levels - 1), "}".repeat(levels - 1))
}

/// A SendMessage whose message.metadata makes the whole body `depth` deep.
fn send_at_depth(depth: usize) -> String {
    // envelope → params → message → metadata: metadata is the 4th level.
    let mut message = user_message("deep");
    message["metadata"] = json!({});
    let message = message
        .to_string()
        .replace(r#""metadata":{}"#, &format!(r#""metadata":{}"#, nested(depth - 3)));
    format!(r#"{{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{{"message":{message}}}}}"#)
}

#[test]
fn the_deepest_accepted_nesting_is_served_and_one_more_is_a_clean_parse_error() {
    // The bound agentd documents (limits::JSON_DEPTH_MAX).
    const MAX: usize = 64;
    let d = Daemon::start(&[]);
    let text = post_raw(&d, &send_at_depth(MAX));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{text}");
    let mut md = &v["result"]["task"]["history"][0]["metadata"];
    for _ in 0..MAX - 4 {
        md = &md["a"];
    }
    assert_eq!(md, &json!({}), "the metadata came back whole: {text}");

    let v: Value = serde_json::from_str(&post_raw(&d, &send_at_depth(MAX + 1))).unwrap();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    // What used to overflow a debug build's connection stack (~122 levels)
    // and serde_json's own limit: clean errors, and the daemon lives on.
    for depth in [122, 127, 128, 129, 5000] {
        let v: Value = serde_json::from_str(&post_raw(&d, &send_at_depth(depth))).unwrap();
        assert_eq!(v["error"]["code"], -32700, "{depth}: {v}");
    }
    let v = d.ok("SendMessage", json!({"message": user_message("still here")}));
    assert_eq!(v["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
}
