#!/bin/sh
# run_group FILE...: one group of pod manifests through kubelet (sourced by
# the node guest's /init; a group is the manifests whose file names start
# with the same number, e.g. 10-a.yaml and 10-b.yaml). Every manifest goes
# into the manifest directory at once; each pod is checked against its
# annotation test.rdma-chain/expect:
#   rdma0    the pod runs; its container sees rdma0 with a global IPv6
#            address that is a RoCE GID in its own view of the RDMA devices,
#            and an RDMA link; a pod granted a device plugin resource has in
#            /dev/infiniband exactly the char devices of the RDMA function
#            the plugin found and rdma_cm (unless it is privileged: the
#            runtime then gives it every host device)
#   none     the pod runs; no rdma0, and rdma-chain recorded nothing for it
#   refused  the sandbox is refused; kubelet's log says why
#   waits    the sandbox is refused while the group's other pods run, with
#            the reason in kubelet's log; once they are removed it runs as
#            rdma0 expects
# and, across the group:
#   test.rdma-chain/rping: server|client  each client rpings the server's
#            rdma0 address from inside its container (RoCE v2 over rxe0)
#   network.alibabacloud.com/erdma-smcr: "true"  the pod's netns has a pnet
#            entry for eth0 and the node one for the RDMA port while it runs
#   test.rdma-chain/restarts: "true"  kubelet, then rdma-chain's DaemonSet
#            pod, restart while the pod runs; it keeps rdma0 and its GID,
#            and the time CRI's NetworkReady (CNI STATUS) is false is printed
#   test.rdma-chain/kubelet-killed: "true"  (on any pod of the group) once
#            the group's pods are in the manifest directory and an ADD of
#            one holds its key lock (pass-through ADDs take none), kubelet
#            is killed (SIGKILL) and started again: every
#            pod runs as it expects, and each of the group's ADDs that
#            failed said 11, "try again" (check_kubelet_killed makes such a
#            group of ten)
#   test.rdma-chain/sandbox-dies: "true"  (exclusive) with kubelet stopped,
#            the pod's processes die and its netns goes without CNI DEL:
#            the DaemonSet's reconcile gives NIC and device back on the
#            kernel's event (the node equals its snapshot; the time is
#            printed); kubelet, started again, gives the pod a new sandbox
#            that gets them again
# Then the manifests are removed: the pods and their sandboxes must go, and
# the node must equal its snapshot from before the group (links, addresses,
# routes, RDMA devices, links and GIDs, pnet table, records, leases).
RECORDS=/var/lib/cni/rdma-chain/attachments
DATADIR=/var/lib/cni/rdma-chain
RIPAM=/var/lib/cni/networks-rdma
POD=/run/pods
. /scenarios/snapshot.sh
# files DIR...: snapshot.sh's, without directories and lock files (the first
# pod creates the state and lease directories and their locks; they are not
# state a pod leaves), nor the cache-* file STATUS keeps its SMC probe in.
files() {
	for _d in "$@"; do
		[ -d "$_d" ] || continue
		find "$_d" -type f ! -name lock ! -name 'last_reserved_ip.*' ! -name outcomes.jsonl ! -name 'cache-*' | sort | while read -r _f; do
			echo "file $_f $(md5sum <"$_f" | cut -c1-12)"
		done
	done
}

# yaml_field FILE KEY: the first "KEY: value" of the manifest, unquoted.
yaml_field() { sed -n "s|^ *$2: *||p" "$1" | head -1 | tr -d "\"'"; }
records() { find "$RECORDS" -maxdepth 1 -type f -name '*.json' 2>/dev/null | wc -l; }
records_are() { [ "$(records)" = "$1" ]; }
# pod_exec CID CMD...: run CMD in the pod's container through containerd.
pod_exec() {
	_cid=$1; shift
	$CTR tasks exec --exec-id "chk-$(cat /proc/sys/kernel/random/uuid)" "$_cid" "$@"
}
task_gone() { ! $CTR tasks ls -q | grep -qx "$1"; }
# pod_v6 CID: rdma0's global IPv6 address in the pod's container.
pod_v6() { pod_exec "$1" /usr/sbin/ip -6 -o addr show dev rdma0 scope global | awk '{print $4; exit}' | cut -d/ -f1; }
# rdma_cid <NODE-CID lines: the container that asks for an RDMA device (a
# sidecar may come first), else the first.
rdma_cid() { awk '$1=="NODE-CID" { if (f == "") f = $4; if ($5 == "rdma" && r == "") r = $4 } END { print (r != "" ? r : f) }'; }

