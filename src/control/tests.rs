use super::*;
use crate::limits::{control_frame_max_bytes, HTTP_BODY_MAX_BYTES, JSONL_LINE_MAX_BYTES};
use crate::limits::{JSON_REENCODE_GROWTH_DEN as DEN, JSON_REENCODE_GROWTH_NUM as NUM};

const MAX: usize = 1 << 20;

#[test]
fn round_trips_through_bytes() {
    let frames = vec![
        FromWorker::Status {
            state: Progress::InputRequired,
            text: Some("which?".into()),
        },
        FromWorker::Pong,
        FromWorker::Done {
            outcome: Outcome::Failed,
            cause: Cause::Exhausted,
            text: None,
        },
    ];
    let mut wire = Vec::new();
    for f in &frames {
        write_frame(&mut wire, f, MAX).unwrap();
    }
    let mut r = &wire[..];
    for f in &frames {
        assert_eq!(read_frame::<FromWorker>(&mut r, MAX).unwrap().as_ref(), Some(f));
    }
    assert_eq!(read_frame::<FromWorker>(&mut r, MAX).unwrap(), None);
}

/// Frames encoded onto one buffer follow each other; one too large is
/// refused and leaves the buffer as it was.
#[test]
fn frames_encoded_onto_a_buffer_follow_each_other_and_a_refused_one_leaves_it_be() {
    let mut buf = Vec::new();
    encode_onto(&mut buf, &FromWorker::Pong, MAX, 0).unwrap();
    encode_onto(&mut buf, &FromWorker::Hello { pid: 7 }, MAX, 0).unwrap();
    let before = buf.clone();
    let big = FromWorker::Status {
        state: Progress::Working,
        text: Some("x".repeat(64)),
    };
    assert!(matches!(
        encode_onto(&mut buf, &big, 32, 64),
        Err(FrameError::TooLarge { max: 32, .. })
    ));
    assert_eq!(buf, before);
    let (first, used) = decode::<FromWorker>(&buf, MAX).unwrap().unwrap();
    assert_eq!(first, FromWorker::Pong);
    assert_eq!(
        decode::<FromWorker>(&buf[used..], MAX).unwrap(),
        Some((FromWorker::Hello { pid: 7 }, buf.len() - used))
    );
}

/// An artifact chunk of `text`, as the text runner sends one.
fn chunk(text: &str) -> FromWorker {
    FromWorker::Artifact {
        artifact: Box::new(Artifact {
            artifact_id: "a-1".into(),
            name: Some("output".into()),
            description: None,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: Vec::new(),
        }),
        append: true,
        last_chunk: false,
    }
}

/// The bytes of a raw text frame: `json`, then `text` raw.
fn raw_frame(json: &[u8], json_len: u32, text: &[u8]) -> Vec<u8> {
    let body = [&[RAW_TEXT_MARK][..], &json_len.to_be_bytes(), json, text].concat();
    [&(body.len() as u32).to_be_bytes()[..], &body].concat()
}

#[test]
fn a_long_text_goes_raw_after_its_json_and_comes_back_whole() {
    let text = "a \"quoted\" line\twith \u{1} and ü\n".repeat(100);
    let frame = chunk(&text);
    let wire = encode(&frame, MAX).unwrap();
    assert_eq!(wire[4], RAW_TEXT_MARK, "sent raw");
    assert!(
        wire.ends_with(text.as_bytes()),
        "the text's own bytes end the frame, unescaped"
    );
    let json = serde_json::to_vec(&frame).unwrap();
    assert!(
        wire.len() < json.len(),
        "{} bytes raw, {} as JSON",
        wire.len(),
        json.len()
    );
    assert_eq!(
        decode::<FromWorker>(&wire, MAX).unwrap(),
        Some((frame.clone(), wire.len()))
    );
    assert_eq!(
        read_frame::<FromWorker>(&mut &wire[..], MAX).unwrap(),
        Some(frame.clone())
    );
    // Followed by another frame on one buffer.
    let mut buf = wire.clone();
    encode_onto(&mut buf, &FromWorker::Pong, MAX, 0).unwrap();
    assert_eq!(
        decode::<FromWorker>(&buf[wire.len()..], MAX).unwrap().unwrap().0,
        FromWorker::Pong
    );
    // The limit counts the frame as sent.
    assert!(matches!(
        encode(&frame, wire.len() - 5),
        Err(FrameError::TooLarge { .. })
    ));
}

