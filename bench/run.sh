#!/usr/bin/env bash
# The comparative benchmark: agentd (as shipped, and with tasks.cgroup=off)
# against the official A2A SDK servers (a2a-sdk for Python on uvicorn,
# @a2a-js/sdk on express, its echo answering with one event per task and with
# three), all on unix sockets, one echo agent each, one load generator (oha),
# and the process floors (the exec floor of the same agentd binary and the
# bare fork floor), measured on the same core. See bench/README.md.
#
#   bench/run.sh            16 s per load run in 8 interleaved rounds, start-up median of 5
#   bench/run.sh --quick    3 s per load run in 1 round, start-up median of 1 (a smoke run)
#
# Options: --duration N (seconds per load run, split over the rounds),
# --rounds N (rounds: each measures the floors and every server once, in
# turn, so a slow stretch of the machine falls on all alike), --servers
# agentd,agentd-nocg,python,js,js-3ev,floor,growth,large,memory (the last
# three are issue 38's benches, run after the servers' rounds: growth, the
# echo rate with 1,000 live tasks and 1,000 idle connections held beside it
# with none; large, a 50 MB artifact through the text and jsonl runners to a
# blocking and a streaming client; memory, the RSS kept per finished task of
# 8 MiB output, musl and glibc builds; see bench/scale.py; floor-threads,
# floor-direct and floor-nocg, the supervised floor's variants, run only when
# named: bench/README.md), --baseline
# OLD.json (a previous results.json, the "before" of the no-worse-than-before
# checks), --setup-only.
# Environment: BENCH_SERVER_CPU (default 1) and BENCH_LOADGEN_CPU (default 0)
# pick the cores; AGENTD_BENCH_ARGS adds daemon flags to every agentd; PYTHON
# picks the interpreter for the venv (>= 3.10; default python3);
# CARGO_BUILD_JOBS (default 2).
#
# Setup is idempotent and lives under target/bench/: oha in tools/, a venv in
# venv/, node_modules in js/, results in results.md (+ results.json, raw/).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
out="$repo/target/bench"
jobs=${CARGO_BUILD_JOBS:-2}
server_cpu=${BENCH_SERVER_CPU:-1}
loadgen_cpu=${BENCH_LOADGEN_CPU:-0}
python=${PYTHON:-python3}
musl=x86_64-unknown-linux-musl
oha_version=1.16.0

duration=16 rounds=8 warmup=2 startups=5 mode=full setup_only=0
servers=agentd,agentd-nocg,python,js,js-3ev,floor,growth,large,memory baseline=
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) duration=3 rounds=1 warmup=1 startups=1 mode=quick ;;
        --duration) duration=$2; shift ;;
        --rounds) rounds=$2; shift ;;
        --servers) servers=$2; shift ;;
        --baseline) baseline=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift ;;
        --setup-only) setup_only=1 ;;
        -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

say() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }

for tool in cargo rustup curl taskset node npm "$python"; do
    command -v "$tool" >/dev/null || die "$tool is not on PATH"
done
ncpu=$(nproc)
[ "$server_cpu" -lt "$ncpu" ] && [ "$loadgen_cpu" -lt "$ncpu" ] \
    || die "need CPUs $loadgen_cpu and $server_cpu; this machine has $ncpu"
[ "$server_cpu" != "$loadgen_cpu" ] || say "warning: server and load generator share CPU $server_cpu"
mkdir -p "$out"

# --- oha, the one load generator ---------------------------------------------
oha="$out/tools/bin/oha"
if ! { [ -x "$oha" ] && "$oha" --version 2>/dev/null | grep -q " $oha_version"; }; then
    say "installing oha $oha_version into $out/tools (cargo install, -j$jobs)"
    # --locked: oha's own lock file; the newest versions of some of its
    # dependencies need a newer rustc than the project's toolchain.
    cargo install oha --version "$oha_version" --locked --root "$out/tools" -j"$jobs"
fi

