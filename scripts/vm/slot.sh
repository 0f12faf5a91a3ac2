# Sourced: slot_acquire waits for one of the VM slots that every qemu-booting
# tier shares (internal/testonly/vmslot is the same protocol in Go): an
# flock(2) on one of RC_VM_SLOTS files (default: the number of CPUs) in
# RC_VM_SLOTS_DIR (default $TMPDIR/rdma-chain-vm-slots). A TCG guest is one
# busy host thread, so one guest per core. The one waiting holds the gate
# file, so a tier that has just released a slot and asks again waits behind
# it. The slot is held on SLOT_FD until slot_release (or the shell's exit);
# SLOT_NAME says which.
slot_acquire() {
	local dir=${RC_VM_SLOTS_DIR:-${TMPDIR:-/tmp}/rdma-chain-vm-slots} n=${RC_VM_SLOTS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)} i start gate
	case $n in '' | *[!0-9]*) n=0 ;; *) n=$((10#$n)) ;; esac
	if [ "$n" -lt 1 ] || [ "$n" -gt 256 ]; then
		echo "slot.sh: RC_VM_SLOTS=${RC_VM_SLOTS:-}: want a whole number from 1 to 256" >&2
		return 1
	fi
	mkdir -p -m 0700 "$dir" 2>/dev/null
	if [ -L "$dir" ] || [ ! -d "$dir" ] || [ "$(stat -c %u "$dir")" != "$(id -u)" ] || [ -n "$(find "$dir" -maxdepth 0 -perm /022)" ]; then
		echo "slot.sh: $dir: not a directory of uid $(id -u) writable by it alone" >&2
		return 1
	fi
	for i in gate $(seq 0 $((n - 1))); do
		[ "$i" = gate ] || i=slot-$i
		[ -L "$dir/$i" ] && { echo "slot.sh: $dir/$i is a symlink" >&2; return 1; }
	done
	start=$(date +%s)
	exec {gate}>>"$dir/gate" || return 1
	flock "$gate"
	while :; do
		for ((i = 0; i < n; i++)); do
			exec {SLOT_FD}>>"$dir/slot-$i" || { exec {gate}>&-; return 1; }
			if flock -n "$SLOT_FD"; then
				exec {gate}>&-
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
