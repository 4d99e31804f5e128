#!/usr/bin/env bash
# setup.sh — installs what the VM tests need, skipping what is already there:
#   Debian packages  qemu-system-x86 (same version as qemu-utils) cpio xz-utils zstd
#                    gcc libc6-dev python3
#   kernel           newest linux-image-*-cloud-amd64, `dpkg -x` into $AGENTD_VM_DIR/kernel
#   vhost-device-vsock  `cargo install` into $AGENTD_VM_DIR/tools
# One line per component; exits non-zero with the reason if one can't be had.
# Env: AGENTD_VM_DIR (default target/vm; point it outside the checkout to keep
# the kernel and tools across fresh clones), VM_KERNEL_PKG (a specific
# linux-image package), VHOST_DEVICE_VSOCK_VERSION (default 0.3.0).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_update() {
	[ $apt_updated = 1 ] && return 0
	apt-get update -qq >/dev/null 2>&1 || vm_die "apt-get update failed (are Debian's package mirrors reachable? are we root?)"
	apt_updated=1
}

# --- Debian packages. --no-remove everywhere: this must never take anything
# away from the machine image.
apt_install() { # PKG... (PKG may be NAME/RELEASE); extra apt options in $apt_opts
	[ "$(id -u)" = 0 ] || vm_die "need Debian packages $* but not root: apt-get install $*"
	apt-get ${apt_opts:-} install -y -qq --no-install-recommends --no-remove "$@" >/dev/null 2>"$VM_DIR/apt.log" ||
		vm_die "apt-get install $* failed: $(grep -v '^W:' "$VM_DIR/apt.log" | tail -5)"
}
mkdir -p "$VM_DIR"
declare -A pkg_of=([cpio]=cpio [xz]=xz-utils [zstd]=zstd [gcc]=gcc [python3]=python3)
missing=()
for cmd in cpio xz zstd gcc python3; do
	command -v "$cmd" >/dev/null || missing+=("${pkg_of[$cmd]}")
