#!/usr/bin/env bash
# make demo: the chain [ptp + host-local, rdma-chain] run through cnitool on
# an embedded default conflist, in throwaway netns (a "node" and a "pod"), so
# the machine's own network is never touched. With DEMO_VM=1 (the default
# when the VM tier is prepared) it runs the soft-RoCE story in a VM instead.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/.tools
work=$(mktemp -d /tmp/rdma-chain-demo.XXXXXX)
node=rcdemo-node-$$
pod=rcdemo-pod-$$
cleanup() {
	ip netns del "$pod" 2>/dev/null || true
	ip netns del "$node" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then echo "demo: needs root (network namespaces)" >&2; exit 1; fi
mkdir -p "$work/bin" "$work/net.d"
ln -s "$ROOT/bin/rdma-chain" "$work/bin/rdma-chain"
for p in ptp host-local loopback; do ln -s "$TOOLS/cni/bin/$p" "$work/bin/$p"; done

conflist() { # podSelection
	cat >"$work/net.d/10-rdmanet.conflist" <<JSON
{"cniVersion":"1.0.0","name":"rdmanet","plugins":[
 {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","dataDir":"$work/ipam","ranges":[[{"subnet":"10.88.0.0/24"}]]}},
 {"type":"rdma-chain","podSelection":"$1","podResourcesSocket":"$work/kubelet.sock","dataDir":"$work/state","logFile":"$work/rdma-chain.log"}
]}
JSON
}
cni() { # verb [CNI_ARGS]
	ip netns exec "$node" env NETCONFPATH="$work/net.d" CNI_PATH="$work/bin" CNI_CACHE_DIR="$work/cache" \
		CNI_ARGS="${2:-}" "$TOOLS/bin/cnitool" "$1" rdmanet "/var/run/netns/$pod" 2>&1 | grep -v "^time=" | sed "s/^/   /"
	return "${PIPESTATUS[0]}"
}
scenario() { # title podSelection CNI_ARGS
	echo "== $1"
	conflist "$2"
	cni add "$3" || true
	echo "   pod interfaces: $(ip -n "$pod" -br addr | awk '{printf "%s %s; ", $1, $3}')"
	cni del "$3" && echo "   DEL ok; state records left: $(find "$work/state" -name '*.json' 2>/dev/null | wc -l)"
}

ip netns add "$node"
ip netns add "$pod"
echo "== node kernel $(uname -r): RDMA subsystem $([ -d /sys/class/infiniband ] && echo present || echo absent); rdma-chain $("$ROOT/bin/rdma-chain" 2>&1 | head -1 || true)"
k8s="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=demo"
scenario "1. operator run without pod identity: nothing requested, ptp's result passes through" requested ""
scenario "2. podSelection requested, kubelet pod-resources socket absent: try again (code 11), nothing changed" requested "$k8s"
scenario "3. podSelection all: the pod needs RDMA, this kernel has none (code 100), nothing changed" all "$k8s"
echo "== plugin log (one line per verb):"
sed 's/^/   /' "$work/rdma-chain.log"
