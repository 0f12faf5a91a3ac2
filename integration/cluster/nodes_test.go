//go:build cluster

package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/internal/testonly/vmslot"
)

// nodeVM is one node of the cluster: qemu (TCG) booting the initramfs of
// scripts/cluster/initramfs.sh plus the node's own part (its kubeconfig).
type nodeVM struct {
	name    string
	idx     int    // 1-based; the node's address is 192.168.50.1<idx>
	console string // qemu's output, this boot's
	qemu    string
	args    []string          // qemu's; bootKernel changes the kernel's
	kernel  string            // the Debian kernel it boots (nodeKernels)
	env     map[string]string // scripts/cluster/initramfs.sh's: the kernels' paths
	work    string            // where the initramfs parts are
	boots   int
	cmd     *exec.Cmd
	started time.Time

	mu    sync.Mutex
	ready time.Duration // RC-NODE-READY after qemu's start; 0 until then
	fails []string      // RC-FAIL and RC-NODE-FAILED lines
	done  bool          // qemu exited
}

// bootNodes builds the node initramfs and boots one VM per name. Each VM
// has three NICs (twoRootNode a fourth): qemu user networking (restrict=on; a guestfwd to the API
// server and one to the image registry, both on the host's loopback, a
// hostfwd of its kubelet's port for the egress proxy), one on a UDP socket netdev on loopback joining the VMs
// into one L2 segment (node addresses, pod routes, RoCE), and one on a
// second such segment, without an RDMA device (soft0: podSoftRoCE's NIC,
// softRoCENIC). The VMs run until owner (the whole test) ends; t gets the
// failures.
func bootNodes(t *testing.T, owner testing.TB, cp *controlPlane) []*nodeVM {
	t.Helper()
	root := testenv.RepoRoot()
	work := filepath.Join(root, ".cache/cluster/run")
	build := exec.Command(filepath.Join(root, "scripts/cluster/initramfs.sh"), work)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/cluster/initramfs.sh: %v\n%s", err, out)
	} else {
		t.Logf("%s", strings.TrimSpace(string(out)))
	}
	env := map[string]string{}
	b, err := os.ReadFile(filepath.Join(work, "env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	fwd := filepath.Join(cp.dir, "fwd")
	testenv.Build(t, fwd, "./integration/cluster/fwd", "")
	cp.registryPort = cp.startRegistry(t)
	udp, udpSoft := make([]int, len(nodeNames)), make([]int, len(nodeNames))
	for i := range udp {
		udp[i], udpSoft[i] = freeUDPPort(t), freeUDPPort(t)
	}
	// The nodes run together: they wait for that many VM slots at once, so
	// no other tier's guest shares their cores (a starved node's kubelet
	// misses its leases and debug pods stall).
	n, err := vmslot.Count()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := vmslot.AcquireN(min(len(nodeNames), n), 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	owner.Cleanup(func() {
		for _, s := range slots {
			s.Release()
		}
	})
	t.Logf("VM slots %s and %s after %.0fs waiting for them", slots[0].Name, slots[len(slots)-1].Name, slots[0].Wait.Seconds())
	var vms []*nodeVM
	for i, name := range nodeNames {
		kernel := nodeKernels[name]
		vm := &nodeVM{name: name, idx: i + 1, console: filepath.Join(work, name+".console"), kernel: kernel, env: env, work: work}
		initrd := filepath.Join(cp.dir, name+".cpio.gz")
		if err := nodeInitrd(cp, name, kernel, work, initrd); err != nil {
			t.Fatal(err)
		}
		kubeletPort := freePort(t)
		cp.egress.route(fmt.Sprintf("192.168.50.1%d:10250", vm.idx), fmt.Sprintf("127.0.0.1:%d", kubeletPort))
		args := nodeArgs(vm.idx, env["KERNEL_"+strings.ReplaceAll(kernel, ".", "_")], initrd,
			fmt.Sprintf("user,id=n0,restrict=on,ipv6=off,guestfwd=tcp:%s:%d-cmd:%s 127.0.0.1:%d,guestfwd=tcp:%s-cmd:%s 127.0.0.1:%d,hostfwd=tcp:127.0.0.1:%d-:10250",
				guestAPIAddr, cp.port, fwd, cp.port, guestRegistryAddr, fwd, cp.registryPort, kubeletPort),
			[2]int{udp[i], udp[(i+1)%len(udp)]}, [2]int{udpSoft[i], udpSoft[(i+1)%len(udp)]})
		own, ownCmdline, err := nodeOwn(cp, name)
		if err != nil {
			t.Fatal(err)
		}
		args = append(append(args, own...), "-append", fmt.Sprintf(
			"console=ttyS0 panic=-1 quiet no_timer_check rc.cluster.node=%s rc.cluster.idx=%d rc.cluster.nodes=%d%s",
			name, vm.idx, len(nodeNames), ownCmdline))
		vm.qemu, vm.args = env["QEMU"], args
		vm.start(t, owner)
		vms = append(vms, vm)
	}
	return vms
}

// nodeArgs are the qemu arguments every node VM has: the kernel and
// initramfs, the user-networking NIC (netdev user), the L2 segment's NIC
// and soft0, each segment a UDP socket netdev from this node's local port
// to the next node's ([local, peer]).
func nodeArgs(idx int, kernel, initrd, user string, segment, soft [2]int) []string {
	return []string{"-accel", "tcg,thread=single", "-m", "3072", "-smp", "2", "-nographic", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
		"-netdev", user,
		"-device", fmt.Sprintf("virtio-net-pci,netdev=n0,mac=52:54:00:00:00:%02x", idx),
		"-netdev", fmt.Sprintf("socket,id=n1,udp=127.0.0.1:%d,localaddr=127.0.0.1:%d", segment[1], segment[0]),
		"-device", fmt.Sprintf("virtio-net-pci,netdev=n1,mac=52:54:00:00:01:%02x", idx),
		// soft0 on a PCI root of its own, numbered after every other:
		// the kernel names it last, so the other NICs keep their names.
		"-device", "pxb,id=pxb9,bus_nr=96,bus=pci.0",
		"-netdev", fmt.Sprintf("socket,id=n9,udp=127.0.0.1:%d,localaddr=127.0.0.1:%d", soft[1], soft[0]),
		"-device", fmt.Sprintf("virtio-net-pci,netdev=n9,bus=pxb9,addr=0x1,mac="+softRoCEMACFormat, idx),
	}
}

// nodeOwn is what one node's VM has that the others' have not, as qemu
// arguments and kernel command line words: diskNode's disk, twoRootNode's
// second PCI root with a NIC on it.
func nodeOwn(cp *controlPlane, name string) (args []string, cmdline string, err error) {
	if name == diskNode {
		disk, err := nodeDisk(cp, name)
		if err != nil {
			return nil, "", err
		}
		// On the root bus by name: qemu put the disk of a plain
		// if=virtio drive on soft0's pxb, the last PCI root, and refused
		// it there ("Only PCI/PCIe bridges can be plugged into pxb").
		args = append(args, "-drive", "file="+disk+",format=raw,if=none,id=disk0,cache=unsafe",
			"-device", "virtio-blk-pci,drive=disk0,bus=pci.0")
		cmdline += " rc.cluster.disk=1"
	}
	if name == twoRootNode {
		// A PCI expander bridge is a root bus of its own: the NIC on it
		// sits under pci0000:20 in the guest's sysfs.
		args = append(args, "-device", "pxb,id=pxb1,bus_nr=32,bus=pci.0",
			"-netdev", "user,id=n2,restrict=on,ipv6=off",
			"-device", "virtio-net-pci,netdev=n2,bus=pxb1,addr=0x1,mac="+twoRootMAC)
		cmdline += " rc.cluster.nic2=1"
	}
	return args, cmdline, nil
}

// twoRootNode has a second RDMA NIC, eth2 (simrdma1), on a PCI root of its
// own (pci0000:20 beside pci0000:00), with nothing behind it: the NIC a
// claim selects by pcieRoot, and the one its pods get in exclusive mode.
const twoRootNode = "node-b"

// secondRoot is the pcieRoot of twoRootNode's eth2, twoRootMAC its MAC.
const (
	secondRoot = "pci0000:20"
	twoRootMAC = "52:54:00:00:02:02"
)

// diskNode keeps /var/lib and /var/log on a disk (ext4 on virtio, made
// fresh for each run), as every real node does: it is the node the
// reboot scenario resets and the node-loss scenario powers off, each
// booting it again from its disk.
const diskNode = "node-a"

// nodeDisk makes the node's disk: a sparse file with an empty ext4.
func nodeDisk(cp *controlPlane, name string) (string, error) {
	disk := filepath.Join(cp.dir, name+".disk")
	f, err := os.Create(disk)
	if err != nil {
		return "", err
	}
	err = f.Truncate(4 << 30)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	mkfs := "mkfs.ext4"
	if _, err := exec.LookPath(mkfs); err != nil {
		mkfs = "/sbin/mkfs.ext4" // not on root's PATH everywhere (scripts/vm/prepare.sh installs e2fsprogs)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-L", name, disk).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", mkfs, disk, err, out)
	}
	return disk, nil
}

// nodeKernels are the Debian kernels the nodes boot: the matrix's newest
// beside the one most nodes run (docs/kernels.md).
var nodeKernels = map[string]string{"node-a": "6.12", "node-b": "7.3"}

// nodeInitrd concatenates the parts of the node's kernel, the shared node
// part and the node's own: its kubeconfig (server at the guest's forward,
// the node's static token).
func nodeInitrd(cp *controlPlane, name, kernel, work, out string) error {
	stage := filepath.Join(cp.dir, name+"-stage")
	if err := os.MkdirAll(filepath.Join(stage, "etc/kubernetes"), 0o755); err != nil {
		return err
	}
	if err := cp.pki.kubeconfig(filepath.Join(stage, "etc/kubernetes/kubelet.kubeconfig"),
		fmt.Sprintf("https://%s:%d", guestAPIAddr, cp.port), "system:node:"+name); err != nil {
		return err
	}
	own := filepath.Join(cp.dir, name+"-own.cpio.gz")
	sh := fmt.Sprintf("cd %q && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --owner 0:0 --quiet | gzip -1 >%q && cat %q %q %q %q >%q",
		stage, own, filepath.Join(work, "base-"+kernel+".cpio.gz"), filepath.Join(work, "node.cpio.gz"),
		filepath.Join(work, "overlay-"+kernel+".cpio.gz"), own, out)
	if o, err := exec.Command("sh", "-c", sh).CombinedOutput(); err != nil {
		return fmt.Errorf("node initramfs: %w: %s", err, o)
	}
	return nil
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// start boots the VM (again, after powerOff): qemu with this boot's
// console copied to vm.console and read for the guest's markers; the
// test's end stops it by its process.
func (vm *nodeVM) start(t *testing.T, owner testing.TB) {
	t.Helper()
	vm.mu.Lock()
	vm.boots++
	file := vm.name + ".console"
	if vm.boots > 1 {
		file = fmt.Sprintf("%s-boot%d.console", vm.name, vm.boots)
	}
	vm.console = filepath.Join(filepath.Dir(vm.console), file)
	vm.ready, vm.fails, vm.done = 0, nil, false
	vm.mu.Unlock()
	f, err := os.Create(vm.console)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(vm.qemu, vm.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	started := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: qemu: %v", vm.name, err)
	}
	vm.mu.Lock()
	vm.cmd, vm.started = cmd, started
	vm.mu.Unlock()
	go vm.readConsole(cmd, out, f, started)
	console := vm.console
	owner.Cleanup(func() {
		_ = cmd.Process.Kill()
		owner.Logf("%s console: %s", vm.name, console)
		// qemu's CPU time against its wall time: how busy the node kept
		// the core its VM slot stands for.
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if ps := cmd.ProcessState; ps != nil {
				owner.Logf("%s: qemu ran %.0fs, CPU %.0fs", vm.name, time.Since(started).Seconds(), (ps.UserTime() + ps.SystemTime()).Seconds())
				break
			}
		}
	})
}

// readConsole copies one boot's console to f and records its markers
// until that qemu exits.
func (vm *nodeVM) readConsole(cmd *exec.Cmd, out io.Reader, f *os.File, started time.Time) {
	defer f.Close()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r")
		fmt.Fprintln(f, l)
		vm.mu.Lock()
		switch {
		case strings.HasPrefix(l, "RC-NODE-READY "):
			vm.ready = time.Since(started)
		case strings.HasPrefix(l, "RC-FAIL "), strings.HasPrefix(l, "RC-NODE-FAILED "):
			vm.fails = append(vm.fails, l)
		}
		vm.mu.Unlock()
	}
	_ = cmd.Wait()
	vm.mu.Lock()
	if vm.cmd == cmd {
		vm.done = true
	}
	vm.mu.Unlock()
}

// powerOff pulls the VM's plug: qemu is killed, the guest gets no
// shutdown; what it had not written to its disk is lost.
func (vm *nodeVM) powerOff(t *testing.T) {
	t.Helper()
	vm.mu.Lock()
	cmd := vm.cmd
	vm.mu.Unlock()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("%s: kill qemu: %v", vm.name, err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		vm.mu.Lock()
		defer vm.mu.Unlock()
		return vm.done, "qemu still running"
	})
}

