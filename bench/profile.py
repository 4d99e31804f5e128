#!/usr/bin/env python3
"""Where a task's CPU goes, on this machine: perf on the server core under load.

Starts agentd pinned to the server core (as bench/run.sh does), drives blocking
SendMessage at the given concurrency with oha from the other core, records
`perf record -e cpu-clock -g -C SERVER_CPU` for a window in the middle, and
splits the samples by who ran (connection threads, procman, the fork server,
a worker before and after it took its task) and by what each was doing (the
first system call or page fault on the stack, else the user function). Each
share is also given as µs per task: the window's core time (its samples at
4999 Hz, idle included) over the tasks started in it (the fork server's
clone3 calls recorded beside the samples: one worker per task).

    bench/run.sh --setup-only      # installs oha under target/bench/
    python3 bench/profile.py       # the static release build, c=16
    python3 bench/profile.py --binary path/to/agentd --concurrency 1 -- --set tasks.cgroup=off
    python3 bench/profile.py --census  # exact counts instead: system calls,
                                       # page faults and switches per task

--census records tracepoints instead of samples (every system call entry,
user page fault and context switch on the server core, perf's own left
out) and prints them per task by thread kind: what a task costs in events,
which holds across machines where the µs do not. A switch is "blocked"
when the thread went to sleep, "preempted" when it was still runnable.

User code shows as one row in the stripped release build; for function names,
build with symbols and point --binary at it:

    CARGO_PROFILE_RELEASE_STRIP=none CARGO_PROFILE_RELEASE_DEBUG=1 cargo build --release \
        --target x86_64-unknown-linux-musl --target-dir target/symbols

Needs perf (linux-perf / linux-tools) and permission to record a CPU
(root, or kernel.perf_event_paranoid <= 0). The shares are samples of the
server core, idle included, and what the kernel attributes to a process
name: a freshly forked worker is named after the fork server until it
renames itself, so the fork server's row includes a worker's first steps.
Read several runs: a shared machine moves ±15% between minutes.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in bench/
import harness  # noqa: E402  (machine)
import servers  # noqa: E402  (AgentdBinary, pinned_oha, run_oha, raw_get)
import report  # noqa: E402  (cpu_line)

SYSCALL = re.compile(r"^__(?:x64|do)_sys_(\w+)$")


def spawns(sock):
    status, body = servers.raw_get(sock, "/metrics")
    if status != 200:
        raise servers.Failure(f"GET /metrics: HTTP {status}")
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("agentd_worker_spawns_total"):
            return int(float(line.split()[-1]))
    raise servers.Failure("no agentd_worker_spawns_total in /metrics")


def kind(comm):
    if comm.startswith("conn-"):
        return "connection threads"
    return {
        "procman": "procman",
        "agentd-fork": "fork server (+ a new worker's first steps)",
        "agentd-idle": "worker, idle",
        "agentd-task": "worker, its task",
        "swapper": "idle core",
    }.get(comm, "other: " + comm)


def what(frames):
    """The first system call or fault on the stack (leaf first), else the
    leaf: kernel or user code (`[unknown]` in a stripped binary)."""
    for name, _ in frames:
        m = SYSCALL.match(name)
        if m:
            return "syscall " + m.group(1)
        if name == "asm_exc_page_fault":
            return "page fault"
        if name in ("ret_from_fork", "ret_from_fork_asm"):
            return "first run after fork"
    if not frames:
        return "?"
    name, kernel = frames[0]
    if kernel:
        return "kernel " + name[:60]
    return "user code (strip=none for names)" if name == "[unknown]" else "user " + name[:60]


def samples(script):
    """(comm, event, [(function, is kernel)], leaf first) per sample of
    `perf script -F comm,event,ip,sym,dso`."""
    head, frames = None, []
    for line in script.splitlines():
        if line and not line[0].isspace():
            if head is not None:
                yield head[0], head[1], frames
            parts = line.split()
            head, frames = (parts[0], parts[1].rstrip(":") if len(parts) > 1 else ""), []
        elif line.strip():
            parts = line.split()
            if len(parts) > 1:
                frames.append((parts[1].split("+")[0], "kernel.kallsyms" in line))
    if head is not None:
        yield head[0], head[1], frames


# One tracepoint for every system call (the per-call ones cost more and
# lose events at these rates); a big buffer so that none is lost.
# Each task is one worker forked: its clone3 (clone on an older kernel),
# counted inside the recorded window, is what "per task" divides by.
FORK_EVENTS = ("syscalls:sys_enter_clone3", "syscalls:sys_enter_clone")
CENSUS_EVENTS = ["-m", "16M", "-e", "raw_syscalls:sys_enter", "-e", "exceptions:page_fault_user",
                 "-e", "sched:sched_switch"]
SWITCH = re.compile(r"prev_state=(\S+)")
SYSCALL_NR = re.compile(r"NR (\d+)")


def syscall_names():
    """Number -> name from the kernel's headers (linux-libc-dev), if here."""
    for path in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"):
        try:
            text = open(path).read()
        except OSError:
            continue
        return {int(n): name for name, n in re.findall(r"#define __NR_(\w+) (\d+)", text)}
    return {}


