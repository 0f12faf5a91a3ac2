#!/bin/sh
# The node as DEL and GC must leave it, for the node tier's pods.sh, which
# compares the node before and after (the VM tier's Go tests read it with
# integration/vm/guestkit's ReadNode). Sourced after lib.sh; reads
# $DATADIR (the plugin's records) and $RIPAM (rdma0's host-local leases).
#   snap            init_net's links (name, flags, MTU, MAC), addresses,
#                   routes of every table, rdma dev and link, the GIDs of
#                   the RDMA devices in init_net, the SMC pnet table,
#                   records and leases
#   settle_equal W  poll until snap equals W (DELTA says how it differs)
#   settled         eth0 has carrier and a settled link-local address

# files DIR...: every entry under DIR with a hash of regular files' content
# (host-local's allocation cursor last_reserved_ip.N is not a lease; the
# plugin's outcomes.jsonl is its log of verbs, one line per call by design;
# its cache-* files keep what STATUS probed of the kernel, no pod's state)
files() {
	for _d in "$@"; do
		[ -d "$_d" ] || continue
		find "$_d" ! -name 'last_reserved_ip.*' ! -name outcomes.jsonl ! -name 'cache-*' | sort | while read -r _f; do
			if [ -f "$_f" ]; then echo "file $_f $(md5sum <"$_f" | cut -c1-12)"; else echo "entry $_f"; fi
		done
	done
}
dev_gids() {
	_any=
	for _g in /sys/class/infiniband/*/ports/1; do
		[ -d "$_g" ] || continue
		_any=1
		_d=${_g#/sys/class/infiniband/}
		_d=${_d%%/*}
		grep -H -v '^0000:0000:0000:0000:0000:0000:0000:0000$' $_g/gids/* 2>/dev/null | sed 's|.*/gids/\([0-9]*\):|\1 |' |
			while read -r n g; do echo "gid $_d $g $(cat $_g/gid_attrs/ndevs/$n 2>/dev/null)"; done | sort
	done
	[ -n "$_any" ] || echo "gids: no RDMA device in init_net"
}
# snap: the node (init_net) as DEL/GC must leave it
snap() {
	ip -o link | sed -n 's/^[0-9]*: \([^:@]*\)[:@].* <\([^>]*\)> mtu \([0-9]*\) .*link\/\([a-z]*\) \([0-9a-f:]*\).*/link \1 mtu=\3 \4=\5 flags=\2/p' | sort
	ip -o addr | awk '{print "addr", $2, $3, $4}' | sort
	ip route show table all | sed 's/  */ /g; s/^/route /' | sort
	rdma dev 2>&1 | sed 's/^[0-9]*: /rdma dev /'
	rdma link 2>&1 | sed 's/^/rdma /'
	dev_gids
	smcctl pnet 2>&1 | sed 's/^/pnet /'
	files $DATADIR $RIPAM /run/ipam
}
# settle_equal WANT: poll (10 s) until snap equals WANT (GIDs and IPv6 DAD
# follow a move back asynchronously); status 1 and the delta in $DELTA if never
# settle_equal WANT: poll for SETTLE_SECS (default 30) of guest uptime until
# snap equals WANT (GIDs and IPv6 DAD follow a move back asynchronously);
# status 1 and the difference in $DELTA if never. Bounded in time, not in
# polls: one snap takes seconds under TCG on a busy host.
settle_equal() {
	_end=$(($(cut -d. -f1 /proc/uptime) + ${SETTLE_SECS:-30}))
	while :; do
		_snap=$(snap)
		[ "$_snap" = "$1" ] && return 0
		[ "$(cut -d. -f1 /proc/uptime)" -lt "$_end" ] || break
		sleep 0.5
	done
	DELTA=$(delta "$1" "$_snap")
	return 1
}
delta() {
	echo "$1" >/run/delta.want
	echo "$2" >/run/delta.got
	echo "missing: [$(grep -vxF -f /run/delta.got /run/delta.want | tr '\n' ';')] unexpected: [$(grep -vxF -f /run/delta.want /run/delta.got | tr '\n' ';')]"
}
# settled: eth0 has its carrier and a non-tentative link-local address (after
# a move back the NIC is NO-CARRIER for a moment and the kernel re-adds fe80::)
settled() {
	wait_until 20 sh -c "/usr/sbin/ip -6 addr show dev eth0 | grep -q 'inet6 fe80' &&
		! /usr/sbin/ip -6 addr show dev eth0 | grep -q tentative && ! /usr/sbin/ip link show eth0 | grep -q NO-CARRIER"
}
# setup_mode MODE NODE_V6: the node for a scenario that attaches pods in MODE
# (exclusive: the netns mode switched, simrdma0 on the NIC eth0 set up as a
# node has it; shared: soft-RoCE rxe0 on veth0 with the node's NODE_V6/64,
# through which soft-RoCE routes the pods' traffic). Sets DEVS (the
# plugin's devices) and node_settled.
setup_mode() {
	if [ "$1" = exclusive ]; then
		step switch-to-exclusive
		if _o=$(rdma system set netns exclusive 2>&1) && [ "$(netns_mode)" = exclusive ]; then pass; else fail "$_o"; fi
		check simrdma0-on-eth0 sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev eth0'"
		check nic-setup setup_nic
		DEVS='["simrdma0"]'
		node_settled() { settled; }
	else
		check rxe0-setup setup_rxe
		check node-v6 sh -c "/usr/sbin/ip addr show dev veth0 | grep -q '$2/' || /usr/sbin/ip addr add $2/64 dev veth0 nodad"
		DEVS='["rxe0"]'
		node_settled() { true; }
	fi
}
