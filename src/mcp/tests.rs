use super::*;

fn run(input: &str) -> Vec<Value> {
    let (bridge, out) = Bridge::in_memory("unix:///nonexistent/agentd-mcp-test.sock");
    bridge.serve(input.as_bytes());
    out.messages()
}

/// Like `run`, but waits for `n` messages (some answers come from threads).
fn run_until(input: &str, n: usize) -> Vec<Value> {
    let (bridge, out) = Bridge::in_memory("unix:///nonexistent/agentd-mcp-test.sock");
    bridge.serve(input.as_bytes());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while out.messages().len() < n && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    out.messages()
}

macro_rules! bad {
    ($($name:ident: $line:expr => $id:expr, $code:expr;)*) => {$(
        #[test]
        fn $name() {
            let m = run(concat!($line, "\n"));
            assert_eq!(m.len(), 1, "{m:?}");
            assert_eq!(m[0]["id"], json!($id), "{m:?}");
            assert_eq!(m[0]["error"]["code"], json!($code), "{m:?}");
        }
    )*};
}

bad! {
    not_json: "{not json" => Value::Null, -32700;
    a_batch: r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"# => Value::Null, -32600;
    a_number: "42" => Value::Null, -32600;
    wrong_version: r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"# => 3, -32600;
    no_method: r#"{"jsonrpc":"2.0","id":"a"}"# => "a", -32600;
    null_id: r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"# => Value::Null, -32600;
    float_id: r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"# => Value::Null, -32600;
    method_not_string: r#"{"jsonrpc":"2.0","id":4,"method":7}"# => 4, -32600;
    params_not_object: r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":[1]}"# => 5, -32602;
    unknown_method: r#"{"jsonrpc":"2.0","id":6,"method":"tasks/list"}"# => 6, -32601;
    modern_probe: r#"{"jsonrpc":"2.0","id":7,"method":"server/discover"}"# => 7, -32601;
    initialize_without_version: r#"{"jsonrpc":"2.0","id":8,"method":"initialize","params":{}}"# => 8, -32602;
}

#[test]
fn notifications_and_responses_get_no_answer_and_blank_lines_are_skipped() {
    let m = run(concat!(
        "\n   \n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    ));
    assert_eq!(m, vec![json!({"jsonrpc": "2.0", "id": 2, "result": {}})]);
}

#[test]
fn version_negotiation() {
    assert_eq!(negotiate("2025-06-18"), "2025-06-18");
    assert_eq!(negotiate("2025-03-26"), "2025-03-26");
    assert_eq!(negotiate("2025-11-25"), "2025-11-25");
    assert_eq!(negotiate("2024-11-05"), "2025-11-25");
    assert_eq!(negotiate("2099-01-01"), "2025-11-25");
    let m = run(concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ));
    let r = &m[0]["result"];
    assert_eq!(r["protocolVersion"], "2025-03-26");
    assert_eq!(r["capabilities"]["resources"]["subscribe"], true);
    assert!(r["capabilities"]["tools"].is_object());
    assert_eq!(r["serverInfo"]["name"], "agentd");
    // 2025-03-26 has no output schemas.
    let tools = m[1]["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().all(|t| t.get("outputSchema").is_none()));
}

#[test]
fn the_five_tools_have_legal_names_and_schemas() {
    let tools = schemas::list("2025-11-25")["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "subagent_spawn",
            "subagent_send",
            "subagent_status",
            "subagent_cancel",
            "subagent_list"
        ]
    );
    assert_eq!(names, tools::TOOLS);
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        // What MCP hosts check (Claude Desktop among them), stricter than
        // the 2025-11-25 revision's 1–128 of A–Z a–z 0–9 _ - .
        assert!(
            (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)),
            "{name}"
        );
        assert_eq!(t["inputSchema"]["type"], "object", "{name}");
        assert_eq!(t["outputSchema"]["type"], "object", "{name}");
    }
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["objective"]));
    assert_eq!(tools[1]["inputSchema"]["required"], json!(["taskId", "text"]));
}

#[test]
fn an_unreachable_daemon_is_a_tool_error_and_the_bridge_goes_on() {
    let m = run_until(
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subagent.status","arguments":{"taskId":"t1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"subagent.spawn","arguments":{"objective":1}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"agentd://task/x"}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}"#,
        ),
        5,
    );
    let by_id = |id: i64| m.iter().find(|x| x["id"] == id).cloned().unwrap_or_default();
    let r1 = by_id(1)["result"].clone();
    assert_eq!(r1["isError"], true, "{m:?}");
    let text = r1["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("is unreachable") && text.contains("agentd serve"),
        "{text}"
    );
    assert_eq!(by_id(2)["error"]["code"], -32602);
    assert_eq!(by_id(2)["error"]["message"], "Unknown tool: nope");
    let r3 = by_id(3)["result"].clone();
    assert_eq!(r3["isError"], true);
    assert_eq!(
        r3["content"][0]["text"],
        "subagent_spawn: `objective` must be a non-empty string"
    );
    assert_eq!(by_id(4)["error"]["code"], -32603);
    assert_eq!(by_id(5)["error"]["code"], -32602);
}

