#!/bin/sh
# exclusive-rdma (own boot, with a second NIC and rc.simrdma=eth0): exclusive
# mode on the kernel's real RDMA core. simrdma0 (integration/vm/simrdma) is a
# movable RDMA device bound to the virtio-net NIC eth0, which behaves like a
# physical NIC (it survives the death of a netns). For cniVersion 0.4.0 and
# 1.0.0, chained after ptp+host-local, through cnicall:
#   ADD / CHECK / DEL, the pod netns deleted before DEL, a stranded holder
#   (netns gone, or path reused by another netns) reclaimed by the next ADD,
#   two pods one device (11), failed ADDs after the move (IPAM, name taken),
#   mode shared on an exclusive kernel (101), a device not offered (rxe0)
#   never touched, and what SMC does with an annotated pod; the result's
#   shape (rdma0's entry only, the whole chain's CHECK passes), and at 1.1.0
#   rdma0's MTU and, with reportIPs, its address; eth0 never moved while it
#   carries the node's default route or address (110).
# Assertions read the kernel's own view: rdma dev, rdma link, sysfs GIDs,
# ip -d link. RC-INFO lines carry the views before ADD, after ADD, after DEL
# and of the stranded reclaim.
. /scenarios/lib.sh

step switch-to-exclusive
if out=$(rdma system set netns exclusive 2>&1) && [ "$(netns_mode)" = exclusive ]; then
	pass
else
	fail "rdma system set netns exclusive: $out; mode now $(netns_mode)"
fi
# init_net as a named netns, so tools inside a pod can name it as a target.
touch /run/netns/host && mount --bind /proc/1/ns/net /run/netns/host
check simrdma0-registered sh -c "/usr/sbin/rdma dev | grep -q ': simrdma0:'"
check simrdma0-on-eth0 sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev eth0'"

check nic-setup setup_nic
check rxe0-on-veth0 setup_rxe # a device the confs never offer

# sim_gids: "GID NDEV TYPE" rows of simrdma0 port 1 as this netns's sysfs
# shows them, sorted (no index: the kernel may reorder on re-add); fails when
# simrdma0 is not visible here. A file, so `ip netns exec` can run it.
cat >/run/sim_gids <<'EOF'
d=/sys/class/infiniband/simrdma0/ports/1
[ -d $d ] || exit 1
grep -H -v '^0000:0000:0000:0000:0000:0000:0000:0000$' $d/gids/* 2>/dev/null | sed 's|.*/gids/\([0-9]*\):|\1 |' |
	while read -r n g; do echo "$g $(cat $d/gid_attrs/ndevs/$n 2>/dev/null) $(cat $d/gid_attrs/types/$n 2>/dev/null)"; done | sort
EOF
sim_gids() { sh /run/sim_gids; }
pod_sim_gids() { ip netns exec "$1" sh /run/sim_gids; }

# nic_view NAME: what DEL must restore of netdev NAME in init_net: name,
# MTU, MAC, flags (UP), addresses, routes of every table (sorted).
nic_view() {
	_l=$(ip -o link show "$1" 2>&1) || { echo "no netdev $1 in init_net"; return 1; }
	echo "$_l" | sed -n 's/^[0-9]*: \([^:@]*\)[:@] <\([^>]*\)> mtu \([0-9]*\) .*link\/ether \([0-9a-f:]*\).*/link \1 mtu=\3 mac=\4 flags=\2/p'
	ip -o addr show dev "$1" | awk '{print "addr", $3, $4}' | sort
	ip route show table all dev "$1" | sed 's/ dev [^ ]*//; s/  */ /g; s/^/route /' | sort
}
# views LABEL [POD...]: the rdma/ip views of init_net (and pods) as RC-INFO lines
views() {
	_lbl=$1
	shift
	info "view $PFX$_lbl: init_net rdma dev: $(rdma dev | tr '\n' ';')"
	info "view $PFX$_lbl: init_net rdma link: $(rdma link | tr '\n' ';')"
	info "view $PFX$_lbl: init_net ip link: $(ip -o link | sed 's/^[0-9]*: \([^:]*\):.*link\/\([a-z]*\) \([0-9a-f:]*\).*/\1(\3)/' | tr '\n' ' ')"
	for _p in "$@"; do
		info "view $PFX$_lbl: $_p rdma dev: $(ip netns exec "$_p" /usr/sbin/rdma dev 2>&1 | tr '\n' ';')"
		info "view $PFX$_lbl: $_p rdma link: $(ip netns exec "$_p" /usr/sbin/rdma link 2>&1 | tr '\n' ';')"
		info "view $PFX$_lbl: $_p ip -d link rdma0: $(ip -n "$_p" -d link show rdma0 2>&1 | tr -s ' ' | tr '\n' ';' | cut -c1-400)"
	done
}