# pod_pid CID: the container's init process on the node.
pod_pid() { $CTR tasks ls | awk -v c="$1" '$1==c {print $2}'; }
# dp_devices: the char devices the device plugin mounts: those of the RDMA
# devices under a PCI function, and rdma_cm.
dp_devices() {
	for d in /sys/class/infiniband_verbs/uverbs* /sys/class/infiniband_mad/umad* /sys/class/infiniband_mad/issm*; do
		[ -e "$d/ibdev" ] || continue
		case "$(readlink -f "/sys/class/infiniband/$(cat "$d/ibdev")")" in */pci*/infiniband/*) basename "$d" ;; esac
	done
	echo rdma_cm
}
# refusal NS/NAME: kubelet's last log line on rdma-chain failing the pod's sandbox.
refusal() { grep 'Failed to create sandbox' /run/kubelet.log | grep "pod=\"$1\"" | grep 'plugin type=\\"rdma-chain\\" failed' | tail -1 | grep .; }
no_pod_pnet() { ! smcctl pnet | grep -q ' ib='; }
# put_manifest FILE: into kubelet's manifest directory in one rename (kubelet
# reads a file it sees half-written and logs a parse error).
put_manifest() {
	cp "$1" "/etc/kubernetes/.$(basename "$1")"
	mv "/etc/kubernetes/.$(basename "$1")" "/etc/kubernetes/manifests/$(basename "$1")"
}
# pod_id FILE: NS/NAME of the manifest's pod.
pod_id() {
	_ns=$(yaml_field "$1" namespace)
	echo "${_ns:-default}/$(yaml_field "$1" name)"
}
expects() { [ "$(yaml_field "$1" test.rdma-chain/expect)" = "$2" ]; }

run_group() {
	mkdir -p $POD
	_gpfx="group-$(basename "$1" | cut -d- -f1)/"
	_snap0=$(snap)
	# The key locks before the group's calls (new_key_locks).
	key_locks >/run/keys-before
	for _f in "$@"; do
		PFX="$(basename "$_f" .yaml)/"
		step "expect-$(yaml_field "$_f" test.rdma-chain/expect)"
		case "$(yaml_field "$_f" test.rdma-chain/expect)" in rdma0 | none | refused | waits) pass ;; *) fail "annotation test.rdma-chain/expect is not rdma0, none, refused or waits" ;; esac
		expects "$_f" waits || put_manifest "$_f"
	done
	PFX=$_gpfx
	grep -qs 'test.rdma-chain/kubelet-killed: "true"' "$@" && kill_kubelet_during_adds
	for _f in "$@"; do
		PFX="$(basename "$_f" .yaml)/"
		expects "$_f" waits || check_pod "$_f"
	done
	# Pods that wait for the others come once those run.
	for _f in "$@"; do
		PFX="$(basename "$_f" .yaml)/"
		expects "$_f" waits && put_manifest "$_f" && check_refused "$_f"
	done
	PFX=$_gpfx
	grep -qs 'test.rdma-chain/kubelet-killed: "true"' "$@" && check_adds_retried "$@"
	group_rping "$@"
	# Pods that wait for the others: remove those, then they must run.
	_waiting=
	for _f in "$@"; do
		if expects "$_f" waits; then _waiting="$_waiting $_f"; else remove_pod "$_f"; fi
	done
	for _f in $_waiting; do
		PFX="$(basename "$_f" .yaml)/"
		check_pod "$_f" rdma0
		remove_pod "$_f"
	done
	PFX=$_gpfx
	step records-after
	if wait_until 120 records_are 0; then pass; else fail "records left: $(ls $RECORDS)"; fi
	step no-pod-pnet
	if wait_until 60 no_pod_pnet; then pass; else fail "pnet entries left: $(smcctl pnet)"; fi
	step node-as-before
	if settle_equal "$_snap0"; then pass; else fail "$DELTA"; fi
	PFX=
	rm -rf $POD
}

# remove_pod FILE: out of the manifest directory; kubelet must drop the pod
# and containerd its sandbox's tasks (CNI DEL runs when kubelet stops the
# sandbox, which may be after kubelet no longer lists the pod).
remove_pod() {
	PFX="$(basename "$1" .yaml)/"
	rm -f "/etc/kubernetes/manifests/$(basename "$1")"
	step gone
	_cid=$(cat "$POD/$(yaml_field "$1" name).cid" 2>/dev/null)
	if ! _out=$(nodectl gone "$(pod_id "$1")" 180); then
		fail "$_out"
	elif [ -n "$_cid" ] && ! wait_until 120 task_gone "$_cid"; then
		fail "container $_cid still has a task"
	else
		pass
	fi
}

# check_refused FILE: the sandbox stays not ready; kubelet's log says why.
check_refused() {
	step refused
	if _out=$(nodectl wait "$(pod_id "$1")" pending 180); then pass; else fail "$_out"; fi
	step refused-reason
	if wait_until 120 refusal "$(pod_id "$1")-node"; then
		pass
		info "kubelet: $(refusal "$(pod_id "$1")-node" | cut -c1-600)"
	else
		fail "no rdma-chain error in kubelet's log for the pod"
	fi
}

# check_pod FILE [EXPECT]: the pod against its expectation; records its
# container in $POD/NAME.cid.
check_pod() {
	_id=$(pod_id "$1")
	_name=${_id#*/}
	_want=${2:-$(yaml_field "$1" test.rdma-chain/expect)}
	[ "$_want" = refused ] && { check_refused "$1"; return; }
	step running
	if ! _out=$(nodectl wait "$_id" running 240); then
		fail "$_out"
		return
	fi
	pass
	echo "$_out" | grep NODE-TIME
	# What the plugin asks kubelet (a static pod's name ends in -NODE).
	nodectl podres get "$_id-node"
	_cid=$(echo "$_out" | rdma_cid)
	echo "$_cid" >"$POD/$_name.cid"
	check_links "$_want" "$_cid"
	[ "$_want" = rdma0 ] && check_rdma_pod "$1" "$_cid"
	if [ "$_want" = none ]; then
		step no-record
		if grep -ls "\"$_name-node\"" $RECORDS/*.json; then fail "a record names the pod"; else pass; fi
	fi
	if [ "$(yaml_field "$1" network.alibabacloud.com/erdma-smcr)" = true ]; then
		step pnet
		_pod=$(smcctl pnet "/proc/$(pod_pid "$_cid")/ns/net" 2>&1)
		_node=$(smcctl pnet 2>&1)
		info "pnet in the pod: $_pod; on the node: $_node"
		case "$_pod:$_node" in *" eth=eth0 "*:*" ib="*" port=1"*) pass ;; *) fail "pod: '$_pod', node: '$_node'" ;; esac
	fi
	[ "$(yaml_field "$1" test.rdma-chain/restarts)" = true ] && check_restarts "$1" "$_cid"
	[ "$(yaml_field "$1" test.rdma-chain/sandbox-dies)" = true ] && check_sandbox_dies "$1" "$_cid"
	return 0
}

# check_links EXPECT CID: rdma0 in the container's links, or not.
check_links() {
	_links=$(pod_exec "$2" /usr/sbin/ip -o link 2>&1)
	step "rdma0-$1"
	case "$_links" in
	*" lo: "*) ;; # ip ran in the container
	*) fail "ip -o link in the container: $_links"; return ;;
	esac
	case "$1:$_links" in
	rdma0:*" rdma0"[@:]*) pass ;;
	none:*" rdma0"[@:]*) fail "the pod has rdma0: $_links" ;;
	none:*) pass ;;
	*) fail "no rdma0 in the pod: $_links" ;;
	esac
}

# check_rdma_pod FILE CID: rdma0's address is a GID of a port the pod sees;
# an RDMA link; /dev/infiniband.
check_rdma_pod() {
	step rdma0-gid
	_a=$(pod_v6 "$2")
	if [ -z "$_a" ]; then
		fail "rdma0 has no global IPv6 address: $(pod_exec "$2" /usr/sbin/ip -6 addr show dev rdma0 2>&1)"
	elif _out=$(pod_exec "$2" /bin/busybox sh -c 'grep -H . /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null' | nodectl gid "$_a" 2>&1); then
		pass
		echo "$_out"
	else
		fail "$_out"
	fi
	step rdma-link
	_rl=$(pod_exec "$2" /usr/sbin/rdma link 2>&1)
	info "rdma link in the pod: $(echo "$_rl" | tr '\n' ';')"
	case "$_rl" in *"link "*/1*) pass ;; *) fail "no RDMA link in the pod: $_rl" ;; esac
	grep -qE 'rdma/hca|aliyun/erdma' "$1" || return 0
	step dev-infiniband
	_in=$(pod_exec "$2" /bin/busybox ls /dev/infiniband 2>&1 | sort | tr '\n' ' ')
	_dp=$(dp_devices | sort | tr '\n' ' ')
	info "/dev/infiniband in the pod: $_in; the device plugin's: $_dp"
	if [ "$(yaml_field "$1" privileged)" = true ]; then
		case " $_in" in *" rdma_cm "*) pass ;; *) fail "no rdma_cm in a privileged pod: $_in" ;; esac
	elif [ "$_in" = "$_dp" ]; then
		pass
	else
		fail "the pod has '$_in', the device plugin mounts '$_dp'"
	fi
}

