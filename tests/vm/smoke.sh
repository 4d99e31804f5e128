#!/usr/bin/env bash
# smoke.sh [PORT] — the end-to-end proof: setup, build guest-init, build the
# initramfs, boot, dial the guest's vsock PORT (default 5000) through the
# hybrid socket, check the hello line, stop the VM. Prints timings; the last
# line is "vm-smoke: 1 passed, 0 failed" (or "0 passed, 1 failed", exit 1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
port=${1:-5000}

"$here/setup.sh"
vm_kernel
work=$VM_DIR/smoke
mkdir -p "$work"
gcc -static -O2 -Wall -Wextra -o "$VM_DIR/guest-init" "$here/guest-init.c"
"$here/mkinitramfs.sh" "$VM_DIR/guest-init" "$work/initramfs.cpio"

fail() {
	echo "vm-smoke: FAILED: $*" >&2
	for f in console vhost qemu; do
		[ -s "$work/$f.log" ] && { echo "--- $work/$f.log (tail)" >&2; tail -20 "$work/$f.log" >&2; }
	done
	echo "vm-smoke: 0 passed, 1 failed"
	exit 1
}
trap '"$here/stop-guest.sh" "$work"' EXIT
t0=$(date +%s.%N)
sock=$("$here/run-guest.sh" "$work" "$work/initramfs.cpio" "$port") || fail "run-guest.sh"
line=$("$here/hybrid-connect.py" "$sock" "$port" 120) || fail "no answer on vsock port $port"
t1=$(date +%s.%N)
[ "$line" = "hello from guest $VM_KREL" ] || fail "unexpected line '$line'"
echo "vm-smoke: got '$line' via $sock"
echo "vm-smoke: qemu start -> hello: $(echo "$t1 - $t0" | bc | xargs printf '%.2f') s; guest: $(grep -o 'uptime [0-9.]* s' "$work/console.log")"
echo "vm-smoke: 1 passed, 0 failed"
