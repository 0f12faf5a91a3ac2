#!/bin/sh
# bond: shared mode on a bonded RDMA netdev, as Lingjun nodes have it
# (mlx5_bond_N on bondN). Soft-RoCE rxe1 is bound to bond0, an active-backup
# bond of two links with the node's fd00:79::1/64; two pods get ipvlan
# children of the bond with IPv6 from the conflist's podIPv6Block
# (::f:0:c00/124, placed in bond0's /64: fd00:79::f:0:c00/124, leases from
# host-local), the addresses become GIDs of rxe1 on the children, rping runs
# between the pods over rxe1, and DEL gives everything back. Then the host
# link lookup tests of pkg/netdev run on this kernel (bonds and bridges whose
# ports carry their MAC, a netdev back from a dead netns among links sharing
# its MAC, the netns-local check).
. /scenarios/lib.sh

DATADIR=/run/rdma-chain-bond
NETDIR=/etc/cni/net.d-bond
LEASES=/run/ipam-bond/rdmanet
leases() { ls "$LEASES" 2>/dev/null | grep '^fd00:79:' | tr '\n' ' '; }

check load-bonding load_bonding
check make-bond make_bond bond0 bs0 bs1
check node-address ip addr add fd00:79::1/64 dev bond0 nodad
check rxe-on-bond sh -c "/usr/sbin/rdma link add rxe1 type rxe netdev bond0 && i=0 &&
	while [ ! -d /sys/class/infiniband/rxe1 ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done &&
	test -d /sys/class/infiniband/rxe1"
check mode-is-shared test "$(netns_mode)" = shared
show ip -d link show bond0
show rdma link

write_conflist "$NETDIR" 1.0.0 "\"mode\":\"shared\",\"devices\":[\"rxe1\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",\"podIPv6Block\":\"::f:0:c00/124\",\"ipam\":{\"type\":\"host-local\",\"dataDir\":\"/run/ipam-bond\"}"
bond_idx=$(cat /sys/class/net/bond0/ifindex)
for pod in b1 b2; do
	ip netns add $pod
	cni cnitool add $pod
	expect_ok add-$pod
	a=$(pod_addr $pod rdma0 fd00:79::f:0:c0)
	eval "ADDR_$pod=\$a"
	check address-from-block-$pod sh -c "/usr/sbin/ip -n $pod -6 addr show dev rdma0 | grep -q 'inet6 $a/124'"
	check ipvlan-child-of-bond-$pod sh -c "/usr/sbin/ip -n $pod -d link show rdma0 | grep -q ipvlan &&
		/usr/sbin/ip -n $pod -o link show rdma0 | grep -q 'rdma0@if$bond_idx:'"
	step gid-$pod
	want=$(expand6 "$a")
	wait_until 15 gid_row "$want" rdma0 rxe1
	row=$(gid_row "$want" rdma0 rxe1)
	if [ -n "$a" ] && [ -n "$row" ]; then
		info "GID of $pod on rxe1: $row"
		pass
	else
		fail "no GID '$want' with ndev rdma0 on rxe1; GIDs: $(gid_rows rxe1 | tr '\n' ';')"
	fi
	show ip -n $pod -6 addr show dev rdma0
done
show rdma link
show sh -c '. /scenarios/lib.sh; gid_rows rxe1'

step rping-over-bond
rping_between b1 b2 "$ADDR_b1" rxe1

del_all b1 b2
check bond-intact sh -c "/usr/sbin/ip -o link show bs0 | grep -q 'master bond0' &&
	/usr/sbin/ip -o link show bs1 | grep -q 'master bond0' && /usr/sbin/ip -o link show bond0 | grep -q 'UP'"
/usr/sbin/rdma link del rxe1

# The host link lookup and netns-local check on this kernel, with bonds.
step netdev-lookup-tests
out=$(RC_PRIVILEGED=1 RC_NETDEV_BOND=1 /usr/local/bin/netdev.test -test.v -test.count=1 \
	-test.run '^(TestRestoreNeverMoved|TestRestoreAmongLinksSharingMAC|TestNetnsLocal)$' 2>&1)
rc=$?
echo "$out" | grep -E -- '^\s*--- |^(ok|FAIL|PASS)' | sed 's/^/  | /'
if [ $rc = 0 ] && echo "$out" | grep -q -- '--- PASS: TestRestoreNeverMoved/bond/without_identity'; then
	pass
else
	fail "netdev.test exit $rc: $(echo "$out" | tail -n 15)"
fi
exit 0
