#!/bin/busybox sh
# /init of a cluster-tier node VM (scripts/cluster/initramfs.sh builds the
# initramfs; integration/cluster boots two). Real parts only, as on the node
# tier's guest: containerd 2.4.2 + Debian's runc, kubelet v1.37 registered
# with the API server on the host (reached at 10.0.2.100 through qemu's
# guestfwd; --kubeconfig holds the node's static token), the Mellanox RDMA
# shared device plugin, the test pods' images imported with ctr. No static
# pods: rdma-chain comes as the DaemonSet the test applies through the API,
# its image pulled from the tier's registry (10.0.2.101:5000).
# Networks:
#   eth0  qemu user networking (restrict=on): the default route and the
#         forwards to the API server and the image registry only
#   eth1  the nodes' L2 segment (a qemu socket netdev between the VMs):
#         the node address (kubelet's --node-ip), pod traffic routed per
#         node subnet as host-gw networks do, and RoCE: soft-RoCE rxe0 and
#         the simrdma PCI function the device plugin offers sit on it
#   eth2  rc.cluster.nic2=1 only: a NIC on a second PCI root (qemu's pxb)
#         with simrdma1, for pcieRoot claims and exclusive mode
#   soft0 a second L2 segment between the VMs, a NIC without an RDMA
#         device (MAC 52:54:00:00:09:IDX, named here by its MAC as udev
#         rules name NICs): the soft-roce scenario's podSoftRoCE NIC, with a
#         /64 of its own
# Disk: rc.cluster.disk=1 only: /dev/vda (ext4) holds /var/lib, /var/log,
# /opt/cni/bin and /etc/cni/net.d.
# Kernel command line: rc.cluster.node=NAME rc.cluster.idx=N (1, 2, ...),
# rc.cluster.nodes=COUNT. The guest prints RC-NODE-READY once kubelet and
# the device plugin run, then stays up until the test stops qemu.
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/netns /dev/pts /sys/fs/cgroup /var/lib/containerd /var/lib/kubelet /var/log /etc/cni/net.d
mount -t devpts devpts /dev/pts
# /dev/shm as every distribution mounts it: pods with hostIPC (kubectl debug
# node's) share it.
mkdir -p /dev/shm
mount -t tmpfs -o mode=1777,nosuid,nodev shm /dev/shm
mount --make-rshared / 2>/dev/null || true
mount --make-rshared /run
mount -t cgroup2 none /sys/fs/cgroup
# Every controller for the cgroups below the root, as systemd enables them:
# kubelet's pod cgroups (cgroupsPerQOS) need cpu, cpuset, memory and pids.
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
	echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
done
mount -t bpf bpf /sys/fs/bpf
: >/run/rc-fails
SCEN=cluster
. /scenarios/lib.sh

arg() { sed -n "s/.*rc\.cluster\.$1=\([a-z0-9-]*\).*/\1/p" /proc/cmdline; }
NAME=$(arg node)
IDX=$(arg idx)
NODES=$(arg nodes)
SCEN=cluster-$NAME
echo "RC-BOOT kernel=$(uname -r) node=$NAME up=$(cut -d' ' -f1 /proc/uptime)s"
KVER=$(cat /lib/modules/kver)
for m in $(cat /lib/modules/load-order) $(cat /lib/modules/load-nic) overlay; do
	out=$(insmod "/lib/modules/$KVER/$m.ko" 2>&1) || echo "RC-INFO insmod $m: $out"
done
dmesg -n 1
# rc.cluster.disk=1 (the node the tier powers off and boots again):
# /var/lib and /var/log on a virtio disk, as on any node, so what the
# runtime, kubelet, the CNI plugins and rdma-chain wrote there outlives the
# power loss; /run (netns files, sockets) starts empty, as on any node.
# Without it they live in this boot's memory.
if grep -q 'rc\.cluster\.disk=1' /proc/cmdline; then
	step disk
	for m in $(cat /lib/modules/load-disk); do
		out=$(insmod "/lib/modules/$KVER/$m.ko" 2>&1) || echo "RC-INFO insmod $m: $out"
	done
	# The disk is /var/lib itself (kubelet's cadvisor finds the image and
	# root filesystems by their mount points); /var/log and the CNI
	# directories are bound from a directory of it. The first boot seeds
	# the disk's plugin directory from this image's.
	D=/var/lib/rc-disk
	if wait_until 10 test -b /dev/vda && out=$(mount -t ext4 /dev/vda /var/lib 2>&1); then
		mkdir -p /var/lib/containerd /var/lib/kubelet $D/log $D/cni-bin $D/cni-conf
		[ -e $D/cni-bin-seeded ] || { cp -a /opt/cni/bin/. $D/cni-bin/ && : >$D/cni-bin-seeded; }
		mount --bind $D/log /var/log
		mount --bind $D/cni-bin /opt/cni/bin
		mount --bind $D/cni-conf /etc/cni/net.d
		echo $(($(cat $D/boots 2>/dev/null || echo 0) + 1)) >$D/boots
		sync
		pass
		echo "RC-NODE-BOOT $(cat $D/boots)"
	else
		fail "no ext4 on /dev/vda: $out $(ls /sys/block)"
	fi
