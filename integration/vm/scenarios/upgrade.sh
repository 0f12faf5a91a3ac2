#!/bin/sh
# The upgrade matrix, sourced by upgrade-exclusive.sh (own boot, simrdma0 on
# the virtio NIC eth0) and upgrade-shared.sh (soft-RoCE rxe0 on veth0) with
# MODE set. Two plugin builds: /usr/local/bin/rdma-chain-old (the
# newest release in docs/releases.md, built from its commit) and
# /usr/local/bin/rdma-chain (the tree under test). For old->new (an upgrade)
# and new->old (the rollback of one release), with IPv6 from host-local on
# rdma0 and an SMC-R annotated pod:
#   1. FROM attaches a pod; TO checks it and deletes it; the node equals its
#      snapshot from before the ADD
#   2. FROM attaches a pod whose netns then dies without DEL; TO's GC (1.1.0)
#      and ptp's DEL clean up; the node equals its snapshot again
# The plugin is replaced as the DaemonSet does it: a copy renamed over the
# one in CNI_PATH. The snapshot (snapshot.sh) is init_net's links,
# addresses, routes, RDMA devices, links and GIDs, the SMC pnet table, the
# host-local leases and the plugin's records.
. /scenarios/snapshot.sh

UPBIN=/opt/cni-up
DATADIR=/run/rdma-chain-up
RIPAM=/run/ipam-up
ANNOTATED='{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}'

SUBNET=fd00:98::/64
[ "$MODE" = exclusive ] || SUBNET=fd00:97::/64
setup_mode "$MODE" "${SUBNET%/64}1"
# A kernel without SMC (docs/kernels.md): annotated pods attach without
# SMC-R (onUnsupported warn; the smc scenario asserts that outcome).
SMC_ON=fail
has_smc || SMC_ON=warn
ENTRY="\"mode\":\"$MODE\",\"devices\":$DEVS,\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",\
\"smcr\":{\"transparent\":\"off\",\"onUnsupported\":\"$SMC_ON\"},\
\"capabilities\":{\"io.kubernetes.cri.pod-annotations\":true},\
\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"$SUBNET\"}]],\"dataDir\":\"$RIPAM\"}"
ND10=/etc/cni/net.d-up-1.0.0
ND11=/etc/cni/net.d-up-1.1.0
NDPTP=/etc/cni/net.d-up-ptp
write_conflist $ND10 1.0.0 "$ENTRY"
write_conflist $ND11 1.1.0 "$ENTRY"
write_ptp_conflist $NDPTP
mkdir -p $UPBIN
for p in ptp host-local loopback; do ln -sf /opt/cni/bin/$p $UPBIN/$p; done
OLDSUM=$(md5sum </usr/local/bin/rdma-chain-old | cut -c1-12)
NEWSUM=$(md5sum </usr/local/bin/rdma-chain | cut -c1-12)
info "builds: old $OLDSUM, new $NEWSUM"
check two-builds test -x /usr/local/bin/rdma-chain-old -a "$OLDSUM" != "$NEWSUM"

# use old|new: install that build as rdma-chain in $UPBIN (copy, then rename)
use() {
	_src=/usr/local/bin/rdma-chain
	[ "$1" = old ] && _src=/usr/local/bin/rdma-chain-old
	cp "$_src" $UPBIN/.rdma-chain.tmp && chmod 0755 $UPBIN/.rdma-chain.tmp && mv -f $UPBIN/.rdma-chain.tmp $UPBIN/rdma-chain
}
# up TOOL ACTION POD NETDIR [VAR=VALUE...]: a CNI call through $UPBIN
up() {
	_tool=$1 _act=$2 _pod=$3 _nd=$4
	shift 4
	CNI_OUT=$(env CAP_ARGS="$ANNOTATED" "$@" NETCONFPATH=$_nd CNI_PATH=$UPBIN \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=$_pod;K8S_POD_UID=uid-$_pod" \
		timeout 60 "$_tool" "$_act" rdmanet "/var/run/netns/$_pod" 2>&1)
	CNI_RC=$?
	echo "  \$ $* $_tool $_act rdmanet $_pod ($_nd) -> exit $CNI_RC"
	[ -n "$CNI_OUT" ] && echo "$CNI_OUT" | grep -v '^ *[][{}"]' | cut -c1-300 | sed 's/^/  | /'
	return 0
}
# attached POD: rdma0 in the pod with an address of the subnet, and the SMC
# pnet entry of the pod's eth0 (no SMC pnet table at all on a kernel without SMC)
attached() {
	ip -n "$1" -6 addr show dev rdma0 | grep -q "inet6 ${SUBNET%%::*}:" || return 1
	if has_smc; then smcctl pnet "/var/run/netns/$1" | grep -q 'eth=eth0'; else ! smcctl pnet; fi
}

# A first cycle creates the records and lease folders; from then on the node
# must come back exactly.
use new
ip netns add warmup
up cnicall add warmup $ND10
expect_ok warmup-add
up cnicall del warmup $ND10
expect_ok warmup-del
ip netns del warmup

N=0
for dir in old:new new:old; do
	FROM=${dir%%:*} TO=${dir#*:}
	R=$FROM-to-$TO
	node_settled
	BASE=$(snap)
	# 1. attached by FROM, checked and deleted by TO
	N=$((N + 1))
	P=up$N
	ip netns add $P
	use "$FROM"
	up cnicall add $P $ND10
	expect_ok "$R/add"
	check "$R/attached" attached $P
	# the comparison would see a pod left behind
	step "$R/snapshot-sees-the-pod"
	if [ "$(snap)" != "$BASE" ]; then pass; else fail "the node snapshot with the pod attached equals the one before"; fi
	use "$TO"
	up cnicall check $P $ND10 CNICALL_ONLY=rdma-chain
	expect_ok "$R/check"
	up cnicall del $P $ND10
	expect_ok "$R/del"
	ip netns del $P
	step "$R/node-restored"
	if settle_equal "$BASE"; then pass; else fail "node differs from before: $DELTA"; fi
	# 2. attached by FROM, netns dies without DEL, GC by TO
	node_settled
	BASE=$(snap)
	N=$((N + 1))
	P=up$N
	ip netns add $P
	use "$FROM"
	up cnicall add $P $ND10
	expect_ok "$R/gc-case-add"
	check "$R/gc-case-attached" attached $P
	ip netns del $P
	use "$TO"
	up cnitool gc $P $ND11
	expect_ok "$R/gc"
	up cnicall del $P $NDPTP
	expect_ok "$R/ptp-del"
	node_settled
	step "$R/gc-restored"
	if settle_equal "$BASE"; then pass; else fail "node differs from before: $DELTA"; fi
done
[ "$MODE" = exclusive ] && check mode-still-exclusive test "$(netns_mode)" = exclusive
exit 0
