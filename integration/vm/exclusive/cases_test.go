package exclusive

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

// strandedCases are the ways a holder's netns dies with no DEL coming:
// at 0.4.0 its path is gone, at 1.0.0 the path names a new netns
// (another inode).
var strandedCases = []struct {
	version string
	reuse   bool
}{{"0.4.0", false}, {"1.0.0", true}}

// stranded checks that the next pod's ADD reclaims the device from the
// dead holder.
func (e *env) stranded(t *testing.T, reuse bool) {
	a, b := guestkit.NewPod("xrdma-", "poda"), guestkit.NewPod("xrdma-", "podb")
	guestkit.ExpectOK(t, "stranded-add-A", e.Add(t, a))
	recA, _ := e.Records()
	inoA := inode(a.NetNS)
	guestkit.DelNetNS(t, a)
	what := "path gone"
	if reuse {
		guestkit.NetNS(t, a)
		what = fmt.Sprintf("replaced by a new netns at the same path (inode %d, was %d)", inode(a.NetNS), inoA)
	}
	order, _ := refundOrder(e.b.mac)
	t.Logf("stranded: poda's netns %s; %s", what, order)
	views(t, "stranded-before-B")
	guestkit.ExpectOK(t, "stranded-add-B-reclaims", e.Add(t, b))
	logB := string(e.C.Stderr)
	views(t, "stranded-after-B", b)
	e.podHolds(t, "stranded-B", b)
	guestkit.Check(t, "stranded-A-record-dropped", func() error {
		recs, err := e.Records()
		if err == nil && (len(recs) != 1 || len(recA) != 1 || recs[0] == recA[0]) {
			err = fmt.Errorf("records %q (A's: %q)", recs, recA)
		}
		return err
	})
	guestkit.Check(t, "stranded-reclaim-logged", func() error {
		if !strings.Contains(logB, "eclaim") {
			return fmt.Errorf("no reclaim log line in B's ADD: %s", logB)
		}
		return nil
	})
	guestkit.ExpectOK(t, "stranded-del-B", e.Del(t, b))
	e.hostRestored(t, "stranded")
	guestkit.ExpectOK(t, "stranded-late-del-A", e.Del(t, a))
	guestkit.DelNetNS(t, a)
	guestkit.DelNetNS(t, b)
}

