#!/bin/sh
# podres: "podSelection":"requested". A fake kubelet serves the pod-resources
# API: pod1 has rdma/hca allocated and gets rdma0; pod2 has nothing and passes
# through (ptp's result, no rdma0). With the kubelet gone, ADD fails with CNI
# error 11 (try again) naming the socket. DRA claims (dynamic_resources, as
# kubelet reports them): pod4's claim device rxe0 of the served driver gets
# rdma0 and is recorded; pod5 with only another driver's (dranet's) device
# on veth0 passes through, logged; pod6 with a device-plugin allocation and
# dranet's device on veth0 is refused (103) and rxe0 is left alone.
. /scenarios/lib.sh

SOCK=/run/kubelet/pod-resources.sock
cat >/run/pods.json <<'EOF'
{"pods":[
 {"namespace":"default","name":"pod1","resources":{"rdma/hca":["1"]}},
 {"namespace":"default","name":"pod2","resources":{}},
 {"namespace":"default","name":"pod3","resources":{"rdma/hca":["2"]}}
]}
EOF

# Not through check(): a background job inside $(...) keeps it waiting forever.
start_kubelet() {
	step kubelet-up
	fakekubelet -socket $SOCK -allocations /run/pods.json >>/tmp/fakekubelet.log 2>&1 &
	KUBELET=$!
	wait_until 15 test -S $SOCK
	if [ -S $SOCK ]; then pass; else fail "no socket $SOCK: $(cat /tmp/fakekubelet.log)"; fi
}

check setup-rxe setup_rxe
for V in 0.4.0 1.0.0; do
	PFX="v$V/"
	NETDIR=/etc/cni/net.d-podres-$V
	DATADIR=/run/rdma-chain-podres-$V
	write_conflist "$NETDIR" "$V" "\"mode\":\"shared\",\"devices\":[\"rxe0\"],\"podSelection\":\"requested\",\"podResourcesSocket\":\"$SOCK\",\"resourceNames\":[\"rdma/hca\"],\"dataDir\":\"$DATADIR\",\"sharedLink\":{\"type\":\"ipvlan\",\"mode\":\"l2\"}"
	info "cniVersion $V conflist: $(tr -d '\n' <"$NETDIR/rdmanet.conflist")"
	start_kubelet
	ip netns add pod1
	ip netns add pod2

	cni cnitool add pod1
	expect_ok add-pod1-requested
	check rdma0-in-pod1 has_rdma0 pod1
	step result-pod1-has-rdma0
	case "$(rdma0_entry)" in *'"sandbox":"/var/run/netns/pod1"'*) pass ;; *) fail "no rdma0 entry in the result" ;; esac
	step record-pod1
	if [ "$(state_count)" -eq 1 ]; then pass; else fail "want 1 record, have: $(state_files)"; fi

	cni cnitool add pod2
	expect_ok add-pod2-not-requested
	check no-rdma0-in-pod2 sh -c "! /usr/sbin/ip -n pod2 link show rdma0 >/dev/null 2>&1"
	step result-pod2-passthrough
	c=$(echo "$CNI_OUT" | tr -d ' \n')
	case "$c" in
	*rdma0*) fail "pass-through result mentions rdma0: $CNI_OUT" ;;
	*'"name":"eth0"'*'"10.99.0.'*) pass ;;
	*) fail "pass-through result lacks ptp's eth0/10.99.0.x: $CNI_OUT" ;;
	esac
	step no-record-pod2
	if [ "$(state_count)" -eq 1 ]; then pass; else fail "want only pod1's record, have: $(state_files)"; fi
	cni cnitool check pod1
	expect_ok check-pod1
	cni cnitool check pod2
	expect_ok check-pod2
	cni cnitool del pod2
	expect_ok del-pod2
	cni cnitool del pod1
	expect_ok del-pod1
	check pod1-child-gone sh -c "! /usr/sbin/ip -n pod1 link show rdma0 >/dev/null 2>&1"

	# Kubelet gone, stale socket left behind (as after a kubelet crash).
	kill -9 $KUBELET
	wait $KUBELET 2>/dev/null
	ip netns add pod3
	cni cnicall add pod3
	expect_code kubelet-dead-code-11 11 $SOCK
	check no-rdma0-kubelet-dead sh -c "! /usr/sbin/ip -n pod3 link show rdma0 >/dev/null 2>&1"
	cni cnicall del pod3
	expect_ok del-kubelet-dead
	# No socket at all.
	rm -f $SOCK
	cni cnicall add pod3
	expect_code kubelet-no-socket-code-11 11 $SOCK
	cni cnicall del pod3
	expect_ok del-no-socket
	step no-records-left
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi
	show cat /tmp/fakekubelet.log
	: >/tmp/fakekubelet.log
	for p in pod1 pod2 pod3; do ip netns del $p; done
