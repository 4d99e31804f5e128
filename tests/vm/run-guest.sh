#!/usr/bin/env bash
# run-guest.sh WORKDIR INITRAMFS PORT
#
# Boots the guest under qemu (TCG) with a vhost-user vsock device served by
# vhost-device-vsock, and returns once both run. Prints the hybrid-vsock unix
# socket path on stdout: connect, send "CONNECT PORT\n", read "OK N\n", then
# the stream is the guest's vsock port. PORT goes on the kernel command line
# as vsockport=PORT. Leaves in WORKDIR: console.log, vhost.log, qemu.log,
# qemu.pid, vhost.pid, sockdir (where the sockets are). Stop with stop-guest.sh.
# Env: VM_ACCEL (default tcg), VM_CID (3), VM_MEM (256M), VM_APPEND (extra
#      kernel args), VM_KERNEL_IMAGE (default boot/vmlinux-REL, else vmlinuz).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -eq 3 ] || { sed -n '2,12s/^# \{0,1\}//p' "$0" >&2; exit 2; }
mkdir -p "$1"
work=$(cd "$1" && pwd) initrd=$2 port=$3
[ -f "$initrd" ] || vm_die "$initrd: no such initramfs"
[[ $port =~ ^[0-9]+$ ]] || vm_die "bad port $port"
command -v qemu-system-x86_64 >/dev/null || vm_die "qemu-system-x86_64 not installed: run tests/vm/setup.sh"
[ -x "$VHOST_DEVICE_VSOCK" ] || vm_die "$VHOST_DEVICE_VSOCK missing: run tests/vm/setup.sh"
vm_kernel
kimage=${VM_KERNEL_IMAGE:-$VM_BOOT_IMAGE}
for f in qemu.pid vhost.pid; do
	if [ -s "$work/$f" ] && kill -0 "$(cat "$work/$f")" 2>/dev/null; then
		vm_die "$work/$f: pid $(cat "$work/$f") still runs; stop-guest.sh $work first"
	fi
done

# unix socket paths are limited to 107 bytes; vhost-device-vsock also dials
# "<uds-path>_<port>" for guest-initiated connections, so keep 11 spare.
sockdir=$work
if [ $((${#work} + 9 + 11)) -gt 107 ]; then  # 9 = "/vm.vsock"
	sockdir=$(mktemp -d /tmp/agentd-vm.XXXXXX)
fi
echo "$sockdir" >"$work/sockdir"
vhost=$sockdir/vhost.sock hybrid=$sockdir/vm.vsock
rm -f "$vhost" "$hybrid" "$work"/{console,vhost,qemu}.log "$work"/{qemu,vhost}.pid

"$VHOST_DEVICE_VSOCK" --guest-cid "${VM_CID:-3}" --socket "$vhost" --uds-path "$hybrid" \
	</dev/null >"$work/vhost.log" 2>&1 &
echo $! >"$work/vhost.pid"
for _ in $(seq 100); do [ -S "$vhost" ] && break; sleep 0.05; done
if [ ! -S "$vhost" ]; then
	"$(dirname "$0")/stop-guest.sh" "$work" >/dev/null 2>&1 || true
	vm_die "vhost-device-vsock did not create $vhost; see $work/vhost.log: $(tail -3 "$work/vhost.log")"
fi

mem=${VM_MEM:-256M}
# -daemonize returns only once qemu is up (or failed); it rules out -nographic,
# so "-display none -serial file:" stands in for it. The memfd backend with
# share=on is what lets vhost-device-vsock map guest memory: without it the
# device never works and nothing says why.
if ! qemu-system-x86_64 \
	-machine pc -accel "${VM_ACCEL:-tcg}" -m "$mem" -smp 1 -no-reboot \
	-nodefaults -no-user-config -display none -monitor none \
	-serial "file:$work/console.log" \
	-object "memory-backend-memfd,id=mem,size=$mem,share=on" -numa node,memdev=mem \
	-chardev "socket,id=vsock0,path=$vhost" -device vhost-user-vsock-pci,chardev=vsock0 \
	-kernel "$kimage" -initrd "$initrd" \
	-append "console=ttyS0 panic=-1 quiet vsockport=$port ${VM_APPEND:-}" \
	-daemonize -pidfile "$work/qemu.pid" </dev/null >"$work/qemu.log" 2>&1; then
	"$(dirname "$0")/stop-guest.sh" "$work" >/dev/null 2>&1 || true
	vm_die "qemu failed to start; $work/qemu.log says: $(cat "$work/qemu.log")"
fi
echo "$hybrid"