# group_rping FILE...: each rping client of the group to its server.
group_rping() {
	_srv= _addr=
	for _f in "$@"; do
		[ "$(yaml_field "$_f" test.rdma-chain/rping)" = server ] || continue
		_srv=$(cat "$POD/$(yaml_field "$_f" name).cid" 2>/dev/null)
		_addr=$(pod_v6 "$_srv")
	done
	for _f in "$@"; do
		[ "$(yaml_field "$_f" test.rdma-chain/rping)" = client ] || continue
		_cli=$(cat "$POD/$(yaml_field "$_f" name).cid" 2>/dev/null)
		step "rping-$(yaml_field "$_f" name)"
		if [ -z "$_srv" ] || [ -z "$_cli" ] || [ -z "$_addr" ]; then
			fail "server container '$_srv' [$_addr], client '$_cli'"
			continue
		fi
		_s0=$(rxe_sent rxe0) _r0=$(rxe_rcvd rxe0)
		pod_exec "$_srv" /bin/busybox timeout 40 /usr/bin/rping -s -a "$_addr" -C 10 >/tmp/rping-srv.log 2>&1 &
		_spid=$!
		wait_until 15 rping_listening "$_addr"
		_out=$(pod_exec "$_cli" /bin/busybox timeout 30 /usr/bin/rping -c -a "$_addr" -C 10 -v 2>&1)
		_st=$?
		wait $_spid
		_s1=$(rxe_sent rxe0) _r1=$(rxe_rcvd rxe0)
		info "rping in containers -> [$_addr]: exit $_st, $(echo "$_out" | grep -c 'ping data') ping data lines; rxe0 sent_pkts $_s0 -> $_s1, rcvd_pkts $_r0 -> $_r1"
		if rping_done "$_st" "$_out" 10 && [ "$_s1" -gt "$_s0" ] && [ "$_r1" -gt "$_r0" ]; then pass; else fail "$_out / server: $(cat /tmp/rping-srv.log)"; fi
	done
}