V4GID=0000:0000:0000:0000:0000:ffff:c0a8:5801 # ::ffff:192.168.88.1
V6GID=fd00:0088:0000:0000:0000:0000:0000:0001
step host-gids-have-nic-addresses
if wait_until 10 sh -c "sh /run/sim_gids | grep -q '^$V6GID eth0 RoCE v2' && sh /run/sim_gids | grep -q '^$V4GID eth0 RoCE v2'"; then
	pass
else
	fail "simrdma0 GIDs lack the NIC's addresses: $(sim_gids | tr '\n' ';')"
fi
# settled: no tentative IPv6 address on eth0 (the kernel adds the local
# route of an address when its DAD ends)
settled() { wait_until 10 sh -c "! /usr/sbin/ip -6 addr show dev eth0 | grep -q tentative"; }
# refund_order: after a pod netns with the device and the NIC is deleted,
# which of the two the kernel gave back to init_net first (polled)
refund_order() {
	_i=0 _d= _m=
	while [ $_i -lt 200 ] && { [ -z "$_d" ] || [ -z "$_m" ]; }; do
		[ -z "$_d" ] && rdma dev | grep -q ': simrdma0:' && _d=$_i
		[ -z "$_m" ] && ip -o link | grep -q "link/ether $MAC" && _m=$_i
		sleep 0.05
		_i=$((_i + 1))
	done
	echo "device back after ${_d:-never} polls, NIC after ${_m:-never} polls (50 ms each)"
	[ -n "$_d" ] && [ -n "$_m" ]
}
check nic-settled settled
BASE_NIC=$(nic_view eth0)
BASE_GIDS=$(sim_gids)
MAC=$(cat /sys/class/net/eth0/address)
RXE_BASE=$(rdma link show rxe0/1)
info "host NIC before any pod: $(echo "$BASE_NIC" | tr '\n' ';')"
info "simrdma0 GIDs before any pod: $(echo "$BASE_GIDS" | tr '\n' ';')"

