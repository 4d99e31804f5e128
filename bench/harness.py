#!/usr/bin/env python3
"""The measuring half of bench/run.sh (which does the setup and then runs this).

First the process floors: benches/spawn_floor.rs (a compiled program, run on
the server core) spawns, execs and waits for `agentd version` in a tight loop
(the exec floor), and forks, _exits and waits (the fork floor).

Then for each server (agentd as shipped, agentd with tasks.cgroup=off, the
a2a-sdk Python server, the @a2a-js/sdk server answering each task with one
event and with three): start it pinned to one core on
a unix socket in a fresh temp dir, time it to its first good agent-card
answer, read its idle RSS, then drive it with oha (GET card at c=16, blocking
SendMessage at c=1 and c=16) while checking every response status (oha) and,
before and after every load run, one full body (curl). Around every load run
it reads the server's CPU time from /proc (the server's own, its reaped
children's and its live descendants'), so that the core time per request is
measured, not only inferred from the rate. Only the server being measured
runs: the others are paused (SIGSTOP) meanwhile, so what an idle server does
in the background (a garbage collector) does not take the measured one's
core. bench/report.py turns it all into one report (tables, ratios, issue
38's checks) in target/bench/results.md; oha's raw JSON goes to
target/bench/raw/.

Standard library only. Exits non-zero if any server failed any check.
"""

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import report
import scale
from servers import (
    SERVER_LABELS,
    FLOOR_SERVERS,
    AGENTD_VARIANTS,
    Failure,
    log,
    vm_rss_kib,
    tree_cpu_s,
    RssSampler,
    curl_send_check,
    run_oha,
    Server,
    ROUND_WARMUP_S,
)

