#!/bin/sh
# run_pod FILE: one pod manifest through kubelet, checked against its
# annotation test.rdma-chain/expect (sourced by the node guest's /init):
#   rdma0    the pod runs; its container sees rdma0 and an RDMA device
#   none     the pod runs; no rdma0, and rdma-chain recorded nothing for it
#   refused  the sandbox is refused; kubelet's log says why
# Then the manifest is removed and the pod must go.
RECORDS=/var/lib/cni/rdma-chain

# yaml_field FILE KEY: the first "KEY: value" of the manifest, unquoted.
yaml_field() { sed -n "s|^ *$2: *||p" "$1" | head -1 | tr -d "\"'"; }
records() { find "$RECORDS" -maxdepth 1 -type f -name '*.json' 2>/dev/null | wc -l; }
# pod_exec CID CMD...: run CMD in the pod's container through containerd.
pod_exec() {
	_cid=$1; shift
	$CTR tasks exec --exec-id "chk$$-$(date +%s%N)" "$_cid" "$@"
}

run_pod() {
	_f=$1
	_name=$(yaml_field "$_f" name)
	_ns=$(yaml_field "$_f" namespace); _ns=${_ns:-default}
	_want=$(yaml_field "$_f" test.rdma-chain/expect)
	PFX="$(basename "$_f" .yaml)/"
	_before=$(records)
	step "expect-$_want"
	case "$_want" in rdma0 | none | refused) pass ;; *) fail "annotation test.rdma-chain/expect is '$_want'"; return ;; esac
	cp "$_f" "/etc/kubernetes/manifests/$(basename "$_f")"
	case "$_want" in
	rdma0 | none)
		step running
		if ! _out=$(nodectl wait "$_ns/$_name" running 240); then
			fail "$_out"
		else
			pass
			echo "$_out" | grep NODE-TIME
			# What the plugin asked kubelet (a static pod's name ends in -NODE).
			nodectl podres get "$_ns/$_name-node"
			_cid=$(echo "$_out" | awk '$1=="NODE-CID" {print $4; exit}')
			_links=$(pod_exec "$_cid" /usr/sbin/ip -o link 2>&1)
			step "rdma0-$_want"
			case "$_want:$_links" in
			rdma0:*" rdma0"[@:]*) pass ;;
			none:*" rdma0"[@:]*) fail "the pod has rdma0: $_links" ;;
			none:*) pass ;;
			*) fail "no rdma0 in the pod: $_links" ;;
			esac
			if [ "$_want" = rdma0 ]; then
				check "devices" pod_exec "$_cid" /bin/busybox ls /dev/infiniband
				show pod_exec "$_cid" /usr/sbin/rdma link
			else
				step no-record
				if [ "$(records)" = "$_before" ]; then pass; else fail "records $_before -> $(records): $(ls $RECORDS)"; fi
			fi
		fi
		;;
	refused)
		step refused
		if _out=$(nodectl wait "$_ns/$_name" pending 180); then pass; else fail "$_out"; fi
		grep -E 'CreatePodSandbox|RunPodSandbox' /run/kubelet.log | grep "$_name" | tail -2 | sed 's/^/RC-INFO kubelet: /'
		;;
	esac
	rm -f "/etc/kubernetes/manifests/$(basename "$_f")"
	step gone
	if _out=$(nodectl gone "$_ns/$_name" 180); then pass; else fail "$_out"; fi
	step records-after
	if wait_until 30 test "$(records)" = "$_before"; then pass; else fail "records $_before -> $(records)"; fi
	PFX=
}
