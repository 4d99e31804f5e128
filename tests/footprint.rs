//! The footprint README promises, checked where it can drift: the direct
//! dependencies are exactly the design card's nine, `cargo tree -e normal`
//! has at most 26 crates in all, and the static musl binary is at most
//! 2.5 MiB, with the worker's code packed first (`link/worker-text.ld`):
//! its anchors inside, and most of the list still matching something.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The design card's dependency set (DESIGN.md): the only direct
/// dependencies allowed.
const DESIGN_CARD: [&str; 9] = [
    "serde",
    "serde_json",
    "httparse",
    "vsock",
    "libc",
    "log",
    "env_logger",
    "crossbeam-channel",
    "signal-hook",
];
const CRATES_MAX: usize = 26;
const STATIC_BINARY_MAX_BYTES: u64 = 2560 * 1024;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The crate names `cargo tree -e normal` lists, at most `depth` deep.
fn tree(depth: Option<u32>) -> BTreeSet<String> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["tree", "-e", "normal", "--prefix", "none", "--offline"]);
    if let Some(d) = depth {
        cmd.args(["--depth", &d.to_string()]);
    }
    let out = cmd.current_dir(repo()).output().expect("cargo tree runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_dependency_tree_is_the_design_cards_and_small() {
    let all = tree(None);
    assert!(all.contains("vsock"), "{all:?}");
    assert!(
        all.len() <= CRATES_MAX,
        "{} crates (at most {CRATES_MAX}): {all:?}",
        all.len()
    );
    let mut direct = tree(Some(1));
    direct.remove("agentd");
    let card: BTreeSet<String> = DESIGN_CARD.iter().map(|c| c.to_string()).collect();
    let outside: Vec<&String> = direct.difference(&card).collect();
    let missing: Vec<&String> = card.difference(&direct).collect();
    assert!(
        outside.is_empty() && missing.is_empty(),
        "the direct dependencies are the design card's nine, exactly: outside it {outside:?}, missing {missing:?}"
    );
}

/// The static binary, built where the VM test builds it (one build for
/// both); None, after saying why, where the musl target is missing.
fn static_agentd_or_skip(test: &str) -> Option<std::path::PathBuf> {
    if !common::musl_target_installed() {
        common::skip_or_fail(
            test,
            "the x86_64-unknown-linux-musl target is not installed (rustup target add x86_64-unknown-linux-musl)",
        );
        return None;
    }
    Some(common::static_agentd())
}

#[test]
fn the_static_binary_fits_in_2_5_mib() {
    let Some(bin) = static_agentd_or_skip("the_static_binary_fits_in_2_5_mib") else {
        return;
    };
    let len = std::fs::metadata(&bin).expect("the static binary exists").len();
    assert!(
        len <= STATIC_BINARY_MAX_BYTES,
        "{} is {len} bytes, over the {STATIC_BINARY_MAX_BYTES} (2.5 MiB) README promises",
        bin.display()
    );
}

/// The sections of a 64-bit little-endian ELF file: (name, address, size).
fn elf_sections(elf: &[u8]) -> Vec<(String, u64, u64)> {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let names = u64_at(header(shstrndx) + 24) as usize;
    (0..shnum)
        .map(|i| {
            let h = header(i);
            let at = names + u32_at(h);
            let len = elf[at..].iter().position(|&b| b == 0).unwrap();
            (
                String::from_utf8_lossy(&elf[at..at + len]).into_owned(),
                u64_at(h + 16),
                u64_at(h + 32),
            )
        })
        .collect()
}