#[test]
fn short_texts_and_other_frames_go_as_json() {
    let short = chunk(&"x".repeat(RAW_TEXT_MIN_BYTES - 1));
    let long = "x".repeat(RAW_TEXT_MIN_BYTES);
    let mut two_parts = chunk(&long);
    if let FromWorker::Artifact { artifact, .. } = &mut two_parts {
        artifact.parts.push(Part::text(long.clone()));
    }
    let status = FromWorker::Status {
        state: Progress::Working,
        text: Some(long.clone()),
    };
    for frame in [short, two_parts, status] {
        let wire = encode(&frame, MAX).unwrap();
        assert_eq!(wire[4], b'{', "{frame:?}");
        assert_eq!(decode::<FromWorker>(&wire, MAX).unwrap().unwrap().0, frame);
    }
}

#[test]
fn a_raw_text_frame_that_does_not_add_up_is_refused() {
    let empty_json = serde_json::to_vec(&chunk("")).unwrap();
    let full_json = serde_json::to_vec(&chunk("not empty")).unwrap();
    let pong = serde_json::to_vec(&FromWorker::Pong).unwrap();
    let ok = raw_frame(&empty_json, empty_json.len() as u32, b"text");
    assert_eq!(decode::<FromWorker>(&ok, MAX).unwrap().unwrap().0, chunk("text"));
    let cases: [(&str, Vec<u8>); 6] = [
        ("no header", [&2u32.to_be_bytes()[..], &[RAW_TEXT_MARK, 0]].concat()),
        (
            "JSON past the end",
            raw_frame(&empty_json, empty_json.len() as u32 + 1, b""),
        ),
        (
            "text not UTF-8",
            raw_frame(&empty_json, empty_json.len() as u32, b"\xff\xfe"),
        ),
        (
            "a text part already full",
            raw_frame(&full_json, full_json.len() as u32, b"more"),
        ),
        (
            "a frame with no text part",
            raw_frame(&pong, pong.len() as u32, b"text"),
        ),
        ("JSON cut short", raw_frame(&empty_json[..10], 10, b"text")),
    ];
    for (what, wire) in cases {
        assert!(
            matches!(decode::<FromWorker>(&wire, MAX), Err(FrameError::BadJson(_))),
            "{what}"
        );
        assert!(read_frame::<FromWorker>(&mut &wire[..], MAX).is_err(), "{what}");
        // Read apart from its head (procman's way for a long text), it is
        // refused as well, or its head is not taken for a whole one.
        let body = &wire[4..];
        if let Some(head) = raw_head_len(body) {
            let text = body[head..].to_vec();
            assert!(decode_raw_text::<FromWorker>(&body[..head], text).is_err(), "{what}");
        }
    }
    // A good one read apart is the frame decode gives.
    let body = &ok[4..];
    let head = raw_head_len(body).unwrap();
    assert_eq!(
        decode_raw_text::<FromWorker>(&body[..head], body[head..].to_vec()).unwrap(),
        chunk("text")
    );
    assert_eq!(raw_head_len(&body[..head - 1]), None, "a head cut short");
    // Nothing agentd sends a worker is ever raw.
    let to = raw_frame(b"\"ping\"", 6, b"text");
    assert!(matches!(decode::<ToWorker>(&to, MAX), Err(FrameError::BadJson(_))));
}

#[test]
fn decode_needs_whole_frames_and_bounds_length() {
    let wire = encode(&ToWorker::Ping, MAX).unwrap();
    for cut in 0..wire.len() {
        assert_eq!(decode::<ToWorker>(&wire[..cut], MAX).unwrap(), None);
    }
    assert_eq!(
        decode::<ToWorker>(&wire, MAX).unwrap(),
        Some((ToWorker::Ping, wire.len()))
    );
    assert!(matches!(
        decode::<ToWorker>(b"\0\0\0\x02{}", MAX),
        Err(FrameError::BadJson(_))
    ));
}

