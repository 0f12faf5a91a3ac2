#!/bin/sh
# shared: RDMA netns mode shared, "podSelection":"all". Each pod gets an
# ipvlan (L2) child of rxe0's netdev veth0, named rdma0, in its netns; the
# parent and rxe0 stay in init_net. CHECK, DEL (twice), DEL after the netns
# is gone. Runs at cniVersion 0.4.0 and 1.0.0.
. /scenarios/lib.sh

check setup-rxe setup_rxe
check mode-is-shared test "$(netns_mode)" = shared
VETH0_IDX=$(cat /sys/class/net/veth0/ifindex)
# For the rping check: a node address in the pods' /64 on the parent.
ip addr add fd00::1/64 dev veth0 nodad

for V in 0.4.0 1.0.0; do
	PFX="v$V/"
	NETDIR=/etc/cni/net.d-shared-$V
	DATADIR=/run/rdma-chain-shared-$V
	write_conflist "$NETDIR" "$V" "\"mode\":\"shared\",\"devices\":[\"rxe0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",\"sharedLink\":{\"type\":\"ipvlan\",\"mode\":\"l2\"}"
	info "cniVersion $V conflist: $(tr -d '\n' <"$NETDIR/rdmanet.conflist")"
	n=0
	for pod in pod1 pod2; do
		ip netns add $pod
		cni cnitool add $pod
		expect_ok add-$pod
		n=$((n + 1))

		step result-$pod
		e=$(rdma0_entry)
		case "$e" in
		*'"mac":"'??:??:??:??:??:??'"'*) case "$e" in
			*'"sandbox":"/var/run/netns/'$pod'"'*) pass ;;
			*) fail "rdma0 entry lacks sandbox /var/run/netns/$pod: '$e'" ;;
			esac ;;
		*) fail "no rdma0 entry with a mac in the result (got '$e')" ;;
		esac
		step result-keeps-prev-$pod
		c=$(echo "$CNI_OUT" | tr -d ' \n')
		case "$c" in *'"name":"eth0"'*'"10.99.0.'*) pass ;; *) fail "ptp's eth0/10.99.0.x missing from the result" ;; esac

		show ip -n $pod -d link show rdma0
		check ipvlan-child-$pod sh -c "/usr/sbin/ip -n $pod -d link show rdma0 | grep -q 'ipvlan  *mode l2'"
		check child-up-$pod sh -c "/usr/sbin/ip -n $pod link show rdma0 | head -n1 | grep -q '[<,]UP[,>]'"
		check child-of-veth0-$pod sh -c "/usr/sbin/ip -n $pod -o link show rdma0 | grep -q 'rdma0@if$VETH0_IDX:'"
		check parent-in-init-net-$pod sh -c "/usr/sbin/ip link show veth0 >/dev/null && ! /usr/sbin/ip -n $pod link show veth0 >/dev/null 2>&1"
		check rxe0-on-veth0-$pod sh -c "/usr/sbin/rdma link show | grep -q 'rxe0/1 .*netdev veth0'"
		step state-file-$pod
		if [ "$(state_count)" -eq $n ]; then pass; else fail "want $n records under $DATADIR/attachments, have: $(state_files)"; fi
	done
	show ls -l "$DATADIR/attachments"
	show sh -c "cat $DATADIR/attachments/* | head -c 1500"

	for pod in pod1 pod2; do
		cni cnitool check $pod
		expect_ok check-$pod
	done

	# RoCE between the two pods over rxe0 through their rdma0 children
	# (soft-RoCE needs the node route: fd00::1/64 on veth0).
	step rping-between-pods
	ip -n pod1 addr add fd00::2/64 dev rdma0 nodad
	ip -n pod2 addr add fd00::3/64 dev rdma0 nodad
	before=$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts)
	/usr/sbin/ip netns exec pod1 rping -s -a fd00::2 -C 3 >/tmp/rping-s.log 2>&1 &
	srv=$!
	wait_until 15 rping_listening fd00::2
	out=$(timeout 20 /usr/sbin/ip netns exec pod2 rping -c -a fd00::2 -C 3 -v 2>&1)
	rc=$?
	if rping_done $rc "$out" 3; then
		pass
	else
		fail "rping pod2 -> pod1: exit $rc: $out / server: $(cat /tmp/rping-s.log)"
	fi
	kill $srv 2>/dev/null
	wait $srv 2>/dev/null
	info "rxe0 sent_pkts delta: $(($(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts) - before))"
	show sh -c 'grep -l . /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/* 2>/dev/null | while read f; do echo "$(basename $f) $(cat $f)"; done'

	cni cnitool del pod2
	expect_ok del-pod2
	check del-removes-child-pod2 sh -c "! /usr/sbin/ip -n pod2 link show rdma0 >/dev/null 2>&1"
	step del-removes-record-pod2
	if [ "$(state_count)" -eq 1 ]; then pass; else fail "want 1 record left, have: $(state_files)"; fi
	cni cnitool del pod2
	expect_ok del-again-pod2

	# CHECK must notice a missing child.
	ip -n pod1 link del rdma0
	cni cnicall check pod1
	expect_code check-mismatch-pod1 106
	cni cnitool del pod1
	expect_ok del-pod1-after-child-gone
	step no-records-left
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi

	# The runtime may call DEL after the netns is gone.
	ip netns add pod3
	cni cnitool add pod3
	expect_ok add-pod3
	ip netns del pod3
	cni cnitool del pod3
	expect_ok del-after-netns-gone
	step no-records-after-netns-gone
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi

	check veth0-intact sh -c "/usr/sbin/ip addr show veth0 | grep -q 'inet 192.168.77.1/24'"
	check rxe0-intact sh -c "/usr/sbin/rdma link show | grep -q 'rxe0/1 .*netdev veth0'"
	ip netns del pod1
	ip netns del pod2
done
exit 0