/// A fresh worker faults its text in 64 KiB around each fault; build.rs
/// links the static binary with link/worker-text.ld so the code it runs
/// lies together, first. Checked here: the section is there, holds code,
/// and comes before the rest of the text. What it holds is checked from
/// the link map below (how few faults it saves is link/worker_text.py's
/// to measure).
#[test]
fn the_static_binary_packs_the_workers_code_first() {
    let Some(bin) = static_agentd_or_skip("the_static_binary_packs_the_workers_code_first") else {
        return;
    };
    let sections = elf_sections(&std::fs::read(&bin).expect("the static binary reads"));
    let find = |name: &str| sections.iter().find(|s| s.0 == name);
    let worker = find(".text.worker").unwrap_or_else(|| {
        panic!(
            "{} has no .text.worker section: build.rs did not link it with link/worker-text.ld; sections {:?}",
            bin.display(),
            sections.iter().map(|s| &s.0).collect::<Vec<_>>()
        )
    });
    let text = find(".text").expect("a .text section");
    assert!(
        worker.2 >= 16 * 1024,
        ".text.worker holds {} bytes: the list matched almost nothing",
        worker.2
    );
    // The worker runs ~112 KiB of code: two 64 KiB windows. An entry that
    // matches every instance of a generic function (a legacy-mangled name,
    // where instances differ only by hash) packed 219 KiB and cost a task
    // two faults more.
    assert!(
        worker.2 <= WORKER_TEXT_MAX_BYTES,
        ".text.worker holds {} bytes, more than {WORKER_TEXT_MAX_BYTES}: some entry matches far more than the \
         worker runs (is the build mangling v0, as .cargo/config.toml asks?); regenerate with python3 link/worker_text.py",
        worker.2
    );
    assert!(
        worker.1 + worker.2 <= text.1,
        ".text.worker ({:#x}+{:#x}) lies before .text ({:#x})",
        worker.1,
        worker.2,
        text.1
    );
}

/// The most code `.text.worker` may hold: the code a worker runs, with
/// room to grow, and still two fault-around windows.
const WORKER_TEXT_MAX_BYTES: u64 = 128 * 1024;

/// The worker's functions the list must place, whatever else goes stale:
/// (what, the identifiers of its path as both manglings spell them).
const ANCHORS: [(&str, &str); 3] = [
    ("agentd::worker::start (a worker's entry)", "6agentd6worker5start"),
    (
        "agentd::worker::forkserver::fork_one",
        "6agentd6worker10forkserver8fork_one",
    ),
    ("agentd::control::read_frame", "6agentd7control10read_frame"),
];
/// The least share of the list's code entries that must match an input
/// section: the linker ignores one that matches nothing, so rot is silent
/// until this check.
const LIVE_ENTRIES_MIN_PERCENT: usize = 80;

/// The link map build.rs has the static build write (`worker-text.map` in
/// agentd's OUT_DIR), found by asking cargo, after the build
/// `static_agentd` ran, where that OUT_DIR is.
fn static_link_map() -> String {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "-j2",
            "--target",
            "x86_64-unknown-linux-musl",
            "--message-format=json",
        ])
        .env("CARGO_TARGET_DIR", common::vm_dir().join("build"))
        .current_dir(repo())
        .output()
        .expect("cargo build runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out_dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|m| {
            m["reason"] == "build-script-executed" && m["package_id"].as_str().is_some_and(|p| p.contains("agentd@"))
        })
        .and_then(|m| m["out_dir"].as_str().map(str::to_string))
        .expect("cargo reports agentd's build script and its OUT_DIR");
    let map = Path::new(&out_dir).join("worker-text.map");
    std::fs::read_to_string(&map)
        .unwrap_or_else(|e| panic!("{}: {e} (build.rs has the static build write it)", map.display()))
}

/// The `.text.worker` part of a GNU ld link map: each statement of the
/// script (`*(.text._ZN6agentd…* …)`, `*libc.a:close.lo(…)`) with the names
/// of the input sections it placed, listed under it.
fn worker_text_statements(map: &str) -> Vec<(String, Vec<String>)> {
    output_section_statements(map, ".text.worker")
}

