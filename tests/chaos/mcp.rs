//! The MCP bridge client: `agentd mcp` on the soak's socket, spawning,
//! cancelling and reading tasks through its tools while the daemon under it
//! is broken and restarted. The bridge itself must live through all of it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::ledger::{Kind, Via, View};
use crate::load::{Env, CALL_TIMEOUT};
use crate::rng::Rng;

struct Bridge {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<Value>,
    next_id: i64,
}

impl Bridge {
    fn start(bin: &Path, socket: &Path) -> Result<Bridge, String> {
        let mut child = Command::new(bin)
            .args(["mcp", &format!("unix://{}", socket.display())])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start agentd mcp: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v = serde_json::from_str::<Value>(&line)
                    .unwrap_or_else(|e| json!({"not-json": line, "error": e.to_string()}));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut b = Bridge {
            child,
            stdin,
            rx,
            next_id: 1,
        };
        let init = b.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "agentd-chaos", "version": "1"}}),
        )?;
        if init["result"]["protocolVersion"] != "2025-06-18" {
            return Err(format!("initialize answered {init}"));
        }
        b.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(b)
    }

    fn send(&mut self, v: &Value) -> Result<(), String> {
        writeln!(self.stdin, "{v}").map_err(|e| format!("bridge stdin: {e}"))?;
        self.stdin.flush().map_err(|e| format!("bridge stdin: {e}"))
    }

    /// One request and its response (notifications are skipped).
    fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline
                .checked_duration_since(Instant::now())
                .ok_or_else(|| format!("no answer to {method} within {CALL_TIMEOUT:?}"))?;
            match self.rx.recv_timeout(left) {
                Ok(v) if v.get("not-json").is_some() => {
                    return Err(format!("the bridge wrote a line that is not JSON: {v}"))
                }
                Ok(v) if v["id"] == id => return Ok(v),
                Ok(_) => {}
                Err(_) => {
                    return Err(format!(
                        "no answer to {method} (the bridge's stdout ended or timed out)"
                    ))
                }
            }
        }
    }

    /// A tool's result: Ok(structuredContent) or Err(its error text).
    fn tool(&mut self, name: &str, args: Value) -> Result<Result<Value, String>, String> {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}))?;
        let res = &r["result"];
        if res["isError"] == true {
            return Ok(Err(res["content"][0]["text"].as_str().unwrap_or("").to_string()));
        }
        if r.get("error").is_some() {
            return Err(format!("tools/call {name}: {r}"));
        }
        Ok(Ok(res["structuredContent"].clone()))
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The MCP client's loop.
pub fn client(env: Arc<Env>, bin: std::path::PathBuf, mut rng: Rng) {
    let mut bridge: Option<Bridge> = None;
    while !env.stopping() {
        let Some((epoch, _)) = env.daemon.wait_up(Duration::from_secs(60)) else {
            continue;
        };
        let b = match bridge.as_mut() {
            Some(b) => b,
            None => match Bridge::start(&bin, &env.daemon.socket) {
                Ok(b) => bridge.insert(b),
                Err(e) => {
                    if !env.daemon.disrupted_since(epoch) {
                        env.ledger.violation("violation.client_error", format!("mcp: {e}"));
                    }
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
            },
        };
        let ctx = env.new_ctx("mcp");
        let cancel = rng.chance(35);
        let (kind, objective) = if cancel {
            (Kind::Sleep, "sleep 0.500 8".to_string())
        } else if rng.chance(20) {
            (Kind::Fail, "fail".to_string())
        } else {
            (Kind::Ok, "ok".to_string())
        };
        env.ledger.register(&ctx, kind, Via::Mcp, epoch, 0);
        let outcome = one(&env, b, &ctx, &objective, cancel);
        let epoch = reattribute(&env, &ctx, epoch);
        match outcome {
            Ok(Some(view)) => env.finish(&ctx, epoch, view),
            Ok(None) => env.follow(&ctx, epoch, CALL_TIMEOUT),
            Err(Broken::Tool(why)) => {
                if env.daemon.disrupted_since(epoch) {
                    env.ledger.count("calls.broken_by_restart");
                } else {
                    env.ledger
                        .violation("violation.client_error", format!("mcp ctx={ctx}: {why}"));
                }
                env.follow(&ctx, epoch, CALL_TIMEOUT);
            }
            Err(Broken::Bridge(why)) => {
                env.ledger.violation(
                    "violation.client_error",
                    format!("mcp ctx={ctx}: the bridge broke: {why}"),
                );
                bridge = None;
                env.follow(&ctx, epoch, CALL_TIMEOUT);
            }
        }
        env.ledger.count("via.Mcp");
        std::thread::sleep(Duration::from_millis(rng.range(50, 400)));
    }
}

/// The bridge dials the daemon itself, so a call made while one daemon
/// was being killed may have reached the next: a task the serving daemon
/// knows is that daemon's, whatever epoch the client noted.
fn reattribute(env: &Env, ctx: &str, epoch: u32) -> u32 {
    if !env.daemon.disrupted_since(epoch) {
        return epoch;
    }
    let (Some(id), Some((now, _))) = (env.ledger.with(ctx, |r| r.task.clone()).flatten(), env.daemon.current()) else {
        return epoch;
    };
    if env.get_view(&id).is_ok() && !env.daemon.disrupted_since(now) {
        env.ledger.with(ctx, |r| r.epoch = now);
        env.ledger.count("calls.mcp_task_of_the_next_daemon");
        return now;
    }
    epoch
}

enum Broken {
    /// A tool error (the daemon unreachable, or worse).
    Tool(String),
    /// The bridge itself failed.
    Bridge(String),
}

/// One spawn (and cancel); the terminal view when the tools gave one.
fn one(env: &Env, b: &mut Bridge, ctx: &str, objective: &str, cancel: bool) -> Result<Option<View>, Broken> {
    let spawned = b
        .tool(
            "subagent.spawn",
            json!({"objective": objective, "contextId": ctx, "returnImmediately": cancel, "historyLength": 0}),
        )
        .map_err(Broken::Bridge)?
        .map_err(Broken::Tool)?;
    let Some(id) = spawned["taskId"].as_str().map(String::from) else {
        return Err(Broken::Tool(format!("spawn without a taskId: {spawned}")));
    };
    env.ledger.set_task(ctx, &id);
    let last = if cancel {
        std::thread::sleep(Duration::from_millis(300));
        let c = b
            .tool("subagent.cancel", json!({"taskId": id}))
            .map_err(Broken::Bridge)?
            .map_err(Broken::Tool)?;
        // A task that had already ended comes back as it is, with a note.
        let ended_before = c.get("note").is_some();
        env.ledger.with(ctx, |r| r.cancel = Some(!ended_before));
        c
    } else {
        spawned
    };
    let view = View::of_task(&last["task"]);
    if !view.terminal() {
        return Ok(None);
    }
    // subagent.status must say the same.
    let status = b
        .tool("subagent.status", json!({"taskId": id, "historyLength": 0}))
        .map_err(Broken::Bridge)?
        .map_err(Broken::Tool)?;
    let again = View::of_task(&status["task"]);
    if again != view {
        env.ledger.violation(
            "violation.view_differs_from_GetTask",
            format!("mcp ctx={ctx}: the tool result said {view:?}, subagent.status {again:?}"),
        );
    }
    Ok(Some(view))
}
