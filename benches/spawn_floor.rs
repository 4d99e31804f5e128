//! The spawn floor: what one process per task costs at the least, measured
//! with the very binary agentd re-executes for each task.
//!
//! `spawn_floor [BIN] [--seconds N] [--quick] [--fork] [--json]` spawns
//! `BIN version` (stdout and stderr to /dev/null, a fresh process group and
//! an empty environment, as procman starts a worker), waits for it to exit
//! and does it again, in one thread, for N seconds (default 3; 1 with
//! `--quick`) after a short warm-up. Spawning is std's `Command` without a
//! `pre_exec` hook, i.e. posix_spawn (clone with CLONE_VM|CLONE_VFORK), which
//! is how agentd spawns its workers. `--fork` adds a second row through
//! fork(2)+exec (an empty `pre_exec` hook), for comparison.
//!
//! BIN defaults to the `agentd` next to this executable's directory
//! (target/<profile>/agentd). bench/run.sh builds this for the musl target and
//! runs it with `taskset -c $server_cpu`, on the core the servers get.
//!
//! Per row it prints spawns/s, wall µs per spawn, CPU µs per spawn (this
//! process plus its reaped children, from getrusage: the whole core time a
//! spawn costs, whichever process it was charged to) and the p50/p99 of one
//! spawn+wait. `--json` prints one JSON object instead.
//!
//! In a small compiled program on purpose: an interpreter's own per-call
//! overhead would raise the floor and flatter whatever is compared with it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

type Res<T> = Result<T, String>;

struct Opts {
    bin: PathBuf,
    duration: Duration,
    fork: bool,
    json: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum How {
    PosixSpawn,
    ForkExec,
}

impl How {
    fn name(self) -> &'static str {
        match self {
            How::PosixSpawn => "posix_spawn",
            How::ForkExec => "fork+exec",
        }
    }
}

struct Row {
    how: How,
    spawns: u64,
    wall: Duration,
    cpu: Duration,
    p50: Duration,
    p99: Duration,
}

fn main() -> ExitCode {
    let opts = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("spawn_floor: {e}");
            eprintln!("usage: spawn_floor [BIN] [--seconds N] [--quick] [--fork] [--json]");
            return ExitCode::from(2);
        }
    };
    let mut hows = vec![How::PosixSpawn];
    if opts.fork {
        hows.push(How::ForkExec);
    }
    let mut rows = Vec::new();
    for how in hows {
        match measure(&opts.bin, how, opts.duration) {
            Ok(row) => rows.push(row),
            Err(e) => {
                eprintln!("spawn_floor: {}: {e}", how.name());
                return ExitCode::FAILURE;
            }
        }
    }
    if opts.json {
        println!("{}", to_json(&opts, &rows));
    } else {
        print_rows(&opts, &rows);
    }
    ExitCode::SUCCESS
}

fn parse_opts() -> Res<Opts> {
    let mut bin = None;
    let mut duration = Duration::from_secs(3);
    let (mut fork, mut json) = (false, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            // cargo bench passes --bench; a filter would be a bare word, but a
            // bare word here is the binary, so cargo's is the only one ignored.
            "--bench" => {}
            "--quick" => duration = Duration::from_secs(1),
            "--fork" => fork = true,
            "--json" => json = true,
            "--seconds" => {
                let v = args.next().ok_or("--seconds needs a number")?;
                let secs: f64 = v.parse().map_err(|_| format!("--seconds: not a number: {v}"))?;
                if !(secs > 0.0 && secs <= 3600.0) {
                    return Err(format!("--seconds: expected 0 < N <= 3600, found {v}"));
                }
                duration = Duration::from_secs_f64(secs);
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => bin = Some(PathBuf::from(s)),
        }
    }
    let bin = match bin {
        Some(b) => b,
        None => default_binary()?,
    };
    if !bin.is_file() {
        return Err(format!("no binary at {}", bin.display()));
    }
    Ok(Opts {
        bin,
        duration,
        fork,
        json,
    })
}

/// current_exe = target/<profile>/deps/spawn_floor-HASH → target/<profile>/agentd.
fn default_binary() -> Res<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("agentd"))
        .ok_or_else(|| format!("cannot derive target dir from {}", exe.display()))
}