class Bench:
    """One server through the whole run: started (and timed) once, then
    measured a round at a time, interleaved with the others."""

    def __init__(self, args, name):
        self.args, self.name = args, name
        self.r = {"checks": 0}
        self.srv = None
        self.rounds = {key: [] for key in LOADS}
        self.rss = {"own": 0, "tree": 0, "children": 0, "samples": 0}

    @property
    def ok(self):
        return "error" not in self.r

    def fail(self, e):
        if isinstance(e, Failure):
            self.r["error"] = str(e)
            log(f"{self.name}: FAILED: {e}")
        else:  # a bug in the harness: still report the others
            import traceback

            traceback.print_exc()
            self.r["error"] = f"harness error: {e!r}"
        if self.srv is not None:
            self.r["log_tail"] = self.srv.log_tail()
            self.srv.cleanup()
            self.srv = None

    def pause(self):
        """Stops the server while another one is measured (Server.pause)."""
        if self.srv is not None:
            self.srv.pause()

    def resume(self):
        if self.srv is not None:
            self.srv.resume()

    def check(self):
        curl_send_check(self.srv.sock)
        self.r["checks"] += 1

    def start(self):
        """Start-up (one unmeasured start to warm the page cache and any
        bytecode caches, then args.startups timed ones; the last one stays
        up), idle RSS, a check and the warm-up."""
        r, args = self.r, self.args
        try:
            times = []
            for i in range(args.startups + 1):
                self.srv = Server(args, self.name)
                ms = self.srv.start()
                if i > 0:
                    times.append(ms)
                if i < args.startups:
                    self.srv.cleanup()
            r["startup_ms"] = statistics.median(times)
            r["startup_all"] = times
            log(f"{self.name}: start-up {r['startup_ms']:.1f} ms (runs: {', '.join(f'{t:.1f}' for t in times)})")
            time.sleep(1.0)
            r["idle_rss_kib"] = vm_rss_kib(self.srv.proc.pid)
            if self.name in AGENTD_VARIANTS:
                r["isolation"] = agentd_isolation(args, self.srv.sock)
            elif self.name in FLOOR_SERVERS:
                said = Path(self.srv.log_path).read_text(errors="replace")
                by = "fork server" if "by a fork server" in said else "forked inline"
                r["isolation"] = f"{by}+{'cgroup2' if 'cgroup v2 slot' in said else 'no cgroup'}"
            self.check()
            log(f"{self.name}: warm-up, SendMessage c=16 for {args.warmup}s")
            run_oha(args, self.srv.sock, 16, args.warmup, True, f"{self.name}-warmup")
            self.check()
        except Exception as e:
            self.fail(e)

    def round(self, n):
        """One round: GET card c=16, SendMessage c=1 and c=16, each for a
        round's share of the load time, with the server's CPU time over
        each and its RSS sampled during SendMessage c=16."""
        args, srv = self.args, self.srv
        try:
            # The other servers ran since this one last did: a second of
            # unmeasured load first brings its caches (and V8's and
            # Python's) back, so each round measures it warm.
            run_oha(args, srv.sock, 16, ROUND_WARMUP_S, True, f"{self.name}-warmup-round{n}")
            for key, (conc, post, title) in LOADS.items():
                sampler = RssSampler(srv.proc.pid) if key == "send16" else None
                if sampler:
                    sampler.start()
                cpu0 = tree_cpu_s(srv.proc.pid)
                try:
                    res = run_oha(args, srv.sock, conc, args.round_s, post, f"{self.name}-{key}-round{n}")
                finally:
                    if sampler:
                        sampler.stop()
                res["cpu_s"] = tree_cpu_s(srv.proc.pid) - cpu0
                self.rounds[key].append(res)
                if sampler:
                    self.rss["own"] = max(self.rss["own"], sampler.peak_own)
                    self.rss["tree"] = max(self.rss["tree"], sampler.peak_tree)
                    self.rss["children"] = max(self.rss["children"], sampler.max_children)
                    self.rss["samples"] += sampler.samples
                self.check()
            log(f"{self.name}: round {n + 1}: " + ", ".join(
                f"{LOADS[k][2]} {self.rounds[k][-1]['rps']:,.0f} req/s" for k in LOADS))
        except Exception as e:
            self.fail(e)

    def finish(self):
        """The rounds summed up (see `aggregate`); the server stopped."""
        r = self.r
        if self.ok:
            for key in LOADS:
                r[key] = aggregate(self.rounds[key])
            r["loaded_rss_kib"] = self.rss["own"]
            r["loaded_tree_rss_kib"] = self.rss["tree"]
            r["max_children"] = self.rss["children"]
            r["rss_samples"] = self.rss["samples"]
        if self.srv is not None:
            self.srv.cleanup()
        return r


# What each round measures: key -> (concurrency, POST SendMessage, title).
LOADS = {
    "card16": (16, False, "GET card c=16"),
    "send1": (1, True, "SendMessage c=1"),
    "send16": (16, True, "SendMessage c=16"),
}


def aggregate(rounds):
    """One measurement over its rounds: the rate, p50 and p99 are the
    medians of the rounds' (a round the machine was slow for moves them
    least); the counts, wall time and CPU are sums, so the CPU per request
    and how busy the core was cover every round."""
    n = sum(x["n"] for x in rounds)
    wall = sum(x["wall_s"] for x in rounds)
    cpu = sum(x["cpu_s"] for x in rounds)
    return {
        "rps": statistics.median(x["rps"] for x in rounds),
        "p50_ms": statistics.median(x["p50_ms"] for x in rounds),
        "p99_ms": statistics.median(x["p99_ms"] for x in rounds),
        "n": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_us_per_req": cpu / n * 1e6,
        "core_busy": cpu / wall if wall else None,
        "rounds": [{k: x[k] for k in ("rps", "p50_ms", "p99_ms", "n", "wall_s", "cpu_s")} for x in rounds],
    }


def agentd_isolation(args, sock_path):
    """What containment the daemon runs with, from its own status command."""
    p = subprocess.run(
        [args.agentd, "command", f"unix://{sock_path}", "status", "--json"],
        capture_output=True, text=True, timeout=10,
    )
    try:
        return json.loads(p.stdout)["isolation"]
    except (ValueError, KeyError, TypeError):
        return f"? ({(p.stderr or p.stdout).strip()[:100]})"