else
	mount -t tmpfs tmpfs /var/lib/containerd
fi
hostname "$NAME"
echo "127.0.0.1 localhost $NAME" >/etc/hosts
echo "nameserver 10.0.2.3" >/etc/resolv.conf
printf '5f1c0ffee0ddba11c0ffee0ddba11c%02x\n' "$IDX" >/etc/machine-id
ip link set lo up
wait_until 10 test -e /sys/class/net/eth1
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
ip link set eth1 up
NODE_IP=192.168.50.1$IDX
ip addr add "$NODE_IP/24" dev eth1
# The node's RDMA-network address. Each node has its own /64, as each
# Lingjun NIC does: pods get theirs from a block of it (podIPv6Block), the
# same block on every node, so one /64 shared by the nodes would give their
# first pods the same address.
ip addr add "fd00:10:$IDX::1/64" dev eth1 nodad
echo 1 >/proc/sys/net/ipv4/ip_forward
SOFT_MAC=$(printf '52:54:00:00:09:%02x' "$IDX")
soft_nic() { grep -l "^$SOFT_MAC$" /sys/class/net/*/address 2>/dev/null | head -n 1; }
if wait_until 10 test -n "$(soft_nic)"; then
	SOFT_DEV=$(soft_nic)
	SOFT_DEV=${SOFT_DEV%/address}
	ip link set "${SOFT_DEV##*/}" name soft0
	ip link set soft0 up
	ip addr add "fd00:60:$IDX::1/64" dev soft0 nodad
else
	fail "no NIC with MAC $SOFT_MAC"
fi
# host-gw: each node's pod subnet through that node's address. On the RDMA
# network, a pod's route off its /64 goes through its IPAM range's gateway
# (host-local's default: the block's first address, fd00:10:N::f:0:c01).
# On a Lingjun fabric a router answers there; here the other nodes play it:
# each holds the others' pods' gateway address (/128: the plugin reads a
# netdev's /64 from its addresses and ignores longer ones) with an on-link
# route to their /64. ipvlan delivers by destination address, so a frame
# sent to that node's MAC reaches the pod holding the address directly.
i=1
while [ "$i" -le "$NODES" ]; do
	if [ "$i" != "$IDX" ]; then
		ip route add "10.244.$i.0/24" via "192.168.50.1$i" dev eth1
		ip addr add "fd00:10:$i::f:0:c01/128" dev eth1 nodad
		ip -6 route add "fd00:10:$i::/64" dev eth1
	fi
	i=$((i + 1))
