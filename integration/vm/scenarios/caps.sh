#!/bin/sh
# caps (own boot, with a second NIC and rc.simrdma=eth0): what this kernel
# offers the plugin, as "RC-CAP KEY VALUE" lines that integration/vm/vm_test.go
# compares with the kernel's row of the table in docs/kernels.md. kcaps
# (integration/vm/guest/kcaps) prints the SMC and netns-local keys; this
# script probes the RDMA netns operations with rdma(8), first thing in the
# boot (the mode can only change while no other netns exists):
#   rdma_mode_set  yes|no  `rdma system set netns exclusive`, then `shared` again
#   move_simrdma   yes|no  exclusive mode: `rdma dev set simrdma0 netns X`
#                          (a driver with disassociate_ucontext)
#   move_rxe       yes|no  the same for soft-RoCE's rxe0
# A device moved to X comes back to init_net when X is deleted.
. /scenarios/lib.sh

cap() { echo "RC-CAP $1 $2"; }
yes_no() { if "$@" >/tmp/caps.out 2>&1; then echo yes; else echo no; fi; }

grep -q ' /sys/fs/bpf bpf ' /proc/mounts || mount -t bpf bpf /sys/fs/bpf
step kcaps
if out=$(kcaps 2>&1); then pass; else fail "kcaps: $out"; fi
echo "$out"

step mode-exclusive
mode_set=$(yes_no rdma system set netns exclusive)
info "rdma system set netns exclusive: $mode_set $(cat /tmp/caps.out); mode now $(netns_mode)"
pass
check rxe0 setup_rxe
check simrdma0-registered sh -c "/usr/sbin/rdma dev | grep -q ': simrdma0:'"
# move DEV: yes when the kernel moves DEV into netns capns (and it shows there)
move() {
	rdma dev set "$1" netns capns && ip netns exec capns /usr/sbin/rdma dev | grep -q ": $1:"
}
ip netns add capns
for d in simrdma0 rxe0; do
	step move-$d
	v=no
	if [ "$(netns_mode)" = exclusive ]; then v=$(yes_no move $d); fi
	info "rdma dev set $d netns capns: $v $(cat /tmp/caps.out)"
	eval "move_$d=\$v"
	pass
done
ip netns del capns
for d in simrdma0 rxe0; do
	eval "v=\$move_$d"
	[ "$v" = yes ] || continue
	check back-$d wait_until 30 sh -c "/usr/sbin/rdma dev | grep -q ': $d:'"
done
# Back to shared: EBUSY until the kernel has freed capns.
step mode-shared
if [ "$mode_set" = yes ] && ! wait_until 30 rdma system set netns shared; then
	mode_set=no
fi
info "rdma system set netns shared: mode now $(netns_mode)"
[ "$mode_set" = no ] || [ "$(netns_mode)" = shared ] || mode_set=no
pass
cap rdma_mode_set "$mode_set"
cap move_simrdma "$move_simrdma0"
cap move_rxe "$move_rxe0"
exit 0