func inode(path string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// twoPods checks that a second pod's ADD while the first holds the
// device gets 11 and nothing; after the first's DEL it gets the device.
func (e *env) twoPods(t *testing.T) {
	p3, p4 := guestkit.NewPod("xrdma-", "pod3"), guestkit.NewPod("xrdma-", "pod4")
	guestkit.ExpectOK(t, "two-add-first", e.Add(t, p3))
	guestkit.ExpectCode(t, "two-second-gets-11", e.Add(t, p4), 11, device)
	guestkit.Check(t, "two-second-has-no-rdma0", func() error { return guestkit.NoLink(p4.NetNS, "rdma0") })
	_ = e.Del(t, p4) // the runtime's DEL after a failed ADD
	guestkit.ExpectOK(t, "two-del-first", e.Gone(t, p3))
	guestkit.ExpectOK(t, "two-second-after-first-del", e.AddTo(t, p4))
	e.podHolds(t, "two-second", p4)
	guestkit.ExpectOK(t, "two-del-second", e.Gone(t, p4))
	e.hostRestored(t, "two")
}

// failedIPAM checks that ADD fails after the move because the IPAM has no
// address left, or does not exist: 107, the node restored. The DEL that
// follows with the missing IPAM is logged, not checked: the failed ADD's
// release left no record for it.
func (e *env) failedIPAM(t *testing.T) {
	mustDo(t, "lease dir", os.MkdirAll("/run/ipam-full/rdmanet", 0o755))
	// host-local with a one-address range whose address is leased already
	mustDo(t, "lease", os.WriteFile("/run/ipam-full/rdmanet/fd00:98::2", []byte("someone-else\n"), 0o644))
	e.Conf(t, e.entry+`,"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:98::/64","rangeStart":"fd00:98::2","rangeEnd":"fd00:98::2"}]],"dataDir":"/run/ipam-full"}`)
	p5 := guestkit.NewPod("xrdma-", "pod5")
	guestkit.ExpectCode(t, "failed-ipam-107", e.Add(t, p5), 107)
	e.hostRestored(t, "failed-ipam")
	guestkit.Check(t, "failed-ipam-pod-has-no-rdma0", func() error { return guestkit.NoLink(p5.NetNS, "rdma0") })
	_ = e.Gone(t, p5)
	e.Conf(t, e.entry+`,"ipam":{"type":"no-such-ipam"}`)
	p9 := guestkit.NewPod("xrdma-", "pod9")
	guestkit.ExpectCode(t, "failed-ipam-missing-107", e.Add(t, p9), 107)
	e.hostRestored(t, "failed-ipam-missing")
	err := e.Del(t, p9)
	ce, _ := guestkit.CNIError(err)
	t.Logf("failed-ipam-missing: DEL with the same conf -> %v (CNI error %+v)", err, ce)
	// a record left behind would hold the device: DEL with a working IPAM
	e.Conf(t, e.entry+","+e.ipam)
	_ = e.Gone(t, p9)
}

// nameTaken checks that ADD fails after the move because rdma0 is taken
// in the pod: the node restored, the pod's own rdma0 kept.
func (e *env) nameTaken(t *testing.T) {
	p6 := guestkit.NewPod("xrdma-", "pod6")
	guestkit.NetNS(t, p6)
	mustDo(t, "dummy rdma0 in pod6", guestkit.InPod(p6.NetNS, func() error {
		return netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "rdma0"}})
	}))
	err := e.AddTo(t, p6)
	guestkit.Check(t, "failed-name-taken", func() error {
		if err == nil {
			return errors.New("ADD succeeded with rdma0 taken in the pod")
		}
		return nil
	})
	ce, _ := guestkit.CNIError(err)
	t.Logf("failed-name-taken: CNI error %+v", ce)
	e.hostRestored(t, "failed-name-taken")
	guestkit.Check(t, "failed-name-taken-dummy-kept", func() error {
		l, err := guestkit.PodLink(p6.NetNS, "rdma0")
		if err == nil && l.Type() != "dummy" {
			err = fmt.Errorf("rdma0 in pod6 is a %s", l.Type())
		}
		return err
	})
	_ = e.Gone(t, p6)
}

// sharedOnExclusive checks that mode shared configured on an exclusive
// kernel fails ADD with 101.
func (e *env) sharedOnExclusive(t *testing.T) {
	e.Conf(t, `"mode":"shared","devices":["`+device+`"],"podSelection":"all","dataDir":"`+e.DataDir+`"`)
	p7 := guestkit.NewPod("xrdma-", "pod7")
	guestkit.ExpectCode(t, "shared-on-exclusive-101", e.Add(t, p7), 101)
	e.hostRestored(t, "shared-on-exclusive")
	guestkit.Check(t, "shared-pod-has-no-rdma0", func() error { return guestkit.NoLink(p7.NetNS, "rdma0") })
	_ = e.Gone(t, p7)
}

