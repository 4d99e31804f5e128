"""Issue 38's measurements of agentd under load it holds, not load it serves:
run by bench/harness.py when --servers names them, rendered by bench/report.py.

growth   the blocking SendMessage c=16 echo rate of one daemon with nothing
         held, and with N live tasks (their programs waiting) and N idle
         keep-alive connections held by the same daemon, alternating within
         each round; the daemon's RSS per live task and per idle connection,
         and one live worker's Pss and private memory.
large    a 50 MB artifact through the text and the jsonl runner, to a blocking
         SendMessage and to a SendStreamingMessage (SSE) client, as MB/s from
         the request to the response's last byte, beside the same program
         writing to /dev/null alone; the daemon's CPU per request.
memory   the daemon's RSS kept per finished task of 8 MiB output (six in a
         row), for the musl and the glibc build, as a ratio to the output.

Every daemon here runs an exec program (the built-in echo finishes at once),
pinned to the server core like the servers; the client is this process, on
the load-generator core. Standard library only.
"""

import json
import os
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import time

import servers
from servers import Failure, log

BENCHES = ("growth", "large", "memory")

# What each bench holds or sends in a full run and in a --quick one
# (report.py says which was used: the run's results carry them).
GROWTH_HELD = {"full": 1000, "quick": 1000}
LARGE_BYTES = 50_000_000
LARGE_REPS = {"full": 5, "quick": 3}
MEMORY_TASKS = 6
MEMORY_OUTPUT_BYTES = 8 * 1024 * 1024

# The growth agent: "hold…" waits until the harness opens hold.fifo (in the
# daemon's working directory) for writing and closes it, then completes with
# no output; anything else is echoed (printf: no newline added, so "hi"
# comes back as "hi", as curl_send_check wants). The same program and flags
# for both states, so the ratio is the held load's alone.
HOLD_FIFO = "hold.fifo"
GROWTH_EXEC = (
    "sh -c 'read -r x; case \"$x\" in hold*) exec cat " + HOLD_FIFO
    + ";; *) printf %s \"$x\";; esac'"
)
# The memory agent: "big…" prints 8 MiB, anything else is echoed.
MEMORY_EXEC = (
    "sh -c 'read -r x; case \"$x\" in big*) head -c " + str(MEMORY_OUTPUT_BYTES)
    + " /dev/zero | tr \"\\0\" a;; *) printf %s \"$x\";; esac'"
)
# The large-output programs: the text one as the issue gives it; the jsonl
# one writes the same bytes as artifact lines of 1 MB (bench/large_jsonl.py).
LARGE_TEXT_ARGV = ["sh", "-c", f'head -c {LARGE_BYTES} /dev/zero | tr "\\0" a']


def large_jsonl_argv():
    here = os.path.dirname(os.path.abspath(__file__))
    return [sys.executable, "-S", os.path.join(here, "large_jsonl.py"), str(LARGE_BYTES)]


def send_body(text, msg_id="m1", immediately=False):
    params = {"message": {"messageId": msg_id, "role": "ROLE_USER", "parts": [{"text": text}]}}
    if immediately:
        params["configuration"] = {"returnImmediately": True}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}).encode()


def stream_body(text):
    return json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]}},
    }).encode()


# ---------------------------------------------------------------- HTTP


