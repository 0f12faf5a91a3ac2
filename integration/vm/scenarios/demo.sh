#!/bin/sh
# demo: the story `make demo` tells (scripts/demo-vm.sh prints the lines with
# the "DEMO " prefix, without it). Shared mode, cniVersion 1.0.0, the chain
# [ptp + host-local, rdma-chain] with IPv6 ipam for rdma0 through cnitool:
# two pods get RDMA and RoCE between them, a pod kubelet allocated nothing
# passes through, DEL gives everything back. Also a normal scenario: every
# claim is a check (RC-STEP/PASS/FAIL).
. /scenarios/lib.sh

say() { echo "DEMO $*"; }
# ok NAME CMD...: a silent check
ok() {
	_n=$1
	shift
	step "$_n"
	if _o=$("$@" 2>&1); then pass "$_n"; else fail "$_n" "[$*] $_o"; fi
}

V=1.0.0
DATADIR=/run/rdma-chain-demo
LEASES=/run/ipam6-demo/rdmanet
IPAM='"ipam":{"type":"host-local","dataDir":"/run/ipam6-demo","ranges":[[{"subnet":"fd00:77::/64","rangeStart":"fd00:77::10"}]]}'
leases() { ls "$LEASES" 2>/dev/null | grep '^fd00:77:'; }

ok setup-rxe setup_rxe
/usr/sbin/ip -6 addr show dev veth0 | grep -q 'fd00:77::1/64' || ip addr add fd00:77::1/64 dev veth0 nodad
say "kernel $(uname -r), RDMA netns mode: $(netns_mode)"
say "RDMA device (rdma link): $(rdma link show rxe0/1 | tr -s ' ' | sed 's/ $//')"
say "node: veth0 carries 192.168.77.1/24 and fd00:77::1/64 (soft-RoCE routes the pods' /64 through it)"

NETDIR=/etc/cni/net.d-demo
write_conflist "$NETDIR" "$V" "\"mode\":\"shared\",\"devices\":[\"rxe0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",\"sharedLink\":{\"type\":\"ipvlan\",\"mode\":\"l2\"},$IPAM,\"capabilities\":{\"io.kubernetes.cri.pod-annotations\":true}"
say "chain rdmanet (cniVersion $V): ptp + host-local 10.99.0.0/24, then rdma-chain shared/ipvlan-l2 with host-local fd00:77::/64 for rdma0"
say "pod1 is annotated network.alibabacloud.com/erdma-smcr: \"true\" (CAP_ARGS, as containerd passes it)"
say ""
for pod in pod1 pod2; do
	ip netns add $pod
	if [ $pod = pod1 ]; then export CAP_ARGS='{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}'; fi
	cni cnitool add $pod
	unset CAP_ARGS
	expect_ok add-$pod
	a=$(pod_ip6 $pod fd00:77:)
	eval "ADDR_$pod=\$a"
	ok result-$pod test -n "$a" -a -n "$(result_iface_index rdma0)"
	say "$pod: cnitool add -> exit $CNI_RC; result: eth0 $(result_ip 10.99.) and rdma0's entry; rdma0 holds $a"
	ip -n $pod -br addr | grep -v '^lo ' | tr -s ' ' | sed 's/^/DEMO     /'
	step gid-$pod
	wait_until 15 gid_row "$(expand6 "$a")" rdma0 # the GID appears through a netdev event
	g=$(gid_row "$(expand6 "$a")" rdma0)
	if [ -n "$g" ]; then pass; else fail "no GID for $a"; fi
	say "    RoCE v2 GID of rxe0: index ${g%% *}, $(echo "$g" | cut -d' ' -f2), ndev $(echo "$g" | cut -d' ' -f3)"
done

s0=$(rxe_sent) r0=$(rxe_rcvd)
timeout 40 /usr/sbin/ip netns exec pod1 rping -s -a "$ADDR_pod1" -C 10 >/tmp/rping-s.log 2>&1 &
srv=$!
wait_until 15 rping_listening "$ADDR_pod1"
step rping
out=$(timeout 30 /usr/sbin/ip netns exec pod2 rping -c -a "$ADDR_pod1" -C 10 -v 2>&1)
rc=$?
wait $srv 2>/dev/null
n=$(echo "$out" | grep -c 'ping data')
if rping_done $rc "$out" 10; then pass; else fail "rping exit $rc, $n ping data lines: $out / $(cat /tmp/rping-s.log)"; fi
say "rping pod2 -> pod1 [$ADDR_pod1] -C 10: exit $rc, $n/10 pings; last: $(echo "$out" | grep 'ping data' | tail -n1 | cut -c1-40)..."
s1=$(rxe_sent) r1=$(rxe_rcvd)
ok counters test "$s1" -gt "$s0" -a "$r1" -gt "$r0"
say "rxe0 hw_counters: sent_pkts $s0 -> $s1, rcvd_pkts $r0 -> $r1"
say ""