def print_census(args, script):
    """Events per task by thread kind, from `perf script -F comm,event,trace`."""
    names = syscall_names()
    counts = collections.defaultdict(collections.Counter)
    for line in script.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 2 or parts[0] in ("perf", "sleep"):
            continue
        k, event = kind(parts[0]), parts[1].rstrip(":")
        if event == "raw_syscalls:sys_enter":
            m = SYSCALL_NR.search(line)
            nr = int(m.group(1)) if m else -1
            counts[k]["syscall " + names.get(nr, f"NR {nr}")] += 1
        elif event == "exceptions:page_fault_user":
            counts[k]["page fault"] += 1
        elif event == "sched:sched_switch":
            m = SWITCH.search(line)
            runnable = m is not None and m.group(1).startswith("R")
            counts[k]["switched out, " + ("preempted" if runnable else "blocked")] += 1
    forker = counts[kind("agentd-fork")]
    tasks = forker["syscall clone3"] + forker["syscall clone"]
    if tasks <= 0:
        raise SystemExit("profile: no worker forked in the window: nothing to report")
    m = harness.machine()
    print(f"{report.cpu_line(m)}, {m['cpus']} CPUs, Linux {m['kernel']}; server on CPU {args.server_cpu}")
    print(f"SendMessage c={args.concurrency}: {tasks:,} tasks (workers forked) in {args.seconds:g} s;"
          " events per task:")
    print()
    for k, c in sorted(counts.items(), key=lambda kc: -sum(kc[1].values())):
        if sum(c.values()) < 0.01 * tasks:
            continue
        calls = sum(v for w, v in c.items() if w.startswith("syscall "))
        print(f"{k}: {calls / tasks:.2f} system calls, {c['page fault'] / tasks:.2f} page faults,"
              f" {c['switched out, blocked'] / tasks:.2f} blocked, {c['switched out, preempted'] / tasks:.2f} preempted")
        rows = sorted(((v, w) for w, v in c.items() if w.startswith("syscall ")), reverse=True)[: args.top]
        for v, w in rows:
            print(f"        {v / tasks:6.2f}  {w}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(HERE, "..", "target", "x86_64-unknown-linux-musl", "release", "agentd"))
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=4, help="the recorded window")
    ap.add_argument("--top", type=int, default=6, help="activities shown per thread kind")
    ap.add_argument("--oha", default=os.path.join(HERE, "..", "target", "bench", "tools", "bin", "oha"))
    ap.add_argument("--server-cpu", default=os.environ.get("BENCH_SERVER_CPU", "1"))
    ap.add_argument("--loadgen-cpu", default=os.environ.get("BENCH_LOADGEN_CPU", "0"))
    ap.add_argument("--census", action="store_true", help="count system calls, faults and switches per task")
    ap.add_argument("flags", nargs="*", help="daemon flags, after --")
    args = ap.parse_args()
    if not shutil.which("perf"):
        ap.error("no perf on PATH (Debian: apt-get install linux-perf)")
    if not os.access(args.oha, os.X_OK):
        ap.error(f"no oha at {args.oha}: run bench/run.sh --setup-only first")
    if not os.access(args.binary, os.X_OK):
        ap.error(f"no agentd at {args.binary}: build it (see bench/README.md)")
    with tempfile.TemporaryDirectory(prefix="agentd-profile-") as out:
        opts = servers.pinned_oha(args, out)
        srv = servers.AgentdBinary(args, "agentd", [args.binary, *args.flags])
        data = os.path.join(out, "perf.data")
        try:
            srv.start()
            servers.run_oha(opts, srv.sock, args.concurrency, 1, True, "warmup")
            load_s = args.seconds + 3
            load = threading.Thread(
                target=servers.run_oha, args=(opts, srv.sock, args.concurrency, load_s, True, "load")
            )
            load.start()
            time.sleep(1.5)
            before = spawns(srv.sock)
            # The rate on cpu-clock alone: a tracepoint records every event.
            forks = [a for e in FORK_EVENTS for a in ("-e", e)]
            events = CENSUS_EVENTS if args.census else ["-e", "cpu-clock/freq=4999/", "-g", *forks]
            rec = subprocess.run(
                ["perf", "record", "-q", *events, "-C", args.server_cpu,
                 "-o", data, "--", "sleep", str(args.seconds)],
                capture_output=True, text=True,
            )
            spawned = spawns(srv.sock) - before
            load.join()
        finally:
            srv.cleanup()
        if rec.returncode != 0:
            raise SystemExit(f"profile: perf record failed: {rec.stderr.strip()[:300]}")
        if "lost" in rec.stderr.lower():
            print(f"profile: perf lost events, the counts are low: {rec.stderr.strip()[:300]}")
        fields = "comm,event,trace" if args.census else "comm,event,ip,sym,dso"
        script = subprocess.run(["perf", "script", "-i", data, "-F", fields], capture_output=True, text=True).stdout
    if spawned <= 0:
        raise SystemExit("profile: no task started while perf recorded")
    if args.census:
        return print_census(args, script)
    by_kind, by_what, user = collections.Counter(), collections.Counter(), collections.Counter()
    tasks = 0
    for comm, event, frames in samples(script):
        if event in FORK_EVENTS:
            tasks += kind(comm) == kind("agentd-fork")
            continue
        k = kind(comm)
        by_kind[k] += 1
        user[k] += bool(frames) and not frames[0][1]
        # A kernel thread's stack starts at ret_from_fork too: its leaf says more.
        activity = what(frames) if not k.startswith("other") else what(frames[:1])
        by_what[(k, activity)] += 1
    total = sum(by_kind.values())
    if not total or tasks <= 0:
        raise SystemExit(f"profile: {total} samples, {tasks} tasks: nothing to report")
    # The window is what was sampled: the core at 4999 Hz, idle included.
    window_s = total / 4999
    us = window_s * 1e6 / tasks  # core time per task in the window
    m = harness.machine()
    print(f"{report.cpu_line(m)}, {m['cpus']} CPUs, Linux {m['kernel']}; server on CPU {args.server_cpu}")
    print(f"SendMessage c={args.concurrency}: {tasks:,} tasks (workers forked) in {window_s:.2f} s sampled"
          f" = {us:.0f} µs of core time each; {total:,} samples")
    print()
    for k, n in by_kind.most_common():
        print(f"{100 * n / total:5.1f}%  {n / total * us:6.1f} µs  {k} (user code {100 * user[k] / total:.1f}%)")
        rows = sorted(((v, w) for (kk, w), v in by_what.items() if kk == k), reverse=True)[: args.top]
        for v, w in rows:
            print(f"        {100 * v / total:5.1f}%  {v / total * us:6.1f} µs  {w}")


if __name__ == "__main__":
    main()