class HttpConn:
    """One keep-alive HTTP/1.1 connection over a unix socket: requests one at
    a time, bodies framed by Content-Length, chunked or the close."""

    def __init__(self, sock_path, timeout=120.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(sock_path)
        self.buf = bytearray()

    def close(self):
        self.s.close()

    def send(self, method, target, body=b"", headers=()):
        head = f"{method} {target} HTTP/1.1\r\nHost: localhost\r\n"
        head += "".join(f"{h}\r\n" for h in headers)
        if body or method == "POST":
            head += f"Content-Length: {len(body)}\r\n"
        self.s.sendall(head.encode() + b"\r\n" + body)

    def _fill(self, eof_ok=False):
        chunk = self.s.recv(1 << 20)
        if not chunk:
            if eof_ok:
                return False
            raise Failure("the server closed the connection mid-response")
        self.buf += chunk
        return True

    def response(self):
        """(status, headers with lower-case names, body bytes) of the next response."""
        while (i := self.buf.find(b"\r\n\r\n")) < 0:
            self._fill()
        lines = bytes(self.buf[:i]).decode("latin-1").split("\r\n")
        del self.buf[: i + 4]
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            return status, hdrs, self._chunked()
        if "content-length" in hdrs:
            # Straight into one buffer of the body's size: a 50 MB answer
            # is read at the socket's pace, not at the pace of copies.
            n = int(hdrs["content-length"])
            body = bytearray(n)
            have = min(n, len(self.buf))
            body[:have] = self.buf[:have]
            del self.buf[:have]
            view = memoryview(body)
            while have < n:
                got = self.s.recv_into(view[have:])
                if not got:
                    raise Failure("the server closed the connection mid-response")
                have += got
            self.last_byte_at = time.perf_counter()
            return status, hdrs, bytes(body) if n < 65536 else body
        while self._fill(eof_ok=True):
            pass
        self.last_byte_at = time.perf_counter()
        body, self.buf = bytes(self.buf), bytearray()
        return status, hdrs, body

    def _chunked(self):
        """The body of a chunked response. Every byte is received first, the
        framing followed by offsets into the buffer, and the chunks are joined
        after: `last_byte_at` is when the last byte came, not when this
        client's own copies of a 50 MB body were done."""
        pos, spans = 0, []
        while True:
            while (i := self.buf.find(b"\r\n", pos)) < 0:
                self._fill()
            size = int(bytes(self.buf[pos:i]).split(b";")[0], 16)
            end = i + 2 + size + 2  # the size line, the data, its CRLF (no trailers)
            while len(self.buf) < end:
                self._fill()
            if size == 0:
                self.last_byte_at = time.perf_counter()
                break
            spans.append((i + 2, i + 2 + size))
            pos = end
        view = memoryview(self.buf)
        body = b"".join(view[a:b] for a, b in spans)
        view.release()
        del self.buf[:end]
        return body

    def post(self, body):
        self.send("POST", "/", body, servers.SEND_HEADERS)
        return self.response()


def rpc_result(status, body, what):
    """The JSON-RPC result of one answer, or Failure saying what came instead."""
    if status != 200:
        raise Failure(f"{what}: HTTP {status}: {body[:200]!r}")
    try:
        doc = json.loads(body)
    except ValueError:
        raise Failure(f"{what}: not JSON: {body[:200]!r}")
    if "error" in doc or "result" not in doc:
        raise Failure(f"{what}: {str(doc)[:300]}")
    return doc["result"]


# ---------------------------------------------------------------- /proc


def own_cpu_s(pid):
    """The daemon's own CPU seconds (utime + stime of all its threads, not
    its children's)."""
    f = servers.stat_fields(pid)
    return (int(f[11]) + int(f[12])) / servers.CLK_TCK if f else 0.0


def smaps_rollup_kib(pid):
    """Rss, Pss and private (clean + dirty) KiB of one process."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Shared_Clean", "Shared_Dirty"):
                    out[k] = int(v.split()[0])
    except OSError:
        return None
    out["Private"] = out.get("Private_Clean", 0) + out.get("Private_Dirty", 0)
    return out


def hold_pids(daemon_pid):
    """The held programs (`cat hold.fifo`) below the daemon."""
    pids = []
    for p in servers.descendants(daemon_pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if f.read() == f"cat\0{HOLD_FIFO}\0".encode():
                    pids.append(p)
        except OSError:
            pass
    return pids


def ppid_of(pid):
    f = servers.stat_fields(pid)
    return int(f[1]) if f else None


def settle_rss(pid, seconds=0.5):
    time.sleep(seconds)
    return servers.vm_rss_kib(pid)


def wait_for(what, cond, timeout, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def raise_nofile(need):
    """Raise this process's soft RLIMIT_NOFILE so it can hold `need` sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need + 256
    if soft >= want:
        return
    if hard != resource.RLIM_INFINITY and hard < want:
        raise Failure(f"holding {need} connections needs {want} file descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def agentd(args, name, binary, flags):
    srv = servers.AgentdBinary(args, name, [binary, *flags])
    srv.start()
    return srv


# ---------------------------------------------------------------- growth


def growth(args):
    """Echo rate with nothing held and with N live tasks + N idle connections."""
    held = GROWTH_HELD[args.mode]
    raise_nofile(held + 64)
    flags = [
        "--exec", GROWTH_EXEC,
        # Room for the held tasks and the echo load beside them, the held
        # connections and oha's, and no idle close while they are held.
        "--set", f"tasks.max_running={held + 64}",
        "--set", f"a2a.max_connections={held + 256}",
        "--set", "http.idle_timeout_ms=3600000",
    ]
    srv = servers.AgentdBinary(args, "growth", [args.agentd, *flags])
    os.mkfifo(os.path.join(srv.dir, HOLD_FIFO))
    srv.cmd += ["--set", f"agent.workdir={srv.dir}"]
    r = {"held_tasks": held, "held_connections": held, "flags": flags, "exec": GROWTH_EXEC, "rounds": []}
    try:
        srv.start()
        pid = srv.proc.pid
        servers.curl_send_check(srv.sock)
        log(f"growth: warm-up, SendMessage c=16 for {args.warmup}s")
        servers.run_oha(args, srv.sock, 16, args.warmup, True, "growth-warmup")
        for n in range(args.rounds):
            rnd = {}
            rnd["none"] = measure_echo(args, srv, f"growth-none-round{n}")
            rss0 = settle_rss(pid)
            t0 = time.monotonic()
            hold_tasks(srv, held)
            rnd["hold_tasks_s"] = time.monotonic() - t0
            rss1 = settle_rss(pid)
            worker = ppid_of(hold_pids(pid)[0])
            rnd["worker"] = smaps_rollup_kib(worker)
            # The tasks alone first, so the report can tell their share of
            # any slow-down from the connections'.
            rnd["tasks"] = measure_echo(args, srv, f"growth-tasks-round{n}")
            conns = hold_connections(srv, held)
            try:
                rss2 = settle_rss(pid)
                rnd["threads"] = int(servers.stat_fields(pid)[17])
                rnd["loaded"] = measure_echo(args, srv, f"growth-loaded-round{n}")
                if len(hold_pids(pid)) != held:
                    raise Failure(f"a held task ended during the load run ({len(hold_pids(pid))} of {held} left)")
            finally:
                for c in conns:
                    c.close()
            t0 = time.monotonic()
            release(srv)
            rnd["release_s"] = time.monotonic() - t0
            rnd["rss_kib"] = {"none": rss0, "tasks": rss1, "tasks_and_connections": rss2}
            rnd["rss_per_task_kib"] = (rss1 - rss0) / held
            rnd["rss_per_connection_kib"] = (rss2 - rss1) / held
            rnd["ratio"] = rnd["loaded"]["rps"] / rnd["none"]["rps"]
            rnd["ratio_tasks"] = rnd["tasks"]["rps"] / rnd["none"]["rps"]
            r["rounds"].append(rnd)
            log(f"growth: round {n + 1}: none {rnd['none']['rps']:,.0f} req/s, with {held} live tasks "
                f"and {held} idle connections {rnd['loaded']['rps']:,.0f} req/s ({rnd['ratio']:.2f}×; "
                f"the tasks alone {rnd['tasks']['rps']:,.0f} req/s, {rnd['ratio_tasks']:.2f}×); "
                f"RSS +{rnd['rss_per_task_kib']:.1f} KiB per task, +{rnd['rss_per_connection_kib']:.1f} KiB "
                f"per connection; holding took {rnd['hold_tasks_s']:.1f} s")
        rounds = r["rounds"]
        med = statistics.median
        r["ratio"] = med(x["ratio"] for x in rounds)
        r["ratio_tasks"] = med(x["ratio_tasks"] for x in rounds)
        for state in ("none", "tasks", "loaded"):
            for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "core_busy"):
                r[f"{state}_{k}"] = med(x[state][k] for x in rounds)
        # The first round's: the daemon's first holding. Later rounds hold
        # again in memory the first released (the allocator keeps it).
        r["rss_per_task_kib"] = rounds[0]["rss_per_task_kib"]
        r["rss_per_connection_kib"] = rounds[0]["rss_per_connection_kib"]
        r["worker"] = rounds[-1]["worker"]
        r["threads_loaded"] = rounds[-1]["threads"]
    except Exception as e:
        fail(r, "growth", e, srv)
    finally:
        srv.cleanup()
    return r


def measure_echo(args, srv, raw_name):
    """Blocking SendMessage c=16 for a round's share, after a second unmeasured,
    checked by curl before and after; with the daemon tree's CPU per request."""
    servers.run_oha(args, srv.sock, 16, servers.ROUND_WARMUP_S, True, raw_name + "-warmup")
    servers.curl_send_check(srv.sock)
    cpu0 = servers.tree_cpu_s(srv.proc.pid)
    res = servers.run_oha(args, srv.sock, 16, args.round_s, True, raw_name)
    cpu = servers.tree_cpu_s(srv.proc.pid) - cpu0
    servers.curl_send_check(srv.sock)
    res["cpu_s"] = cpu
    res["cpu_us_per_req"] = cpu / res["n"] * 1e6
    res["core_busy"] = cpu / res["wall_s"] if res["wall_s"] else None
    return res


def hold_tasks(srv, held):
    """`held` returnImmediately SendMessages of "hold…", then wait until every
    one's program is waiting on the fifo."""
    pid = srv.proc.pid
    c = HttpConn(srv.sock)
    try:
        for i in range(held):
            res = rpc_result(*_sr(c.post(send_body(f"hold {i}", f"h{i}", immediately=True))), "hold SendMessage")
            if "task" not in res:
                raise Failure(f"hold SendMessage answered no task: {str(res)[:200]}")
    finally:
        c.close()
    wait_for(f"{held} held programs running", lambda: len(hold_pids(pid)) >= held, 120, 0.25)


def _sr(resp):
    status, _, body = resp
    return status, body


def hold_connections(srv, held):
    """`held` keep-alive connections, each after one GET of the card."""
    conns = []
    try:
        for _ in range(held):
            c = HttpConn(srv.sock)
            conns.append(c)
            c.send("GET", servers.CARD_PATH)
            status, _, body = c.response()
            if status != 200:
                raise Failure(f"idle connection {len(conns)}: GET card answered {status}: {body[:200]!r}")
    except BaseException:
        for c in conns:
            c.close()
        raise
    return conns


def release(srv):
    """Every held program reads end-of-file on the fifo and exits 0, so its
    task completes; then wait for the daemon to have no task running."""
    pid = srv.proc.pid
    path = os.path.join(srv.dir, HOLD_FIFO)

    def released():
        # A writer that opens and closes wakes every reader blocked in open.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:  # ENXIO: no reader right now
            pass
        return not hold_pids(pid)

    wait_for("held programs released", released, 60, 0.05)
    wait_for("held tasks finished", lambda: status_tasks(srv).get("running") == 0, 60, 0.1)


def status_tasks(srv):
    p = subprocess.run(
        [srv.cmd[0], "command", f"unix://{srv.sock}", "status", "--json"],
        capture_output=True, text=True, timeout=30,
    )
    try:
        return json.loads(p.stdout)["tasks"]
    except (ValueError, KeyError, TypeError):
        raise Failure(f"status command: {(p.stderr or p.stdout).strip()[:200]}")


def fail(r, name, e, srv):
    if isinstance(e, Failure):
        r["error"] = str(e)
    else:
        import traceback

        traceback.print_exc()
        r["error"] = f"harness error: {e!r}"
    r["log_tail"] = srv.log_tail()
    log(f"{name}: FAILED: {r['error']}")


# ---------------------------------------------------------------- large


def large(args):
    """A 50 MB artifact through the text and the jsonl runner."""
    reps = LARGE_REPS[args.mode]
    out = {"bytes": LARGE_BYTES, "reps": reps, "runners": {}}
    for runner, argv, protocol in (
        ("text", LARGE_TEXT_ARGV, "text"),
        ("jsonl", large_jsonl_argv(), "jsonl"),
    ):
        out["runners"][runner] = large_one(args, runner, argv, protocol, reps)
    return out


def large_one(args, runner, argv, protocol, reps):
    exec_line = shlex.join(argv)
    srv = servers.AgentdBinary(args, f"large-{runner}", [args.agentd, "--exec", exec_line, "--exec-protocol", protocol])
    r = {"exec": exec_line, "protocol": protocol, "alone": [], "blocking": [], "streaming": []}
    try:
        srv.start()
        pid = srv.proc.pid
        # One of each unmeasured: the page cache, the daemon's first large
        # buffers, the program's first start.
        large_blocking(srv, pid)
        large_streaming(srv, pid)
        program_alone(args, argv)
        for _ in range(reps):
            r["alone"].append(program_alone(args, argv))
            r["blocking"].append(large_blocking(srv, pid))
            r["streaming"].append(large_streaming(srv, pid))
        for kind in ("alone", "blocking", "streaming"):
            r[f"{kind}_s"] = statistics.median(x["s"] for x in r[kind])
            r[f"{kind}_mb_s"] = LARGE_BYTES / 1e6 / r[f"{kind}_s"]
        for kind in ("blocking", "streaming"):
            r[f"{kind}_daemon_cpu_s"] = statistics.median(x["daemon_cpu_s"] for x in r[kind])
            r[f"{kind}_tree_cpu_s"] = statistics.median(x["tree_cpu_s"] for x in r[kind])
            r[f"{kind}_response_bytes"] = r[kind][-1]["response_bytes"]
        log(f"large: {runner}: program alone {r['alone_mb_s']:.0f} MB/s, blocking {r['blocking_mb_s']:.0f} MB/s, "
            f"streaming {r['streaming_mb_s']:.0f} MB/s (medians of {reps})")
    except Exception as e:
        fail(r, f"large-{runner}", e, srv)
    finally:
        srv.cleanup()
    return r


def program_alone(args, argv):
    """The program on the server core, its output to /dev/null."""
    t0 = time.perf_counter()
    p = subprocess.run(["taskset", "-c", args.server_cpu, *argv], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    s = time.perf_counter() - t0
    if p.returncode != 0:
        raise Failure(f"the program alone exited {p.returncode}: {p.stderr[:200]!r}")
    return {"s": s}


def timed_request(srv, pid, body):
    c = HttpConn(srv.sock)
    try:
        cpu0, tree0 = own_cpu_s(pid), servers.tree_cpu_s(pid)
        t0 = time.perf_counter()
        c.send("POST", "/", body, servers.SEND_HEADERS)
        status, hdrs, resp = c.response()
        s = c.last_byte_at - t0
        # The worker is reaped (its CPU in the daemon's cutime) just after
        # the answer: give it a moment before reading the tree's CPU.
        time.sleep(0.05)
        cpu = {"daemon_cpu_s": own_cpu_s(pid) - cpu0, "tree_cpu_s": servers.tree_cpu_s(pid) - tree0}
    finally:
        c.close()
    return status, hdrs, resp, s, cpu


def large_blocking(srv, pid):
    status, _, resp, s, cpu = timed_request(srv, pid, send_body("go"))
    res = rpc_result(status, resp, "large SendMessage")
    task = res.get("task") or {}
    state = dig_state(task)
    got = sum(len(p.get("text", "")) for a in task.get("artifacts", []) for p in a.get("parts", []))
    if state != "TASK_STATE_COMPLETED" or got != LARGE_BYTES:
        raise Failure(f"large SendMessage: state {state}, {got:,} bytes of artifact text (want {LARGE_BYTES:,})")
    return {"s": s, "response_bytes": len(resp), **cpu}


def large_streaming(srv, pid):
    status, hdrs, resp, s, cpu = timed_request(srv, pid, stream_body("go"))
    if status != 200 or "text/event-stream" not in hdrs.get("content-type", ""):
        raise Failure(f"large SendStreamingMessage: HTTP {status} {hdrs.get('content-type')}: {resp[:200]!r}")
    got, state, events = 0, None, 0
    for event in resp.split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if not data:
            continue
        events += 1
        result = rpc_result(200, data, "large SendStreamingMessage event")
        if "artifactUpdate" in result:
            got += sum(len(p.get("text", "")) for p in result["artifactUpdate"]["artifact"].get("parts", []))
        elif "statusUpdate" in result:
            state = result["statusUpdate"]["status"]["state"]
        elif "task" in result:
            state = dig_state(result["task"])
    if state != "TASK_STATE_COMPLETED" or got != LARGE_BYTES:
        raise Failure(f"large SendStreamingMessage: last state {state}, {got:,} bytes of artifact text "
                      f"in {events} events (want {LARGE_BYTES:,})")
    return {"s": s, "response_bytes": len(resp), "events": events, **cpu}


def dig_state(task):
    return (task.get("status") or {}).get("state")


# ---------------------------------------------------------------- memory


def memory(args):
    """RSS kept per finished task of 8 MiB output, for each build given."""
    out = {"tasks": MEMORY_TASKS, "output_bytes": MEMORY_OUTPUT_BYTES, "exec": MEMORY_EXEC, "builds": {}}
    builds = {"musl": args.agentd}
    if getattr(args, "agentd_glibc", None):
        builds["glibc"] = args.agentd_glibc
    for build, binary in builds.items():
        out["builds"][build] = memory_one(args, build, binary)
    return out


def memory_one(args, build, binary):
    srv = servers.AgentdBinary(args, f"memory-{build}", [binary, "--exec", MEMORY_EXEC])
    r = {"binary": os.path.relpath(binary, args.repo), "rss_kib": []}
    try:
        srv.start()
        pid = srv.proc.pid
        c = HttpConn(srv.sock)
        try:
            # Small tasks first, so the daemon's first-task allocations are
            # not counted as the large tasks'.
            for i in range(20):
                rpc_result(*_sr(c.post(send_body("hi", f"w{i}"))), "memory warm-up SendMessage")
            rss0 = settle_rss(pid)
            r["rss_kib"].append(rss0)
            for i in range(MEMORY_TASKS):
                res = rpc_result(*_sr(c.post(send_body("big", f"b{i}"))), "memory SendMessage")
                task = res.get("task") or {}
                got = sum(len(p.get("text", "")) for a in task.get("artifacts", []) for p in a.get("parts", []))
                if dig_state(task) != "TASK_STATE_COMPLETED" or got != MEMORY_OUTPUT_BYTES:
                    raise Failure(f"memory SendMessage: state {dig_state(task)}, {got:,} bytes of artifact text")
                r["rss_kib"].append(settle_rss(pid, 0.2))
        finally:
            c.close()
        rss_end = settle_rss(pid, 1.0)
        r["rss_end_kib"] = rss_end
        r["per_task_kib"] = (rss_end - rss0) / MEMORY_TASKS
        r["ratio"] = r["per_task_kib"] * 1024 / MEMORY_OUTPUT_BYTES
        r["retained"] = status_tasks(srv)
        log(f"memory: {build}: +{r['per_task_kib'] / 1024:.1f} MiB RSS kept per finished task of 8 MiB output "
            f"({r['ratio']:.2f}×; RSS {rss0 / 1024:.1f} → {rss_end / 1024:.1f} MiB over {MEMORY_TASKS} tasks)")
    except Exception as e:
        fail(r, f"memory-{build}", e, srv)
    finally:
        srv.cleanup()
    return r


def run(args, names):
    """The benches of `names` (a subset of BENCHES), in order; their results by name."""
    out = {}
    for name in names:
        log(f"=== {name}")
        out[name] = {"growth": growth, "large": large, "memory": memory}[name](args)
    return out


def failed(results):
    """The names of the benches (or their parts) that failed."""
    bad = []
    for name, r in results.items():
        if "error" in r:
            bad.append(name)
        for part, sub in {**r.get("runners", {}), **r.get("builds", {})}.items():
            if "error" in sub:
                bad.append(f"{name}-{part}")
    return bad
