#!/bin/sh
# ipv6: shared mode with an "ipam" section for the pod-side RDMA interface.
# The plugin delegates to host-local (fd00:77::/64) for each pod's rdma0,
# configures the address in the pod only; the result gains rdma0's entry
# (its MTU at 1.1.0) but not its address, so the full chain's CHECK (ptp
# included) passes. The addresses become RoCE v2 GIDs of rxe0 (ndev rdma0),
# rping runs between two pods over them, DEL gives the leases back (also
# when the netns is gone). Runs at cniVersion 0.4.0, 1.0.0 and 1.1.0. Then
# a full GID table refuses a pod's ADD (111) and one with room takes it.
. /scenarios/lib.sh

check setup-rxe setup_rxe
check mode-is-shared test "$(netns_mode)" = shared
# Soft-RoCE needs a route to the pods' /64 in init_net.
check node-address sh -c "/usr/sbin/ip -6 addr show dev veth0 | grep -q 'fd00:77::1/64' ||
	/usr/sbin/ip addr add fd00:77::1/64 dev veth0 nodad"

DATADIR=/run/rdma-chain
LEASES=/run/ipam6/rdmanet

# leases: host-local's lease files for fd00:77:: addresses
leases() { ls "$LEASES" 2>/dev/null | grep '^fd00:77:' | tr '\n' ' '; }

for V in 0.4.0 1.0.0 1.1.0; do
	PFX="v$V/"
	NETDIR=/etc/cni/net.d-ipv6-$V
	write_conflist "$NETDIR" "$V" "\"mode\":\"shared\",\"devices\":[\"rxe0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\",\"sharedLink\":{\"type\":\"ipvlan\",\"mode\":\"l2\"},\"ipam\":{\"type\":\"host-local\",\"dataDir\":\"/run/ipam6\",\"ranges\":[[{\"subnet\":\"fd00:77::/64\",\"rangeStart\":\"fd00:77::10\"}]]}"
	info "cniVersion $V conflist: $(tr -d '\n' <"$NETDIR/rdmanet.conflist")"
	n=0
	for pod in pod1 pod2; do
		ip netns add $pod
		cni cnitool add $pod
		expect_ok add-$pod
		n=$((n + 1))
		if [ "$V" = 0.4.0 ] && [ $pod = pod1 ]; then
			echo "RC-JSON-BEGIN"
			echo "$CNI_OUT" | sed -n '/^{/,$p'
			echo "RC-JSON-END"
		fi

		# soft-RoCE's rxe0 has no PCI address: no pciID
		result_shape result-$pod $pod "$V"
		addr6=$(pod_ip6 $pod fd00:77:)
		eval "ADDR_$pod=\$addr6"
		check ipv6-on-rdma0-$pod test -n "$addr6"
		step result-primary-ip-$pod
		case "$(result_ip_entry 10.99.0.)" in *'"interface":'*) pass ;; *) fail "ptp's IP lost its interface: $(compact_result)" ;; esac

		show ip -n $pod -br addr
		check addr-on-rdma0-$pod sh -c "/usr/sbin/ip -n $pod -6 addr show dev rdma0 | grep -q 'inet6 $addr6/64'"
		check not-tentative-$pod sh -c "/usr/sbin/ip -n $pod -6 addr show dev rdma0 | grep 'inet6 $addr6/64' | grep -v -q tentative"
		check not-on-eth0-$pod sh -c "! /usr/sbin/ip -n $pod -6 addr show dev eth0 | grep -q fd00:77:"
		check not-in-init-net-$pod sh -c "! /usr/sbin/ip -6 addr show | grep -q 'inet6 $addr6/'"
		check lease-taken-$pod sh -c "ls $LEASES | grep -qx '$addr6'"

		step gid-$pod
		want=$(expand6 "$addr6")
		wait_until 15 gid_row "$want" rdma0 # the GID appears through a netdev event
		row=$(gid_row "$want" rdma0)
		if [ -n "$row" ]; then
			info "GID of $pod: $row"
			pass
		else
			fail "no GID $want with ndev rdma0; GIDs: $(gid_rows | tr '\n' ';')"
		fi
		step state-file-$pod
		if [ "$(state_count)" -eq $n ]; then pass; else fail "want $n records, have: $(state_files)"; fi
	done
	show sh -c '. /scenarios/lib.sh; gid_rows'

	# CHECK of the rdma-chain entry (the cached result as prevResult), and
	# of the whole chain: upstream ptp wants every IP of the result on its
	# own eth0 (ip.ValidateExpectedInterfaceIPs), which the result now
	# satisfies.
	for pod in pod1 pod2; do
		export CNICALL_ONLY=rdma-chain
		cni cnicall check $pod
		unset CNICALL_ONLY
		expect_ok check-$pod
		cni cnitool check $pod
		expect_ok full-chain-check-$pod
	done

	# RoCE v2 between the pods over their IPv6 addresses.
	step rping-ipv6
	rping_between pod1 pod2 "$ADDR_pod1" rxe0

	for pod in pod1 pod2; do
		cni cnitool del $pod
		expect_ok del-$pod
		check child-gone-$pod sh -c "! /usr/sbin/ip -n $pod link show rdma0 >/dev/null 2>&1"
	done
	step no-ipv6-gid-left
	wait_until 15 no_output v6_gid_rows
	if [ -z "$(v6_gid_rows)" ]; then pass; else fail "GIDs left: $(v6_gid_rows | tr '\n' ';')"; fi
	step leases-released
	if [ -z "$(leases)" ]; then pass; else fail "lease files left in $LEASES: $(leases)"; fi
	show ls -A $LEASES
	step no-records-left
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi
	for pod in pod1 pod2; do
		cni cnitool del $pod
		expect_ok del-again-$pod
	done

	# DEL after the runtime already deleted the netns: the lease still goes.
	ip netns add pod3
	cni cnitool add pod3
	expect_ok add-pod3
	a3=$(pod_ip6 pod3 fd00:77:)
	check lease-taken-pod3 sh -c "ls $LEASES | grep -qx '$a3'"
	ip netns del pod3
	cni cnitool del pod3
	expect_ok del-after-netns-gone
	step lease-released-netns-gone
	if [ -z "$(leases)" ]; then pass; else fail "lease files left in $LEASES: $(leases)"; fi
	step no-records-netns-gone
	if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi

	ip netns del pod1
	ip netns del pod2