def spawn_floor(args):
    """The exec and fork floors, measured on the server core (see benches/spawn_floor.rs),
    for one round's share of the load time."""
    cmd = [
        "taskset", "-c", args.server_cpu, args.spawn_floor, args.agentd,
        "--seconds", str(args.round_s), "--fork", "--fork-floor", "--json",
    ]
    log(f"process floors: {args.round_s}s each of posix_spawn and fork+exec of `agentd version` "
        f"(the exec floor) and of fork+_exit (the fork floor) on CPU {args.server_cpu}")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise Failure(f"spawn_floor exited {p.returncode}: {p.stderr.strip()[:300]}")
    try:
        doc = json.loads(p.stdout)
        rows = {row["how"]: row for row in doc["rows"]}
    except (ValueError, KeyError, TypeError) as e:
        raise Failure(f"spawn_floor printed no JSON ({e}): {p.stdout[:200]!r}")
    for how, row in rows.items():
        log(f"process floors: {how}: {row['spawns_per_s']:,.0f}/s, "
            f"{row['wall_us_per_spawn']:.1f} µs wall, {row['cpu_us_per_spawn']:.1f} µs CPU each")
    if report.FORK_FLOOR not in rows:
        raise Failure(f"spawn_floor printed no {report.FORK_FLOOR} row: {sorted(rows)}")
    return rows


