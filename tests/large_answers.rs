//! A task answer of a megabyte or more is written onto the connection as it
//! is rendered (chunked), not into a buffer of its size first. What a client
//! gets must not change: the same JSON, every byte of the artifact (escapes
//! and multi-byte characters included), the connection usable after it, and
//! HTTP/1.0 clients, which know no chunks, still served whole.

mod common;

use std::io::{BufReader, Write};
use std::time::Duration;

use common::{artifact_text, read_response, user_message, Daemon};
use serde_json::{json, Value};

/// One line of the program's output: quotes, a backslash, a tab, a control
/// character and characters of two, three and four bytes, all of which
/// JSON escapes or must keep whole.
const LINE: &str = "a \"quoted\" \\ back\tslash \u{1} ü ✓ 😀 line\n";
/// Lines in the answer: about 3 MB of text, over the 1 MiB from which an
/// answer is streamed.
const LINES: usize = 70_000;

fn daemon() -> Daemon {
    // printf's format would read the backslash: the line goes as an argument.
    let program = format!(
        "python3 -c 'import sys; sys.stdout.write(sys.argv[1] * {LINES})' '{}'",
        LINE.replace('\'', "'\\''")
    );
    Daemon::start(&["--exec", &program, "--set", "tasks.prespawn=0"])
}

fn call(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()
}

fn request(body: &str, version: &str, close: bool) -> Vec<u8> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    format!(
        "POST / {version}\r\nHost: agentd\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n\
         {connection}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn a_large_answer_is_chunked_whole_and_the_connection_goes_on() {
    let d = daemon();
    let expected = LINE.repeat(LINES);
    let mut conn = d.connect();
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());

    let send = call("SendMessage", json!({"message": user_message("go")}));
    conn.write_all(&request(&send, "HTTP/1.1", false)).unwrap();
    let resp = read_response(&mut reader).unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("Transfer-Encoding"), Some("chunked"), "{:?}", resp.headers);
    assert_eq!(resp.header("Content-Length"), None);
    assert_eq!(resp.header("Content-Type"), Some("application/json"));
    let answer = resp.json();
    assert_eq!(answer["id"], 7);
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{}", task["status"]);
    let text = artifact_text(task);
    assert_eq!(text.len(), expected.len());
    assert!(
        text == expected,
        "the artifact text differs from what the program wrote"
    );

    // The same connection serves the next call: GetTask, as large, the
    // task itself as the result.
    let get = call("GetTask", json!({"id": task["id"]}));
    conn.write_all(&request(&get, "HTTP/1.1", true)).unwrap();
    let again = read_response(&mut reader).unwrap();
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("Transfer-Encoding"), Some("chunked"));
    assert_eq!(
        again.json()["result"],
        *task,
        "GetTask answers the task SendMessage answered"
    );
}

#[test]
fn a_streamed_large_answer_carries_every_byte_in_its_artifact_chunks() {
    let d = daemon();
    let expected = LINE.repeat(LINES);
    let mut stream = d.stream("SendStreamingMessage", json!({"message": user_message("go")}), &[]);
    stream.set_timeout(Duration::from_secs(60));
    let events = stream.collect();
    assert!(stream.ended(), "the stream ends with its zero chunk");
    let mut text = String::new();
    let mut chunks = 0;
    for e in &events {
        assert!(!e.raw.contains('\r'), "one data line per event: {:.80}", e.raw);
        if let Some(update) = e.result().get("artifactUpdate") {
            chunks += 1;
            for part in update["artifact"]["parts"].as_array().unwrap() {
                text.push_str(part["text"].as_str().unwrap());
            }
        }
    }
    assert!(chunks > 1, "3 MB of output comes in more than one chunk: {chunks}");
    assert_eq!(text.len(), expected.len());
    assert!(
        text == expected,
        "the streamed text differs from what the program wrote"
    );
    let last = events.last().unwrap().result();
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{last}"
    );
}

#[test]
fn an_http_1_0_client_gets_a_large_answer_whole() {
    let d = daemon();
    let send = call("SendMessage", json!({"message": user_message("go")}));
    let resp = d.raw(&request(&send, "HTTP/1.0", true));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("Transfer-Encoding"), None, "{:?}", resp.headers);
    let len: usize = resp
        .header("Content-Length")
        .expect("a Content-Length")
        .parse()
        .unwrap();
    assert_eq!(len, resp.body.len());
    assert!(artifact_text(&resp.json()["result"]["task"]) == LINE.repeat(LINES));
}

#[test]
fn a_small_answer_keeps_its_content_length() {
    let d = Daemon::start(&["--set", "tasks.prespawn=0"]);
    let send = call("SendMessage", json!({"message": user_message("small")}));
    let resp = d.raw(&request(&send, "HTTP/1.1", true));
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("Transfer-Encoding"), None);
    assert!(resp.header("Content-Length").is_some());
}

/// A client that hangs up while its large answer is being written costs
/// the daemon its connection only: the thread ends, and the next client is
/// served.
#[test]
fn a_client_that_hangs_up_mid_answer_costs_only_its_connection() {
    let d = daemon();
    let send = call("SendMessage", json!({"message": user_message("go")}));
    let id = {
        // Read the head and a little of the body, then hang up.
        let mut conn = d.connect();
        conn.write_all(&request(&send, "HTTP/1.1", true)).unwrap();
        let mut first = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < first.len() {
            match std::io::Read::read(&mut conn, &mut first[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => panic!("reading the answer's start: {e}"),
            }
        }
        let start = String::from_utf8_lossy(&first[..got]).into_owned();
        assert!(
            start.contains("Transfer-Encoding: chunked"),
            "{}",
            &start[..start.len().min(300)]
        );
        let at = start.find("\"id\":\"").expect("the task's id in the answer's start") + 6;
        start[at..at + 36].to_string()
    };
    d.settle();
    let task = d.ok("GetTask", json!({"id": id}));
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(artifact_text(&task) == LINE.repeat(LINES));
}
