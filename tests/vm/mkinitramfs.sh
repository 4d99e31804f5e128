#!/usr/bin/env bash
# mkinitramfs.sh INIT_BINARY OUT.cpio[.gz] [EXTRA_FILE:GUEST_PATH ...]
#
# Builds a newc initramfs: INIT_BINARY as /init, the vsock modules (those not
# built into the kernel; decompressed) under /lib/modules/ with their load
# order in /lib/modules/modules.load, /dev/console, and each EXTRA_FILE at
# GUEST_PATH (absolute). OUT ending in .gz is gzipped. No root needed.
# KEEP_COMPRESSED=1 keeps modules as .ko.xz/.ko.zst (the init must then pass
# MODULE_INIT_COMPRESSED_FILE to finit_module; guest-init.c does).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -ge 2 ] || { sed -n '2,10s/^# \{0,1\}//p' "$0" >&2; exit 2; }
init=$1 out=$2
shift 2
[ -f "$init" ] && [ -x "$init" ] || vm_die "$init: not an executable file"
command -v cpio >/dev/null || vm_die "cpio not installed: run tests/vm/setup.sh"
vm_kernel
mods=$VM_KERNEL_DIR/lib/modules/$VM_KREL

stage=$(mktemp -d "${TMPDIR:-/tmp}/initramfs.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{proc,sys,dev,run,tmp,lib/modules}
install -m 0755 "$init" "$stage/init"

# Modules: skip built-ins, decompress the rest, check each one's depends=.
loaded=" "
for m in $VM_MODULES; do
	if grep -q "/$m\.ko$" "$mods/modules.builtin"; then
		loaded+="$m "
		continue
	fi
	src=$(find "$mods/kernel" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" -o -name "$m.ko.gz" \) -print -quit)
	[ -n "$src" ] || vm_die "module $m is neither built into $VM_KREL nor under $mods/kernel"
	case $src in
	*.xz) dec="xz -dc" ;;
	*.zst) dec="zstd -qdc" ;;
	*.gz) dec="gzip -dc" ;;
	*) dec="cat" ;;
	esac
	$dec "$src" >"$stage/lib/modules/$m.ko" || vm_die "cannot decompress $src (xz-utils/zstd installed?)"
	deps=$(tr '\0' '\n' <"$stage/lib/modules/$m.ko" | sed -n 's/^depends=//p' | head -1 | tr ',' ' ')
	for d in $deps; do
		[[ $loaded == *" $d "* ]] || vm_die "module $m depends on $d, which is not loaded before it (add it to VM_MODULES in lib.sh)"
	done
	if [ "${KEEP_COMPRESSED:-0}" = 1 ] && [ "$dec" != cat ]; then
		rm "$stage/lib/modules/$m.ko"
		cp "$src" "$stage/lib/modules/"
		basename "$src" >>"$stage/lib/modules/modules.load"
	else
		echo "$m.ko" >>"$stage/lib/modules/modules.load"
	fi
	loaded+="$m "
done
touch "$stage/lib/modules/modules.load"

for x in "$@"; do
	src=${x%%:*} dst=${x#*:}
	[ "$src" != "$x" ] && [[ $dst == /* ]] || vm_die "extra file '$x': expected FILE:/GUEST/PATH"
	[ -e "$src" ] || vm_die "extra file $src does not exist"
	mkdir -p "$stage$(dirname "$dst")"
	cp -a "$src" "$stage$dst"
done

# newc entry by hand (ASCII hex header), so /dev/console needs no mknod/root.
newc() { # NAME MODE RDEVMAJOR RDEVMINOR
	local name=$1 mode=$2 maj=$3 min=$4 len pad
	len=$((${#name} + 1))
	printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' \
		$((++ino)) "$mode" 0 0 1 0 0 0 0 "$maj" "$min" "$len" 0
	printf '%s\0' "$name"
	pad=$(((4 - (110 + len) % 4) % 4))
	head -c "$pad" /dev/zero
}

tmp=$out.tmp
{
	ino=0
	newc dev $((0040755)) 0 0
	newc dev/console $((0020600)) 5 1
	newc TRAILER!!! 0 0 0
	(cd "$stage" && find . -mindepth 1 ! -path ./dev | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet)
} >"$tmp"
case $out in
*.gz) gzip -n -6 <"$tmp" >"$out" && rm "$tmp" ;;
*) mv "$tmp" "$out" ;;
esac
echo "initramfs $out: kernel $VM_KREL, modules: $(tr '\n' ' ' <"$stage/lib/modules/modules.load")" >&2