# --- assertions shared by the cases ---
# host_restored NAME: eth0 and simrdma0 back in init_net exactly as before
host_restored() {
	_hr=$1
	step $_hr-nic-restored
	settled
	_v=$(nic_view eth0)
	if [ "$_v" = "$BASE_NIC" ]; then pass; else fail "eth0 differs from before: $(delta "$BASE_NIC" "$_v")"; fi
	check $_hr-device-in-init-net sh -c "/usr/sbin/rdma dev | grep -q ': simrdma0:'"
	check $_hr-device-on-eth0 sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev eth0'"
	step $_hr-host-gids-back
	if wait_until 10 sh -c "[ \"\$(sh /run/sim_gids)\" = '$BASE_GIDS' ]"; then pass; else fail "GIDs now [$(sim_gids | tr '\n' ';')], before [$(echo "$BASE_GIDS" | tr '\n' ';')]"; fi
	step $_hr-no-record
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi
	check $_hr-rxe0-untouched sh -c "[ \"\$(/usr/sbin/rdma link show rxe0/1)\" = '$RXE_BASE' ]"
}
# delta WANT GOT: the lines only in WANT (-) and only in GOT (+)
delta() {
	echo "$1" >/run/delta.want
	echo "$2" >/run/delta.got
	echo "missing: [$(grep -vxF -f /run/delta.got /run/delta.want | tr '\n' ';')] unexpected: [$(grep -vxF -f /run/delta.want /run/delta.got | tr '\n' ';')]"
}
# pod_holds NAME POD: the pod has rdma0 (host name in its alias, the NIC's
# MAC) and simrdma0 bound to it; init_net sees neither
pod_holds() {
	_ph=$1 _p=$2
	check $_ph-rdma0-in-pod sh -c "/usr/sbin/ip -n $_p -d link show rdma0 | grep -q 'link/ether $MAC'"
	check $_ph-alias-is-host-name sh -c "/usr/sbin/ip -n $_p -d link show rdma0 | grep -q 'alias eth0'"
	check $_ph-device-in-pod sh -c "/usr/sbin/ip netns exec $_p /usr/sbin/rdma dev | grep -q ': simrdma0:'"
	check $_ph-device-on-rdma0 sh -c "/usr/sbin/ip netns exec $_p /usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev rdma0'"
	check $_ph-init-net-without-device sh -c "! /usr/sbin/rdma dev | grep -q simrdma0 && ! test -e /sys/class/infiniband/simrdma0"
	check $_ph-init-net-without-nic sh -c "! /usr/sbin/ip link show eth0 >/dev/null 2>&1"
	check $_ph-rxe0-untouched sh -c "[ \"\$(/usr/sbin/rdma link show rxe0/1)\" = '$RXE_BASE' ]"
}
# check_call POD: CHECK of rdma-chain only, to read its own error codes
# (see cnicall); the whole chain's CHECK is checked once per version too
check_call() { export CNICALL_ONLY=rdma-chain; cni cnicall check "$1"; unset CNICALL_ONLY; }
# add POD: netns + cnicall add
add() { ip netns add "$1"; cni cnicall add "$1"; }
# gone POD: DEL ran and its netns is removed
gone() { cni cnicall del "$1"; ip netns del "$1" 2>/dev/null; }

