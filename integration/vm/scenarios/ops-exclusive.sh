#!/bin/sh
# ops-exclusive (own boot, with a second NIC and rc.simrdma=eth0): inspect
# and reconcile in exclusive mode with the movable simrdma0 device bound to
# the virtio-net NIC eth0. A pod gets the NIC (as rdma0) and the device;
# `inspect` shows the attachment healthy and `inspect --netns` the pod's
# rdma0 with its GIDs as the pod netns sees them; the pod netns is then
# deleted behind the plugin's back (the kernel returns both to init_net)
# and `reconcile --once` without CRI releases the attachment: the NIC is
# renamed back to eth0 with its addresses, the record and lease are gone.
. /scenarios/lib.sh

NETDIR=/etc/cni/net.d-opsx
DATADIR=/run/rdma-chain-opsx

step switch-to-exclusive
if out=$(rdma system set netns exclusive 2>&1) && [ "$(netns_mode)" = exclusive ]; then pass; else fail "$out"; fi
check simrdma0-registered sh -c "/usr/sbin/rdma dev | grep -q ': simrdma0:'"
setup_ops_nic() {
	ip link set eth0 up &&
		ip addr add 192.168.88.1/24 dev eth0 &&
		ip addr add fd00:88::1/64 dev eth0 nodad
}
check nic-setup setup_ops_nic
MAC=$(cat /sys/class/net/eth0/address)
IPAM='"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:99::/64"}]],"dataDir":"/run/ipam-opsx"}'
write_conflist "$NETDIR" 1.0.0 "\"mode\":\"exclusive\",\"devices\":[\"simrdma0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",$IPAM"
info "conflist: $(tr -d '\n' <"$NETDIR/rdmanet.conflist")"

print_info validate rdma-chain-ops validate "$NETDIR/rdmanet.conflist" --cni-bin-dir /opt/cni/bin
check validate-ok test "$RC" = 0

ip netns add xpod1
cni cnicall add xpod1
expect_ok add-xpod1
V6=$(pod_ip6 xpod1 fd00:99:)
G=$(expand6 "$V6")
info "xpod1 rdma0 $V6"
step pod-gid # the GID of the pod's address, in the pod netns's own sysfs
# (busybox's ip applet has no netns exec: the real one)
if wait_until 15 /usr/sbin/ip netns exec xpod1 sh -c "grep -l '$G' /sys/class/infiniband/simrdma0/ports/1/gids/*"; then
	pass
else
	fail "no GID $G"
fi

print_info inspect rdma-chain-ops inspect --data-dir $DATADIR
expect inspect-exclusive "RDMA netns mode: exclusive" "pod default/xpod1  exclusive  netns /var/run/netns/xpod1" \
	"link simrdma0 moved as rdma0 (host eth0) ips $V6/64 step done" "    healthy"
check inspect-exit test "$RC" = 0
step inspect-device-not-on-host
if has "  simrdma0  driver"; then fail "simrdma0 listed in init_net while the pod holds it"; else pass; fi

print_info inspect-netns rdma-chain-ops inspect --data-dir $DATADIR --netns /var/run/netns/xpod1
expect inspect-netns "Netns /var/run/netns/xpod1:" "  rdma0 " "$MAC  [RDMA]" "    inet $V6/64" \
	"    GID simrdma0 port 1 index " " $G RoCE v2"
check inspect-netns-exit test "$RC" = 0

# The pod netns goes behind the plugin's back: the kernel returns the
# device and the NIC (under the name it had in the pod) to init_net.
ip netns del xpod1
step refunded
if wait_until 20 sh -c "/usr/sbin/rdma dev | grep -q ': simrdma0:' && /usr/sbin/ip -o link | grep -q 'link/ether $MAC'"; then
	pass
else
	fail "device or NIC not back: $(rdma dev | tr '\n' ';') $(ip -o link | tr '\n' ';')"
fi
info "init_net links after the netns went: $(ip -o link | sed 's/^[0-9]*: \([^:@]*\).*link\/ether \([0-9a-f:]*\).*/\1(\2)/' | tr '\n' ' ')"
print_info inspect-stale rdma-chain-ops inspect --data-dir $DATADIR
expect inspect-stale "PROBLEM: netns /var/run/netns/xpod1 is gone"

print_info reconcile rdma-chain-ops reconcile --conflist "$NETDIR/rdmanet.conflist" --cni-bin-dir /opt/cni/bin --once
expect reconcile-released 'msg="released an attachment" attachment="rdmanet/' \
	'(pod default/xpod1, exclusive, moved simrdma0 as rdma0)" why="netns /var/run/netns/xpod1 is gone' \
	'msg="pass done" released=1 kept=0 problems=0 liveness=netns'
check reconcile-exit test "$RC" = 0
check nic-back-as-eth0 sh -c "/usr/sbin/ip -o link show eth0 | grep -q 'link/ether $MAC'"
check nic-addresses-back sh -c "/usr/sbin/ip -o addr show dev eth0 | grep -q '192.168.88.1/24' && /usr/sbin/ip -o addr show dev eth0 | grep -q 'fd00:88::1/64'"
check device-on-eth0 sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev eth0'"
check no-records-left test "$(state_count)" = 0
check lease-gone test ! -e "/run/ipam-opsx/rdmanet/$V6"

print_info inspect-after rdma-chain-ops inspect --data-dir $DATADIR
expect inspect-after "  simrdma0  driver " "netdev eth0  netns host  port 1 ACTIVE" "Attachments (0):"
check inspect-after-exit test "$RC" = 0
exit 0
