#!/bin/sh
# ops: the operator commands on a shared-mode node with soft-RoCE and SMC.
# validate and install on the scenario's conflist; a pod with SMC-R (ipvlan
# child with IPv6 from host-local, pnet entries), a pod whose ADD fails
# (deviceID naming no offered device, code 103), a third pod; `inspect` and
# `inspect --netns` show them (their output is printed as RC-INFO lines);
# the third pod's netns is deleted behind the plugin's back and
# `reconcile --once` without CRI releases its attachment (record and IPv6
# lease) and keeps the others.
. /scenarios/lib.sh

UEID=RDMACHAIN-OPS
NETDIR=/etc/cni/net.d-ops
DATADIR=/run/rdma-chain-ops
V6IPAM=/run/ipam-ops-rdma
ANN_TRUE='{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}'
BAD_DEVICE='{"deviceID":"mlx5_9"}'

check setup-rxe setup_rxe
# What inspect says of SMC: the node's table and the annotated pod's entry,
# or, on a kernel without SMC (docs/kernels.md), that SMC is not available
# (the pod attached without SMC-R: onUnsupported warn, the default).
if has_smc; then
	check smc-module test -d /sys/module/smc
	SMC_NODE="SMC: available; UEIDs: $UEID" SMC_NODE_IB=" ib rxe0 port 1" SMC_POD="SMC-R pnetid "
	SMC_NS="  net.smc:" SMC_NS_FB="SMC fallbacks to TCP:" SMC_NS_ETH=" eth eth0"
else
	SMC_NODE="SMC: not available (" SMC_NODE_IB="SMC: not available" SMC_POD="link rxe0 ipvlan as rdma0"
	SMC_NS="  pnet table (0):" SMC_NS_FB="  pnet table (0):" SMC_NS_ETH="  pnet table (0):"
fi

mkdir -p $NETDIR
cat >$NETDIR/rdmanet.conflist <<CONF
{"cniVersion":"1.0.0","name":"rdmanet","plugins":[
 {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.98.0.0/24"}]],"dataDir":"/run/ipam-ops"}},
 {"type":"rdma-chain","mode":"shared","devices":["rxe0"],"podSelection":"all","dataDir":"$DATADIR",
  "sharedLink":{"type":"ipvlan"},"smcr":{"ueid":"$UEID"},
  "ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:78::/64"}]],"dataDir":"$V6IPAM"},
  "capabilities":{"io.kubernetes.cri.pod-annotations":true,"deviceID":true}}
]}
CONF
info "conflist: $(tr -d '\n' <$NETDIR/rdmanet.conflist)"

# validate and install
print_info validate rdma-chain-ops validate $NETDIR/rdmanet.conflist --cni-bin-dir /opt/cni/bin
check validate-ok test "$RC" = 0
printf '{"cniVersion":"1.0.0","name":"n","plugins":[\n  {"type":"ptp"}\n]}\n' >/tmp/ops-install.conflist
SET='{"mode":"shared","sharedLink":{"type":"none"}}'
print_info install rdma-chain-ops install --conflist /tmp/ops-install.conflist --after ptp --set "$SET"
expect install-inserted "rdma-chain entry inserted"
print_info install-again rdma-chain-ops install --conflist /tmp/ops-install.conflist --after ptp --set "$SET"
expect install-idempotent "unchanged"
print_info validate-installed rdma-chain-ops validate /tmp/ops-install.conflist
check validate-installed test "$RC" = 0
printf '{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain","Mode":"shared"}]}\n' >/tmp/ops-bad.conflist
print_info validate-bad rdma-chain-ops validate /tmp/ops-bad.conflist
expect validate-bad-key '/tmp/ops-bad.conflist:1:81: unknown key "Mode": did you mean "mode"?'

