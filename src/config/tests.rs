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
