# Shared paths for the VM test scripts; sourced, not run.
# Overrides: AGENTD_VM_DIR (scratch root), VM_KERNEL_DIR (a `dpkg -x` of a
# linux-image .deb), VHOST_DEVICE_VSOCK (the binary).
VM_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VM_DIR=${AGENTD_VM_DIR:-$VM_REPO/target/vm}
VM_KERNEL_DIR=${VM_KERNEL_DIR:-$VM_DIR/kernel}
VM_TOOLS=$VM_DIR/tools
VHOST_DEVICE_VSOCK=${VHOST_DEVICE_VSOCK:-$VM_TOOLS/bin/vhost-device-vsock}

# The modules vsock needs, in load order; those built into the kernel are skipped.
VM_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport"

vm_die() { echo "$(basename "$0"): ERROR: $*" >&2; exit 1; }

# Sets VM_KREL (kernel release), VM_VMLINUZ and VM_BOOT_IMAGE (the
# uncompressed PVH-bootable boot/vmlinux-REL that setup.sh extracts, which
# spares TCG the ~2-3 s of decompressing vmlinuz; else vmlinuz), or dies.
vm_kernel() {
	local d
	for d in "$VM_KERNEL_DIR"/lib/modules/*/; do
		[ -d "$d" ] || continue
		VM_KREL=$(basename "$d")
		VM_VMLINUZ=$VM_KERNEL_DIR/boot/vmlinuz-$VM_KREL
		VM_BOOT_IMAGE=$VM_KERNEL_DIR/boot/vmlinux-$VM_KREL
		[ -f "$VM_BOOT_IMAGE" ] || VM_BOOT_IMAGE=$VM_VMLINUZ
		[ -f "$VM_VMLINUZ" ] && return 0
	done
	vm_die "no kernel under $VM_KERNEL_DIR (expected boot/vmlinuz-REL and lib/modules/REL): run tests/vm/setup.sh"
}
