"""What every bench script shares: the servers (agentd, the SDK servers, the
supervised floor) started pinned to the server core on a unix socket, and
how they are measured: oha runs, curl checks, and a server's CPU and memory
read from /proc. bench/harness.py (run.sh's measuring half), bench/scale.py
(issue 38's benches), bench/ab.py and bench/profile.py build on it.

Standard library only.
"""

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path


SEND_BODY = (
    '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'
    '{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}'
)
SEND_HEADERS = ["Content-Type: application/json", "A2A-Version: 1.0"]
CARD_PATH = "/.well-known/agent-card.json"
URL_BASE = "http://localhost"

SERVER_LABELS = {
    "agentd": "agentd (as shipped)",
    "agentd-nocg": "agentd (tasks.cgroup=off)",
    "python": "python (a2a-sdk + uvicorn)",
    "js": "js (@a2a-js/sdk + express, 1 event per task)",
    "js-3ev": "js-3ev (@a2a-js/sdk + express, 3 events per task)",
    "floor": "supervised floor (no A2A: HTTP + a fresh supervised process per task)",
    "floor-threads": "supervised floor, agentd's structure (threads per connection + a supervisor thread)",
    "floor-direct": "supervised floor, threads per connection supervising their own tasks",
    "floor-nocg": "supervised floor, no cgroup",
}

# benches/supervised_floor.rs: not a peer but a yardstick, the least a server
# with agentd's per-task guarantees spends on a task (see report.py); and,
# not run unless asked for, the same with agentd's structure around it, with
# its threads but no supervisor thread, and with no cgroup.
FLOOR_SERVERS = {
    "floor": [],
    "floor-threads": ["--threads"],
    "floor-direct": ["--direct"],
    "floor-nocg": ["--no-cgroup"],
}

# bench/js/server.mjs --events N: the same SDK server, answering each task
# with one published event (the completed Task) or three (submitted, the
# artifact, completed). bench/report.py compares agentd with the faster.
JS_VARIANTS = {"js": "1", "js-3ev": "3"}

# Daemon flags that make each agentd variant; AGENTD_BENCH_ARGS comes after
# them, so an experiment can still override any of these.
AGENTD_VARIANTS = {
    "agentd": [],
    "agentd-nocg": ["--set", "tasks.cgroup=off"],
}

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Failure(Exception):
    pass


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- /proc


