# Sourced: slot_acquire waits for one of the VM slots that every qemu-booting
# tier shares (internal/testonly/vmslot is the same protocol in Go): an
# flock(2) on one of RC_VM_SLOTS files (default: the number of CPUs) in
# RC_VM_SLOTS_DIR (default $TMPDIR/rdma-chain-vm-slots). A TCG guest is one
# busy host thread, so one guest per core. The slot is held on SLOT_FD until
# slot_release (or the shell's exit); SLOT_NAME says which.
slot_acquire() {
	local dir=${RC_VM_SLOTS_DIR:-${TMPDIR:-/tmp}/rdma-chain-vm-slots} n=${RC_VM_SLOTS:-$(nproc)} i start
	case $n in '' | *[!0-9]* | 0) echo "slot.sh: RC_VM_SLOTS=$n: want a whole number from 1" >&2; return 1 ;; esac
	mkdir -p -m 0700 "$dir" 2>/dev/null
	if [ -L "$dir" ] || [ ! -d "$dir" ] || [ "$(stat -c %u "$dir")" != "$(id -u)" ]; then
		echo "slot.sh: $dir: not a directory of uid $(id -u)" >&2
		return 1
	fi
	start=$(date +%s)
	while :; do
		for ((i = 0; i < n; i++)); do
			[ -L "$dir/slot-$i" ] && { echo "slot.sh: $dir/slot-$i is a symlink" >&2; return 1; }
			exec {SLOT_FD}>>"$dir/slot-$i" || return 1
			if flock -n "$SLOT_FD"; then
				SLOT_NAME=slot-$i
				echo "slot.sh: $SLOT_NAME after $(($(date +%s) - start)) s" >&2
				return 0
			fi
			exec {SLOT_FD}>&-
		done
		sleep 0.25
	done
}

slot_release() {
	[ -n "${SLOT_FD:-}" ] && exec {SLOT_FD}>&-
	SLOT_FD=
}