for V in 0.4.0 1.0.0; do
	PFX="v$V/"
	NETDIR=/etc/cni/net.d-xrdma-$V
	DATADIR=/run/rdma-chain-xrdma-$V
	IPAM="\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"fd00:99::/64\"}]],\"dataDir\":\"/run/ipam-xrdma-$V\"}"
	BASE="\"mode\":\"exclusive\",\"devices\":[\"simrdma0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\""
	write_conflist "$NETDIR" "$V" "$BASE,$IPAM"
	info "cniVersion $V conflist: $(tr -d '\n' <"$NETDIR/rdmanet.conflist")"

	# ---- ADD ----
	views before-add
	add pod1
	expect_ok add
	views after-add pod1
	pod_holds add pod1
	V6=$(pod_ip6 pod1 fd00:99:)
	step add-ipv6-on-rdma0
	if [ -n "$V6" ]; then pass; else fail "no fd00:99:: address on rdma0 in pod1: $(ip -n pod1 -6 -o addr 2>&1 | tr '\n' ';')"; fi
	result_shape add-result pod1 "$V"
	step add-ipv6-in-pod-gid-table
	G=$(expand6 "$V6")
	if wait_until 10 sh -c "/usr/sbin/ip netns exec pod1 sh /run/sim_gids | grep -q '^$G rdma0 RoCE v2'"; then
		pass
	else
		fail "GID $G on rdma0 not in pod1's simrdma0 table: $(pod_sim_gids pod1 | tr '\n' ';')"
	fi
	info "pod1 simrdma0 GIDs: $(pod_sim_gids pod1 | tr '\n' ';')"
	step add-one-record
	if [ "$(state_count)" -eq 1 ]; then pass; else fail "records: $(state_files)"; fi

	# ---- CHECK ----
	check_call pod1
	expect_ok check-ok
	cni cnicall check pod1
	expect_ok check-full-chain
	# device moved back by hand (from a thread inside the pod: the kernel's rule)
	ip netns exec pod1 /usr/sbin/rdma dev set simrdma0 netns host
	check_call pod1
	expect_code check-device-moved-106 106 simrdma0
	rdma dev set simrdma0 netns pod1
	check_call pod1
	expect_ok check-ok-device-back
	# netdev moved back by hand: lands in init_net as rdma0 (addresses go)
	ip -n pod1 link set rdma0 netns host
	check_call pod1
	expect_code check-netdev-moved-106 106 rdma0
	ip link set rdma0 netns pod1 && ip -n pod1 link set rdma0 up &&
		ip -n pod1 addr add "$V6/64" dev rdma0 nodad
	check_call pod1
	expect_ok check-ok-netdev-back

	# ---- DEL ----
	cni cnicall del pod1
	expect_ok del
	views after-del pod1
	host_restored del
	check del-pod-has-no-rdma0 sh -c "! /usr/sbin/ip -n pod1 link show rdma0 >/dev/null 2>&1"
	check del-pod-has-no-device sh -c "! /usr/sbin/ip netns exec pod1 /usr/sbin/rdma dev | grep -q simrdma0"
	cni cnicall del pod1
	expect_ok del-again
	ip netns del pod1

	# ---- the pod netns deleted before DEL ----
	# A dummy rdma0 in init_net makes the returning NIC take a devN name.
	add pod2
	expect_ok gone-netns-add
	ip link add rdma0 type dummy
	ip netns del pod2
	step gone-netns-kernel-refunds-device-and-nic
	if o=$(refund_order); then pass; else fail "$o; rdma dev: $(rdma dev); ip link: $(ip -o link)"; fi
	info "gone-netns: $o"
	info "gone-netns: the kernel returned the NIC as '$(ip -o link | grep "link/ether $MAC" | sed 's/^[0-9]*: \([^:]*\):.*/\1/')' (rdma0 taken in init_net); rdma link: $(rdma link | tr '\n' ';')"
	ip link del rdma0
	cni cnicall del pod2
	expect_ok gone-netns-del
	views after-gone-netns-del
	host_restored gone-netns

	# ---- never stranded: the holder's netns dies and no DEL comes ----
	# 0.4.0: the path is gone; 1.0.0: the path names a new netns (other inode).
	add poda
	expect_ok stranded-add-A
	REC_A=$(state_files)
	INO_A=$(stat -L -c %i /var/run/netns/poda)
	ip netns del poda
	[ "$V" = 1.0.0 ] && ip netns add poda && info "stranded: netns inode at /var/run/netns/poda was $INO_A, the new netns there has $(stat -L -c %i /var/run/netns/poda)"
	info "stranded: poda's netns $([ "$V" = 1.0.0 ] && echo 'replaced by a new netns at the same path' || echo 'path gone'); $(refund_order)"
	views stranded-before-B
	add podb
	expect_ok stranded-add-B-reclaims
	views stranded-after-B podb
	pod_holds stranded-B podb
	step stranded-A-record-dropped
	if [ "$(state_count)" -eq 1 ] && [ "$(state_files)" != "$REC_A" ]; then pass; else fail "records: $(state_files) (A's: $REC_A)"; fi
	step stranded-reclaim-logged
	case "$CNI_OUT" in *eclaim*) pass ;; *) fail "no reclaim log line in B's ADD output: $CNI_OUT" ;; esac
	cni cnicall del podb
	expect_ok stranded-del-B
	host_restored stranded
	cni cnicall del poda
	expect_ok stranded-late-del-A
	ip netns del poda 2>/dev/null
	ip netns del podb

	# ---- two pods, one device ----
	add pod3
	expect_ok two-add-first
	add pod4
	expect_code two-second-gets-11 11 simrdma0
	check two-second-has-no-rdma0 sh -c "! /usr/sbin/ip -n pod4 link show rdma0 >/dev/null 2>&1"
	cni cnicall del pod4
	gone pod3
	expect_ok two-del-first
	cni cnicall add pod4
	expect_ok two-second-after-first-del
	pod_holds two-second pod4
	gone pod4
	expect_ok two-del-second
	host_restored two

	# ---- failed ADD after the move: the IPAM fails ----
	# host-local with a one-address range whose address is leased already
	mkdir -p /run/ipam-full/rdmanet && echo someone-else >/run/ipam-full/rdmanet/fd00:98::2
	write_conflist "$NETDIR" "$V" "$BASE,\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"fd00:98::/64\",\"rangeStart\":\"fd00:98::2\",\"rangeEnd\":\"fd00:98::2\"}]],\"dataDir\":\"/run/ipam-full\"}"
	add pod5
	expect_code failed-ipam-107 107
	host_restored failed-ipam
	check failed-ipam-pod-has-no-rdma0 sh -c "! /usr/sbin/ip -n pod5 link show rdma0 >/dev/null 2>&1"
	gone pod5
	# the IPAM plugin does not even exist (its DEL fails too)
	write_conflist "$NETDIR" "$V" "$BASE,\"ipam\":{\"type\":\"no-such-ipam\"}"
	add pod9
	expect_code failed-ipam-missing-107 107
	host_restored failed-ipam-missing
	cni cnicall del pod9
	info "failed-ipam-missing: DEL with the same conf -> exit $CNI_RC code $(cni_code)"
	# a record left behind would hold the device: DEL with a working IPAM
	write_conflist "$NETDIR" "$V" "$BASE,$IPAM"
	gone pod9

	# ---- failed ADD after the move: rdma0 taken in the pod ----
	write_conflist "$NETDIR" "$V" "$BASE,$IPAM"
	ip netns add pod6
	ip -n pod6 link add rdma0 type dummy
	cni cnicall add pod6
	step failed-name-taken
	if [ "$CNI_RC" != 0 ]; then pass; else fail "ADD succeeded with rdma0 taken in the pod"; fi
	info "failed-name-taken: CNI error code $(cni_code)"
	host_restored failed-name-taken
	check failed-name-taken-dummy-kept sh -c "/usr/sbin/ip -n pod6 -d link show rdma0 | grep -q dummy"
	gone pod6

	# ---- mode shared configured on an exclusive kernel ----
	write_conflist "$NETDIR" "$V" "\"mode\":\"shared\",\"devices\":[\"simrdma0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\""
	add pod7
	expect_code shared-on-exclusive-101 101
	host_restored shared-on-exclusive
	check shared-pod-has-no-rdma0 sh -c "! /usr/sbin/ip -n pod7 link show rdma0 >/dev/null 2>&1"
	gone pod7

	# ---- SMC with the RDMA device in a pod netns ----
	# (a) the kernel alone: a pod without the annotation holds the device;
	# raw SMC_PNETID_ADDs in init_net and in the pod, then the dumps.
	M=M${V%%.*}X
	write_conflist "$NETDIR" "$V" "$BASE,$IPAM,\"capabilities\":{\"io.kubernetes.cri.pod-annotations\":true}"
	add pod8
	expect_ok smc-raw-add
	info "smc-raw: SMC-R devices seen from init_net [$(smcctl devices 2>&1 | tr '\n' ';')] from pod8 [$(smcctl devices /var/run/netns/pod8 2>&1 | tr '\n' ';')]"
	info "smc-raw: init_net ADD{$M ib=simrdma0 port 1} (device in pod8) -> $(smcctl pnet-add - $M ib=simrdma0:1 2>&1)"
	info "smc-raw: pod8 ADD{$M eth=rdma0} -> $(smcctl pnet-add /var/run/netns/pod8 $M eth=rdma0 2>&1)"
	info "smc-raw: pod8 ADD{${M}P ib=simrdma0 port 1} -> $(smcctl pnet-add /var/run/netns/pod8 ${M}P ib=simrdma0:1 2>&1)"
	info "smc-raw: pnet init_net [$(smcctl pnet 2>&1 | tr '\n' ';')] pod8 [$(smcctl pnet /var/run/netns/pod8 2>&1 | tr '\n' ';')]; devices [$(smcctl devices /var/run/netns/pod8 2>&1 | tr '\n' ';')]"
	info "smc-raw: deletes init_net $(smcctl pnet-del - $M 2>&1) pod8 $(smcctl pnet-del /var/run/netns/pod8 $M 2>&1)"
	gone pod8
	expect_ok smc-raw-del
	# (b) the plugin with an annotated pod
	info "smc: before ADD: devices [$(smcctl devices 2>&1 | tr '\n' ';')] init_net pnet [$(smcctl pnet 2>&1 | tr '\n' ';')]"
	ip netns add pod8
	export CAP_ARGS='{"io.kubernetes.cri.pod-annotations":{"network.alibabacloud.com/erdma-smcr":"true"}}'
	cni cnicall add pod8
	unset CAP_ARGS
	expect_ok smc-add
	info "smc: annotated pod8 ADD -> exit $CNI_RC; SMC log lines: $(echo "$CNI_OUT" | grep -i smc | tr '\n' ';' | cut -c1-500)"
	info "smc: pnet init_net [$(smcctl pnet 2>&1 | tr '\n' ';')] pod8 [$(smcctl pnet /var/run/netns/pod8 2>&1 | tr '\n' ';')]; devices from pod8 [$(smcctl devices /var/run/netns/pod8 2>&1 | tr '\n' ';')]"
	cni cnicall del pod8
	expect_ok smc-del
	if has_smc; then
		check smc-del-init-net-pnet-empty no_output smcctl pnet
	else # no SMC (docs/kernels.md): the pod attached without SMC-R, no table exists
		check smc-no-smc-table sh -c "! smcctl pnet"
	fi
	info "smc: after DEL: devices [$(smcctl devices 2>&1 | tr '\n' ';')]"
	ip netns del pod8
	host_restored smc
	rm -rf "$DATADIR"