def vm_rss_kib(pid):
    """VmRSS of one process in KiB, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return 0  # a zombie has no VmRSS line


def descendants(pid):
    """pid's descendants (children, grandchildren, ...) from one /proc scan."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parens.
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def stat_fields(pid):
    """/proc/PID/stat from field 3 (state) on, or None if pid is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # pid (comm) state ...: comm may hold spaces and parens.
    return stat[stat.rfind(")") + 2 :].split()


def tree_cpu_s(pid):
    """CPU seconds (user + system) spent by pid and everything below it so far.

    pid's own time (all its threads), its reaped children's (cutime and
    cstime: agentd reaps every task worker itself) and every live
    descendant's own and reaped children's, the prespawned idle workers
    included. A worker reaped between the two reads can be counted twice or
    missed once, a few ms against seconds of load.
    """

    def ticks(p):
        f = stat_fields(p)
        # utime stime cutime cstime are fields 14-17; f[0] is field 3.
        return sum(int(x) for x in f[11:15]) if f else 0

    own = ticks(pid)
    return (own + sum(ticks(d) for d in descendants(pid))) / CLK_TCK


class RssSampler(threading.Thread):
    """Peak VmRSS of pid alone and of pid plus all its descendants."""

    def __init__(self, pid, interval=0.1):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_own = 0
        self.peak_tree = 0
        self.max_children = 0
        self.samples = 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            own = vm_rss_kib(self.pid)
            if own is None:
                return
            kids = descendants(self.pid)
            tree = own + sum(vm_rss_kib(k) or 0 for k in kids)
            self.peak_own = max(self.peak_own, own)
            self.peak_tree = max(self.peak_tree, tree)
            self.max_children = max(self.max_children, len(kids))
            self.samples += 1
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()


# ---------------------------------------------------------------- HTTP


def raw_get(sock_path, target, timeout=5.0):
    """One HTTP/1.1 GET over a unix socket; returns (status, body bytes).

    Used only for the 1 ms start-up poll, where forking curl every
    millisecond would cost more than what is being measured.
    """
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock_path)
        s.sendall(
            f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = dechunk(body)
    return status, body


def dechunk(body):
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return out


def curl_send_check(sock_path):
    """Send SendMessage once with curl; the body must be a COMPLETED task."""
    cmd = ["curl", "-sS", "--max-time", "10", "--unix-socket", sock_path]
    for h in SEND_HEADERS:
        cmd += ["-H", h]
    cmd += ["-d", SEND_BODY, "-w", "\n%{http_code}", f"{URL_BASE}/"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise Failure(f"curl failed: {p.stderr.strip()}")
    body, _, code = p.stdout.rpartition("\n")
    short = body[:300]
    if code != "200":
        raise Failure(f"SendMessage answered HTTP {code}: {short}")
    # The plain string checks the issue asks for ...
    if '"result"' not in body or '"error"' in body or "TASK_STATE_COMPLETED" not in body:
        raise Failure(f"SendMessage body is not a completed result: {short}")
    # ... and the same, structurally, plus the echo itself.
    try:
        doc = json.loads(body)
        task = doc["result"]["task"]
        state = task["status"]["state"]
        texts = [p.get("text") for a in task.get("artifacts", []) for p in a.get("parts", [])]
    except (ValueError, KeyError, TypeError) as e:
        raise Failure(f"SendMessage body is not a 1.0 task result ({e}): {short}")
    if "error" in doc or state != "TASK_STATE_COMPLETED" or "hi" not in texts:
        raise Failure(f"SendMessage result is not a completed echo of 'hi': {short}")


# ---------------------------------------------------------------- oha


def run_oha(args, sock_path, conc, seconds, post, raw_name):
    cmd = [
        args.oha, "--no-tui", "--output-format", "json", "-w",
        "-z", f"{seconds}s", "-c", str(conc), "--unix-socket", sock_path,
    ]
    if post:
        cmd += ["-m", "POST", "-d", SEND_BODY]
        for h in SEND_HEADERS:
            cmd += ["-H", h]
        cmd.append(f"{URL_BASE}/")
    else:
        cmd.append(f"{URL_BASE}{CARD_PATH}")
    p = subprocess.run(cmd, capture_output=True, text=True)
    raw = Path(args.out) / "raw" / f"{raw_name}.json"
    raw.write_text(p.stdout)
    if p.returncode != 0:
        raise Failure(f"oha exited {p.returncode}: {p.stderr.strip()[:300]}")
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise Failure(f"oha printed no JSON (see {raw})")
    summary = doc["summary"]
    codes = {str(k): v for k, v in (doc.get("statusCodeDistribution") or {}).items()}
    errors = doc.get("errorDistribution") or {}
    total = sum(codes.values())
    res = {
        "rps": summary["requestsPerSec"],
        "wall_s": summary["total"],
        "p50_ms": (doc["latencyPercentiles"]["p50"] or 0) * 1000,
        "p99_ms": (doc["latencyPercentiles"]["p99"] or 0) * 1000,
        "n": total,
        "codes": codes,
        "errors": errors,
    }
    if total == 0:
        raise Failure(f"oha got no responses; errors: {errors}")
    if set(codes) != {"200"} or errors:
        raise Failure(f"not every response was 200: status {codes}, errors {errors}")
    return res


# ---------------------------------------------------------------- servers


def server_cmd(args, name, sock_path):
    if name in AGENTD_VARIANTS:
        # AGENTD_BENCH_ARGS: extra daemon flags for an experiment, e.g.
        # '--set tasks.prespawn=4', given to every agentd variant.
        extra = os.environ.get("AGENTD_BENCH_ARGS", "").split()
        return [
            args.agentd, "serve", "--listen", f"unix://{sock_path}", "--log-level", "warn",
            *AGENTD_VARIANTS[name], *extra,
        ]
    if name == "python":
        return [
            os.path.join(args.venv, "bin", "uvicorn"), "--app-dir", args.py_dir,
            "python_server:app", "--uds", sock_path, "--loop", "uvloop", "--http", "httptools",
            "--no-access-log", "--log-level", "warning",
        ]
    if name in JS_VARIANTS:
        return ["node", os.path.join(args.js_dir, "server.mjs"), sock_path, "--events", JS_VARIANTS[name]]
    if name in FLOOR_SERVERS:
        return [args.supervised_floor, sock_path, *FLOOR_SERVERS[name]]
    raise ValueError(name)


class Server:
    def __init__(self, args, name):
        self.args, self.name = args, name
        self.dir = tempfile.mkdtemp(prefix=f"agentd-bench-{name}-")
        self.sock = os.path.join(self.dir, "s.sock")
        self.proc = None
        self.log_path = os.path.join(self.dir, "server.log")

    def command(self):
        """The server's argv (bench/ab.py gives its own)."""
        return server_cmd(self.args, self.name, self.sock)

    def start(self, timeout=60.0):
        """Launch pinned to the server core; return ms to first good card answer."""
        cmd = ["taskset", "-c", self.args.server_cpu] + self.command()
        env = dict(os.environ)
        env.pop("RUST_LOG", None)
        logf = open(self.log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env,
            cwd=self.dir, start_new_session=True,
        )
        logf.close()
        deadline = t0 + timeout
        last = "no answer"
        while True:
            if self.proc.poll() is not None:
                raise Failure(f"exited {self.proc.returncode} before answering; log: {self.log_tail()}")
            if os.path.exists(self.sock):
                try:
                    status, body = raw_get(self.sock, CARD_PATH)
                    if status == 200 and "name" in json.loads(body):
                        return (time.perf_counter() - t0) * 1000
                    last = f"HTTP {status}: {body[:200]!r}"
                except (OSError, ValueError, IndexError) as e:
                    last = repr(e)
            if time.perf_counter() > deadline:
                raise Failure(f"no good card answer within {timeout:.0f}s ({last}); log: {self.log_tail()}")
            time.sleep(0.001)

    def keep_log_if_it_says_something(self):
        """agentd runs at --log-level warn here: a line in its log is a
        warning or an error the run should not lose with the temporary
        directory (kept as OUT/logs/NAME-PID.log, and said)."""
        out = getattr(self.args, "out", None)
        if not out or self.proc is None or not os.path.exists(self.log_path):
            return
        if os.path.getsize(self.log_path) == 0 or self.name not in AGENTD_VARIANTS:
            return
        kept = Path(out) / "logs" / f"{self.name}-{self.proc.pid}.log"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.log_path, kept)
        log(f"{self.name}: its log had warnings or errors, kept: {kept}")

    def log_tail(self):
        try:
            return Path(self.log_path).read_text(errors="replace")[-500:].strip() or "(empty)"
        except OSError:
            return "(none)"

    def pause(self):
        """Stops the server's process group (SIGSTOP) while another server
        is measured on the same core: an idle server is not always idle (a
        Node server's garbage collector ran on the server core seconds after
        its own load, in the middle of the next server's rounds)."""
        self._signal_group(signal.SIGSTOP)

    def resume(self):
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        # A paused server would hold the SIGTERM until SIGKILL.
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log(f"{self.name}: no exit 10 s after SIGTERM; SIGKILL")
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if os.path.exists(self.sock):
            os.unlink(self.sock)

    def cleanup(self):
        self.stop()
        self.keep_log_if_it_says_something()
        try:
            for f in os.listdir(self.dir):
                os.unlink(os.path.join(self.dir, f))
            os.rmdir(self.dir)
        except OSError:
            pass