// smcRaw sends raw SMC_PNETID_ADDs in init_net and in a pod that holds
// the device without the annotation, then logs the dumps: what the kernel
// does alone, not what the plugin must do.
func (e *env) smcRaw(t *testing.T) {
	m := "M" + strings.SplitN(e.V, ".", 2)[0] + "X"
	e.Conf(t, e.entry+","+e.ipam+`,"capabilities":{"io.kubernetes.cri.pod-annotations":true}`)
	p8 := guestkit.NewPod("xrdma-", "pod8")
	guestkit.ExpectOK(t, "smc-raw-add", e.Add(t, p8))
	t.Logf("smc-raw: SMC-R devices seen from init_net [%s] from pod8 [%s]", smcDevices(""), smcDevices(p8.NetNS))
	t.Logf("smc-raw: init_net ADD{%s ib=simrdma0 port 1} (device in pod8) -> %s", m, pnetAdd("", smc.PnetEntry{PnetID: m, IBName: device, IBPort: 1}))
	t.Logf("smc-raw: pod8 ADD{%s eth=rdma0} -> %s", m, pnetAdd(p8.NetNS, smc.PnetEntry{PnetID: m, EthName: "rdma0"}))
	t.Logf("smc-raw: pod8 ADD{%sP ib=simrdma0 port 1} -> %s", m, pnetAdd(p8.NetNS, smc.PnetEntry{PnetID: m + "P", IBName: device, IBPort: 1}))
	t.Logf("smc-raw: pnet init_net %s pod8 %s; devices [%s]", pnetDump(""), pnetDump(p8.NetNS), smcDevices(p8.NetNS))
	t.Logf("smc-raw: deletes init_net %v pod8 %v", smc.Do("", func(c *smc.Client) error { return c.PnetDel(m) }),
		smc.Do(p8.NetNS, func(c *smc.Client) error { return c.PnetDel(m) }))
	guestkit.ExpectOK(t, "smc-raw-del", e.Gone(t, p8))
}

// smcAnnotated attaches an annotated pod and checks that after DEL
// init_net's pnet table is empty, or, on a kernel without SMC
// (docs/kernels.md), the pod attached without SMC-R and there is no table
// at all.
func (e *env) smcAnnotated(t *testing.T) {
	t.Logf("smc: before ADD: devices [%s] init_net pnet %s", smcDevices(""), pnetDump(""))
	p8 := guestkit.NewPod("xrdma-", "pod8")
	p8.Caps = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]any{"network.alibabacloud.com/erdma-smcr": "true"}}
	guestkit.ExpectOK(t, "smc-add", e.Add(t, p8))
	var lines []string
	for _, l := range strings.Split(string(e.C.Stderr), "\n") {
		if strings.Contains(strings.ToLower(l), "smc") {
			lines = append(lines, l)
		}
	}
	t.Logf("smc: annotated pod8's ADD: SMC log lines: %q", lines)
	t.Logf("smc: pnet init_net %s pod8 %s; devices from pod8 [%s]", pnetDump(""), pnetDump(p8.NetNS), smcDevices(p8.NetNS))
	guestkit.ExpectOK(t, "smc-del", e.Del(t, p8))
	if guestkit.HasSMC() {
		guestkit.Check(t, "smc-del-init-net-pnet-empty", func() error {
			rows, err := guestkit.Pnet("")
			if err == nil && len(rows) > 0 {
				err = fmt.Errorf("init_net's pnet table after DEL: %q", rows)
			}
			return err
		})
	} else {
		guestkit.Check(t, "smc-no-smc-table", func() error {
			err := smc.Do("", func(c *smc.Client) error { _, err := c.PnetDump(); return err })
			if !errors.Is(err, smc.ErrUnavailable) {
				return fmt.Errorf("the pnet table on a kernel without SMC: %w, want %w", err, smc.ErrUnavailable)
			}
			return nil
		})
	}
	t.Logf("smc: after DEL: devices [%s]", smcDevices(""))
	guestkit.DelNetNS(t, p8)
	e.hostRestored(t, "smc")
	mustDo(t, "remove the state", os.RemoveAll(e.DataDir))
}

func smcDevices(nsPath string) string {
	var devs []smc.SMCRDevice
	err := smc.Do(nsPath, func(c *smc.Client) (err error) { devs, err = c.SMCRDevices(); return err })
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%+v", devs)
}

func pnetAdd(nsPath string, p smc.PnetEntry) string {
	if err := smc.Do(nsPath, func(c *smc.Client) error { return c.PnetAdd(p) }); err != nil {
		return err.Error()
	}
	return "ok"
}

func pnetDump(nsPath string) string {
	rows, err := guestkit.Pnet(nsPath)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%q", rows)
}