done

# ---- cniVersion 1.1.0: rdma0's entry carries the moved NIC's MTU and, as
# pciID, the PCI function under eth0's virtio device (simrdma0 registers
# without a parent device, as eRDMA-like devices on a virtio NIC are found:
# netdev -> virtioN -> its PCI function); the whole chain's CHECK passes;
# with reportIPs the result also lists rdma0's address, pointing at rdma0,
# without gateway; with runtimeConfig CNIDeviceInfoFile the NPWG
# device-info file names that PCI function and simrdma0, and DEL removes it ----
V=1.1.0
PFX="v$V/"
NETDIR=/etc/cni/net.d-xrdma-$V
DATADIR=/run/rdma-chain-xrdma-$V
IPAM="\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"fd00:99::/64\",\"gateway\":\"fd00:99::1\"}]],\"dataDir\":\"/run/ipam-xrdma-$V\"}"
BASE="\"mode\":\"exclusive\",\"devices\":[\"simrdma0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\""
NIC_MTU=$(cat /sys/class/net/eth0/mtu)
# eth0's device is virtioN, whose parent directory is the virtio-pci function
NIC_DEV=$(readlink -f /sys/class/net/eth0/device)
NIC_PCI=$(basename "$(dirname "$NIC_DEV")")
step nic-on-virtio-pci
case "$(basename "$NIC_DEV") $NIC_PCI" in
virtio[0-9]*" "[0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f].[0-7]) pass ;;
*) fail "eth0's device link '$NIC_DEV' is not virtioN under a PCI function" ;;
esac
check simrdma0-without-parent test ! -e /sys/class/infiniband/simrdma0/device
write_conflist "$NETDIR" "$V" "$BASE,$IPAM"
add pod1
expect_ok add
pod_holds add pod1
result_shape add-result pod1 "$V" "$NIC_PCI"
check add-mtu-is-nic-mtu sh -c "echo '$(rdma0_entry)' | grep -q '\"mtu\":$NIC_MTU[,}]'"
cni cnicall check pod1
expect_ok check-full-chain
gone pod1
expect_ok del
host_restored del
write_conflist "$NETDIR" "$V" "$BASE,$IPAM,\"reportIPs\":true"
add pod1
expect_ok report-add
info "reportIPs result at $V: $(compact_result)"
step report-ip-on-rdma0
idx=$(result_iface_index rdma0)
ent=$(result_ip_entry fd00:99:)
case "$ent" in
*gateway*) fail "rdma0's IP carries a gateway: '$ent'" ;;
*"\"interface\":$idx,"* | *"\"interface\":$idx}"*) pass ;;
*) fail "no fd00:99:: IP pointing at rdma0 (interface '$idx') in $(compact_result)" ;;
esac
check report-address-is-rdma0s test "$(result_ip fd00:99:)" = "$(pod_ip6 pod1 fd00:99:)"
gone pod1
expect_ok report-del
host_restored report