done
# The primary network: ptp + host-local on this node's pod subnet, a
# conflist of a name the DaemonSet does not know (--conflist auto finds it).
# Its agent's own copy stays in /etc/podnet: the tier rewrites the conflist
# from it, as a primary's agent does on restart. A node that boots again
# from its disk keeps the conflist it had (rdma-chain's entry in it).
# The primary's leases live on tmpfs, which a boot empties: host-local
# writes them unsynced and releases only a lease that names the container,
# so on a disk a power loss leaves them empty and held for good (its
# maintainers leave the clean-up to the node's boot).
mkdir -p /etc/podnet
cat >/etc/podnet/10-podnet.conflist <<EOC
{
  "cniVersion": "1.1.0",
  "name": "podnet",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "ipam": {"type": "host-local", "dataDir": "/run/cni/networks", "ranges": [[{"subnet": "10.244.$IDX.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}
EOC
[ -e /etc/cni/net.d/10-podnet.conflist ] || cp /etc/podnet/10-podnet.conflist /etc/cni/net.d/10-podnet.conflist
info "node $NAME network up=$(cut -d' ' -f1 /proc/uptime)s: $(ip -br addr show eth1 | tr -s ' ')"

# supervise NAME CMD...: runs CMD again whenever it exits, as systemd's
# Restart=always does on a node.
supervise() {
	_sn=$1
	shift
	(
		while :; do
			"$@"
			echo "RC-INFO $_sn exited ($?) up=$(cut -d' ' -f1 /proc/uptime)s"
			sleep 1
		done
	) &
}

# The tier's image registry (make push's, on the host's loopback) at
# 10.0.2.101:5000 through eth0's forward, over plain HTTP: the DaemonSets'
# image is pulled from it, as a cluster's nodes pull from the admin's.
mkdir -p /etc/containerd/certs.d/10.0.2.101:5000
cat >/etc/containerd/certs.d/10.0.2.101:5000/hosts.toml <<'EOF'
server = "http://10.0.2.101:5000"
[host."http://10.0.2.101:5000"]
  capabilities = ["pull", "resolve"]
EOF
cat >>/etc/containerd/config.toml <<'EOF'

[plugins."io.containerd.cri.v1.images".registry]
  config_path = "/etc/containerd/certs.d"
EOF
step containerd
supervise containerd sh -c 'exec containerd --config /etc/containerd/config.toml >>/run/containerd.log 2>&1'
if wait_until 120 test -S /run/containerd/containerd.sock; then pass; else fail "no socket after 120 s: $(tail -5 /run/containerd.log)"; fi
CTR="ctr --address /run/containerd/containerd.sock -n k8s.io"
for img in /images/*.tar; do
	check "import/$(basename "$img" .tar)" $CTR images import "$img"
done

# The RDMA devices on the L2 segment's NIC: soft-RoCE carries RoCE; simrdma
# (pci_function=1) is the RDMA function of eth1's PCI device, what the device
# plugin discovers and offers. rxe0 first: RDMA CM takes the first device
# holding an address's GID.
# With rc.cluster.nic2=1 (one node) a second RDMA NIC, eth2 on a PCI root of
# its own, carries simrdma1 and a /64 of its own for its pods' addresses;
# nothing is behind it.
SIMNICS=eth1
if grep -q 'rc\.cluster\.nic2=1' /proc/cmdline; then
	wait_until 10 test -e /sys/class/net/eth2
	ip link set eth2 up
	ip addr add "fd00:20:$IDX::1/64" dev eth2 nodad
	SIMNICS=eth1,eth2
	info "eth2 at $(readlink -f /sys/class/net/eth2/device/..)"
fi
check rxe rdma link add rxe0 type rxe netdev eth1
check simrdma insmod "/lib/modules/$KVER/simrdma.ko" netdev=$SIMNICS pci_function=1

# The kubernetes Service (10.96.0.1:443) for in-cluster clients on this
# node (the DRA driver): the node has no kube-proxy, fwd -listen stands in
# for this one Service, to the API server's endpoint (the guest's forward).
API=$(sed -n 's#.*server: https://\([0-9.:]*\).*#\1#p' /etc/kubernetes/kubelet.kubeconfig)
ip addr add 10.96.0.1/32 dev lo
fwd -listen 10.96.0.1:443 "$API" >/run/svc-fwd.log 2>&1 &
info "kubernetes Service 10.96.0.1:443 -> $API (fwd -listen)"

step kubelet
info "$(kubelet --version)"
supervise kubelet sh -c "exec kubelet --config /etc/kubernetes/kubelet.yaml --kubeconfig /etc/kubernetes/kubelet.kubeconfig \
	--hostname-override '$NAME' --node-ip '$NODE_IP' --v 2 >>/run/kubelet.log 2>&1"
if wait_until 600 wget -q -O /dev/null http://127.0.0.1:10248/healthz; then
	pass
	info "kubelet healthy up=$(cut -d' ' -f1 /proc/uptime)s"
else
	fail "healthz not ok after 600 s: $(grep -E '^[EF][0-9]{4}' /run/kubelet.log | tail -3)"
fi

step device-plugin
k8s-rdma-shared-dp --config-file /etc/rdma-dp/config.json >/run/rdma-dp.log 2>&1 &
if wait_until 600 grep -q 'All servers started' /run/rdma-dp.log; then pass; else fail "not started: $(tail -5 /run/rdma-dp.log)"; fi
grep -E 'device found|no Rdma Devices|exposing|Warning|error' /run/rdma-dp.log | sed 's/^/RC-INFO rdma-dp: /'

if [ "$(wc -l </run/rc-fails)" -eq 0 ]; then
	echo "RC-NODE-READY $NAME up=$(cut -d' ' -f1 /proc/uptime)s"
else
	echo "RC-NODE-FAILED $NAME"
	tail -n 20 /run/kubelet.log | sed 's/^/RC-KUBELET /'
fi
# Until the test stops qemu: kubelet's new errors to the console, for the
# test's log.
seen=0
while :; do
	sleep 30
	total=$(wc -l </run/kubelet.log)
	sed -n "$((seen + 1)),${total}p" /run/kubelet.log | grep -E '^E[0-9]{4}' | tail -n 5 | sed "s/^/RC-KUBELET $NAME /"
	seen=$total
done
