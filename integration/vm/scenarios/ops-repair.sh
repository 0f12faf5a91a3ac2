#!/bin/sh
# ops-repair (the ops-exclusive boot: a second NIC and rc.simrdma=eth0):
# `rdma-chain-ops reconcile --interval 10m --metrics-bind-address` runs in
# the background and finds the network itself (NETCONFPATH). A pod gets the
# NIC (as rdma0) and simrdma0; the metrics are scraped over HTTP and parsed
# with the Prometheus text parser (promscrape); the pod netns is deleted
# without DEL and the time until the NIC is back as eth0 with its addresses
# and the device on it is measured and printed (RC-INFO repair-time; the
# goal, 5 s under TCG, is a number to read, not an assertion: it moves with
# the machine's load). That the repair came from the kernel's event, not
# from a pass, is asserted: rdma_chain_repairs_total{trigger="event"}.
. /scenarios/lib.sh

NETDIR=/etc/cni/net.d-repair
DATADIR=/run/rdma-chain-repair
METRICS=http://127.0.0.1:9742/metrics

step exclusive
if [ "$(netns_mode)" = exclusive ] || { rdma system set netns exclusive && [ "$(netns_mode)" = exclusive ]; }; then pass; else fail "mode $(netns_mode)"; fi
nic_setup() {
	ip link set eth0 up || return 1
	ip -o addr show dev eth0 | grep -q '192.168.88.1/24' || ip addr add 192.168.88.1/24 dev eth0 || return 1
	ip -o addr show dev eth0 | grep -q 'fd00:88::1/64' || ip addr add fd00:88::1/64 dev eth0 nodad
}
check nic-setup nic_setup
MAC=$(cat /sys/class/net/eth0/address)
IPAM='"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:98::/64"}]],"dataDir":"/run/ipam-repair"}'
write_conflist "$NETDIR" 1.0.0 "\"mode\":\"exclusive\",\"devices\":[\"simrdma0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",$IPAM"

# nic_back: eth0 is the NIC again, with both addresses, and simrdma0 is on it
nic_back() {
	ip -o link show eth0 2>/dev/null | grep -q "link/ether $MAC" &&
		ip -o addr show dev eth0 | grep -q '192.168.88.1/24' &&
		ip -o addr show dev eth0 | grep -q 'fd00:88::1/64' &&
		rdma link | grep -q 'simrdma0/1 .*netdev eth0'
}
# scrape LABEL: the parsed scrape in $OUT (printed as RC-INFO lines without the HELP-less noise)
scrape() { print_info "$1" promscrape $METRICS; }
# fresh_scrape LINE: the server answers from a collection up to 2 s old;
# wait (10 s at most) for one that shows LINE, i.e. taken after the change
fresh_scrape() { wait_until 10 sh -c "promscrape $METRICS | grep -qF '$1'"; }

NETCONFPATH=$NETDIR rdma-chain-ops reconcile --cni-bin-dir /opt/cni/bin --interval 10m \
	--metrics-bind-address 127.0.0.1:9742 >/run/reconcile-repair.log 2>&1 &
RPID=$!
step metrics-served
if wait_until 30 promscrape $METRICS; then pass; else fail "no metrics: $(cat /run/reconcile-repair.log)"; fi
info "reconcile log: $(tr '\n' '|' </run/reconcile-repair.log)"

ip netns add rpod1
cni cnicall add rpod1
expect_ok add-rpod1
# rdma0's address, read in the pod (the result lists it only with reportIPs)
V6=$(pod_ip6 rpod1 fd00:98:)
check pod-has-v6 test -n "$V6"

print_info inspect-default env NETCONFPATH=$NETDIR rdma-chain-ops inspect
expect inspect-finds-network "pod default/rpod1  exclusive  netns /var/run/netns/rpod1" "link simrdma0 moved as rdma0 (host eth0)"
print_info inspect-json env NETCONFPATH=$NETDIR rdma-chain-ops inspect --json
expect inspect-json-schema '"schemaVersion": 1' '"mode": "exclusive"'

fresh_scrape 'rdma_chain_attachments{device="simrdma0"'
scrape scrape-pod
expect metrics-pod 'rdma_chain_attachments{device="simrdma0",mode="exclusive",network="rdmanet"} 1' \
	'rdma_chain_cni_outcomes_total{code="0",network="rdmanet",verb="ADD"} 1' \
	'rdma_chain_rdma_port_info{device="simrdma0",netns="pod",' \
	'rdma_chain_rdma_netns_mode{mode="exclusive"} 1' 'rdma_chain_event_source_up{source="rtnetlink"} 1' \
	'rdma_chain_collect_errors{source="pods"} 0' '# promscrape: '

# The pod netns dies without DEL: the kernel refunds the NIC (as rdma0)
# and the device; reconcile repairs on the link event.
T0=$(cut -d' ' -f1 /proc/uptime)
ip netns del rpod1
step repaired
if wait_until 30 nic_back; then
	T1=$(cut -d' ' -f1 /proc/uptime)
	MS=$(awk -v a="$T0" -v b="$T1" 'BEGIN { printf "%d", (b - a) * 1000 }')
	info "repair-time kernel=$(uname -r): NIC back as eth0 with its addresses and simrdma0 on it ${MS} ms after ip netns del"
	pass
else
	fail "not repaired: $(ip -o link | tr '\n' ';') $(tr '\n' '|' </run/reconcile-repair.log)"
fi
info "reconcile log: $(tr '\n' '|' </run/reconcile-repair.log)"
step repair-logged
if grep -q 'msg="repaired an attachment" attachment="rdmanet/.*(pod default/rpod1, exclusive, moved simrdma0 as rdma0)" why="netns /var/run/netns/rpod1 is gone and .*" trigger=event afterEvent=[0-9.]*s$' /run/reconcile-repair.log; then pass; else fail "$(cat /run/reconcile-repair.log)"; fi
check no-records-left test "$(state_count)" = 0
check lease-gone test ! -e "/run/ipam-repair/rdmanet/$V6"

fresh_scrape 'rdma_chain_repairs_total{network="rdmanet",trigger="event"} 1'
scrape scrape-after
expect metrics-repaired 'rdma_chain_repairs_total{network="rdmanet",trigger="event"} 1' \
	'rdma_chain_repair_duration_seconds_count 1' 'rdma_chain_events_total{source="rtnetlink"} ' \
	'rdma_chain_rdma_port_info{device="simrdma0",netns="host",'
step metrics-no-attachment
if has 'rdma_chain_attachments{'; then fail "attachments still exported"; else pass; fi
step rdma-monitor # Linux >= 6.11 has the RDMA netlink monitor; 6.1 does not
case "$(uname -r)" in
6.1.*) want='rdma_chain_event_source_up{source="rdma"} 0' ;;
*) want='rdma_chain_event_source_up{source="rdma"} 1' ;;
esac
if has "$want"; then pass; else fail "lacks $want"; fi
info "events: $(echo "$OUT" | grep rdma_chain_events_total | tr '\n' ' ')"

kill -TERM $RPID
step reconcile-stops
if wait_until 10 sh -c "! kill -0 $RPID"; then pass; else fail "still running"; fi
exit 0