# ---- the node's uplink never moves: eth0 carries a main-table IPv4 or
# IPv6 default route, or the source address of a default route through
# another netdev; ADD is refused with 110 naming eth0 and what it carries,
# nothing is recorded or moved, and DEL has nothing to give back ----
write_conflist "$NETDIR" "$V" "$BASE,$IPAM"
ip link add up0 type veth peer name up0p && ip link set up0p up && ip link set up0 up &&
	ip addr add 10.77.0.2/24 dev up0
# uplink_case NAME ROUTE WORDS: with ROUTE (ip route add arguments) in place
uplink_case() {
	_uc=$1 _route=$2 _words=$3
	step uplink-$_uc-route
	if _o=$(ip $_route 2>&1); then pass; else fail "ip $_route: $_o"; return; fi
	_before=$(nic_view eth0)
	info "uplink-$_uc: $(ip -4 route show default; ip -6 route show default)"
	ip netns add up1
	cni cnicall add up1
	expect_code uplink-$_uc-refused-110 110 "netdev eth0 of RDMA device simrdma0 carries" "$_words"
	step uplink-$_uc-eth0-untouched
	_v=$(nic_view eth0)
	if [ "$_v" = "$_before" ]; then pass; else fail "eth0 changed: $(delta "$_before" "$_v")"; fi
	check uplink-$_uc-device-on-eth0 sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev eth0'"
	check uplink-$_uc-nothing-in-pod sh -c "! /usr/sbin/ip -n up1 -o link | grep -q 'rdma0\\|$MAC' && ! /usr/sbin/ip netns exec up1 /usr/sbin/rdma dev | grep -q simrdma0"
	step uplink-$_uc-no-record
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi
	cni cnicall del up1
	expect_ok uplink-$_uc-del
	ip netns del up1
	ip $(echo "$_route" | sed 's/ add / del /')
	host_restored uplink-$_uc
}
uplink_case ipv4-default "route add default via 192.168.88.254 dev eth0" "the node's IPv4 default route"
uplink_case ipv6-default "-6 route add default via fd00:88::fe dev eth0" "the node's IPv6 default route"
uplink_case node-address "route add default via 10.77.0.1 dev up0 src 192.168.88.1" "the node's address 192.168.88.1"
# the control: a default route through another netdev moves eth0 as before
ip route add default via 10.77.0.1 dev up0
add pod1
expect_ok uplink-elsewhere-add
pod_holds uplink-elsewhere pod1
gone pod1
expect_ok uplink-elsewhere-del
host_restored uplink-elsewhere
ip route del default via 10.77.0.1 dev up0
ip link del up0
DEVINFO=/run/devinfo-xrdma/rdmanet-pod1-rdma0.json
write_conflist "$NETDIR" "$V" "$BASE,$IPAM,\"capabilities\":{\"CNIDeviceInfoFile\":true}"
add_devinfo() { export CAP_ARGS="{\"CNIDeviceInfoFile\":\"$DEVINFO\"}"; add pod1; unset CAP_ARGS; }
add_devinfo
expect_ok devinfo-add
info "device-info file after ADD: $(cat "$DEVINFO" 2>&1)"
step devinfo-names-virtio-pci-function
case "$(tr -d ' \n' <"$DEVINFO" 2>/dev/null)" in
*'"type":"pci"'*'"pci-address":"'"$NIC_PCI"'"'*'"rdma-device":"simrdma0"'*) pass ;;
*) fail "device-info file $DEVINFO: '$(cat "$DEVINFO" 2>&1)'; want pci-address $NIC_PCI, rdma-device simrdma0" ;;
esac
result_shape devinfo-result pod1 "$V" "$NIC_PCI"
gone pod1
expect_ok devinfo-del
check devinfo-removed-by-del test ! -e "$DEVINFO"
host_restored devinfo
rm -rf "$DATADIR"
check mode-still-exclusive test "$(netns_mode)" = exclusive
exit 0
