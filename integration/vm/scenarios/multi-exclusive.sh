#!/bin/sh
# multi-exclusive (own boot, four NICs, rc.simrdma=eth0,eth1,eth2,eth3):
# exclusive mode with four movable test devices simrdma0..simrdma3, one on
# each virtio-net NIC, each NIC with its own /64 (fd00:a0::/64 ..
# fd00:a3::/64). The fake kubelet allocates all four to one pod: ADD moves
# the four NICs (rdma0..rdma3) and the four devices into it, each interface
# gets its IPv6 from podIPv6Block ::f:0:c00/124 in its own NIC's /64, a GID
# of its own device in the pod; DEL gives all four NICs (name, addresses)
# and devices back to init_net.
. /scenarios/lib.sh

DATADIR=/run/rdma-chain-multix
NETDIR=/etc/cni/net.d-multix
SOCK=/run/kubelet/pod-resources.sock

step switch-to-exclusive
if out=$(rdma system set netns exclusive 2>&1) && [ "$(netns_mode)" = exclusive ]; then pass; else fail "$out; mode $(netns_mode)"; fi
step four-devices
ok=1
for i in 0 1 2 3; do
	rdma link | grep -q "simrdma$i/1 .*netdev eth$i" || ok=0
	ip link set eth$i up && ip addr add fd00:a$i::1/64 dev eth$i nodad || ok=0
done
if [ $ok = 1 ]; then pass; else fail "$(rdma link | tr '\n' ';')"; fi
show rdma link
# nics: "name mac addrs" of eth0..eth3 in init_net, what DEL must restore
nics() { for i in 0 1 2 3; do echo "eth$i $(cat /sys/class/net/eth$i/address 2>&1) $(ip -o addr show dev eth$i scope global 2>&1 | awk '{print $4}' | sort | tr '\n' ' ')"; done; }
before=$(nics)

cat >/run/pods-multix.json <<'JSON'
{"pods":[{"namespace":"default","name":"x1","resources":{"rdma/hca":["simrdma0","simrdma1","simrdma2","simrdma3"]}}]}
JSON
step kubelet-up
fakekubelet -socket $SOCK -allocations /run/pods-multix.json >>/tmp/fakekubelet-multix.log 2>&1 &
KUBELET=$!
wait_until 15 test -S $SOCK
if [ -S $SOCK ]; then pass; else fail "no socket: $(cat /tmp/fakekubelet-multix.log)"; fi

write_conflist "$NETDIR" 1.0.0 "\"mode\":\"exclusive\",\"podSelection\":\"requested\",\"podResourcesSocket\":\"$SOCK\",\"resourceNames\":[\"rdma/hca\"],\"dataDir\":\"$DATADIR\",\"podIPv6Block\":\"::f:0:c00/124\",\"ipam\":{\"type\":\"host-local\",\"dataDir\":\"/run/ipam-multix\"}"
ip netns add x1
cni cnitool add x1
expect_ok add-x1-four-devices
# pod_gids POD DEV: "GID NDEV" rows of DEV port 1 as the pod's sysfs shows them
cat >/run/dev_gids <<'SH'
d=/sys/class/infiniband/$1/ports/1
[ -d $d ] || exit 1
grep -H -v '^0000:0000:0000:0000:0000:0000:0000:0000$' $d/gids/* 2>/dev/null | sed 's|.*/gids/\([0-9]*\):|\1 |' |
	while read -r n g; do echo "$g $(cat $d/gid_attrs/ndevs/$n 2>/dev/null)"; done | sort
SH
for i in 0 1 2 3; do
	a=$(pod_addr x1 rdma$i fd00:a$i::f:0:c0)
	check moved-eth$i-as-rdma$i sh -c "[ -n '$a' ] && /usr/sbin/ip -n x1 link show rdma$i >/dev/null &&
		[ ! -e /sys/class/net/eth$i ] && /usr/sbin/ip -n x1 -6 addr show dev rdma$i | grep -q 'inet6 $a/124'"
	check device-simrdma$i-in-pod sh -c "/usr/sbin/ip netns exec x1 /usr/sbin/rdma link | grep -q 'simrdma$i/1 .*netdev rdma$i' &&
		! /usr/sbin/rdma dev | grep -q ': simrdma$i:'"
	step gid-rdma$i
	want=$(expand6 "$a")
	wait_until 15 sh -c "/usr/sbin/ip netns exec x1 sh /run/dev_gids simrdma$i | grep -q '^$want rdma$i\$'"
	if ip netns exec x1 sh /run/dev_gids simrdma$i | grep -q "^$want rdma$i\$"; then pass; else fail "no GID $want on simrdma$i in x1: $(ip netns exec x1 sh /run/dev_gids simrdma$i | tr '\n' ';')"; fi
done
info "x1 rdma link: $(ip netns exec x1 /usr/sbin/rdma link | tr '\n' ';')"
info "x1 ip -6 addr: $(ip -n x1 -6 -o addr | awk '{print $2, $4}' | tr '\n' ';')"
for i in 0 1 2 3; do info "x1 GIDs of simrdma$i: $(ip netns exec x1 sh /run/dev_gids simrdma$i | tr '\n' ';')"; done
info "init_net rdma link after ADD: $(rdma link | tr '\n' ';')"

cni cnitool del x1
expect_ok del-x1
step four-back-in-init-net
ok=1
for i in 0 1 2 3; do rdma link | grep -q "simrdma$i/1 .*netdev eth$i" || ok=0; done
if [ $ok = 1 ] && [ "$(nics)" = "$before" ]; then pass; else fail "rdma link: $(rdma link | tr '\n' ';') / nics before: $before / after: $(nics)"; fi
step no-records-left
if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi
check leases-released sh -c "! ls /run/ipam-multix/rdmanet 2>/dev/null | grep -q '^fd00:a'"
show rdma link
ip netns del x1
kill $KUBELET 2>/dev/null
exit 0
