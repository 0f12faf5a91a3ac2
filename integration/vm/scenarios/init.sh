#!/bin/busybox sh
# /init of the rdma-chain test VM (initramfs.sh installs this file as /init).
# Mounts the pseudo file systems, loads the modules in /lib/modules/load-order,
# runs the scenarios named by rc.scenario=a,b,... on the kernel command line
# (each /scenarios/NAME.sh in its own shell; rc.load=optional also loads the
# modules in /lib/modules/load-optional; rc.simrdma=NETDEV loads the
# virtio-net modules of /lib/modules/load-nic and then the simrdma test
# module with one device on each NETDEV of a comma-separated list), prints the verdict as
# "RC-RESULT pass|fail" and powers off.
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
# as systemd does on every node: the SMC-R socket hook's pins, which every
# hook operation (inspect's and the metrics' reads too) requires on a bpffs
mount -t bpf bpf /sys/fs/bpf 2>/dev/null || echo "RC-INFO no bpffs at /sys/fs/bpf"
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/netns /dev/pts
mount -t devpts devpts /dev/pts

echo "RC-BOOT kernel=$(uname -r) up=$(cut -d' ' -f1 /proc/uptime)s cmdline=$(cat /proc/cmdline)"
KVER=$(cat /lib/modules/kver)
: >/run/rc-fails
mods=$(cat /lib/modules/load-order)
grep -q 'rc\.load=optional' /proc/cmdline && mods="$mods $(cat /lib/modules/load-optional)"
for m in $mods; do
	if ! out=$(insmod "/lib/modules/$KVER/$m.ko" 2>&1); then
		echo "RC-INFO insmod $m: $out"
	fi
done
# The movable test RDMA device (integration/vm/simrdma) on the second NIC.
simnic=$(sed -n 's/.*rc\.simrdma=\([^ ]*\).*/\1/p' /proc/cmdline)
if [ -n "$simnic" ]; then
	for m in $(cat /lib/modules/load-nic); do
		out=$(insmod "/lib/modules/$KVER/$m.ko" 2>&1) || echo "RC-INFO insmod $m: $out"
	done
	for nic in $(echo "$simnic" | tr ',' ' '); do
		i=0
		while [ ! -e "/sys/class/net/$nic" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	done
	if ! out=$(insmod "/lib/modules/$KVER/simrdma.ko" "netdev=$simnic" 2>&1); then
		echo "RC-FAIL init/simrdma: insmod simrdma.ko netdev=$simnic: $out; $(ls /sys/class/net | tr '\n' ' ')"
		echo init/simrdma >>/run/rc-fails
	fi
fi
grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs configfs /sys/kernel/config 2>/dev/null
# Kernel messages would cut marker lines in two; they are shown at the end on failure.
dmesg -n 1
/usr/sbin/ip link set lo up
echo "RC-INFO modules loaded up=$(cut -d' ' -f1 /proc/uptime)s"

scenarios=$(sed -n 's/.*rc\.scenario=\([^ ]*\).*/\1/p' /proc/cmdline | tr ',' ' ')
[ -n "$scenarios" ] || { echo "RC-FAIL init: no rc.scenario= on the kernel command line"; echo init >>/run/rc-fails; }
for s in $scenarios; do
	if [ ! -f "/scenarios/$s.sh" ]; then
		echo "RC-FAIL $s: no scenario /scenarios/$s.sh"
		echo "$s" >>/run/rc-fails
		continue
	fi
	echo "RC-INFO scenario $s start up=$(cut -d' ' -f1 /proc/uptime)s"
	/bin/sh "/scenarios/$s.sh"
	rc=$?
	if [ $rc -ne 0 ]; then
		echo "RC-FAIL $s: scenario script exited $rc"
		echo "$s" >>/run/rc-fails
	fi
	echo "RC-INFO scenario $s end up=$(cut -d' ' -f1 /proc/uptime)s"
done

nfail=$(wc -l </run/rc-fails)
if [ "$nfail" -eq 0 ]; then
	echo "RC-RESULT pass up=$(cut -d' ' -f1 /proc/uptime)s"
else
	echo "RC-INFO $nfail failed checks; last kernel messages:"
	dmesg | sed -n '/Run \/init as init/,$p' | tail -n 40 | sed 's/^/RC-DMESG /'
	echo "RC-RESULT fail up=$(cut -d' ' -f1 /proc/uptime)s"
fi
sync
poweroff -f