# check_restarts FILE CID: kubelet restarts (the plugin's STATUS fails while
# kubelet's pod-resources socket is gone: CRI NetworkReady is false until it
# is back), then the DaemonSet pod; the pod keeps rdma0 and its GID.
check_restarts() {
	nodectl netready 300 >/run/netready.log 2>&1 &
	_np=$!
	step kubelet-restart
	kill "$(cat /run/kubelet.pid)"
	wait_until 30 sh -c "! kill -0 $(cat /run/kubelet.pid)"
	wait_until 30 sh -c "nodectl netready-is false"
	start_kubelet
	if wait_until 240 wget -q -O /dev/null http://127.0.0.1:10248/healthz; then pass; else fail "kubelet not healthy again"; fi
	step network-ready-again
	if wait $_np; then pass; else fail "$(cat /run/netready.log)"; fi
	cat /run/netready.log
	check_links rdma0 "$2"
	step daemonset-restart
	rm -f /etc/kubernetes/manifests/rdma-chain-$MODE.yaml
	if ! _out=$(nodectl gone kube-system/rdma-chain 180); then
		fail "$_out"
	else
		put_manifest /etc/node/rdma-chain-$MODE.yaml
		if _out=$(nodectl wait kube-system/rdma-chain running 240); then pass; else fail "$_out"; fi
	fi
	check_links rdma0 "$2"
	check_rdma_pod "$1" "$2"
}

