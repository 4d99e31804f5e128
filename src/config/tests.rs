use super::*;

#[test]
fn parses_a_file_and_names_the_bad_line() {
    let mut c = Config::default();
    c.load_str(
        "# comment\n\na2a.listen: unix:///tmp/x.sock\ntasks.max_running: 4\n",
        "f.conf",
    )
    .unwrap();
    assert_eq!(c.tasks.max_running, 4);
    assert_eq!(c.listen.len(), 1);
    let err = c.load_str("card.name: a\nbogus.key: 1\n", "f.conf").unwrap_err();
    assert_eq!(err.place, "f.conf:2");
    assert!(err.message.contains("unknown key `bogus.key`"), "{err}");
    let err = c.load_str("tasks.max_running: many\n", "f.conf").unwrap_err();
    assert_eq!(
        err.to_string(),
        "f.conf:1: tasks.max_running: expected a whole number, found `many`"
    );
}

#[test]
fn tls_on_unix_is_an_error() {
    let err = Config::default().load_str("a2a.tls: cert.pem\n", "f").unwrap_err();
    assert_eq!(err.place, "f:1");
    assert!(err.message.starts_with("a2a.tls: TLS is not supported"));
}

#[test]
fn suggests_near_keys() {
    let err = Config::default().set("tasks.max-running", "3").unwrap_err();
    assert!(err.contains("did you mean `tasks.max_running`"), "{err}");
    for typo in [
        "tasks.max_runing",
        "tasks.max_runnin",
        "tasks.mxa_running",
        "Tasks.Max_Running",
    ] {
        let err = Config::default().set(typo, "3").unwrap_err();
        assert!(err.contains("did you mean `tasks.max_running`"), "{typo}: {err}");
    }
    let err = Config::default().set("agent.exce", "cat").unwrap_err();
    assert!(err.contains("did you mean `agent.exec`"), "{err}");
    let err = Config::default().set("nothing.like.it", "1").unwrap_err();
    assert!(err.contains("`agentd help config` lists every key"), "{err}");
}

#[test]
fn seconds_read_and_print_without_floats() {
    use std::time::Duration;
    assert_eq!(parse_secs("30"), Some(Duration::from_secs(30)));
    assert_eq!(parse_secs("0.5"), Some(Duration::from_millis(500)));
    assert_eq!(parse_secs(".25"), Some(Duration::from_millis(250)));
    assert_eq!(parse_secs("2."), Some(Duration::from_secs(2)));
    assert_eq!(parse_secs("0.000000001"), Some(Duration::from_nanos(1)));
    for bad in ["", ".", "-1", "1e3", "0.0000000001", "1,5", " 1", "inf"] {
        assert_eq!(parse_secs(bad), None, "{bad}");
    }
    assert_eq!(secs_text(Duration::from_secs(30)), "30");
    assert_eq!(secs_text(Duration::from_millis(1500)), "1.5");
    assert_eq!(secs_text(Duration::from_millis(250)), "0.25");
}

#[test]
fn edit_distance_counts_inserts_deletes_substitutions_and_swaps() {
    assert_eq!(edit_distance("", ""), 0);
    assert_eq!(edit_distance("abc", ""), 3);
    assert_eq!(edit_distance("max_runing", "max_running"), 1);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("exce", "exec"), 1);
    assert_eq!(nearest("--jsn", &["--json", "--stream"]), Some("--json"));
    assert_eq!(nearest("--colour", &["--json", "--stream"]), None);
    assert_eq!(nearest("--STREAM", &["--json", "--stream"]), Some("--stream"));
}

#[test]
fn splits_commands_like_sh() {
    assert_eq!(
        split_command(r#"sh -c 'echo "a b"; exit 3' x\ y "q\"z""#).unwrap(),
        vec!["sh", "-c", "echo \"a b\"; exit 3", "x y", "q\"z"]
    );
    assert!(split_command("'open").is_err());
    assert_eq!(split_command("  ").unwrap(), Vec::<String>::new());
}

#[test]
fn every_key_is_settable_or_deliberately_refused() {
    for k in KEYS {
        let sample = match k.value {
            "N" | "MS" | "BYTES" | "SECS" => "16",
            "BOOL" => "true",
            "ADDRESS" => "unix:///tmp/agentd-key-test.sock",
            "CID,…" => "2,3",
            "URI,…" => crate::ext::COMMAND,
            "BINDING URL" => "JSONRPC http://127.0.0.1:1/",
            "echo|exec|peer" => "echo",
            "ENDPOINT" => "unix:///tmp/peer.sock",
            "text|jsonl" => "jsonl",
            "auto|off|PATH" => "off",
            "auto|N" => "auto",
            "PATH" => "/tmp",
            "NAME=VALUE" => "A=b",
            "LEVEL" => "debug",
            _ => "x",
        };
        let res = Config::default().set(k.name, sample);
        assert!(res.is_ok() || k.name == "a2a.tls", "{}: {res:?}", k.name);
    }
}

#[test]
fn the_last_of_exec_and_peer_picks_the_runner() {
    let peer = Runner::Peer {
        address: Address::parse("unix:///tmp/p.sock").unwrap(),
    };
    let exec = Runner::Exec {
        argv: vec!["cat".into()],
    };
    let mut c = Config::default();
    c.set("agent.exec", "cat").unwrap();
    c.set("agent.peer", "unix:///tmp/p.sock").unwrap();
    c.validate().unwrap();
    assert_eq!(c.runner, peer);
    assert_eq!(
        c.unused_runner_keys(),
        vec!["agent.exec is set but unused: the runner is peer (the last of agent.exec and agent.peer set picks the runner)"]
    );
    let mut c = Config::default();
    c.set("agent.peer", "unix:///tmp/p.sock").unwrap();
    c.set("agent.exec", "cat").unwrap();
    c.validate().unwrap();
    assert_eq!(c.runner, exec);
    // agent.runner names one outright, wherever it comes.
    c.set("agent.runner", "peer").unwrap();
    c.validate().unwrap();
    assert_eq!(c.runner, peer);
    assert!(c.unused_runner_keys()[0].contains("(agent.runner names the runner)"));
    let mut c = Config::default();
    c.set("agent.exec", "cat").unwrap();
    c.validate().unwrap();
    assert!(c.unused_runner_keys().is_empty());
}

#[test]
fn a_missing_script_is_named_with_a_near_one() {
    let dir = std::env::temp_dir().join(format!("agentd-script-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("agents")).unwrap();
    std::fs::write(dir.join("agents/trip_planner.py"), "").unwrap();
    let mut c = Config::default();
    c.set("agent.workdir", dir.to_str().unwrap()).unwrap();
    c.set("agent.exec", "python3 agents/trip_planer.py").unwrap();
    c.validate().unwrap();
    let err = c.check_script().unwrap_err();
    assert_eq!(
        err,
        format!(
            "agent.exec: the script `agents/trip_planer.py` does not exist (no {}/agents/trip_planer.py, \
             relative to agent.workdir): did you mean `trip_planner.py`?",
            dir.display()
        )
    );
    c.set("agent.exec", "python3 agents/trip_planner.py").unwrap();
    c.validate().unwrap();
    assert_eq!(c.check_script(), Ok(Some(dir.join("agents/trip_planner.py"))));
    c.set("agent.exec", "python3 agents/").unwrap();
    c.validate().unwrap();
    assert!(c.check_script().unwrap_err().contains("is not a file"));
    std::fs::remove_dir_all(&dir).unwrap();
}