/// One spawn + exec + exit + wait of `bin version`.
fn spawn_once(bin: &Path, how: How) -> Res<()> {
    let mut cmd = Command::new(bin);
    cmd.arg("version")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if how == How::ForkExec {
        // An empty pre_exec hook makes std fork(2) and exec instead of
        // posix_spawn.
        // SAFETY: the hook does nothing, so it is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| Ok(()));
        }
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{} version: {s}", bin.display())),
        Err(e) => Err(format!("spawn {}: {e}", bin.display())),
    }
}

fn measure(bin: &Path, how: How, duration: Duration) -> Res<Row> {
    // Warm-up: page cache, the dynamic parts of exec, the CPU's caches.
    let warm_until = Instant::now() + (duration / 10).max(Duration::from_millis(100));
    while Instant::now() < warm_until {
        spawn_once(bin, how)?;
    }
    // Room for the samples up front, so the vector does not grow while it is
    // measured: one per 20 µs is above any real spawn rate (capped for long
    // runs; untouched capacity costs address space, not memory).
    let room = (duration.as_micros() / 20).min(1 << 22) as usize;
    let mut samples = Vec::with_capacity(room);
    let cpu0 = cpu_time()?;
    let t0 = Instant::now();
    let deadline = t0 + duration;
    loop {
        let s = Instant::now();
        if s >= deadline {
            break;
        }
        spawn_once(bin, how)?;
        samples.push(s.elapsed());
    }
    let wall = t0.elapsed();
    let cpu = cpu_time()?.saturating_sub(cpu0);
    samples.sort_unstable();
    Ok(Row {
        how,
        spawns: samples.len() as u64,
        wall,
        cpu,
        p50: percentile(&samples, 50.0),
        p99: percentile(&samples, 99.0),
    })
}

/// User + system time of this process and of its reaped children.
fn cpu_time() -> Res<Duration> {
    let mut total = Duration::ZERO;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: rusage is plain old data, so all-zeroes is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: ru is a valid, writable rusage for the call's duration.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return Err(format!("getrusage: {}", std::io::Error::last_os_error()));
        }
        for tv in [ru.ru_utime, ru.ru_stime] {
            total += Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64);
        }
    }
    Ok(total)
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn per_spawn(d: Duration, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        us(d) / n as f64
    }
}

fn to_json(opts: &Opts, rows: &[Row]) -> serde_json::Value {
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "how": r.how.name(),
                "spawns": r.spawns,
                "wall_s": r.wall.as_secs_f64(),
                "cpu_s": r.cpu.as_secs_f64(),
                "spawns_per_s": r.spawns as f64 / r.wall.as_secs_f64(),
                "wall_us_per_spawn": per_spawn(r.wall, r.spawns),
                "cpu_us_per_spawn": per_spawn(r.cpu, r.spawns),
                "p50_us": us(r.p50),
                "p99_us": us(r.p99),
            })
        })
        .collect();
    serde_json::json!({
        "bin": opts.bin.display().to_string(),
        "argv": ["version"],
        "seconds": opts.duration.as_secs_f64(),
        "rows": rows,
    })
}

fn print_rows(opts: &Opts, rows: &[Row]) {
    println!(
        "spawn floor: spawn + exec + exit + wait of `{} version`, one thread, {:.1} s per row",
        opts.bin.display(),
        opts.duration.as_secs_f64()
    );
    println!(
        "  {:<12} {:>10} {:>12} {:>13} {:>12} {:>10} {:>10}",
        "how", "spawns", "spawns/s", "wall µs/each", "CPU µs/each", "p50 µs", "p99 µs"
    );
    for r in rows {
        println!(
            "  {:<12} {:>10} {:>12.0} {:>13.1} {:>12.1} {:>10.1} {:>10.1}",
            r.how.name(),
            r.spawns,
            r.spawns as f64 / r.wall.as_secs_f64(),
            per_spawn(r.wall, r.spawns),
            per_spawn(r.cpu, r.spawns),
            us(r.p50),
            us(r.p99)
        );
    }
}
