#!/usr/bin/env python3
"""Interleaved A/B of agentd binaries: is a change faster, on this machine, now?

Each round starts every variant fresh, in an order that rotates from round to
round, warms it for 1 s, then drives blocking SendMessage to the built-in echo
agent with oha for the given seconds; the server runs on one core, oha on the
other (as in bench/run.sh). A slow stretch of a shared machine falls on every
variant alike, so the per-round ratio is what to read, and its median.

    bench/run.sh --setup-only          # installs oha under target/bench/
    python3 bench/ab.py A=old/agentd B=target/x86_64-unknown-linux-musl/release/agentd
    python3 bench/ab.py --rounds 6 --seconds 3 --concurrency 1 A=... B=...
    python3 bench/ab.py cg=agentd 'nocg=agentd --set tasks.cgroup=off'

A variant is NAME=BINARY, optionally followed by daemon flags. The first
variant is the baseline every other is divided by.

Read a median against the noise of the same run: `--control` runs the
baseline a second time as one more variant (NAME-again). On a shared 2-vCPU
machine an identical binary has come out anywhere from 0.94 to 1.10 of
itself over 8–14 rounds; a change that does not clear its control did not
show.
"""
import argparse
import os
import shlex
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in bench/ (run.sh runs from copies for the same reason)
import servers  # noqa: E402  (AgentdBinary, pinned_oha, run_oha, tree_cpu_s)


def measure(args, variants, out):
    """Every round, every variant: (req/s, µs CPU per request, p99 ms) per round, by name."""
    opts = servers.pinned_oha(args, out)
    names = list(variants)
    results = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            srv = servers.AgentdBinary(args, name, variants[name])
            try:
                srv.start()
                servers.run_oha(opts, srv.sock, args.concurrency, 1, True, f"{name}-warmup-{r}")
                cpu0 = servers.tree_cpu_s(srv.proc.pid)
                res = servers.run_oha(opts, srv.sock, args.concurrency, args.seconds, True, f"{name}-{r}")
                cpu_us = (servers.tree_cpu_s(srv.proc.pid) - cpu0) / res["n"] * 1e6
            except servers.Failure as e:
                raise SystemExit(f"ab: {name}: {e}")
            finally:
                srv.cleanup()
            results[name].append((res["rps"], cpu_us, res["p99_ms"]))
            print(f"round {r} {name}: {res['rps']:,.0f} req/s, {cpu_us:.0f} µs CPU/req, p99 {res['p99_ms']:.2f} ms",
                  flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+", help="NAME=BINARY [flags]; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5, help="per variant per round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--oha", default=os.path.join(HERE, "..", "target", "bench", "tools", "bin", "oha"))
    ap.add_argument("--server-cpu", default=os.environ.get("BENCH_SERVER_CPU", "1"))
    ap.add_argument("--loadgen-cpu", default=os.environ.get("BENCH_LOADGEN_CPU", "0"))
    ap.add_argument("--control", action="store_true",
                    help="run the baseline twice: its second copy's ratio is this run's noise")
    args = ap.parse_args()
    if len(args.variants) < 2 and not args.control:
        ap.error("give at least two variants (or one and --control)")
    if not os.access(args.oha, os.X_OK):
        ap.error(f"no oha at {args.oha}: run bench/run.sh --setup-only first")
    variants = {}
    for v in args.variants:
        name, _, rest = v.partition("=")
        if not rest:
            ap.error(f"{v!r}: write NAME=BINARY [flags]")
        variants[name] = shlex.split(rest)
    if args.control:
        base_name = next(iter(variants))
        variants[base_name + "-again"] = variants[base_name]
    names = list(variants)
    with tempfile.TemporaryDirectory(prefix="agentd-ab-raw-") as out:
        results = measure(args, variants, out)
    print(f"\nSendMessage c={args.concurrency}, {args.rounds} rounds × {args.seconds} s, medians:")
    base = names[0]
    for name in names:
        rps, cpu, p99 = zip(*results[name])
        line = f"  {name}: {statistics.median(rps):,.0f} req/s, {statistics.median(cpu):.0f} µs CPU/req, " \
               f"p99 {statistics.median(p99):.2f} ms"
        if name != base:
            ratio = [x[0] / b[0] for x, b in zip(results[name], results[base])]
            cpu_ratio = [x[1] / b[1] for x, b in zip(results[name], results[base])]
            line += (f"; ÷ {base} per round {' '.join(f'{x:.2f}' for x in ratio)}, "
                     f"median {statistics.median(ratio):.3f} (CPU/req {statistics.median(cpu_ratio):.3f})")
        print(line)


if __name__ == "__main__":
    main()