#[test]
fn eof_mid_frame_is_an_error() {
    let wire = encode(&ToWorker::Cancel, MAX).unwrap();
    let mut r = &wire[..wire.len() - 1];
    assert!(read_frame::<ToWorker>(&mut r, MAX).is_err());
}

/// A status frame whose JSON is exactly `len` bytes.
fn status_of_len(len: usize) -> FromWorker {
    let empty = encode(
        &FromWorker::Status {
            state: Progress::Working,
            text: Some(String::new()),
        },
        MAX,
    )
    .unwrap();
    FromWorker::Status {
        state: Progress::Working,
        text: Some("x".repeat(len - (empty.len() - 4))),
    }
}

#[test]
fn a_frame_at_the_limit_passes_one_byte_over_is_refused() {
    let max = 1000;
    let at = encode(&status_of_len(max), max).unwrap();
    assert_eq!(at.len(), 4 + max);
    assert_eq!(
        decode::<FromWorker>(&at, max).unwrap(),
        Some((status_of_len(max), 4 + max))
    );
    assert_eq!(
        read_frame::<FromWorker>(&mut &at[..], max).unwrap(),
        Some(status_of_len(max))
    );

    let over = FrameError::TooLarge { len: max + 1, max };
    assert_eq!(encode(&status_of_len(max + 1), max), Err(over.clone()));
    assert_eq!(
        over.to_string(),
        "a control frame of 1001 bytes is over the control channel's limit of 1000 bytes \
         (derived from http.body_max_bytes and the jsonl line limit)"
    );
    // The reader refuses it from the length prefix alone.
    let wire = encode(&status_of_len(max + 1), max + 1).unwrap();
    assert_eq!(decode::<FromWorker>(&wire[..4], max), Err(over.clone()));
    let e = read_frame::<FromWorker>(&mut &wire[..], max).unwrap_err();
    assert_eq!(e.to_string(), over.to_string());
}

#[test]
fn the_limit_follows_the_configured_body_limit() {
    let default = control_frame_max_bytes(HTTP_BODY_MAX_BYTES);
    assert_eq!(default, (4 * 1024 * 1024 / 2 + 1) * 9 + 64 * 1024);
    assert_eq!(control_frame_max_bytes(1), default, "the jsonl line limit is the floor");
    assert!(control_frame_max_bytes(64 << 20) > (64 << 20) / 2 * 9);
    assert_eq!(control_frame_max_bytes(usize::MAX), u32::MAX as usize);
}

/// The growth bound behind the limit: every JSON number of up to five
/// bytes (the longest growth is there: `1e15`), and the longest forms
/// serde_json writes at all (24 bytes, so longer inputs grow < 4.5×).
#[test]
fn numbers_grow_at_most_by_the_bound_when_re_encoded() {
    let alphabet = b"0123456789.eE+-";
    let mut worst = (0usize, 1usize, String::new());
    for len in 1..=5usize {
        let mut digits = vec![0usize; len];
        'all: loop {
            let text: Vec<u8> = digits.iter().map(|&i| alphabet[i]).collect();
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) {
                let out = serde_json::to_vec(&v).unwrap();
                assert!(out.len() * DEN <= text.len() * NUM, "{v} from {text:?}");
                if out.len() * worst.1 > worst.0 * len {
                    worst = (out.len(), len, String::from_utf8(text).unwrap());
                }
            }
            for d in digits.iter_mut() {
                *d += 1;
                if *d < alphabet.len() {
                    continue 'all;
                }
                *d = 0;
            }
            break;
        }
    }
    assert_eq!(
        worst,
        (18, 4, "1e15".to_string()),
        "the worst case is the documented one"
    );
    for long in [
        "-1.2345678901234567e-308",
        "-2.2250738585072014e-308",
        "5e-324",
        "-1.7976931348623157e308",
    ] {
        let v: serde_json::Value = serde_json::from_str(long).unwrap();
        assert!(serde_json::to_vec(&v).unwrap().len() <= 24, "{long}");
    }
    // float_roundtrip: the value survives, so its shortest form is short.
    let v: serde_json::Value = serde_json::from_str("3e30").unwrap();
    assert_eq!(v.as_f64(), Some(3e30));
    assert!(v.to_string().len() <= 5, "{v}"); // 3e30 or 3e+30, by serde_json's version
}

