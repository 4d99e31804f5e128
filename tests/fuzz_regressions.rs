//! The fuzz targets' checks under `cargo test`: every committed seed in
//! `fuzz/corpus/<target>/seed-*` goes through the same function its fuzz
//! target calls (`fuzz/src/lib.rs`, included here by path), so a parser
//! change that breaks an invariant on a known input fails here without
//! nightly or cargo-fuzz. Crash inputs a fuzz run finds get a named test
//! with their bytes at the bottom.

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod checks;

use std::path::PathBuf;

/// The committed seeds of one target, sorted by name; never empty.
fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seed-"))
        })
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seed-* files in {}", dir.display());
    out
}

macro_rules! seeds_pass {
    ($($target:ident),* $(,)?) => {$(
        #[test]
        fn $target() {
            for (path, bytes) in seeds(stringify!($target)) {
                // Printed only when the check panics: names the seed.
                println!("{}", path.display());
                checks::$target(&bytes);
            }
        }
    )*};
}

seeds_pass!(
    http_request,
    chunked,
    sse,
    http_response,
    jsonrpc,
    control_frame,
    jsonl_line,
    jsonl_lines,
    mcp_line,
    config_file,
    systemd_env,
    json_text
);

/// The seeds are valid examples, not just inputs that do not crash: each
/// decodes to something, so the fuzzers start from the interesting paths.
#[test]
fn seeds_are_valid_examples() {
    use agentd::http::{Limits, MemConn, Reader};
    for (path, bytes) in seeds("http_request") {
        let mut reader = Reader::new(Limits::default());
        assert!(
            reader.read_request(&mut MemConn::new(&bytes)).is_ok(),
            "{}",
            path.display()
        );
    }
    for (path, bytes) in seeds("http_response") {
        let (_, mut r) = agentd::http::client::ResponseReader::new(&bytes[..]).unwrap();
        assert!(r.body(1 << 20).is_ok(), "{}", path.display());
    }
    for (path, bytes) in seeds("chunked") {
        let mut dec = agentd::http::chunked::Decoder::new();
        assert!(
            dec.feed(&bytes[1..], &mut Vec::new()).is_ok() && dec.is_done(),
            "{}",
            path.display()
        );
    }
    for (path, bytes) in seeds("sse") {
        let mut events = Vec::new();
        agentd::http::sse::Parser::new().feed(&bytes[1..], &mut events).unwrap();
        assert!(!events.is_empty(), "{}", path.display());
    }
    for (path, bytes) in seeds("jsonrpc") {
        assert!(agentd::rpc::decode(&bytes).is_ok(), "{}", path.display());
    }
    let max = agentd::limits::control_frame_max_bytes(agentd::limits::HTTP_BODY_MAX_BYTES);
    for (path, bytes) in seeds("control_frame") {
        let name = path.file_name().unwrap().to_str().unwrap();
        match name {
            "seed-fork-request" => {
                assert!(agentd::control::ForkRequest::decode(&bytes).is_some(), "{name}");
                continue;
            }
            "seed-fork-reply" => {
                assert!(agentd::control::ForkReply::decode(&bytes).is_some(), "{name}");
                continue;
            }
            _ => {}
        }
        let used = if name.starts_with("seed-to-") {
            agentd::control::decode::<agentd::control::ToWorker>(&bytes, max).map(|f| f.map(|(_, n)| n))
        } else {
            agentd::control::decode::<agentd::control::FromWorker>(&bytes, max).map(|f| f.map(|(_, n)| n))
        };
        assert!(matches!(used, Ok(Some(_))), "{name}: {used:?}");
    }
    for (path, bytes) in seeds("jsonl_line") {
        assert!(agentd::worker::jsonl::parse_line(&bytes).is_ok(), "{}", path.display());
        // The in-place reading of long chunks has a seed of its own shape.
        let text_chunk = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("seed-text-chunk"));
        assert_eq!(
            agentd::worker::jsonl::chunk_readings(&bytes).is_some(),
            text_chunk,
            "{}",
            path.display()
        );
    }
    // Every line of these is one a jsonl program may write.
    for (path, bytes) in seeds("jsonl_lines") {
        for line in bytes[2..].split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.iter().all(u8::is_ascii_whitespace) {
                assert!(agentd::worker::jsonl::parse_line(line).is_ok(), "{}", path.display());
            }
        }
    }
    for (path, bytes) in seeds("mcp_line") {
        let json_lines = bytes[1..]
            .split(|b| *b == b'\n')
            .filter(|l| serde_json::from_slice::<serde_json::Value>(l).is_ok())
            .count();
        assert!(json_lines > 0, "{}", path.display());
    }
    let mut config = agentd::config::Config::default();
    let full = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/config_file/seed-every-section"),
    )
    .unwrap();
    config
        .load_str(&full, "seed")
        .expect("seed-every-section is a valid config");
    config.validate().expect("seed-every-section validates");
    for (path, bytes) in seeds("systemd_env") {
        let notify = String::from_utf8_lossy(bytes.split(|b| *b == 0).next().unwrap()).into_owned();
        let valid = !path.ends_with("seed-bad-count");
        assert_eq!(
            agentd::systemd::NotifyTarget::parse(&notify).is_ok(),
            valid,
            "{}",
            path.display()
        );
    }
}
