//! Streaming throughput and latency: events per second through one
//! `SendStreamingMessage` stream, and time to the first event, side by side
//! with the named baseline: the same program's output read straight from a
//! pipe (what a stream could at best deliver).
//!
//! `cargo bench --bench stream` (3 runs of 20,000 events) or
//! `cargo bench --bench stream -- --quick` (1 run of 5,000). It starts the
//! release `agentd` next to this bench executable with a jsonl program that
//! writes N artifact-chunk lines as fast as it can, then `completed`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let quick = std::env::args().any(|a| a == "--quick");
    let (runs, events) = if quick { (1, 5_000) } else { (3, 20_000) };
    match run(runs, events) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("agentd"))
        .ok_or("no parent dir")?;
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} not found: run `cargo build --release` first",
            bin.display()
        ))
    }
}

/// The jsonl program: N artifact chunks as fast as Python can write them.
const PROGRAM: &str = r#"
import sys
n = int(sys.argv[1])
sys.stdin.readline()
line = '{"artifact":{"artifactId":"a","parts":[{"text":"0123456789abcdef"}]},"append":true}\n'
out = sys.stdout
for _ in range(n):
    out.write(line)
out.write('{"status":"completed"}\n')
out.flush()
"#;

struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(runs: usize, events: usize) -> Result<(), String> {
    let bin = binary()?;
    let dir = std::env::temp_dir().join(format!("agentd-streambench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let prog = dir.join("emit.py");
    std::fs::write(&prog, PROGRAM).map_err(|e| e.to_string())?;
    let socket = dir.join("a.sock");
    let child = Command::new(&bin)
        .args(["serve", "--listen", &format!("unix://{}", socket.display())])
        .args([
            "--exec",
            &format!("python3 {} {events}", prog.display()),
            "--exec-protocol",
            "jsonl",
        ])
        .args(["--log-level", "warn", "--set", "tasks.output_max_bytes=1000000000"])
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let daemon = Daemon { child, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(&socket).is_err() {
        if Instant::now() > deadline {
            return Err("agentd did not listen".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    let mut streamed = Vec::new();
    let mut piped = Vec::new();
    for _ in 0..runs {
        streamed.push(one_stream(&socket, events)?);
        piped.push(one_pipe(&prog, events)?);
    }
    drop(daemon);
    let med = |v: &mut Vec<Sample>, f: fn(&Sample) -> f64| {
        let mut xs: Vec<f64> = v.iter().map(f).collect();
        xs.sort_by(|a, b| a.total_cmp(b));
        xs[xs.len() / 2]
    };
    let s_rate = med(&mut streamed, |s| s.events as f64 / s.total.as_secs_f64());
    let p_rate = med(&mut piped, |s| s.events as f64 / s.total.as_secs_f64());
    let s_first = med(&mut streamed, |s| s.first.as_secs_f64() * 1e3);
    let s_first_art = med(&mut streamed, |s| s.first_artifact.as_secs_f64() * 1e3);
    let p_first = med(&mut piped, |s| s.first_artifact.as_secs_f64() * 1e3);
    println!("{runs} run(s) of {events} events, medians:");
    println!(
        "{:<46} {:>12} {:>16} {:>18}",
        "row", "events/s", "first event", "first artifact"
    );
    println!(
        "{:<46} {:>12.0} {:>13.2} ms {:>15.2} ms",
        "agentd SendStreamingMessage (jsonl program)", s_rate, s_first, s_first_art
    );
    println!(
        "{:<46} {:>12.0} {:>16} {:>15.2} ms",
        "baseline: the program's stdout through a pipe", p_rate, "-", p_first
    );
    println!(
        "ratio: stream ÷ pipe events/s = {:.2}; first artifact, stream − pipe = {:.2} ms",
        s_rate / p_rate,
        s_first_art - p_first
    );
    Ok(())
}

struct Sample {
    events: usize,
    /// From sending the request to the first SSE event (the task).
    first: Duration,
    /// To the first artifact chunk.
    first_artifact: Duration,
    total: Duration,
}

/// One stream: raw chunked SSE, counting artifact events.
fn one_stream(socket: &Path, events: usize) -> Result<Sample, String> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"go"}]}}}"#;
    let mut s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    let start = Instant::now();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut r = BufReader::with_capacity(1 << 16, s);
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        if line == "\r\n" {
            break;
        }
    }
    let (mut first, mut first_artifact, mut seen) = (None, None, 0usize);
    loop {
        line.clear();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(line.trim(), 16).map_err(|_| format!("bad chunk line {line:?}"))?;
        if size == 0 {
            break;
        }
        let mut chunk = vec![0u8; size + 2];
        r.read_exact(&mut chunk).map_err(|e| e.to_string())?;
        first.get_or_insert_with(|| start.elapsed());
        if chunk.windows(16).any(|w| w == b"\"artifactUpdate\"") {
            first_artifact.get_or_insert_with(|| start.elapsed());
            seen += 1;
        }
    }
    if seen != events {
        return Err(format!("expected {events} artifact events, got {seen}"));
    }
    Ok(Sample {
        events: seen,
        first: first.unwrap_or_default(),
        first_artifact: first_artifact.unwrap_or_default(),
        total: start.elapsed(),
    })
}

/// The baseline: the program run directly, its lines read from a pipe.
fn one_pipe(prog: &Path, events: usize) -> Result<Sample, String> {
    let start = Instant::now();
    let mut child = Command::new("python3")
        .arg(prog)
        .arg(events.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(b"{}\n")
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::with_capacity(1 << 16, child.stdout.take().ok_or("no stdout")?);
    let (mut first, mut n) = (None, 0usize);
    let mut line = String::new();
    while r.read_line(&mut line).map_err(|e| e.to_string())? > 0 {
        if line.starts_with("{\"artifact\"") {
            first.get_or_insert_with(|| start.elapsed());
            n += 1;
        }
        line.clear();
    }
    let _ = child.wait();
    Ok(Sample {
        events: n,
        first: Duration::ZERO,
        first_artifact: first.unwrap_or_default(),
        total: start.elapsed(),
    })
}