done

V=1.0.0
PFX="dra/"
NETDIR=/etc/cni/net.d-podres-dra
DATADIR=/run/rdma-chain-podres-dra
cat >/run/pods.json <<'EOF'
{"pods":[
 {"namespace":"default","name":"pod4","resources":{},"claims":[{"namespace":"default","name":"nic","driver":"rdma-chain.github.io","pool":"node1","device":"rxe0","cdi":["rdma-chain.github.io/rdma=u4-rxe0"]}]},
 {"namespace":"default","name":"pod5","resources":{},"claims":[{"namespace":"default","name":"net","driver":"dranet.gke.io","pool":"node1","device":"veth0"}]},
 {"namespace":"default","name":"pod6","resources":{"rdma/hca":["3"]},"claims":[{"namespace":"default","name":"net","driver":"dranet.gke.io","pool":"node1","device":"veth0"}]}
]}
EOF
write_conflist "$NETDIR" "$V" "\"mode\":\"shared\",\"devices\":[\"rxe0\"],\"podSelection\":\"requested\",\"podResourcesSocket\":\"$SOCK\",\"resourceNames\":[\"rdma/hca\"],\"dataDir\":\"$DATADIR\",\"sharedLink\":{\"type\":\"ipvlan\",\"mode\":\"l2\"}"
start_kubelet
RXE_BEFORE=$(rdma link show rxe0/1)
for p in pod4 pod5 pod6; do ip netns add $p; done
cni cnitool add pod4
expect_ok add-pod4-claim
check rdma0-in-pod4 has_rdma0 pod4
step record-pod4-claim
if grep -q '"claims":\[{"namespace":"default","name":"nic","driver":"rdma-chain.github.io","pool":"node1","device":"rxe0","rdmaDevice":"rxe0"}\]' "$DATADIR"/attachments/*.json; then
	pass
else
	fail "record lacks the claim: $(cat "$DATADIR"/attachments/*.json 2>&1)"
fi
cni cnitool add pod5
expect_ok add-pod5-foreign-only
check no-rdma0-in-pod5 sh -c "! /usr/sbin/ip -n pod5 link show rdma0 >/dev/null 2>&1"
step foreign-device-logged
case "$CNI_OUT" in *"driver this network does not serve"*dranet.gke.io*) pass ;; *) fail "no log line for dranet's device: $CNI_OUT" ;; esac
cni cnicall add pod6
expect_code foreign-netdev-refused-103 103 "no RDMA device offered"
check no-rdma0-in-pod6 sh -c "! /usr/sbin/ip -n pod6 link show rdma0 >/dev/null 2>&1"
cni cnicall del pod6
expect_ok del-pod6
cni cnitool del pod5
expect_ok del-pod5
cni cnitool del pod4
expect_ok del-pod4
check pod4-child-gone sh -c "! /usr/sbin/ip -n pod4 link show rdma0 >/dev/null 2>&1"
check rxe0-unchanged sh -c "[ \"\$(rdma link show rxe0/1)\" = '$RXE_BEFORE' ]"
step dra-no-records-left
if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi
kill $KUBELET
for p in pod4 pod5 pod6; do ip netns del $p; done
exit 0