def floor_median(rounds):
    """Each floor row's figures as the median of its rounds'."""
    out = {}
    for how in rounds[0]:
        rows = [r[how] for r in rounds if how in r]
        row = dict(rows[0])
        for k, v in rows[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row[k] = statistics.median(r[k] for r in rows)
        row["rounds"] = len(rows)
        out[how] = row
    return out


# ---------------------------------------------------------------- facts


def elf_is_static(path):
    """True if the ELF file has no PT_INTERP (no dynamic loader)."""
    with open(path, "rb") as f:
        hdr = f.read(64)
        if hdr[:4] != b"\x7fELF" or hdr[4] != 2:
            return None
        phoff, = struct.unpack_from("<Q", hdr, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", hdr, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


def cpu_busy(seconds):
    """Fraction of all CPUs' time spent not idle over `seconds`, from /proc/stat."""

    def sample():
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
        return sum(vals), idle

    t1, i1 = sample()
    time.sleep(seconds)
    t2, i2 = sample()
    return 1 - (i2 - i1) / max(t2 - t1, 1)


def machine():
    """The CPU model and count, from /proc/cpuinfo (every report says what it ran on)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() not in fields:
                    fields[key.strip()] = value.strip()
    except OSError:
        pass
    m = {
        "cpu_model": fields.get("model name", "?"),
        "cpu_id": cpu_id(fields),
        "cpus": os.cpu_count(),
        "kernel": os.uname().release,
    }
    # Per package: "siblings" logical CPUs on "cpu cores" physical cores; more
    # siblings than cores means SMT, where the two bench cores may share one.
    try:
        siblings, cores = int(fields["siblings"]), int(fields["cpu cores"])
        m["threads_per_core"] = siblings // cores if cores else None
    except (KeyError, ValueError):
        m["threads_per_core"] = None
    return m


def cpu_id(fields):
    """Vendor, family, model and stepping from /proc/cpuinfo: a VM may name two
    CPU generations alike ("AMD EPYC" has been Zen 3 and Zen 5 here), and a
    fork's cost differs between them, so a run says which it had."""
    parts = [fields.get("vendor_id")]
    for key, label in (("cpu family", "family"), ("model", "model"), ("stepping", "stepping")):
        if fields.get(key):
            parts.append(f"{label} {fields[key]}")
    return " ".join(p for p in parts if p) or None


def sh(cmd, **kw):
    p = subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, **kw)
    return p.stdout.strip() if p.returncode == 0 else f"? ({p.stderr.strip()[:100]})"


def versions(args):
    v = {}
    v["agentd"] = sh([args.agentd, "version"]).splitlines()[0].removeprefix("agentd ")
    py = os.path.join(args.venv, "bin", "python")
    v["a2a-sdk"] = sh([py, "-c", "import importlib.metadata as m; print(m.version('a2a-sdk'))"])
    v["uvicorn"] = sh([py, "-c", "import importlib.metadata as m; print(m.version('uvicorn'))"])
    v["python"] = sh([py, "-c", "import platform; print(platform.python_version())"])
    for pkg, key in (("@a2a-js/sdk", "@a2a-js/sdk"), ("express", "express")):
        try:
            v[key] = json.loads(
                (Path(args.js_dir) / "node_modules" / pkg / "package.json").read_text()
            )["version"]
        except (OSError, ValueError, KeyError):
            v[key] = "?"
    v["node"] = sh(["node", "--version"])
    v["oha"] = sh([args.oha, "--version"]).removeprefix("oha ")
    v["rustc"] = sh(["rustc", "--version"]).removeprefix("rustc ")
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--startups", type=int, default=5)
    ap.add_argument("--servers", default=",".join(SERVER_LABELS),
                    help="servers, and issue 38's benches (growth, large, memory; bench/scale.py)")
    ap.add_argument("--server-cpu", default="1")
    ap.add_argument("--loadgen-cpu", default="0")
    ap.add_argument("--agentd", required=True)
    ap.add_argument("--agentd-glibc", help="the glibc build of agentd, for the memory bench")
    ap.add_argument("--oha", required=True)
    ap.add_argument("--venv", required=True)
    ap.add_argument("--js-dir", required=True)
    ap.add_argument("--py-dir", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="full")
    ap.add_argument("--spawn-floor", help="the built benches/spawn_floor.rs executable")
    ap.add_argument("--supervised-floor", help="the built benches/supervised_floor.rs executable")
    ap.add_argument("--baseline", help="a previous results.json: its agentd is the 'before'")
    args = ap.parse_args()

    names = [s for s in args.servers.split(",") if s]
    args.servers = [s for s in names if s not in scale.BENCHES]
    benches_38 = [s for s in names if s in scale.BENCHES]
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    # Each load run, and each floor, is split over the rounds.
    args.round_s = max(1, round(args.duration / args.rounds))
    for s in args.servers:
        if s not in SERVER_LABELS:
            ap.error(f"unknown server {s!r}")
    for s in args.servers:
        if s in FLOOR_SERVERS and not args.supervised_floor:
            ap.error(f"server {s!r}: no --supervised-floor executable given")
    (Path(args.out) / "raw").mkdir(parents=True, exist_ok=True)

    busy = cpu_busy(2.0)
    noisy = busy > 0.10
    if noisy:
        log(f"warning: the CPUs were {busy:.0%} busy over 2 s before the run: this machine is "
            "not quiet, so treat these numbers as a smoke run")

    baseline = baseline_context = None
    if args.baseline:
        try:
            baseline, baseline_context = report.baseline_of(args.baseline)
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"--baseline {args.baseline}: no agentd results in it ({e})")

    # Every server is started and warmed up first; then each round measures
    # the floors and every server in turn (the order rotating), so a stretch
    # of time the machine was slow falls on all of them alike. Only the
    # server being measured runs: the others are paused (SIGSTOP), so nothing
    # a server does when idle lands in another's measurement.
    benches = {}

    def alone(name):
        """Resumes `name` (None: no server) and pauses every other one."""
        for other, b in benches.items():
            if other != name:
                b.pause()
        if name in benches:
            benches[name].resume()

    for name in args.servers:
        log(f"=== {name}: start-up and warm-up")
        alone(None)
        benches[name] = Bench(args, name)
        benches[name].start()
    want_floor = any(s in AGENTD_VARIANTS for s in args.servers)
    floor_rounds, floor = [], {}
    for n in range(args.rounds if args.servers else 0):
        log(f"=== round {n + 1} of {args.rounds}")
        alone(None)
        if want_floor and "error" not in floor:
            try:
                if not args.spawn_floor:
                    raise Failure("no --spawn-floor executable given")
                floor_rounds.append(spawn_floor(args))
            except Failure as e:
                floor = {"error": str(e)}
                log(f"process floors: FAILED: {e}")
        order = args.servers[n % len(args.servers):] + args.servers[: n % len(args.servers)]
        for name in order:
            if benches[name].ok:
                alone(name)
                benches[name].round(n)
    for b in benches.values():
        b.resume()
    if floor_rounds and "error" not in floor:
        floor = floor_median(floor_rounds)
    results = {name: benches[name].finish() for name in args.servers}
    # Issue 38's benches, each with daemons of its own, after the servers'
    # rounds (their rates are ratios within each bench, not across servers).
    scaled = scale.run(args, benches_38) if benches_38 else {}

    size = os.path.getsize(args.agentd)
    static = elf_is_static(args.agentd)
    tree = sh("cargo tree -e normal --prefix none | sort -u | wc -l", cwd=args.repo)
    # The same list counts a crate twice when it also appears as "name v (*)".
    distinct = sh("cargo tree -e normal --prefix none | sed 's/ (\\*)$//' | sort -u | wc -l", cwd=args.repo)
    facts = [
        f"agentd binary: {size:,} bytes ({size / 1048576:.2f} MiB), "
        f"{'static' if static else 'NOT static' if static is False else '?'} "
        f"({os.path.relpath(args.agentd, args.repo)})",
        f"agentd dependencies: `cargo tree -e normal --prefix none | sort -u | wc -l` = {tree} "
        f"(lines, agentd itself included; {distinct} distinct crates once the `(*)` repeats are folded)",
    ]
    vers = versions(args)
    mach = machine()
    header = (
        f"# agentd vs the A2A SDK servers ({args.mode} run: {args.rounds} interleaved rounds of "
        f"{args.round_s} s per load run, {args.warmup} s warm-up, start-up median of {args.startups})\n\n"
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; servers on CPU "
        f"{args.server_cpu}, oha on CPU {args.loadgen_cpu}; CPUs {busy:.0%} busy just before the run"
        + (" (**not quiet: smoke numbers only**)" if noisy else "")
        + (f"; AGENTD_BENCH_ARGS=`{os.environ['AGENTD_BENCH_ARGS']}`"
           if os.environ.get("AGENTD_BENCH_ARGS", "").strip() else "")
    )
    run = {
        "servers": args.servers,
        "labels": {n: SERVER_LABELS[n] for n in args.servers},
        "results": results,
        "scale": scaled,
        "floor": floor,
        "baseline": baseline,
        "baseline_context": baseline_context,
        "machine": mach,
        "header": header,
        "facts": facts,
        "versions": vers,
        "settings": {
            "mode": args.mode, "duration_s": args.duration, "rounds": args.rounds,
            "round_s": args.round_s, "warmup_s": args.warmup,
            "startups": args.startups, "server_cpu": args.server_cpu,
            "loadgen_cpu": args.loadgen_cpu, "cpu_busy_before": busy,
            "agentd_bench_args": os.environ.get("AGENTD_BENCH_ARGS", ""),
        },
    }
    # Which JS server the ratios and checks were set against (report.py
    # derives it again when it renders a stored run).
    run["fastest_js"] = {key: report.fastest_js(run, key) for key in ("send16", "send1")}
    text = report.render(run)
    (Path(args.out) / "results.md").write_text(text)
    (Path(args.out) / "results.json").write_text(json.dumps(run, indent=2, default=str))
    print(text)
    log(f"wrote {Path(args.out) / 'results.md'}")
    failed = [n for n, r in results.items() if "error" in r] + scale.failed(scaled)
    if "error" in floor:
        failed.append("process floors")
    if failed:
        log(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