/// A message at the body limit, all `1e15`s, fits a spawn frame; a
/// line at the jsonl limit fits an artifact frame.
#[test]
fn the_worst_input_within_the_limits_fits_a_frame() {
    let max = control_frame_max_bytes(HTTP_BODY_MAX_BYTES);
    let n = (HTTP_BODY_MAX_BYTES - 100) / 5;
    let body = format!(
        r#"{{"messageId":"m","role":"ROLE_USER","parts":[{{"data":[{}]}}]}}"#,
        vec!["1e15"; n].join(",")
    );
    assert!(body.len() <= HTTP_BODY_MAX_BYTES);
    let message: Message = serde_json::from_str(&body).unwrap();
    let spawn = ToWorker::Spawn {
        task_id: "t".repeat(36),
        context_id: "c".repeat(36),
        message: std::sync::Arc::new(message),
        runner: std::sync::Arc::new(RunnerSpec::Echo),
        trace: None,
    };
    let frame = encode(&spawn, max).unwrap();
    assert!(frame.len() > 3 * body.len(), "the numbers did grow: {}", frame.len());

    let n = (JSONL_LINE_MAX_BYTES - 100) / 5;
    let parts = format!(r#"[{{"data":[{}]}}]"#, vec!["1e15"; n].join(","));
    let artifact = FromWorker::Artifact {
        artifact: Box::new(Artifact {
            artifact_id: "a".repeat(36),
            name: None,
            description: None,
            parts: serde_json::from_str(&parts).unwrap(),
            metadata: None,
            extensions: Vec::new(),
        }),
        append: true,
        last_chunk: true,
    };
    assert!(encode(&artifact, max).is_ok());
}

#[test]
fn fork_requests_round_trip_and_refuse_anything_else() {
    let mut all = Vec::new();
    // placed_only means something only with into_cgroup.
    for (into_cgroup, placed_only) in [(false, false), (true, false), (true, true)] {
        for containment in [None, Some(ContainmentFile::Kill), Some(ContainmentFile::Procs)] {
            all.push(ForkRequest {
                into_cgroup,
                placed_only,
                containment,
            });
        }
    }
    for req in &all {
        assert_eq!(ForkRequest::decode(&req.encode()), Some(*req));
    }
    let full = ForkRequest {
        into_cgroup: true,
        placed_only: true,
        containment: Some(ContainmentFile::Kill),
    };
    assert_eq!(full.fds(), 4);
    assert_eq!(ForkRequest::default().fds(), 2);
    let bytes = full.encode();
    assert_eq!(
        ForkRequest::decode(&[bytes.as_slice(), b"k"].concat()),
        None,
        "a second containment file"
    );
    assert_eq!(ForkRequest::decode(b"fork\0kc"), None, "out of order");
    assert_eq!(ForkRequest::decode(b"fork\0cC"), None, "two cgroup letters");
    assert_eq!(ForkRequest::decode(b"fork\0x"), None, "an unknown letter");
    assert_eq!(ForkRequest::decode(b"spawn\0"), None, "not a fork request");
    assert_eq!(ForkRequest::decode(b""), None);
}

#[test]
fn fork_replies_round_trip_and_refuse_anything_else() {
    for reply in [
        ForkReply::Forked {
            pid: 4242,
            placement_errno: 0,
        },
        ForkReply::Forked {
            pid: 7,
            placement_errno: libc::EBUSY,
        },
        ForkReply::Failed { errno: libc::EAGAIN },
    ] {
        assert_eq!(ForkReply::decode(&reply.encode()), Some(reply));
    }
    let mut bad = ForkReply::Forked {
        pid: 1,
        placement_errno: 0,
    }
    .encode();
    bad[1..5].copy_from_slice(&0i32.to_le_bytes());
    assert_eq!(ForkReply::decode(&bad), None, "pid 0 is no worker");
    assert_eq!(ForkReply::decode(b"F\0\0"), None, "short");
    assert_eq!(ForkReply::decode(b"X12345678"), None, "unknown tag");
}