class AgentdBinary(Server):
    """An agentd of a given binary and daemon flags (`cmd` = [binary, flag…]),
    with Server's start (pinned, timed to a good card), stop and clean-up:
    what bench/ab.py and bench/profile.py start."""

    def __init__(self, args, name, cmd):
        super().__init__(args, name)
        # The server starts in its own directory: a relative path is ours.
        self.cmd = [os.path.abspath(cmd[0]) if os.sep in cmd[0] else cmd[0], *cmd[1:]]

    def command(self):
        return [self.cmd[0], "serve", "--listen", f"unix://{self.sock}", "--log-level", "warn", *self.cmd[1:]]


def pinned_oha(args, out):
    """run_oha's options for oha pinned to args.loadgen_cpu (run_oha pins
    nothing itself: oha runs under taskset through a wrapper in `out`),
    raw results under out/raw."""
    os.makedirs(os.path.join(out, "raw"), exist_ok=True)
    oha = os.path.join(out, "oha")
    with open(oha, "w") as f:
        f.write(f'#!/bin/sh\nexec taskset -c {args.loadgen_cpu} {shlex.quote(os.path.abspath(args.oha))} "$@"\n')
    os.chmod(oha, 0o755)
    return types.SimpleNamespace(oha=oha, out=out)


# Unmeasured SendMessage c=16 load before each server's round.
ROUND_WARMUP_S = 1
