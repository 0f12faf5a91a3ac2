#!/bin/sh
# exclusive (own boot): RDMA netns mode exclusive. soft-RoCE (rxe) cannot
# change netns, so ADD in "mode":"exclusive" must fail with CNI error 102
# naming rxe0, and leave the node as it was. "mode":"shared" configured on an
# exclusive kernel must fail with 101.
. /scenarios/lib.sh

# The switch works only while no netns but init_net exists.
step switch-to-exclusive
if out=$(rdma system set netns exclusive 2>&1) && [ "$(netns_mode)" = exclusive ]; then
	pass
else
	fail "rdma system set netns exclusive: $out; mode now $(netns_mode)"
fi
show rdma system show
check setup-rxe setup_rxe

for V in 0.4.0 1.0.0; do
	PFX="v$V/"
	NETDIR=/etc/cni/net.d-excl-$V
	DATADIR=/run/rdma-chain-excl-$V
	write_conflist "$NETDIR" "$V" "\"mode\":\"exclusive\",\"devices\":[\"rxe0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\""
	info "cniVersion $V conflist: $(tr -d '\n' <"$NETDIR/rdmanet.conflist")"
	ip netns add pod1

	cni cnitool add pod1
	step add-fails
	if [ "$CNI_RC" != 0 ]; then pass; else fail "ADD succeeded; soft-RoCE cannot change netns"; fi
	step add-error-names-rxe0
	case "$CNI_OUT" in *rxe0*) pass ;; *) fail "error does not name rxe0: $CNI_OUT" ;; esac

	# What the node looks like after the failed ADD (before any DEL).
	show ip -n pod1 -o link show
	show ip -o addr show veth0
	show rdma dev
	links=$(pod_links pod1)
	info "after failed ADD, pod1 netns has: $links (ptp ran before rdma-chain; libcni does not undo it, the runtime's DEL does)"
	check veth0-in-init-net sh -c "/usr/sbin/ip addr show veth0 | grep -q 'inet 192.168.77.1/24'"
	check rxe0-in-init-net sh -c "/usr/sbin/rdma dev | grep -q '^[0-9]*: rxe0:'"
	check rxe0-still-on-veth0 sh -c "/usr/sbin/rdma link show | grep -q 'rxe0/1 .*netdev veth0'"
	step no-state-file
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records after a failed ADD: $(state_files)"; fi
	step pod-netns-only-lo-eth0
	bad=
	for l in $links; do case "$l" in lo | eth0) ;; *) bad="$bad $l" ;; esac; done
	if [ -z "$bad" ]; then pass; else fail "unexpected links in pod1:$bad (all: $links)"; fi
	step rxe0-not-in-pod
	if ip netns exec pod1 /usr/sbin/rdma dev 2>&1 | grep -q rxe0; then fail "rxe0 visible in pod1"; else pass; fi

	cni cnitool del pod1
	expect_ok del-after-failed-add
	check pod-clean-after-del sh -c "test \"\$(/usr/sbin/ip -n pod1 -o link show | wc -l)\" -eq 1"

	# The same ADD through cnicall shows the CNI error code.
	cni cnicall add pod1
	expect_code add-code-102 102 rxe0
	cni cnicall del pod1
	expect_ok del-after-code-102

	# mode shared configured, kernel exclusive -> 101
	write_conflist "$NETDIR" "$V" "\"mode\":\"shared\",\"devices\":[\"rxe0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",\"sharedLink\":{\"type\":\"ipvlan\",\"mode\":\"l2\"}"
	cni cnicall add pod1
	expect_code shared-on-exclusive-101 101
	show ip -n pod1 -o link show
	check no-rdma0-after-101 sh -c "! /usr/sbin/ip -n pod1 link show rdma0 >/dev/null 2>&1"
	cni cnicall del pod1
	expect_ok del-after-101
	step no-state-file-after-101
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records: $(state_files)"; fi
	ip netns del pod1
done
check mode-still-exclusive test "$(netns_mode)" = exclusive
exit 0