# pods
# addpod POD CAP_ARGS|"": a netns and cnicall ADD
addpod() {
	ip netns add $1
	if [ -n "$2" ]; then export CAP_ARGS="$2"; else unset CAP_ARGS; fi
	cni cnicall add $1
	unset CAP_ARGS
}
addpod ops-smc "$ANN_TRUE"
expect_ok add-ops-smc
SMC_V6=$(pod_ip6 ops-smc fd00:78:)
info "ops-smc rdma0 $SMC_V6"
addpod ops-fail "$BAD_DEVICE"
expect_code add-ops-fail 103 mlx5_9
addpod ops-stale ""
expect_ok add-ops-stale
STALE_V6=$(pod_ip6 ops-stale fd00:78:)
info "ops-stale rdma0 $STALE_V6"
check stale-lease test -f "$V6IPAM/rdmanet/$STALE_V6"

print_info inspect rdma-chain-ops inspect --data-dir $DATADIR
expect inspect-node "RDMA netns mode: shared" "  rxe0  driver rdma_rxe  netdev veth0  netns host  port 1 ACTIVE" \
	"$SMC_NODE" "$SMC_NODE_IB"
expect inspect-smc-pod "pod default/ops-smc  shared  netns /var/run/netns/ops-smc" \
	"link rxe0 ipvlan as rdma0 (host veth0) ips fd00:78:" "$SMC_POD"
has_smc || check inspect-no-smc-pnetid sh -c "! rdma-chain-ops inspect --data-dir $DATADIR | grep -q 'SMC-R pnetid'"
expect inspect-failure "  default/ops-fail  ADD  code 103  at " "mlx5_9"
step inspect-all-healthy
if has PROBLEM || [ "$RC" != 0 ]; then fail "exit $RC"; else pass; fi

step gid-ops-smc # rxe adds the child's GID on a netdev event
if wait_until 20 gid_row "$(expand6 "$SMC_V6")" rdma0; then pass; else fail "no GID for $SMC_V6 on rdma0"; fi
print_info inspect-netns rdma-chain-ops inspect --data-dir $DATADIR --netns /var/run/netns/ops-smc
expect inspect-netns "Netns /var/run/netns/ops-smc:" "  rdma0 ipvlan up" "[RDMA]" "    GID rxe0 port 1 index " \
	"RoCE v2" "$SMC_NS_ETH" "$SMC_NS" "$SMC_NS_FB"

print_info inspect-json rdma-chain-ops inspect --data-dir $DATADIR --json
expect inspect-json '"mode": "shared"' '"healthy": true' '"lastFailures": [' '"code": 103'

# The stale pod: its netns goes behind the plugin's back.
ip netns del ops-stale
print_info inspect-stale rdma-chain-ops inspect --data-dir $DATADIR
expect inspect-stale "PROBLEM: netns /var/run/netns/ops-stale is gone"
check inspect-stale-exit test "$RC" = 1

N0=$(state_count)
print_info reconcile rdma-chain-ops reconcile --conflist $NETDIR/rdmanet.conflist --cni-bin-dir /opt/cni/bin --once
expect reconcile-released 'msg="released an attachment" attachment="rdmanet/' \
	'(pod default/ops-stale, shared, ipvlan rxe0 as rdma0)" why="netns /var/run/netns/ops-stale is gone' \
	'msg="pass done" released=1 kept=1 problems=0 liveness=netns'
check reconcile-exit test "$RC" = 0
check reconcile-record-gone test "$(state_count)" = $((N0 - 1))
check reconcile-lease-gone test ! -e "$V6IPAM/rdmanet/$STALE_V6"
check reconcile-kept-pod has_rdma0 ops-smc
print_info reconcile-again rdma-chain-ops reconcile --conflist $NETDIR/rdmanet.conflist --cni-bin-dir /opt/cni/bin --once
expect reconcile-idempotent 'msg="pass done" released=0 kept=1 problems=0'

print_info inspect-after rdma-chain-ops inspect --data-dir $DATADIR
step inspect-after-healthy
if has PROBLEM || [ "$RC" != 0 ]; then fail "exit $RC"; else pass; fi

for p in ops-smc ops-fail; do
	cni cnitool del $p
	expect_ok del-$p
	ip netns del $p
done
check no-records-left test "$(state_count)" = 0
exit 0
