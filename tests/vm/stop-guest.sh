#!/usr/bin/env bash
# stop-guest.sh WORKDIR — stops the qemu and vhost-device-vsock that
# run-guest.sh started (pids in WORKDIR/*.pid) and removes their sockets.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
work=$1
for f in qemu vhost; do
	pidf=$work/$f.pid
	[ -s "$pidf" ] || continue
	pid=$(cat "$pidf")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$pidf"
done
if [ -s "$work/sockdir" ]; then
	sockdir=$(cat "$work/sockdir")
	rm -f "$sockdir"/vhost.sock "$sockdir"/vm.vsock "$sockdir"/vm.vsock_*
	case $sockdir in /tmp/agentd-vm.*) rmdir "$sockdir" 2>/dev/null ;; esac
	rm -f "$work/sockdir"
fi
exit 0