/// An output section's part of a GNU ld link map, as above.
fn output_section_statements(map: &str, section: &str) -> Vec<(String, Vec<String>)> {
    let mut statements: Vec<(String, Vec<String>)> = Vec::new();
    let mut lines = map.lines().skip_while(|l| l.split_whitespace().next() != Some(section));
    lines.next();
    for line in lines.take_while(|l| l.is_empty() || l.starts_with(char::is_whitespace)) {
        let text = line.trim();
        if text.starts_with("*fill*") {
            continue;
        }
        if text.starts_with('*') {
            statements.push((text.to_string(), Vec::new()));
        } else if text.starts_with('.') {
            if let (Some(last), Some(name)) = (statements.last_mut(), text.split_whitespace().next()) {
                last.1.push(name.to_string());
            }
        }
    }
    statements
}

/// Whether an input section is the function an anchor names (not one of
/// its closures): legacy `.text._ZN<path>17h…E`, or v0 `.text._R…<path>`
/// ending there or followed by generic arguments or the instantiating
/// crate (a closure's name goes on with a digit).
fn is_anchor(section: &str, path: &str) -> bool {
    if let Some(legacy) = section.strip_prefix(".text._ZN") {
        return legacy.strip_prefix(path).is_some_and(|rest| rest.starts_with("17h"));
    }
    section.starts_with(".text._R")
        && section
            .split_once(path)
            .is_some_and(|(_, rest)| !rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// The functions a fresh worker runs first lie inside `.text.worker`, and
/// most of the list's entries still match what the compiler emits: from the
/// static build's link map (GNU ld prints each script statement with the
/// input sections it placed).
#[test]
fn the_worker_text_list_still_places_the_workers_code() {
    let test = "the_worker_text_list_still_places_the_workers_code";
    if static_agentd_or_skip(test).is_none() {
        return;
    }
    let map = static_link_map();
    let statements = worker_text_statements(&map);
    assert!(
        statements.len() >= 20,
        "the link map shows {} statements in .text.worker: not the map of a link with link/worker-text.ld",
        statements.len()
    );
    for (what, path) in ANCHORS {
        let placed = statements.iter().flat_map(|s| &s.1).any(|sec| is_anchor(sec, path));
        let elsewhere = map
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .any(|sec| is_anchor(sec, path));
        assert!(
            placed,
            "{what} is not in .text.worker: {}; regenerate the list (python3 link/worker_text.py), or build with \
             .cargo/config.toml's flags (v0 mangling; RUSTFLAGS in the environment replaces them)",
            if elsewhere {
                "it lies elsewhere in the text, so no entry of link/worker-text.ld matches its symbol"
            } else {
                "it has no section of its own (inlined or renamed)"
            }
        );
    }
    let stale: Vec<&String> = statements.iter().filter(|s| s.1.is_empty()).map(|s| &s.0).collect();
    let live = statements.len() - stale.len();
    assert!(
        live * 100 >= statements.len() * LIVE_ENTRIES_MIN_PERCENT,
        "{live} of {} entries of link/worker-text.ld match an input section (at least {LIVE_ENTRIES_MIN_PERCENT}% must): \
         regenerate the list (python3 link/worker_text.py). Matching nothing:\n{}",
        statements.len(),
        stale.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
}

/// The read-only data a worker reads, in `.rodata.worker`: the constants
/// no name can place are placed whole, as link/worker-text.ld says — the
/// small ones the linker merges across the binary (serde_json's string
/// escaping reads an 8-byte one; a worker's process names are 16-byte
/// ones), and rustc's anonymous constants ahead of the merged C strings,
/// which a worker does not read. Without them a worker faulted two
/// windows of read-only data instead of one.
#[test]
fn the_worker_rodata_holds_the_constants_no_name_can_place() {
    let test = "the_worker_rodata_holds_the_constants_no_name_can_place";
    if static_agentd_or_skip(test).is_none() {
        return;
    }
    let map = static_link_map();
    let statements = output_section_statements(&map, ".rodata.worker");
    let placed = |pattern: &str| {
        statements
            .iter()
            .position(|(statement, _)| statement.contains(pattern))
            .map(|i| (i, &statements[i].1))
    };
    let Some((merged_at, merged)) = placed(".rodata.cst8") else {
        panic!(
            "link/worker-text.ld places no .rodata.cst8 in .rodata.worker: regenerate it (python3 link/worker_text.py)"
        )
    };
    for section in [".rodata.cst8", ".rodata.cst16"] {
        assert!(
            merged.iter().any(|s| s == section),
            "{section} is not in .rodata.worker (the statement placed {merged:?}): a worker's merged constants lie \
             elsewhere"
        );
    }
    let (anon_at, anon) = placed(".rodata..Lanon.").expect("rustc's anonymous constants are in .rodata.worker");
    let (strings_at, _) = placed(".rodata.str1.1").expect("the merged C strings are in .rodata.worker");
    assert!(!anon.is_empty(), "the anonymous constants' statement placed nothing");
    assert!(
        merged_at < anon_at && anon_at < strings_at,
        "the merged small constants, then the anonymous ones, then the C strings (statements {merged_at}, \
         {anon_at}, {strings_at}): the C strings are 32 KiB a worker does not read"
    );
}

/// The fork server allocates from an arena of its own from its first
/// allocation, and nothing once it serves (sys/alloc.rs): musl's malloc
/// never runs there, so it has no heap and no malloc mappings — memory
/// areas every fork copied and every worker's exit tore down. Checked on
/// the static build (the only one with that allocator), after it has
/// forked workers for tasks: no `[heap]`, and of unnamed anonymous
/// mappings only the zeroed data, the thread area and std's signal stack
/// with its guard page.
#[test]
fn the_static_fork_server_has_no_heap() {
    let Some(bin) = static_agentd_or_skip("the_static_fork_server_has_no_heap") else {
        return;
    };
    let d = common::Daemon::start_with_binary(&bin, &[]);
    for i in 0..3 {
        let r = d.rpc(
            "SendMessage",
            serde_json::json!({"message": common::user_message(&format!("task {i}"))}),
        );
        assert_eq!(
            r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "the echo task completes: {r}"
        );
    }
    let fork_server = common::fork_servers(d.pid())
        .first()
        .copied()
        .expect("a fork server under the daemon");
    let maps = std::fs::read_to_string(format!("/proc/{fork_server}/maps")).expect("its maps read");
    assert!(
        !maps.contains("[heap]"),
        "the fork server has a heap (musl's malloc ran in it):\n{maps}"
    );
    // address perms offset dev inode, and no name: an anonymous mapping.
    let anonymous = maps
        .lines()
        .filter(|l| l.split_whitespace().count() == 5 && l.split_whitespace().nth(4) == Some("0"))
        .count();
    assert!(
        anonymous <= 4,
        "{anonymous} anonymous mappings in the fork server, more than its zeroed data, thread area, signal stack and guard:\n{maps}"
    );
}

/// The daemon's fork server and one of its idle workers, once both are up.
fn fork_server_and_idle_worker(d: &common::Daemon) -> (i32, i32) {
    let (mut fork_server, mut idle) = (None, None);
    assert!(
        common::wait_for(std::time::Duration::from_secs(10), || {
            fork_server = common::fork_servers(d.pid()).first().copied();
            idle = common::idle_workers(d.pid()).first().copied();
            fork_server.is_some() && idle.is_some()
        }),
        "a fork server and an idle worker under the daemon"
    );
    (fork_server.unwrap(), idle.unwrap())
}

/// The fork server keeps std's signal stack to itself (MADV_DONTFORK):
/// a worker, whose handlers never use it, does not inherit the memory
/// area, which its fork would copy and its exit tear down. Found in the
/// fork server's maps as the mapping right after an anonymous guard page;
/// an idle worker forked from it has the guard (inherited, no pages) and
/// nothing where the stack was.
#[test]
fn a_worker_does_not_inherit_the_fork_servers_signal_stack() {
    let d = common::Daemon::start(&[]);
    let (fork_server, idle) = fork_server_and_idle_worker(&d);
    let maps = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps read");
    let starts = |text: &str| -> Vec<(u64, String)> {
        text.lines()
            .map(|l| {
                let start = u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap();
                (start, l.to_string())
            })
            .collect()
    };
    let (server, worker) = (maps(fork_server), maps(idle));
    let server_areas = starts(&server);
    let guard_end = server
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("---p") && l.split_whitespace().count() == 5)
        .map(|l| u64::from_str_radix(l.split_whitespace().next().unwrap().split('-').nth(1).unwrap(), 16).unwrap())
        .unwrap_or_else(|| panic!("no guard page in the fork server's maps:\n{server}"));
    assert!(
        server_areas
            .iter()
            .any(|(start, l)| *start == guard_end && l.contains("rw-p")),
        "the fork server's signal stack follows its guard page:\n{server}"
    );
    assert!(
        !starts(&worker).iter().any(|(start, _)| *start == guard_end),
        "the worker inherited the signal stack at {guard_end:#x}:\n{worker}"
    );
}

/// The fork server answers requests from near the top of a stack page
/// (worker/forkserver.rs, `on_a_page_of_its_own`): a worker forked there
/// writes one page of its stack while it waits for its task and two with
/// it, wherever the kernel began the fork server's stack. From outside:
/// the fork server's stack pointer in its recvmsg (`/proc/PID/syscall`)
/// lies in the top part of a page, and an idle worker has written (smaps:
/// the stack's Private_Dirty) only that page and its command line's. The
/// stack begins at a random offset in its page, so three daemons are
/// started: without the placement, all three pass by chance one time in
/// twenty.
#[test]
fn the_fork_server_forks_from_the_top_of_a_stack_page() {
    const PAGE: u64 = 4096; // the static build is x86_64
    let Some(bin) = static_agentd_or_skip("the_fork_server_forks_from_the_top_of_a_stack_page") else {
        return;
    };
    for _ in 0..3 {
        let d = common::Daemon::start_with_binary(&bin, &["--set", "tasks.prespawn=1"]);
        let (fork_server, idle) = fork_server_and_idle_worker(&d);
        // "47 args… sp pc" once it waits in recvmsg(2) for the next request
        // (readable where we may trace it, as root or its user may).
        let syscall = format!("/proc/{fork_server}/syscall");
        if let Err(e) = std::fs::read_to_string(&syscall) {
            eprintln!("the_fork_server_forks_from_the_top_of_a_stack_page: {syscall} unread ({e}); its stack pointer is not checked");
        } else {
            let mut waiting = String::new();
            assert!(
                common::wait_for(std::time::Duration::from_secs(10), || {
                    waiting = std::fs::read_to_string(&syscall).unwrap_or_default();
                    waiting.split_whitespace().next() == Some("47")
                }),
                "the fork server waits in recvmsg: {syscall} says {waiting:?}"
            );
            let sp = waiting
                .split_whitespace()
                .nth(7)
                .and_then(|sp| u64::from_str_radix(sp.trim_start_matches("0x"), 16).ok())
                .unwrap_or_else(|| panic!("no stack pointer in {waiting:?}"));
            assert!(
                sp % PAGE >= PAGE - 1536,
                "the fork server waits {} bytes above a page's start, not near its top ({sp:#x})",
                sp % PAGE
            );
        }
        let smaps = std::fs::read_to_string(format!("/proc/{idle}/smaps")).expect("the idle worker's smaps read");
        let dirty_kib: u64 = smaps
            .lines()
            .skip_while(|l| !l.ends_with("[stack]"))
            .find_map(|l| l.strip_prefix("Private_Dirty:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no Private_Dirty for the idle worker's stack:\n{smaps}"));
        assert!(
            dirty_kib <= 2 * PAGE / 1024,
            "the idle worker wrote {dirty_kib} KiB of its stack: more than the page it was forked on and its command line's"
        );
    }
}
