package caps

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// rxeNetns probes, in shared mode, whether soft-RoCE devices made inside
// two netns carry RoCE between them (podSoftRoCE's premise): netns A and
// B joined by a veth pair, an rxe device made from inside each on its
// end, one verified rping round from B to A. The value is yes or no when
// the plugin's rdma.SoftRoCEUnsupported says the same of this kernel, a
// "mismatch:..." value no table row has otherwise.
func (p *probe) rxeNetns(t *testing.T) string {
	if err := guestkit.ModeIs(rdma.ModeShared); err != nil {
		return "untested"
	}
	a, b := guestkit.NewPod("caps-", "rxnA"), guestkit.NewPod("caps-", "rxnB")
	guestkit.NetNS(t, a)
	guestkit.NetNS(t, b)
	defer guestkit.DelNetNS(t, a)
	defer guestkit.DelNetNS(t, b)
	err := rxePair(a, b)
	if err == nil {
		err = rpingOnce(a, b, "10.211.0.1")
	}
	t.Logf("rxe devices made inside two netns, rping between them: %v", err)
	probed := err == nil
	plugin := rdma.SoftRoCEUnsupported(rdma.KernelRelease())
	if probed != (plugin == "") {
		return fmt.Sprintf("mismatch:probe=%s,plugin=%q", yesNo(probed), plugin)
	}
	return yesNo(probed)
}

// rxePair joins a and b with a veth pair (10.211.0.1/24 in a, .2 in b) and
// makes an rxe device on each end from inside its netns.
func rxePair(a, b guestkit.Pod) error {
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "rxnA"}, PeerName: "rxnB"}); err != nil {
		return fmt.Errorf("veth rxnA: %w", err)
	}
	for _, end := range []struct {
		pod       guestkit.Pod
		link, dev string
		addr      string
	}{{a, "rxnA", "rxeA", "10.211.0.1/24"}, {b, "rxnB", "rxeB", "10.211.0.2/24"}} {
		if err := moveTo(end.link, end.pod.NetNS); err != nil {
			return fmt.Errorf("move %s: %w", end.link, err)
		}
		err := guestkit.InPod(end.pod.NetNS, func() error {
			l, err := netlink.LinkByName(end.link)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err == nil {
				err = netnstest.AddAddrTo(l, end.addr)
			}
			if err == nil {
				err = guestkit.AddRxe(end.dev, end.link)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("%s in %s: %w", end.dev, end.pod.Name, err)
		}
	}
	return nil
}

// moveTo moves init_net's link name into the netns at nsPath.
func moveTo(name, nsPath string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	f, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	return netlink.LinkSetNsFd(l, int(f.Fd()))
}

// rpingOnce runs an rping server on addr in a and one verified round from
// b, each bounded, the server stopped when the client is done.
func rpingOnce(a, b guestkit.Pod, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, "/usr/sbin/ip", "netns", "exec", a.Name, "rping", "-s", "-a", addr, "-C", "1")
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { cancel(); _ = srv.Wait() }()
	err := guestkit.Poll(15*time.Second, 100*time.Millisecond, func() error {
		out, err := exec.Command("/usr/sbin/rdma", "-j", "resource", "show", "cm_id").Output()
		if err == nil && !strings.Contains(string(out), `"src-addr":"`+addr+":") {
			err = fmt.Errorf("no cm_id on %s: %s", addr, out)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("rping server: %w: %s", err, srvOut.String())
	}
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	out, err := exec.CommandContext(cctx, "/usr/sbin/ip", "netns", "exec", b.Name, "rping", "-c", "-a", addr, "-C", "1", "-v").CombinedOutput()
	if strings.Count(string(out), "ping data") != 1 {
		return fmt.Errorf("rping client: %s: %s / server: %s", fmt.Sprint(err), out, srvOut.String())
	}
	return nil
}