done
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || missing+=(libc6-dev) # for gcc -static
if [ ${#missing[@]} -gt 0 ]; then
	apt_update
	apt_install "${missing[@]}"
fi

# qemu: the image's qemu-utils may come from <codename>-backports, and it
# Breaks the stable qemu-system-common (apt would remove qemu-img to install
# stable qemu-system-x86), so take qemu-system-x86 of the same version from
# backports then, through a private apt state dir (no change to the system's
# sources).
if ! command -v qemu-system-x86_64 >/dev/null; then
	uver=$(dpkg-query -W -f '${Version}' qemu-utils 2>/dev/null || true)
	if [[ $uver == *bpo* ]]; then
		bpo=$(. /etc/os-release && echo "${VERSION_CODENAME:?}")-backports b=$VM_DIR/apt-bpo
		mkdir -p "$b/lists/partial" "$b/archives/partial"
		echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $bpo main" >"$b/sources.list"
		apt_opts="-o Dir::Etc::sourcelist=$b/sources.list -o Dir::State::lists=$b/lists -o Dir::Cache::archives=$b/archives -t $bpo"
		apt-get ${apt_opts% -t *} update -qq >/dev/null 2>&1 || vm_die "apt-get update with $bpo failed (needed for qemu-system-x86 $uver)"
		apt_install qemu-system-x86
		apt_opts=
		rm -rf "$b"
	else
		apt_update
		apt_install qemu-system-x86
	fi
fi
echo "qemu: $(qemu-system-x86_64 --version | head -1)"
qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vhost-user-vsock-pci"' ||
	vm_die "this qemu-system-x86_64 has no vhost-user-vsock-pci device (needs QEMU >= 7.0)"
echo "tools: $(cpio --version | head -1), xz $(xz --version | head -1 | awk '{print $NF}'), zstd $(zstd -V | grep -o 'v[0-9.]*' | head -1), $(gcc --version | head -1), $(python3 --version)"

# --- kernel
if ( vm_kernel ) >/dev/null 2>&1; then
	vm_kernel
else
	pkg=${VM_KERNEL_PKG:-}
	if [ -z "$pkg" ]; then
		apt_update
		pkg=$(apt-cache search --names-only '^linux-image-[0-9].*-cloud-amd64$' | awk '{print $1}' | sort -V | tail -1)
		[ -n "$pkg" ] || vm_die "apt-cache search finds no linux-image-*-cloud-amd64 package (is this Debian with main enabled?)"
	fi
	dl=$(mktemp -d "$VM_DIR/kernel-dl.XXXXXX")
	trap 'rm -rf "$dl"' EXIT
	chmod 755 "$dl" # so apt's _apt user may write there
	(cd "$dl" && apt-get download -qq "$pkg" >/dev/null 2>"$dl/log") ||
		{ apt_update; (cd "$dl" && apt-get download -qq "$pkg" >/dev/null 2>"$dl/log"); } ||
		vm_die "apt-get download $pkg failed: $(grep -v '^W:' "$dl/log" | tail -3)"
	dpkg -x "$dl"/*.deb "$dl/x" || vm_die "dpkg -x of $pkg failed"
	rm -rf "$VM_KERNEL_DIR"
	mv "$dl/x" "$VM_KERNEL_DIR"
	vm_kernel
fi
# An uncompressed vmlinux boots straight into its PVH entry (qemu -kernel on an
# ELF with a XEN_ELFNOTE_PHYS32_ENTRY note), skipping decompression under TCG.
vmlinux=$VM_KERNEL_DIR/boot/vmlinux-$VM_KREL
if [ ! -f "$vmlinux" ]; then
	for fmt in '\x28\xb5\x2f\xfd:zstd -qdc' '\xfd\x37\x7a\x58\x5a\x00:xz -qdc' '\x1f\x8b\x08:gzip -qdc'; do
		off=$(LC_ALL=C grep -obUaP "${fmt%%:*}" "$VM_VMLINUZ" | head -1 | cut -d: -f1)
		[ -n "$off" ] || continue
		tail -c +$((off + 1)) "$VM_VMLINUZ" | ${fmt#*:} >"$vmlinux.tmp" 2>/dev/null || true # trailing data: non-zero exit
		if [ "$(head -c 4 "$vmlinux.tmp")" = $'\x7fELF' ] && readelf -n "$vmlinux.tmp" 2>/dev/null | grep -q '(0x00000012)'; then
			mv "$vmlinux.tmp" "$vmlinux"
			break
		fi
	done
	rm -f "$vmlinux.tmp"
fi
vm_kernel
echo "kernel: $VM_KREL (boots $VM_BOOT_IMAGE)"
mods=$VM_KERNEL_DIR/lib/modules/$VM_KREL
for m in $VM_MODULES; do
	grep -q "/$m\.ko$" "$mods/modules.builtin" ||
		[ -n "$(find "$mods/kernel" -name "$m.ko*" -print -quit)" ] ||
		vm_die "kernel $VM_KREL has module $m neither built in nor under $mods/kernel"
done

# --- vhost-device-vsock
want=${VHOST_DEVICE_VSOCK_VERSION:-0.3.0}
have=$("$VHOST_DEVICE_VSOCK" --version 2>/dev/null | awk '{print $2}') || true
if [ "$have" != "$want" ]; then
	cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
	[ -x "$cargo" ] || vm_die "cargo not found: needed to install vhost-device-vsock $want"
	echo "vhost-device-vsock: installing $want with cargo (a few minutes on 2 cores)..." >&2
	"$cargo" install -q vhost-device-vsock --version "$want" --locked --root "$VM_TOOLS" -j2 \
		>"$VM_DIR/cargo-install.log" 2>&1 ||
		vm_die "cargo install vhost-device-vsock $want failed; tail of $VM_DIR/cargo-install.log: $(tail -5 "$VM_DIR/cargo-install.log")"
	have=$("$VHOST_DEVICE_VSOCK" --version | awk '{print $2}')
fi
echo "vhost-device-vsock: $have ($VHOST_DEVICE_VSOCK)"

# --- busybox (static), for the programs agentd runs inside the guest
bb=$VM_DIR/busybox/bin/busybox
if [ ! -x "$bb" ]; then
	dl=$(mktemp -d "$VM_DIR/busybox-dl.XXXXXX")
	chmod 755 "$dl"
	(cd "$dl" && apt-get download -qq busybox-static >/dev/null 2>"$dl/log") ||
		{ apt_update; (cd "$dl" && apt-get download -qq busybox-static >/dev/null 2>"$dl/log"); } ||
		vm_die "apt-get download busybox-static failed: $(grep -v '^W:' "$dl/log" | tail -3)"
	dpkg -x "$dl"/*.deb "$dl/x" || vm_die "dpkg -x of busybox-static failed"
	mkdir -p "$VM_DIR/busybox/bin"
	cp "$dl/x/bin/busybox" "$bb"
	rm -rf "$dl"
fi
echo "busybox: $("$bb" 2>&1 | head -1)"
