#!/bin/busybox sh
# /init of the node tier's guest (scripts/node/run.sh builds the initramfs):
# a Kubernetes node with real parts only. containerd 2.4.2 + Debian's runc,
# kubelet v1.37 standalone (static pods from /etc/kubernetes/manifests, no
# API server), the Mellanox RDMA shared device plugin, and rdma-chain
# deployed by its own DaemonSet's pod template (a static pod derived from
# conf/daemonset.yaml by integration/node/staticpod) on the image make image
# builds. Then the manifests of /pods, group by group (pods.sh): dropped into
# the manifest directory, checked through kubelet's pod status and `ctr task
# exec` in the pods' containers against their annotations, removed again.
# rc.node=shared (default) or exclusive on the kernel command line sets the
# node up in that RDMA netns mode (run.sh boots once per mode); rc.ownpods=1
# says /pods are the project's own (integration/node/pods). Markers as in
# the VM tier (lib.sh); RC-RESULT at the end.
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/netns /dev/pts /sys/fs/cgroup /var/lib/containerd /var/lib/kubelet /var/log
mount -t devpts devpts /dev/pts
# As on a systemd node: mounts are shared, so a pod's HostToContainer mount
# (the DaemonSet's /var/run/netns) is allowed and sees new netns.
mount --make-rshared / 2>/dev/null || true
mount --make-rshared /run
# kubelet 1.37 refuses cgroup v1.
mount -t cgroup2 none /sys/fs/cgroup
# As systemd does: the SMC socket hook pins its program there.
mount -t bpf bpf /sys/fs/bpf
mount -t tmpfs tmpfs /var/lib/containerd
: >/run/rc-fails
SCEN=node
. /scenarios/lib.sh

echo "RC-BOOT kernel=$(uname -r) up=$(cut -d' ' -f1 /proc/uptime)s"
MODE=$(sed -n 's/.*rc\.node=\([a-z]*\).*/\1/p' /proc/cmdline)
MODE=${MODE:-shared}
SCEN=node-$MODE
info "node mode $MODE"
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
# The node's address on the RDMA network; pods get theirs from a block of it.
ip addr add fd00:10::15/64 dev eth0 nodad
ip route add default via 10.0.2.2
info "node network up=$(cut -d' ' -f1 /proc/uptime)s"
if [ "$MODE" = exclusive ]; then
	# Before any netns exists (the kernel refuses the switch after).
	check exclusive-mode rdma system set netns exclusive
	# The NIC the pods get in turn, with the node's RDMA-network address.
	wait_until 10 test -e /sys/class/net/eth1
	ip link set eth1 up
	ip addr add fd00:11::15/64 dev eth1 nodad
fi