// bootKernel shuts the VM down (its disk synced first, as a node's
// reboot does) and boots it on another of the tier's Debian kernels, its
// initramfs made again for that kernel: a node's kernel upgrade, with
// its disk kept. It returns once the guest's node parts run.
func (vm *nodeVM) bootKernel(t *testing.T, owner testing.TB, cp *controlPlane, kernel string) {
	t.Helper()
	path := vm.env["KERNEL_"+strings.ReplaceAll(kernel, ".", "_")]
	if path == "" {
		t.Fatalf("no %s kernel among the tier's (scripts/cluster/initramfs.sh's CLUSTER_KERNELS)", kernel)
	}
	initrd := filepath.Join(cp.dir, fmt.Sprintf("%s-%s.cpio.gz", vm.name, kernel))
	if err := nodeInitrd(cp, vm.name, kernel, vm.work, initrd); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(vm.args)
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-kernel":
			args[i+1] = path
		case "-initrd":
			args[i+1] = initrd
		}
	}
	if out, err := cp.nodeExec(t, vm.name, "sync"); err != nil {
		t.Fatalf("sync on %s: %v: %s", vm.name, err, out)
	}
	vm.powerOff(t)
	vm.args, vm.kernel = args, kernel
	vm.start(t, owner)
	vm.waitReady(t, 20*time.Minute)
}

// waitReady polls the console until the guest says its node parts run.
func (vm *nodeVM) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() (bool, string) {
		vm.mu.Lock()
		defer vm.mu.Unlock()
		if len(vm.fails) > 0 || vm.done {
			t.Fatalf("%s: guest failed (done=%v): %s\n%s", vm.name, vm.done, strings.Join(vm.fails, "\n"), tail(vm.console, 40))
		}
		if vm.ready == 0 {
			time.Sleep(time.Second)
		}
		return vm.ready > 0, fmt.Sprintf("%s: no RC-NODE-READY\n%s", vm.name, tail(vm.console, 40))
	})
}

func tail(path string, n int) string {
	out, _ := exec.Command("tail", "-n", fmt.Sprint(n), path).Output()
	return string(out)
}
