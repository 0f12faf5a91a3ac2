// Package caps is the VM tier's caps scenario, run first in its own boot
// (a second NIC, simrdma0 on it): what this kernel offers the plugin,
// written as "RC-CAP KEY VALUE" lines to capsFile, which caps.sh prints
// for integration/vm/vm_test.go to compare with the kernel's row of the
// table in docs/kernels.md. kcaps (integration/vm/guest/kcaps) gives the
// SMC and netns-local keys; this test probes the RDMA netns operations
// itself (the mode can only change while no other netns exists):
//
//	rdma_mode_set  yes|no  the netns mode set to exclusive, then shared again
//	move_simrdma   yes|no  in exclusive mode, simrdma0 moved into a netns
//	                       (a driver with disassociate_ucontext)
//	move_rxe       yes|no  the same for soft-RoCE's rxe0
//	rxe_netdev_move follows|stays|gone|untested|failed
//	               in exclusive mode, where a soft-RoCE device is once
//	               its netdev moved into a netns
//	rxe_netns      yes|no|untested  in shared mode, rxe devices made inside
//	               two netns on a veth pair between them carry an rping
//	               round, and the plugin's podSoftRoCE check agrees
//	               (otherwise a "mismatch:..." value no table row has)
//	transparent    tcp2smc|socket_hook|none|no_smc
//	               the mechanism smcr.transparent auto picks, written only
//	               when kcaps (pkg/smc.Detect), the plugin's STATUS log,
//	               `rdma-chain-ops inspect --json` and the metric
//	               rdma_chain_smc_transparent_info all name it; otherwise
//	               a "mismatch:..." value no table row has.
//
// A device moved into a netns comes back to init_net when it is deleted.
// The reconcile daemon must hold the socket hook loaded exactly where the
// mechanism is the hook, and `rdma-chain-smc-hook release` detach it.
package caps

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// capsFile holds the RC-CAP lines caps.sh prints after the test.
const capsFile = "/run/rc-caps"

// probe is what the test found of one kernel.
type probe struct {
	caps      []string // RC-CAP lines
	kcapsMech string   // the mechanism kcaps names
	modeSet   bool
	moved     map[string]bool // device -> moved into a netns
	// where a soft-RoCE device is once its netdev moved into a netns
	rxeNetdevMove string
	transparent   map[string]string
}

func TestCaps(t *testing.T) {
	testenv.VMGuest(t)
	_ = os.Remove(capsFile)
	p := &probe{moved: map[string]bool{}, transparent: map[string]string{}}
	guestkit.Check(t, "bpffs", mountBPF)
	guestkit.Check(t, "kcaps", p.kcaps)
	p.netnsOps(t)
	rxeNetns := p.rxeNetns(t)
	p.mechanisms(t)
	p.caps = append(p.caps, "RC-CAP transparent "+p.agreed(),
		"RC-CAP rdma_mode_set "+yesNo(p.modeSet),
		"RC-CAP move_simrdma "+yesNo(p.moved["simrdma0"]),
		"RC-CAP move_rxe "+yesNo(p.moved["rxe0"]),
		"RC-CAP rxe_netdev_move "+p.rxeNetdevMove,
		"RC-CAP rxe_netns "+rxeNetns)
	if err := os.WriteFile(capsFile, []byte(strings.Join(p.caps, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mountBPF mounts bpffs at /sys/fs/bpf unless it is there.
func mountBPF() error {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return err
	}
	if strings.Contains(string(b), " /sys/fs/bpf bpf ") {
		return nil
	}
	return unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "")
}

// kcaps runs kcaps and keeps its RC-CAP lines and the mechanism it names.
func (p *probe) kcaps() error {
	out, err := exec.Command("/usr/local/bin/kcaps").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kcaps: %w: %s", err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "RC-CAP "):
			p.caps = append(p.caps, line)
		case strings.HasPrefix(line, "RC-INFO transparent "):
			p.kcapsMech = strings.TrimPrefix(line, "RC-INFO transparent ")
		}
	}
	if len(p.caps) == 0 {
		return fmt.Errorf("kcaps printed no RC-CAP line: %s", out)
	}
	return nil
}

// agreed is the mechanism when kcaps, STATUS, inspect and the metrics
// all name it, else a mismatch value no table row has.
func (p *probe) agreed() string {
	t := p.transparent
	k := p.kcapsMech
	if k != "" && t["status"] == k && t["inspect"] == k && t["metrics"] == k {
		return k
	}
	return fmt.Sprintf("mismatch:kcaps=%s,status=%s,inspect=%s,metrics=%s", k, t["status"], t["inspect"], t["metrics"])
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