# --- containerd and the images -------------------------------------------------
step containerd
containerd --config /etc/containerd/config.toml >/run/containerd.log 2>&1 &
if wait_until 60 test -S /run/containerd/containerd.sock; then pass; else fail "no socket after 60 s: $(tail -5 /run/containerd.log)"; fi
CTR="ctr --address /run/containerd/containerd.sock -n k8s.io"
for img in /images/*.tar; do
	check "import/$(basename "$img" .tar)" $CTR images import "$img"
done
show $CTR images ls -q

# --- the node's RDMA devices ---------------------------------------------------
# simrdma with pci_function=1 is the RDMA function of a NIC's PCI device, as
# the device plugin discovers them (/sys/bus/pci/devices/ADDR/infiniband,
# uverbs, umad), with no data path. Shared: on eth0, with rxe0 (soft-RoCE)
# carrying RoCE on the same NIC; rxe0 comes first, as RDMA CM takes the
# first device holding an address's GID and both ports hold every address of
# eth0 and its children. Exclusive: on eth1, which pods get in turn.
if [ "$MODE" = exclusive ]; then
	check simrdma insmod "/lib/modules/$KVER/simrdma.ko" netdev=eth1 pci_function=1
else
	check rxe rdma link add rxe0 type rxe netdev eth0
	check simrdma insmod "/lib/modules/$KVER/simrdma.ko" netdev=eth0 pci_function=1
fi
info "simrdma0 sysfs: $(readlink /sys/class/infiniband/simrdma0)"
info "char devices: $(ls /dev/infiniband | tr '\n' ' ')"

# --- kubelet ------------------------------------------------------------------
step kubelet
info "$(kubelet --version)"
start_kubelet() {
	kubelet --config /etc/kubernetes/kubelet.yaml --hostname-override node --node-ip 10.0.2.15 \
		--v 2 >>/run/kubelet.log 2>&1 &
	echo $! >/run/kubelet.pid
}
start_kubelet
if wait_until 240 wget -q -O /dev/null http://127.0.0.1:10248/healthz; then
	pass
	info "kubelet healthy up=$(cut -d' ' -f1 /proc/uptime)s"
else
	fail "healthz not ok after 240 s: $(grep -E '^[EF][0-9]{4}' /run/kubelet.log | tail -3)"
fi

# --- the device plugin (before any pod that asks for its resource) --------------
step device-plugin
k8s-rdma-shared-dp --config-file /etc/rdma-dp/config.json >/run/rdma-dp.log 2>&1 &
dp=$!
if [ "$MODE" = exclusive ]; then
	# It serves shared mode only: at start it exits when the RDMA subsystem
	# is in exclusive netns mode (ValidateRdmaSystemMode). The exclusive
	# node's pods get RDMA through podSelection "all" instead.
	if wait_until 60 sh -c "! kill -0 $dp" && grep -q 'incorrect RDMA subsystem network namespace' /run/rdma-dp.log; then
		pass
	else
		fail "expected its exit in exclusive mode: $(tail -3 /run/rdma-dp.log)"
	fi
	sed 's/^/RC-INFO rdma-dp: /' /run/rdma-dp.log | tail -3
else
	if wait_until 240 grep -q 'All servers started' /run/rdma-dp.log; then pass; else fail "not started: $(tail -5 /run/rdma-dp.log)"; fi
	wait_until 30 sh -c "grep -q 'Registered client.*rdma/hca' /run/kubelet.log && grep -q 'Registered client.*aliyun/erdma' /run/kubelet.log"
	grep -E 'device found|no Rdma Devices|exposing|Warning|error' /run/rdma-dp.log | sed 's/^/RC-INFO rdma-dp: /'
	grep -E 'Registered client' /run/kubelet.log | tail -5 | sed 's/^/RC-INFO kubelet: /'
fi

# --- rdma-chain by its own DaemonSet pod -----------------------------------------
step daemonset
. /scenarios/pods.sh
put_manifest /etc/node/rdma-chain-$MODE.yaml
if nodectl wait kube-system/rdma-chain running 240; then pass; else fail "DaemonSet pod not running: $(tail -5 /run/kubelet.log)"; fi
check daemonset/plugin-installed test -x /opt/cni/bin/rdma-chain
check daemonset/hook-installed test -x /opt/cni/bin/rdma-chain-smc-hook
check daemonset/entry grep -q '"type": "rdma-chain"' /etc/cni/net.d/10-rdmanet.conflist
show cat /etc/cni/net.d/10-rdmanet.conflist
# Its reconcile container holds the SMC socket hook's program loaded where
# smcr.transparent auto uses the hook (6.12), before any SMC-R pod, and says
# why not elsewhere; where it holds it, no pod's ADD loads it (checked
# after the pods).
RECONCILE_LOG="/var/log/pods/kube-system_rdma-chain-*/reconcile/*.log"
step daemonset/smc-hook-decided
if wait_until 120 sh -c "grep -hqE 'holding the SMC socket hook|SMC socket hook not held' $RECONCILE_LOG"; then
	pass
	grep -h 'SMC socket hook' $RECONCILE_LOG | sed 's/^/RC-INFO reconcile: /'
else
	fail "no hold decision in the reconcile log: $(cat $RECONCILE_LOG 2>&1 | tail -5)"
fi
HOOK_HELD=0
if grep -hq 'holding the SMC socket hook' $RECONCILE_LOG 2>/dev/null; then
	HOOK_HELD=1
	check daemonset/smc-hook-pinned test -e /sys/fs/bpf/rdma-chain/smc_link
fi
nodectl podres list
nodectl podres get default/no-such-pod

# --- the pods, group by group (the leading number of their file names) ------
for g in $(ls /pods/*.yaml | sed 's|^/pods/||; s|-.*||' | sort -u); do
	run_group /pods/"$g"-*.yaml
done
# kubelet killed under the plugin's calls: on the shared node, where a
# device plugin's pods and pass-through pods start side by side; only
# with the project's own pods (rc.ownpods=1, run.sh without PODS_DIR).
if [ "$MODE" = shared ] && grep -Eq '(^| )rc\.ownpods=1( |$)' /proc/cmdline; then
	check_kubelet_killed
fi

# With the hook held, the SMC-R pods' ADD listed their netns without
# loading the program.
if [ "$HOOK_HELD" = 1 ] && grep -qs erdma-smcr /pods/*.yaml; then
	step smc-hook-no-load
	listed=$(grep -c 'listed in the SMC socket hook' /var/log/rdma-chain.log)
	loaded=$(grep -c 'listed in the SMC socket hook.* programLoaded=true' /var/log/rdma-chain.log)
	info "SMC-R pods listed in the held hook: $listed, of which loaded the program: $loaded"
	if [ "$listed" -ge 1 ] && [ "$loaded" = 0 ]; then pass; else fail "listed $listed, loaded $loaded"; fi
fi

# Where the SMC-R pods' ADD spent its time: the plugin's lines of their
# calls, with their times.
awk 'NR == FNR {
	if (/msg=done/ && /verb=ADD / && /pod=default\/erdma-smcr/)
		for (i = 1; i <= NF; i++) if ($i ~ /^container=/) c[$i] = 1
	next
}
{ for (k in c) if (index($0, k " ")) { print "RC-INFO plugin: " $0; break } }' /var/log/rdma-chain.log /var/log/rdma-chain.log 2>/dev/null

# The plugin's own timing of each verb (its share of time-to-running).
awk -v mode="$MODE" '/msg=done/ && / verb=(ADD|DEL) / {
	v = p = d = o = ""
	for (i = 1; i <= NF; i++) {
		if ($i ~ /^verb=/) v = $i; else if ($i ~ /^pod=/) p = $i
		else if ($i ~ /^duration=/) d = $i; else if ($i ~ /^outcome=/) o = $i
	}
	print "NODE-PLUGIN", mode, v, p, d, o
}' /var/log/rdma-chain.log 2>/dev/null
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
