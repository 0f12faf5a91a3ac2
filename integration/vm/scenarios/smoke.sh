#!/bin/sh
# smoke: the VM itself works — modules loaded, soft-RoCE device rxe0 on veth0,
# a netns mode, a non-empty GID table, netns + ipvlan + rping work. No plugin.
. /scenarios/lib.sh

check modules test -d /sys/module/rdma_rxe -a -d /sys/module/ib_core -a -d /sys/module/ipvlan
step rxe0-created
if setup_rxe; then pass; else fail "setup_rxe failed"; fi
show rdma link show
check rdma-link-rxe0 sh -c '/usr/sbin/rdma link show | grep -q "rxe0/1 .*netdev veth0"'

step netns-mode
mode=$(netns_mode)
show rdma system show
case "$mode" in shared | exclusive) pass ;; *) fail "rdma system printed no mode" ;; esac

step gid-table
gids=$(cat /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null | grep -vc '^0000:0000:0000:0000:0000:0000:0000:0000$')
info "rxe0 non-zero GIDs: $gids"
if [ "$gids" -gt 0 ]; then pass; else fail "no non-zero GID in /sys/class/infiniband/rxe0/ports/1/gids"; fi

check netns-add ip netns add smoke1
check ipvlan-into-netns sh -c '/usr/sbin/ip link add link veth0 name sm0 type ipvlan mode l2 &&
	/usr/sbin/ip link set sm0 netns smoke1 && /usr/sbin/ip -n smoke1 link set sm0 up &&
	/usr/sbin/ip -n smoke1 -d link show sm0 | grep -q ipvlan'
check ibv-provider test -f /etc/libibverbs.d/rxe.driver
check tools-present sh -c 'for b in /usr/local/bin/cnitool /opt/cni/bin/ptp /opt/cni/bin/host-local; do test -x $b || { echo missing $b; exit 1; }; done'

# rping over rxe0 in init_net (server and client on 192.168.77.1).
step rping-loopback
rping -s -a 192.168.77.1 -C 3 -v >/tmp/rping-s.log 2>&1 &
srv=$!
wait_until 15 rping_listening 192.168.77.1
out=$(timeout 20 rping -c -a 192.168.77.1 -C 3 -v 2>&1)
rc=$?
if rping_done $rc "$out" 3; then
	pass
else
	fail "rping client: exit $rc: $out $(cat /tmp/rping-s.log)"
fi
kill $srv 2>/dev/null
wait $srv 2>/dev/null
info "rxe0 counters: sent=$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts 2>/dev/null) rcvd=$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts 2>/dev/null)"
ip netns del smoke1
exit 0