done

# GID room, at the last cniVersion: node addresses on veth0 fill rxe0's
# GID table until ROOM pods fit; each of those pods' ADD attaches with a
# GID for its address, the next is refused with 111 before its child is
# made, leaving nothing; DEL of all and the addresses gone return the table
# to where it started. How many rows a node address and a pod's address
# take is measured here, not assumed (rxe: 1 and 2).
PFX=gid-room/
ROOM=3
GIDS=/sys/class/infiniband/rxe0/ports/1/gids
free_gids() { cat $GIDS/* | grep -c '^0000:0000:0000:0000:0000:0000:0000:0000$'; }
room_gids() { [ "$(free_gids)" -ge 2 ]; }
gids_are() { [ "$(free_gids)" = "$1" ]; }
settled() { _a=$(free_gids); sleep 3; [ "$(free_gids)" = "$_a" ]; }
# wait_until polls every 0.1 s, and one read of 1,024 rows takes longer
# under TCG: a bound in seconds, with the count shown as it falls.
until_secs() { # SECONDS CMD...
	_end=$(($(date +%s) + $1)); shift
	until "$@"; do
		[ "$(date +%s)" -ge $_end ] && return 1
		info "rxe0: $(free_gids) GID rows free, $(ip -6 -o addr show dev veth0 | wc -l) IPv6 addresses on veth0"
		sleep 5
	done
}
i=0
: >/tmp/gid-free.batch
fill_round() { # N: N more node addresses on veth0
	: >/tmp/gid-fill.batch
	_k=0
	while [ $_k -lt "$1" ]; do
		i=$((i + 1)) _k=$((_k + 1))
		printf 'addr add fd00:99::%x/128 dev veth0 nodad\n' $i >>/tmp/gid-fill.batch
		printf 'addr del fd00:99::%x/128 dev veth0\n' $i >>/tmp/gid-free.batch
	done
	ip -batch /tmp/gid-fill.batch
}
f0=$(free_gids)
info "rxe0 GID table: $(ls $GIDS | wc -l) entries, $f0 free"
step fill-half # not through check: its subshell would keep i
if fill_round $((f0 / 2)); then pass; else fail "ip -batch failed"; fi
check settled-half until_secs 120 settled
f1=$(free_gids)
per=$(((f0 - f1) / (f0 / 2)))
info "rxe0: $f1 GID rows free after $((f0 / 2)) node addresses: $per entries each"
step per-address
if [ "$per" -ge 1 ]; then pass; else fail "the addresses took $((f0 - f1)) entries"; fi
# What one pod's address takes, measured with room to spare (the plugin
# asks for 2 free rows), then node addresses until exactly ROOM-1 more
# pods fit and no further one does.
add_room_pod() { # N
	ip netns add room$1
	cni cnicall add room$1
	expect_ok add-room$1
	_a=$(pod_ip6 room$1 fd00:77:)
	step gid-room$1
	if [ -n "$_a" ] && wait_until 15 gid_row "$(expand6 "$_a")" rdma0; then pass; else fail "no GID for room$1's address '$_a'; $(free_gids) free"; fi
}
f1=$(free_gids)
add_room_pod 1
check settled-room1 until_secs 120 settled
podrows=$((f1 - $(free_gids)))
info "rxe0: a pod's address took $podrows GID rows"
target=$(((ROOM - 1) * podrows))
step fill-to-room
if [ "$podrows" -ge 1 ] && [ "$per" -ge 1 ] && fill_round $((($(free_gids) - target) / per)) && until_secs 120 settled; then pass; else fail "fill failed"; fi
f2=$(free_gids)
info "rxe0: $f2 GID rows free after $i node addresses: room for $((ROOM - 1)) more pods"
step room-left
if [ "$f2" -ge "$target" ] && [ "$f2" -lt $((target + 2)) ]; then pass; else fail "$f2 free, want $target or $((target + 1))"; fi
n=2
while [ $n -le $ROOM ]; do
	add_room_pod $n
	n=$((n + 1))
done
ip netns add pod4
cni cnicall add pod4
expect_code add-refused-111 111 rxe0 "no RoCE GID"
check no-child-after-refusal sh -c "! /usr/sbin/ip -n pod4 link show rdma0 >/dev/null 2>&1"
step nothing-recorded-after-refusal
if [ "$(state_count)" -eq $ROOM ]; then pass; else fail "want the $ROOM pods' records, have: $(state_files)"; fi
step nothing-leased-after-refusal
if [ "$(leases | wc -w)" -eq $ROOM ]; then pass; else fail "want the $ROOM pods' leases, have: $(leases)"; fi
cni cnicall del pod4
expect_ok del-after-refusal
n=1
while [ $n -le $ROOM ]; do
	cni cnicall del room$n
	expect_ok del-room$n
	ip netns del room$n
	n=$((n + 1))
done
check free ip -batch /tmp/gid-free.batch
step table-as-before
if until_secs 120 gids_are "$f0"; then pass; else fail "$(free_gids) free, $f0 before"; fi
step nothing-left
if [ "$(state_count)" -eq 0 ] && [ -z "$(leases)" ]; then pass; else fail "records: $(state_files); leases: $(leases)"; fi
cni cnicall add pod4
expect_ok add-with-room
cni cnicall del pod4
expect_ok del-pod4
ip netns del pod4
exit 0
