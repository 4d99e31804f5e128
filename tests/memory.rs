//! What a finished task keeps: its output and little else. The daemon
//! holds each finished task (within tasks.retain_*), and with it the
//! task's artifact; the answers it rendered and the frames it read must
//! not stay behind in the allocator's heaps. With glibc's malloc left to
//! itself they did: six finished tasks of 8 MiB output each kept 12.5–13
//! MiB apiece (1.63–1.68× in this test's debug build, 1.65× released); agentd
//! fixes glibc's mmap threshold at start (sys::keep_large_blocks_out_of_
//! mallocs_heap), and keeps ≤ 1.5×. This runs the build cargo made for the
//! tests, glibc's on most hosts (the static musl build never did it).

mod common;

use std::time::Duration;

use common::{wait_for, Daemon};
use serde_json::json;

const OUTPUT_BYTES: u64 = 8 * 1024 * 1024;
const TASKS: u64 = 6;

/// One task whose program prints OUTPUT_BYTES; it completes with all of it.
fn run_large_task(d: &Daemon, i: u64) {
    let r = d.ok(
        "SendMessage",
        json!({"message": common::user_message(&format!("t{i}"))}),
    );
    assert_eq!(r["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let text = r["task"]["artifacts"][0]["parts"][0]["text"].as_str().unwrap_or("");
    assert_eq!(text.len() as u64, OUTPUT_BYTES, "the whole output is kept");
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_finished_task_keeps_at_most_one_and_a_half_times_its_output() {
    let tmp = common::TempDir::new("memory");
    let prog = common::script(
        &tmp.0,
        "out.sh",
        &format!("head -c {OUTPUT_BYTES} /dev/zero | tr '\\000' a"),
    );
    let d = Daemon::start(&["--exec", prog.to_str().unwrap(), "--set", "tasks.cgroup=off"]);
    let before = rss_kib(d.pid());
    for i in 0..TASKS {
        run_large_task(&d, i);
    }
    // Every task is retained (the default retention holds them all).
    let listed = d.ok("ListTasks", json!({"pageSize": 100}));
    assert_eq!(listed["tasks"].as_array().map_or(0, Vec::len) as u64, TASKS);
    let bound_kib = before + TASKS * OUTPUT_BYTES * 3 / 2 / 1024;
    let mut now = 0;
    let fits = wait_for(Duration::from_secs(5), || {
        now = rss_kib(d.pid());
        now <= bound_kib
    });
    let per_task = (now.saturating_sub(before)) as f64 * 1024.0 / TASKS as f64;
    eprintln!(
        "RSS {before} -> {now} KiB: {:.2} MiB kept per task of {} MiB output ({:.2}x)",
        per_task / 1048576.0,
        OUTPUT_BYTES >> 20,
        per_task / OUTPUT_BYTES as f64
    );
    assert!(
        fits,
        "{TASKS} finished tasks of {} MiB output each: RSS {before} -> {now} KiB, {:.2}x their output (at most 1.5x)",
        OUTPUT_BYTES >> 20,
        per_task / OUTPUT_BYTES as f64
    );
}

fn minor_faults(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    common::stat_field(&stat, 10).and_then(|f| f.parse().ok()).unwrap_or(0)
}

/// The static build keeps the chunks of a large output it dropped for the
/// next large output (sys/alloc.rs, its large classes): with one finished
/// task retained, the third task's output goes into the pages the first
/// one's left, with far fewer page faults than it has pages; and once no
/// large output has come for a while, procman gives them back to libc.
#[test]
fn the_static_build_stores_a_large_output_in_the_pages_a_dropped_one_left() {
    let test = "the_static_build_stores_a_large_output_in_the_pages_a_dropped_one_left";
    if !common::musl_target_installed() {
        common::skip_or_fail(test, "the x86_64-unknown-linux-musl target is not installed");
        return;
    }
    let bin = common::static_agentd();
    let tmp = common::TempDir::new("spare");
    // Written first, so the program (cat) writes it in large blocks and
    // the worker reads it in whole 64 KiB chunks.
    let data = tmp.0.join("out.txt");
    std::fs::write(&data, "a".repeat(OUTPUT_BYTES as usize)).unwrap();
    let prog = common::script(&tmp.0, "out.sh", &format!("exec cat '{}'", data.display()));
    let d = Daemon::start_with_binary(
        &bin,
        &[
            "--exec",
            prog.to_str().unwrap(),
            "--set",
            "tasks.cgroup=off",
            "--set",
            "tasks.retain_max=1",
        ],
    );
    // The second task's end drops the first: its chunks are kept spare.
    run_large_task(&d, 0);
    run_large_task(&d, 1);
    let before = minor_faults(d.pid());
    run_large_task(&d, 2);
    let faults = minor_faults(d.pid()) - before;
    let pages = OUTPUT_BYTES / 4096;
    eprintln!("the third task of {pages} pages of output: {faults} page faults in the daemon");
    assert!(
        faults < pages / 2,
        "the third task faulted {faults} pages in for its {pages} pages of output: the dropped task's chunks were not reused"
    );
    // Nothing more comes: the spare blocks go back.
    let released = wait_for(Duration::from_secs(10), || {
        d.log_text().contains("procman.spare_blocks released_bytes=")
    });
    assert!(released, "no release logged:\n{}", d.log_text());
}
