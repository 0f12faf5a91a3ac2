#!/bin/sh
# bond-exclusive (in the simrdma boot): exclusive mode with the movable test
# device simrdma0 bound to bond1, an active-backup bond of two links. A bond
# cannot leave init_net (the kernel keeps it there: NETIF_F_NETNS_LOCAL), so
# ADD must refuse with 102 naming the bond and why, before anything is
# recorded or moved; DEL then has nothing to give back. A slave of that bond
# carrying the node's default route is refused with 110. simrdma is
# reloaded bound to eth0 afterwards.
. /scenarios/lib.sh

DATADIR=/run/rdma-chain-bondx
NETDIR=/etc/cni/net.d-bondx
KVER=$(cat /lib/modules/kver)

step exclusive-mode
if [ "$(netns_mode)" = exclusive ] || { rdma system set netns exclusive && [ "$(netns_mode)" = exclusive ]; }; then
	pass
else
	fail "mode $(netns_mode)"
fi
check load-bonding load_bonding
check simrdma-unloaded rmmod simrdma
check make-bond make_bond bond1 bx0 bx1
check simrdma-on-bond insmod "/lib/modules/$KVER/simrdma.ko" netdev=bond1
check simrdma0-on-bond1 sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev bond1'"
show rdma link
show ip -d link show bond1
# the bond and its slaves as configured: names, master, MTU, MAC (not the
# carrier, which active-backup with miimon may still be settling)
bond_links() { ip -o link show "$@" | sed 's/<[^>]*>//; s/ state [A-Z]*//'; }
bond_before=$(bond_links bond1; bond_links bx0; bond_links bx1)

write_conflist "$NETDIR" 1.0.0 "\"mode\":\"exclusive\",\"devices\":[\"simrdma0\"],\"podSelection\":\"all\",\"dataDir\":\"$DATADIR\""
ip netns add bx
cni cnicall add bx
expect_code refused-102 102 bond1 "it is a bond" "shared mode"
step no-record
if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi
check no-rdma-link-in-pod sh -c "! /usr/sbin/ip -n bx -o link | grep -q 'rdma\\|bond\\|bx[01]'"
check device-in-init-net sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev bond1'"
step bond-untouched
bond_after=$(bond_links bond1; bond_links bx0; bond_links bx1)
if [ "$bond_before" = "$bond_after" ]; then pass; else fail "before: $bond_before / after: $bond_after"; fi
cni cnicall del bx
expect_ok del-after-refusal
show rdma link
ip netns del bx

# a device bound to a port of a bond that carries the node's default route:
# simrdma0 bound to the slave bx0, bond1 given an address and the main
# table's default route. The kernel's RoCE GID table puts the port's GIDs on
# the bond (gid_attrs/ndevs/0 is bond1), so the plugin's netdev of the
# device is bond1: ADD is refused with 110 naming bond1 and the route
# before anything else is tried
check simrdma-on-bond-port sh -c "rmmod simrdma && insmod /lib/modules/$KVER/simrdma.ko netdev=bx0"
check simrdma0-on-bx0 sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev bx0'"
check bond1-default-route sh -c "ip addr add 10.66.0.2/24 dev bond1 && ip route add default via 10.66.0.1 dev bond1"
bond_before=$(bond_links bond1; bond_links bx0; bond_links bx1)
ip netns add bx
cni cnicall add bx
expect_code port-refused-110 110 "netdev bond1 of RDMA device simrdma0 carries the node's IPv4 default route"
step port-no-record
if [ "$(state_count)" -eq 0 ]; then pass; else fail "records left: $(state_files)"; fi
check port-device-in-init-net sh -c "/usr/sbin/rdma link | grep -q 'simrdma0/1 .*netdev bx0'"
step port-bond-untouched
bond_after=$(bond_links bond1; bond_links bx0; bond_links bx1)
if [ "$bond_before" = "$bond_after" ]; then pass; else fail "before: $bond_before / after: $bond_after"; fi
cni cnicall del bx
expect_ok port-del-after-refusal
ip netns del bx
ip route del default via 10.66.0.1 dev bond1
ip addr del 10.66.0.2/24 dev bond1

check simrdma-back-on-eth0 sh -c "rmmod simrdma && insmod /lib/modules/$KVER/simrdma.ko netdev=eth0"
exit 0
