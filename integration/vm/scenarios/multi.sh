#!/bin/sh
# multi: several RDMA devices per pod in shared mode, with one conflist for
# every node. Four soft-RoCE devices rxe10..rxe13, each on its own netdev
# mn0..mn3 with its own /64 (fd00:90::/64 .. fd00:93::/64, node address ::1);
# podIPv6Block ::f:0:c00/124 places each pod interface's address in its own
# device's /64. Two pods get four ipvlan children each (rdma0..rdma3), each
# address is a GID of its own device only, rping runs between the pods over
# each device, and DEL releases all four children and leases of each pod.
. /scenarios/lib.sh

DATADIR=/run/rdma-chain-multi
NETDIR=/etc/cni/net.d-multi
LEASES=/run/ipam-multi/rdmanet
leases() { ls "$LEASES" 2>/dev/null | grep '^fd00:9' | tr '\n' ' '; }

step four-devices
ok=1
for i in 0 1 2 3; do
	ip link add mn$i type veth peer name mn${i}p && ip link set mn${i}p up && ip link set mn$i up &&
		ip addr add fd00:9$i::1/64 dev mn$i nodad && rdma link add rxe1$i type rxe netdev mn$i || ok=0
done
for i in 0 1 2 3; do wait_until 10 test -d /sys/class/infiniband/rxe1$i || ok=0; done
if [ $ok = 1 ]; then pass; else fail "set-up failed: $(rdma link | tr '\n' ';')"; fi
show rdma link

write_conflist "$NETDIR" 1.0.0 "\"mode\":\"shared\",\"devices\":[\"rxe10\",\"rxe11\",\"rxe12\",\"rxe13\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",\"podIPv6Block\":\"::f:0:c00/124\",\"ipam\":{\"type\":\"host-local\",\"dataDir\":\"/run/ipam-multi\"}"
info "multi conflist: $(tr -d '\n' <"$NETDIR/rdmanet.conflist")"
for pod in m1 m2; do
	ip netns add $pod
	cni cnitool add $pod
	expect_ok add-$pod
	for i in 0 1 2 3; do
		a=$(pod_addr $pod rdma$i fd00:9$i::f:0:c0)
		eval "ADDR_${pod}_$i=\$a"
		check child-$i-of-mn$i-$pod sh -c "[ -n '$a' ] && /usr/sbin/ip -n $pod -o link show rdma$i | grep -q 'rdma$i@if$(cat /sys/class/net/mn$i/ifindex):' &&
			/usr/sbin/ip -n $pod -6 addr show dev rdma$i | grep -q 'inet6 $a/124'"
		step gid-$i-$pod
		want=$(expand6 "$a")
		wait_until 15 gid_row "$want" rdma$i rxe1$i
		others=""
		for j in 0 1 2 3; do
			[ $j = $i ] || others="$others$(gid_rows rxe1$j | grep " $want ")"
		done
		if [ -n "$a" ] && gid_row "$want" rdma$i rxe1$i >/dev/null && [ -z "$others" ]; then
			info "GID of $pod rdma$i on rxe1$i: $(gid_row "$want" rdma$i rxe1$i)"
			pass
		else
			fail "address '$a' of rdma$i: GID on rxe1$i [$(gid_row "$want" rdma$i rxe1$i)], on other devices [$others]"
		fi
	done
	show ip -n $pod -6 addr
done
show rdma link
for i in 0 1 2 3; do show sh -c ". /scenarios/lib.sh; gid_rows rxe1$i"; done

for i in 0 1 2 3; do
	step rping-rxe1$i
	eval "rping_between m1 m2 \"\$ADDR_m1_$i\" rxe1$i 5"
done

del_all m1 m2
for i in 0 1 2 3; do rdma link del rxe1$i; done
exit 0