# SMC-R: the pnet table the kernel uses, read back through its own dumps.
PNETID=$(cat /sys/class/net/veth0/address | tr -d ':' | tr a-f A-F)
ok smc-host-entry sh -c "smcctl pnet | grep -qx '$PNETID eth=n/a ib=rxe0 port=1'"
ok smc-pod1-entry sh -c "smcctl pnet /var/run/netns/pod1 | grep -qx '$PNETID eth=eth0 ib=n/a port=0'"
ok smc-pod2-none test -z "$(smcctl pnet /var/run/netns/pod2)"
say "SMC-R pnet table (smcctl, the project's netlink client):"
say "    init_net: $(smcctl pnet | tr '\n' ' ')"
say "    pod1:     $(smcctl pnet /var/run/netns/pod1 | tr '\n' ' ')"
say "    pod2:     $(smcctl pnet /var/run/netns/pod2 | tr '\n' ' ')(none: not annotated)"
say ""

# A pod that asked for nothing: podSelection requested, kubelet allocated nothing.
SOCK=/run/kubelet/demo.sock
echo '{"pods":[{"namespace":"default","name":"pod3","resources":{}}]}' >/run/demo-pods.json
fakekubelet -socket $SOCK -allocations /run/demo-pods.json >/tmp/demo-kubelet.log 2>&1 &
KUBELET=$!
wait_until 15 test -S $SOCK
NETDIR=/etc/cni/net.d-demo-req
write_conflist "$NETDIR" "$V" "\"mode\":\"shared\",\"devices\":[\"rxe0\"],\"podSelection\":\"requested\",\"podResourcesSocket\":\"$SOCK\",\"resourceNames\":[\"rdma/hca\"],\"dataDir\":\"$DATADIR\",\"sharedLink\":{\"type\":\"ipvlan\",\"mode\":\"l2\"},$IPAM"
ip netns add pod3
cni cnitool add pod3
expect_ok add-pod3
ok pod3-no-rdma0 sh -c "! /usr/sbin/ip -n pod3 link show rdma0 >/dev/null 2>&1"
ok pod3-result-passthrough sh -c "! echo '$(compact_result)' | grep -q -e rdma0 -e fd00:77:"
ok pod3-no-record test "$(state_count)" -eq 2
say "pod3 (podSelection requested, kubelet allocated nothing): cnitool add -> exit $CNI_RC, passes through"
say "    result: eth0 $(result_ip 10.99.) only; pod links: $(pod_links pod3); records still $(state_count)"
say ""

# DEL: what comes back.
g_before=$(v6_gid_rows | wc -l)
l_before=$(leases | wc -l)
r_before=$(state_count)
cni cnitool del pod3
expect_ok del-pod3
NETDIR=/etc/cni/net.d-demo
for pod in pod1 pod2; do
	cni cnitool del $pod
	expect_ok del-$pod
	ok child-gone-$pod sh -c "! /usr/sbin/ip -n $pod link show rdma0 >/dev/null 2>&1"
done
wait_until 15 no_output v6_gid_rows
ok gids-gone test -z "$(v6_gid_rows)"
ok leases-released test -z "$(leases)"
ok records-gone test "$(state_count)" -eq 0
ok smc-host-entry-gone test -z "$(smcctl pnet)"
say "DEL pod3, pod1, pod2: all exit 0"
say "    rdma0 children: pod1 $(has_rdma0 pod1 && echo present || echo gone), pod2 $(has_rdma0 pod2 && echo present || echo gone); veth0 and rxe0 stay: $(rdma link show rxe0/1 | grep -o 'netdev [a-z0-9]*')"
say "    pod GIDs $g_before -> $(v6_gid_rows | wc -l), IPv6 leases $l_before -> $(leases | wc -l), attachment records $r_before -> $(state_count)"
say "    SMC-R init_net entry: $( [ -z "$(smcctl pnet)" ] && echo removed with the last annotated pod || smcctl pnet)"
cni cnitool del pod1
expect_ok del-again-pod1
say "    DEL again: exit $CNI_RC (idempotent)"
kill $KUBELET 2>/dev/null
wait $KUBELET 2>/dev/null
for p in pod1 pod2 pod3; do ip netns del $p; done
exit 0
