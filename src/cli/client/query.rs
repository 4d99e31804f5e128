//! The client commands that ask and show: card, get, list, cancel,
//! events and the operator command.

use std::io::Write;

use serde_json::{json, Value};

use super::print::{print_json, print_task, short_state, text};
use super::{Failure, Opts, EXIT_OK};
use crate::client::Client;

pub fn card(client: &Client, opts: &Opts) -> Result<i32, Failure> {
    let card = client.card()?;
    if opts.json {
        print_json(&card);
        client.check_interface(&card)?;
        return Ok(EXIT_OK);
    }
    println!("{} {}", text(&card["name"]), text(&card["version"]));
    println!("  {}", text(&card["description"]));
    println!("interfaces:");
    for i in card["supportedInterfaces"].as_array().into_iter().flatten() {
        println!(
            "  {}  {}  (A2A {})",
            text(&i["url"]),
            text(&i["protocolBinding"]),
            text(&i["protocolVersion"])
        );
    }
    let caps = &card["capabilities"];
    println!(
        "capabilities: streaming={} pushNotifications={} extendedAgentCard={}",
        caps["streaming"].as_bool().unwrap_or(false),
        caps["pushNotifications"].as_bool().unwrap_or(false),
        caps["extendedAgentCard"].as_bool().unwrap_or(false)
    );
    for e in caps["extensions"].as_array().into_iter().flatten() {
        println!(
            "  extension {}{}",
            text(&e["uri"]),
            if e["required"] == true { " (required)" } else { "" }
        );
    }
    for s in card["skills"].as_array().into_iter().flatten() {
        println!("skill {}: {}", text(&s["id"]), text(&s["description"]));
    }
    client.check_interface(&card)?;
    Ok(EXIT_OK)
}

pub fn get(client: &mut Client, opts: &Opts, id: &str) -> Result<i32, Failure> {
    client.discover()?;
    let mut params = json!({ "id": id });
    if let Some(n) = opts.number("--history").map_err(Failure::Usage)? {
        params["historyLength"] = json!(n);
    }
    let task = client.call("GetTask", params)?;
    if opts.json {
        print_json(&task);
    } else {
        print_task(&task, true, &client.addr.to_string());
    }
    Ok(EXIT_OK)
}

pub fn list(client: &mut Client, opts: &Opts) -> Result<i32, Failure> {
    client.discover()?;
    let mut params = json!({});
    if let Some(c) = opts.value("--context") {
        params["contextId"] = json!(c);
    }
    if let Some(s) = opts.value("--state") {
        let upper = s.to_ascii_uppercase().replace('-', "_");
        let state = if upper.starts_with("TASK_STATE_") {
            upper
        } else {
            format!("TASK_STATE_{upper}")
        };
        params["status"] = json!(state);
    }
    if let Some(n) = opts.number("--page-size").map_err(Failure::Usage)? {
        params["pageSize"] = json!(n);
    }
    if let Some(t) = opts.value("--page-token") {
        params["pageToken"] = json!(t);
    }
    if opts.has("--artifacts") {
        params["includeArtifacts"] = json!(true);
    }
    let page = client.call("ListTasks", params)?;
    if opts.json {
        print_json(&page);
        return Ok(EXIT_OK);
    }
    let tasks = page["tasks"].as_array().cloned().unwrap_or_default();
    println!("{:<36}  {:<15}  {:<24}  CONTEXT", "TASK", "STATE", "UPDATED");
    for t in &tasks {
        println!(
            "{:<36}  {:<15}  {:<24}  {}",
            text(&t["id"]),
            short_state(&t["status"]["state"]),
            text(&t["status"]["timestamp"]),
            text(&t["contextId"])
        );
    }
    println!("{} of {} task(s)", tasks.len(), page["totalSize"]);
    if let Some(next) = page["nextPageToken"].as_str().filter(|t| !t.is_empty()) {
        println!("more: --page-token {next}");
    }
    Ok(EXIT_OK)
}

pub fn cancel(client: &mut Client, opts: &Opts, id: &str) -> Result<i32, Failure> {
    client.discover()?;
    super::follow(id);
    let task = client.call("CancelTask", json!({ "id": id }))?;
    if opts.json {
        print_json(&task);
    } else {
        println!("task {} {}", text(&task["id"]), short_state(&task["status"]["state"]));
    }
    Ok(EXIT_OK)
}

pub fn events(client: &mut Client, opts: &Opts) -> Result<i32, Failure> {
    client.discover()?;
    client.extensions.push(crate::ext::EVENTS.to_string());
    let mut params = json!({});
    let from = opts.number("--from").map_err(Failure::Usage)?;
    if let Some(n) = from {
        params["fromSeq"] = json!(n);
    }
    let json_out = opts.json;
    client.stream(crate::ext::EVENTS_METHOD, params, None, &mut |ev| {
        let r = &ev.result;
        if json_out {
            print_json(r);
        } else if let Some(e) = r.get("event") {
            let mut line = format!("{:>6} {} {:<14}", text(&e["seq"]), text(&e["time"]), text(&e["kind"]));
            for key in ["taskId", "state", "pid", "cause", "exit", "artifactId"] {
                if let Some(v) = e.get(key).filter(|v| !v.is_null()) {
                    let v = if key == "state" { short_state(v) } else { text(v) };
                    line.push_str(&format!(" {key}={v}"));
                }
            }
            println!("{line}");
        } else if let Some(h) = r.get("hello") {
            // `seq` is the newest record: new ones come after it, and with
            // --from the kept records after the one asked for come first.
            let (newest, ring_start) = (text(&h["seq"]), text(&h["ringStart"]));
            match from {
                Some(f) if h["seq"].as_i64().is_some_and(|newest| f < newest) => println!(
                    "# replaying the kept records after seq {f} (the ring starts at {ring_start}), \
                     then following new events after seq {newest}"
                ),
                _ => println!("# following new events after seq {newest} (the ring starts at {ring_start})"),
            }
        } else if let Some(rs) = r.get("resync") {
            println!(
                "# resync: records after {} are gone; the ring starts at {}",
                text(&rs["from"]),
                text(&rs["ringStart"])
            );
        } else if r.get("goodbye").is_some() {
            println!("# goodbye: the daemon is stopping");
        }
        let _ = std::io::stdout().flush();
        true
    })?;
    Ok(EXIT_OK)
}

pub fn operator_command(client: &mut Client, opts: &Opts, rest: &[String]) -> Result<i32, Failure> {
    let Some((op, args)) = rest.split_first() else {
        return Err(Failure::Usage(
            "`command` needs an OP: status, drain, resume or limits".into(),
        ));
    };
    let mut data = json!({ "op": op });
    for a in args {
        let (k, v) = a
            .split_once('=')
            .ok_or_else(|| Failure::Usage(format!("command arguments are KEY=VALUE, found `{a}`")))?;
        data[k] = v.parse::<i64>().map(Value::from).unwrap_or_else(|_| json!(v));
    }
    client.discover()?;
    client.extensions.push(crate::ext::COMMAND.to_string());
    let message = json!({
        "messageId": crate::ids::new_id(),
        "role": "ROLE_USER",
        "extensions": [crate::ext::COMMAND],
        "parts": [{"data": data}],
    });
    let result = client.call("SendMessage", json!({ "message": message }))?;
    let reply = &result["message"]["parts"][0]["data"];
    if opts.json {
        print_json(reply);
    } else {
        println!("{}", serde_json::to_string_pretty(reply).unwrap_or_default());
    }
    Ok(EXIT_OK)
}
