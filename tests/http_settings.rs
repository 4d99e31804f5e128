//! Two settings of the HTTP side as the manual words them:
//! `a2a.version_required` ("false treats a missing header as 1.0") and
//! `http.idle_timeout_ms` ("idle time allowed on a keep-alive connection
//! between requests; then the connection is closed").

mod common;

use std::io::{BufReader, Read, Write};
use std::time::{Duration, Instant};

use common::{read_response, user_message, Daemon};
use serde_json::json;

fn send_body() -> String {
    json!({"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": user_message("v")}}).to_string()
}

#[test]
fn version_required_false_treats_a_missing_header_as_1_0() {
    // The default refuses it with -32009 ...
    let d = Daemon::start(&[]);
    let v = d.post(&send_body(), &[]).json();
    assert_eq!(v["error"]["code"], -32009, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("A2A-Version: 1.0"),
        "{v}"
    );

    // ... false serves it as 1.0 ...
    let d = Daemon::start(&["--set", "a2a.version_required=false"]);
    let v = d.post(&send_body(), &[]).json();
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    assert_eq!(v["result"]["task"]["artifacts"][0]["parts"][0]["text"], "v", "{v}");

    // ... and only a missing one: a version it does not serve is still
    // refused, and 1.0 still served.
    let v = d.post(&send_body(), &[("A2A-Version", "0.3")]).json();
    assert_eq!(v["error"]["code"], -32009, "{v}");
    let v = d.post(&send_body(), &[("A2A-Version", "1.0")]).json();
    assert!(v.get("error").is_none(), "{v}");
}

/// One keep-alive GET of the card on `s`; its response.
fn keep_alive_get(s: &mut std::os::unix::net::UnixStream) -> u16 {
    s.write_all(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: agentd\r\n\r\n")
        .unwrap();
    let resp = read_response(&mut BufReader::new(&mut *s)).expect("a response on the kept-alive connection");
    resp.status
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_idle_timeout_ms() {
    const IDLE: Duration = Duration::from_millis(1500);
    let d = Daemon::start(&["--set", &format!("http.idle_timeout_ms={}", IDLE.as_millis())]);

    // Busy, it stays open past the idle time: requests every 200 ms for
    // three idle periods, all on one connection.
    let mut busy = d.connect();
    let started = Instant::now();
    let mut served = 0;
    while started.elapsed() < IDLE * 3 {
        assert_eq!(keep_alive_get(&mut busy), 200, "request {served} on a busy connection");
        served += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(served >= 5, "{served}");

    // Idle, it is closed: not before the idle time, and not much after.
    // The idle clock starts when the answer is written, after the request
    // is sent and before it is read here. A loaded 2-core machine wakes the
    // connection's timer and this reader late, well under 100 ms when
    // measured there; LATE is room enough.
    const LATE: Duration = Duration::from_secs(1);
    let mut idle = d.connect();
    let asked = Instant::now();
    assert_eq!(keep_alive_get(&mut idle), 200);
    let answered = Instant::now();
    idle.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut byte = [0u8; 1];
    let n = idle.read(&mut byte).expect("a close, not a read timeout");
    let (since_asked, closed_after) = (asked.elapsed(), answered.elapsed());
    assert_eq!(n, 0, "the daemon wrote unasked: {byte:?}");
    assert!(
        since_asked >= IDLE && closed_after < IDLE + LATE,
        "an idle connection closed {closed_after:?} after its last answer (idle timeout {IDLE:?})"
    );
    assert!(
        d.log_text().contains("reason=idle"),
        "the close is logged as idle:\n{}",
        d.log_text()
    );
}