# nic_home: the exclusive node's NIC is eth1 again with its address, and
# simrdma0 is on it.
nic_home() {
	ip -o addr show dev eth1 2>/dev/null | grep -q 'fd00:11::15/64' && rdma link | grep -q 'simrdma0/1 .*netdev eth1'
}
reconcile_log() { cat /var/log/pods/kube-system_rdma-chain-node_*/reconcile/*.log 2>/dev/null; }
# repair_logged NS/NAME: reconcile's log has the repair of the pod's attachment.
repair_logged() { reconcile_log | grep -q "msg=\"repaired an attachment\" attachment=\"rdmanet/.*(pod $1-node, exclusive, .*is gone and .* is back on the host"; }
# new_cid NS/NAME OLD FILE: the pod runs in a container other than OLD;
# its ID goes into FILE.
new_cid() {
	_nc=$(nodectl wait "$1" running 5 2>/dev/null | rdma_cid)
	[ -n "$_nc" ] && [ "$_nc" != "$2" ] && echo "$_nc" >"$3"
}

# check_sandbox_dies FILE CID: with kubelet stopped, the pod's processes are
# killed and the runtime's pin of its netns removed: the netns dies without
# CNI DEL. The DaemonSet's reconcile must give the NIC and device back (the
# node equals the group's snapshot, $_snap0). Then kubelet starts again and
# the pod gets a new sandbox with the device.
check_sandbox_dies() {
	_id=$(pod_id "$1")
	step sandbox-dies
	_ns=$(ip netns identify "$(pod_pid "$2")")
	if [ -z "$_ns" ]; then
		fail "the container's netns is not one of /var/run/netns"
		return
	fi
	kill "$(cat /run/kubelet.pid)"
	if ! wait_until 30 sh -c "! kill -0 $(cat /run/kubelet.pid)"; then
		fail "kubelet still runs"
		return
	fi
	_pids=$(ip netns pids "$_ns" | tr '\n' ' ')
	info "kubelet stopped; killing the pod's processes ($_pids) and removing /var/run/netns/$_ns"
	# shellcheck disable=SC2086 # one PID per word
	kill -9 $_pids
	if wait_until 30 sh -c "[ -z \"\$(ip netns pids $_ns)\" ]" && umount "/var/run/netns/$_ns" && rm "/var/run/netns/$_ns"; then
		pass
	else
		fail "the pod's netns is still held: pids '$(ip netns pids "$_ns" | tr '\n' ' ')'"
		return
	fi
	_t0=$(cut -d' ' -f1 /proc/uptime)
	step repaired
	if wait_until 120 nic_home; then
		_t1=$(cut -d' ' -f1 /proc/uptime)
		pass
		info "repair-time: eth1 back with its address and simrdma0 on it $(awk -v a="$_t0" -v b="$_t1" 'BEGIN { printf "%d", (b - a) * 1000 }') ms after the netns pin went"
	else
		fail "not repaired: $(ip -o link | tr '\n' ';') $(rdma link | tr '\n' ';')"
	fi
	step repair-logged
	if wait_until 30 repair_logged "$_id"; then
		pass
		info "reconcile: $(reconcile_log | grep 'msg="repaired an attachment"' | tail -1 | cut -c1-400)"
	else
		fail "no repair in reconcile's log: $(reconcile_log | tail -5 | tr '\n' '|')"
	fi
	step repaired-on-event
	# the metrics server answers from a collection up to 2 s old: poll
	if wait_until 10 sh -c "wget -q -O - http://127.0.0.1:9742/metrics | grep -q '^rdma_chain_repairs_total{network=\"rdmanet\",trigger=\"event\"} 1\$'"; then
		pass
	else
		fail "$(wget -q -O - http://127.0.0.1:9742/metrics | grep repairs_total | tr '\n' ';')"
	fi
	step repaired-as-before
	if records_are 0 && settle_equal "$_snap0"; then pass; else fail "records $(records); $DELTA"; fi
	step new-sandbox
	start_kubelet
	_cidf="$POD/$(yaml_field "$1" name).cid"
	if wait_until 300 new_cid "$_id" "$2" "$_cidf"; then
		pass
		nodectl wait "$_id" running 5 | grep NODE-TIME
	else
		fail "no new container running: $(nodectl show "$_id" 2>&1 | tr -d '\n' | cut -c1-600)"
		return
	fi
	check_links rdma0 "$(cat "$_cidf")"
	check_rdma_pod "$1" "$(cat "$_cidf")"
}

# key_locks: the attachments' key lock files (keys/*.lock), one a line. A
# key lock file exists only while a call holds it, or after a killed call:
# an ADD that records a pod holds it from its first look to its last
# change. A glob, not a scan of /proc: under TCG a shared-mode ADD ends
# before a pgrep of every process does. new_key_locks: those not listed in
# /run/keys-before (run_group lists them before the group starts).
key_locks() {
	for _k in "$DATADIR"/keys/*.lock; do
		[ -e "$_k" ] && echo "$_k"
	done
	return 0
}
new_key_locks() {
	key_locks | while read -r _k; do
		grep -qxF "$_k" /run/keys-before || echo "$_k"
	done
}
plugin_adding() { [ -n "$(new_key_locks)" ]; }

# kill_kubelet_during_adds: once an rdma-chain ADD of the group holds its
# key lock (new_key_locks), kubelet is killed with SIGKILL at once (its CRI
# calls are cut off mid-sandbox) and started again.
kill_kubelet_during_adds() {
	step kubelet-killed
	if ! wait_until 180 plugin_adding; then
		fail "no rdma-chain ADD of the group held its key lock within 180 s"
		return
	fi
	kill -9 "$(cat /run/kubelet.pid)"
	if ! wait_until 30 sh -c "! kill -0 $(cat /run/kubelet.pid)"; then
		fail "kubelet still runs after SIGKILL"
		return
	fi
	info "kubelet killed; key lock files of the group's calls a moment after (held, or left by killed calls): $(new_key_locks | wc -l)"
	start_kubelet
	if wait_until 240 wget -q -O /dev/null http://127.0.0.1:10248/healthz; then
		pass
	else
		fail "kubelet not healthy again"
	fi
}

# check_adds_retried FILE...: the plugin's lines for the group's pods: each
# failed ADD said 11 ("try again"), and every pod has an ADD that ended ok.
check_adds_retried() {
	step adds-retried
	_bad= _counts=
	for _f in "$@"; do
		_p="pod=$(pod_id "$_f")-node"
		_adds=$(grep ' verb=ADD ' /var/log/rdma-chain.log | grep " $_p ")
		_ok=$(echo "$_adds" | grep -c 'outcome=ok')
		_failed=$(echo "$_adds" | grep -c 'outcome=error')
		_other=$(echo "$_adds" | grep 'outcome=error' | grep -vc ' code=11 ')
		_counts="$_counts $(yaml_field "$_f" name):ok=$_ok,failed=$_failed"
		if [ "$_ok" -lt 1 ] || [ "$_other" != 0 ]; then _bad="$_bad $_p(ok=$_ok,not-11=$_other)"; fi
	done
	info "ADDs per pod after kubelet's kill:$_counts"
	if [ -z "$_bad" ]; then
		pass
	else
		fail "$_bad: $(grep ' verb=ADD ' /var/log/rdma-chain.log | grep ' pod=default/killed-' | grep 'outcome=error' | grep -v ' code=11 ' | tail -3)"
	fi
}

# check_kubelet_killed: ten pods at once, five asking for rdma/hca and five
# for nothing (their ADDs pass through), with kubelet killed while the
# plugin's calls run (kill_kubelet_during_adds); then as any group.
check_kubelet_killed() {
	_dir=/run/kubelet-killed
	mkdir -p $_dir
	for _i in 1 2 3 4 5 6 7 8 9 10; do
		_exp=none _res=
		if [ "$_i" -le 5 ]; then
			_exp=rdma0
			_res="      resources: {limits: {rdma/hca: 1}}"
		fi
		cat >"$_dir/60-killed-$_i.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: killed-$_i
  namespace: default
  annotations:
    test.rdma-chain/expect: $_exp
    test.rdma-chain/kubelet-killed: "true"
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: localhost/rdma-chain-test:node
      imagePullPolicy: Never
      command: [/bin/busybox, sleep, "3600"]
$_res
EOF
	done
	run_group "$_dir"/60-killed-*.yaml
}