#[test]
fn over_long_lines_are_dropped_whole() {
    let mut r = &b"0123456789\nok\nlast"[..];
    let mut buf = Vec::new();
    assert!(matches!(read_line(&mut r, &mut buf, 4).unwrap(), Line::TooLong));
    buf.clear();
    assert!(matches!(read_line(&mut r, &mut buf, 4).unwrap(), Line::Complete));
    assert_eq!(buf, b"ok");
    buf.clear();
    assert!(matches!(read_line(&mut r, &mut buf, 4).unwrap(), Line::Complete));
    assert_eq!(buf, b"last");
    buf.clear();
    assert!(matches!(read_line(&mut r, &mut buf, 4).unwrap(), Line::Eof));
    // At the limit exactly: kept.
    let mut r = &b"abcd\n"[..];
    assert!(matches!(read_line(&mut r, &mut buf, 4).unwrap(), Line::Complete));
}

#[test]
fn cancellation_finds_the_task_whichever_comes_first() {
    let c = Call::new(json!(1), "tools/call".into());
    assert!(!c.bind_task("t1"), "not cancelled yet");
    assert_eq!(c.cancel().as_deref(), Some("t1"));
    let c = Call::new(json!(1), "tools/call".into());
    assert_eq!(c.cancel(), None, "task not known yet");
    assert!(c.bind_task("t2"), "the binder learns it must cancel");
}

#[test]
fn resource_uris() {
    assert_eq!(resources::task_of("agentd://task/abc"), Some("abc"));
    assert_eq!(resources::task_of("agentd://task/"), None);
    assert_eq!(resources::task_of("agentd://task/a/b"), None);
    assert_eq!(resources::task_of("agentd://other/a"), None);
    assert_eq!(resources::uri_of("abc"), "agentd://task/abc");
}

#[test]
fn a_task_view() {
    let t = json!({
        "id": "t1", "contextId": "c1",
        "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"parts": [{"text": "Which day?"}]}},
        "artifacts": [{"artifactId": "a", "name": "plan", "parts": [{"text": "- x\n"}, {"text": "- y\n"}]}],
        "metadata": {crate::ext::ANNOTATIONS: {"team": "search"}},
    });
    let v = tools::task_view(&t);
    assert_eq!(v["taskId"], "t1");
    assert_eq!(v["state"], "input-required");
    assert_eq!(v["statusText"], "Which day?");
    assert_eq!(v["artifacts"][0]["text"], "- x\n- y\n");
    assert_eq!(v["annotations"], json!({"team": "search"}));
}

#[test]
fn progress_reads_each_event_and_skips_an_empty_chunk() {
    let chunk = |text: &str, last: bool| {
        json!({"artifactUpdate": {"taskId": "t", "lastChunk": last,
               "artifact": {"artifactId": "a", "name": "output", "parts": [{"text": text}]}}})
    };
    assert_eq!(
        tools::progress_text(&chunk("HELLO", false)).as_deref(),
        Some("artifact output: HELLO")
    );
    assert_eq!(tools::progress_text(&chunk("", false)), None);
    assert_eq!(
        tools::progress_text(&chunk("", true)).as_deref(),
        Some("artifact output complete")
    );
    let working = json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_WORKING",
                         "message": {"parts": [{"text": "Planning"}]}}}});
    assert_eq!(tools::progress_text(&working).as_deref(), Some("working: Planning"));
}

#[test]
fn every_request_read_before_eof_is_answered_in_time() {
    // Nothing listens at the endpoint: the tool call fails at once, and the
    // drain returns as soon as it is answered.
    let (bridge, out) = Bridge::in_memory("unix:///nonexistent/agentd.sock");
    bridge.serve(
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"subagent.status","arguments":{"taskId":"t"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#,
            "\n",
        )
        .as_bytes(),
    );
    let started = std::time::Instant::now();
    bridge.drain(std::time::Duration::from_secs(30));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let ids: std::collections::BTreeSet<i64> = out.messages().iter().filter_map(|m| m["id"].as_i64()).collect();
    assert_eq!(ids, (1..=4).collect(), "{}", out.text());
    // The dotted name still reaches its tool: the answer is the tool's own.
    let status = out.messages().into_iter().find(|m| m["id"] == 3).unwrap();
    assert!(
        status["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("is unreachable"),
        "{status}"
    );
}