# --- the Python SDK server -----------------------------------------------------
venv="$out/venv"
req="$here/requirements.txt"
stamp="$venv/.bench-requirements"
# uvicorn must also start: a venv copied from another directory keeps
# shebangs that point at the old one.
if ! { [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp" && "$venv/bin/uvicorn" --version >/dev/null 2>&1; }; then
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$python is $("$python" --version 2>&1); a2a-sdk 1.x needs >= 3.10 (set PYTHON=...)"
    say "setting up the venv in $venv (a2a-sdk, uvicorn)"
    "$venv/bin/python" -c '' 2>/dev/null && "$venv/bin/uvicorn" --version >/dev/null 2>&1 \
        || { rm -rf "$venv"; "$python" -m venv "$venv"; }
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$stamp"
fi

# Run from a copy, so that its __pycache__ lands under target/, not in bench/.
mkdir -p "$out/py"
cp "$here/python_server.py" "$out/py/python_server.py"

# --- the JavaScript SDK server -------------------------------------------------
js="$out/js"
mkdir -p "$js"
if ! { [ -d "$js/node_modules/@a2a-js/sdk" ] && cmp -s "$here/js/package-lock.json" "$js/.bench-lock"; }; then
    say "npm ci in $js (@a2a-js/sdk, express)"
    cp "$here/js/package.json" "$here/js/package-lock.json" "$js/"
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$here/js/package-lock.json" "$js/.bench-lock"
fi
# Next to its node_modules, so its bare imports resolve.
cp "$here/js/server.mjs" "$js/server.mjs"

# --- agentd: the static release binary ----------------------------------------
if ! rustup target list --installed | grep -qx "$musl"; then
    say "rustup target add $musl"
    rustup target add "$musl"
fi
say "cargo build --release --target $musl -j$jobs"
(cd "$repo" && cargo build --release --target "$musl" -j"$jobs" --quiet)
agentd="$repo/target/$musl/release/agentd"
[ -x "$agentd" ] || die "no binary at $agentd"

# The process floors: a small compiled loop (benches/spawn_floor.rs), built
# for the same target as agentd, so it spawns and forks through the same libc,
# as a small static binary (which is what a fork's cost depends on); and the
# supervised floor (benches/supervised_floor.rs), a server that does for each
# task what agentd does for its worker and nothing else.
say "cargo build --release --target $musl --bench spawn_floor --bench supervised_floor -j$jobs"
built=$(cd "$repo" && cargo build --release --target "$musl" --bench spawn_floor --bench supervised_floor \
            -j"$jobs" --quiet --message-format json)
floor=$(printf '%s\n' "$built" | sed -n 's/.*"executable":"\([^"]*spawn_floor-[^"]*\)".*/\1/p' | tail -n 1)
supervised=$(printf '%s\n' "$built" | sed -n 's/.*"executable":"\([^"]*supervised_floor-[^"]*\)".*/\1/p' | tail -n 1)
[ -n "$floor" ] && [ -x "$floor" ] || die "no spawn_floor executable from cargo build"
[ -n "$supervised" ] && [ -x "$supervised" ] || die "no supervised_floor executable from cargo build"

# The glibc build, for the memory bench's second column (built only when the
# memory bench is asked for: a whole second release build).
agentd_glibc=
case ",$servers," in
    *,memory,*)
        say "cargo build --release -j$jobs (the glibc build, for the memory bench)"
        (cd "$repo" && cargo build --release -j"$jobs" --quiet)
        agentd_glibc="$repo/target/release/agentd"
        [ -x "$agentd_glibc" ] || die "no binary at $agentd_glibc"
        ;;
esac

[ "$setup_only" = 1 ] && { say "setup done"; exit 0; }

# --- measure -------------------------------------------------------------------
# The harness (and so oha and curl, its children) runs on the load-generator
# core; it starts every server under `taskset -c $server_cpu`. No
# __pycache__ in bench/ from its imports (report, scale).
PYTHONDONTWRITEBYTECODE=1 exec taskset -c "$loadgen_cpu" "$venv/bin/python" "$here/harness.py" \
    --mode "$mode" --duration "$duration" --rounds "$rounds" --warmup "$warmup" --startups "$startups" \
    --servers "$servers" --server-cpu "$server_cpu" --loadgen-cpu "$loadgen_cpu" \
    --agentd "$agentd" --oha "$oha" --venv "$venv" --js-dir "$js" \
    --py-dir "$out/py" --repo "$repo" --out "$out" --spawn-floor "$floor" --supervised-floor "$supervised" \
    ${baseline:+--baseline "$baseline"} ${agentd_glibc:+--agentd-glibc "$agentd_glibc"}
