#!/bin/busybox sh
# /init of the node tier's guest (scripts/node/run.sh builds the initramfs):
# a Kubernetes node with real parts only. containerd 2.4.2 + Debian's runc,
# kubelet v1.37 standalone (static pods from /etc/kubernetes/manifests, no
# API server), the Mellanox RDMA shared device plugin, and rdma-chain
# deployed by its own DaemonSet's pod template (a static pod derived from
# conf/daemonset.yaml by integration/node/staticpod) on the image make image
# builds. Then every manifest of /pods in name order: dropped into the
# manifest directory, checked through kubelet's pod status and `ctr task
# exec` in the pod's container against its annotation test.rdma-chain/expect,
# removed again. Markers as in the VM tier (lib.sh); RC-RESULT at the end.
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/netns /dev/pts /sys/fs/cgroup /var/lib/containerd /var/lib/kubelet
mount -t devpts devpts /dev/pts
# As on a systemd node: mounts are shared, so a pod's HostToContainer mount
# (the DaemonSet's /var/run/netns) is allowed and sees new netns.
mount --make-rshared / 2>/dev/null || true
mount --make-rshared /run
# kubelet 1.37 refuses cgroup v1.
mount -t cgroup2 none /sys/fs/cgroup
mount -t tmpfs tmpfs /var/lib/containerd
: >/run/rc-fails
SCEN=node
. /scenarios/lib.sh

echo "RC-BOOT kernel=$(uname -r) up=$(cut -d' ' -f1 /proc/uptime)s"
KVER=$(cat /lib/modules/kver)
for m in $(cat /lib/modules/load-order) $(cat /lib/modules/load-nic) overlay; do
	out=$(insmod "/lib/modules/$KVER/$m.ko" 2>&1) || echo "RC-INFO insmod $m: $out"
done
grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs configfs /sys/kernel/config 2>/dev/null
dmesg -n 1
hostname node
echo "127.0.0.1 localhost node" >/etc/hosts
echo "nameserver 10.0.2.3" >/etc/resolv.conf
echo 5f1c0ffee0ddba11c0ffee0ddba11c0f >/etc/machine-id
ip link set lo up
wait_until 10 test -e /sys/class/net/eth0
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
info "node network up=$(cut -d' ' -f1 /proc/uptime)s"

# --- containerd and the images -------------------------------------------------
step containerd
containerd --config /etc/containerd/config.toml >/run/containerd.log 2>&1 &
if wait_until 60 test -S /run/containerd/containerd.sock; then pass; else fail "no socket after 60 s: $(tail -5 /run/containerd.log)"; fi
CTR="ctr --address /run/containerd/containerd.sock -n k8s.io"
for img in /images/*.tar; do
	check "import/$(basename "$img" .tar)" $CTR images import "$img"
done
show $CTR images ls -q

# --- soft-RoCE on the node's NIC --------------------------------------------------
check rxe rdma link add rxe0 type rxe netdev eth0
info "rxe0 sysfs parent: $(readlink /sys/class/infiniband/rxe0)"
info "eth0 device: $(readlink /sys/class/net/eth0/device)"

# --- kubelet ------------------------------------------------------------------
step kubelet
info "$(kubelet --version)"
kubelet --config /etc/kubernetes/kubelet.yaml --hostname-override node --node-ip 10.0.2.15 \
	--v 2 >/run/kubelet.log 2>&1 &
echo $! >/run/kubelet.pid
if wait_until 240 wget -q -O /dev/null http://127.0.0.1:10248/healthz; then
	pass
	info "kubelet healthy up=$(cut -d' ' -f1 /proc/uptime)s"
else
	fail "healthz not ok after 240 s: $(grep -E '^[EF][0-9]{4}' /run/kubelet.log | tail -3)"
fi

# --- the device plugin (before any pod that asks for its resource) --------------
step device-plugin
k8s-rdma-shared-dp --config-file /etc/rdma-dp/config.json >/run/rdma-dp.log 2>&1 &
if wait_until 240 grep -q 'All servers started' /run/rdma-dp.log; then pass; else fail "not started: $(tail -5 /run/rdma-dp.log)"; fi
sleep 2
grep -E 'device found|no Rdma Devices|exposing|Warning|error' /run/rdma-dp.log | sed 's/^/RC-INFO rdma-dp: /'
grep -E 'device_plugin|Registered|plugin registration' /run/kubelet.log | tail -5 | sed 's/^/RC-INFO kubelet: /'

# --- rdma-chain by its own DaemonSet pod -----------------------------------------
step daemonset
cp /etc/node/rdma-chain.yaml /etc/kubernetes/manifests/rdma-chain.yaml
if nodectl wait kube-system/rdma-chain running 240; then pass; else fail "DaemonSet pod not running: $(tail -5 /run/kubelet.log)"; fi
check daemonset/plugin-installed test -x /opt/cni/bin/rdma-chain
check daemonset/hook-installed test -x /opt/cni/bin/rdma-chain-smc-hook
check daemonset/entry grep -q '"type": "rdma-chain"' /etc/cni/net.d/10-rdmanet.conflist
show cat /etc/cni/net.d/10-rdmanet.conflist
nodectl podres list
nodectl podres get default/no-such-pod

# --- the pods ----------------------------------------------------------------
. /scenarios/pods.sh
for f in /pods/*.yaml; do
	run_pod "$f"
done

grep -E 'rdma-chain|CNI|cni' /run/kubelet.log | grep -vE 'I[0-9]{4}' | tail -20 | sed 's/^/RC-INFO kubelet: /'
nfail=$(wc -l </run/rc-fails)
if [ "$nfail" -eq 0 ]; then
	echo "RC-RESULT pass up=$(cut -d' ' -f1 /proc/uptime)s"
else
	echo "RC-INFO $nfail failed checks; kubelet's last lines:"
	tail -n 30 /run/kubelet.log | sed 's/^/RC-KUBELET /'
	tail -n 10 /run/containerd.log | sed 's/^/RC-CONTAINERD /'
	echo "RC-RESULT fail up=$(cut -d' ' -f1 /proc/uptime)s"
fi
sync
poweroff -f
