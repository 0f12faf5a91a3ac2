package ops

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

const (
	unseenNetDir  = "/etc/cni/net.d-unseen"
	unseenConf    = unseenNetDir + "/rdmanet.conflist"
	unseenDataDir = "/run/rdma-chain-unseen"
	unseenIPAM    = "/run/ipam-unseen-rdma"
	unseenNet     = "fd00:79:"
)

// unseenConflist is ptp + host-local and rdma-chain in shared mode, rdma0's
// IPv6 from host-local.
const unseenConflist = `{"cniVersion":"1.0.0","name":"rdmanet","plugins":[
 {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.97.0.0/24"}]],"dataDir":"/run/ipam-unseen"}},
 {"type":"rdma-chain","mode":"shared","devices":["rxe0"],"podSelection":"all","dataDir":"` + unseenDataDir + `",
  "sharedLink":{"type":"ipvlan"},
  "ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:79::/64"}]],"dataDir":"` + unseenIPAM + `"}}
]}
`

// keptUnseen is reconcile's line for a listed sandbox whose netns it
// cannot see.
const keptUnseen = "kept an attachment CRI lists: its netns cannot be read here, and nothing proves its pod dead " +
	"(said once; counted as a problem of every pass while it lasts)"

// TestOpsUnseen (scenario ops-unseen): shared mode on soft-RoCE. A pod
// attaches (an ipvlan child with an IPv6 lease), and the runtime's CRI (a
// ListPodSandbox server in this test) lists its sandbox ready. reconcile
// --interval runs in a mount namespace whose netns directory is an empty
// tmpfs, as a DaemonSet whose mount of it does not see the runtime's pins:
// over three passes it releases nothing (record, lease, child and GID
// stay), counts a problem in every pass and says why once. The pod's own
// DEL then releases it.
func TestOpsUnseen(t *testing.T) {
	testenv.VMGuest(t)
	if !guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe) ||
		!guestkit.Check(t, "mode-is-shared", func() error { return guestkit.ModeIs(rdma.ModeShared) }) {
		t.Fatal("the node could not be set up: no case runs")
	}
	c := guestkit.NewCalls(t, "1.0.0", unseenDataDir)
	if !writeConflist(t, c, unseenConf, []byte(unseenConflist)) {
		t.Fatal("no conflist: no case runs")
	}
	p := guestkit.NewPod("unseen-", "unseen-pod")
	if !guestkit.ExpectOK(t, "add", c.Add(t, p)) {
		t.Fatal("the pod did not attach: no case runs")
	}
	addr := podV6(t, p, unseenNet)
	gid := guestkit.GIDOf(addr)
	sock := serveCRI(t, p.ContainerID)

	logPath := "/run/ops-unseen-reconcile.log"
	// sh's $0 and $@ are the operator binary and its arguments.
	d, err := guestkit.StartCommand(t, logPath, nil, "unshare", "-m", "sh", "-c",
		`mount -t tmpfs unseen `+guestkit.NSDir+` && exec "$0" "$@"`,
		guestkit.OpsBinary, "reconcile", "--conflist", unseenConf, "--cni-bin-dir", cniBinDir,
		"--cri-socket", sock, "--interval", "1s")
	if !guestkit.Check(t, "reconcile-started", func() error { return err }) {
		return
	}
	guestkit.Check(t, "three-passes", func() error {
		return guestkit.Poll(90*time.Second, 200*time.Millisecond, func() error {
			if n := len(records(d.Log(), "pass done")); n < 3 {
				return fmt.Errorf("%d passes done so far", n)
			}
			return nil
		})
	})
	guestkit.Check(t, "reconcile-stopped", func() error { return d.Stop(20 * time.Second) })
	out := d.Log()
	t.Logf("reconcile in a mount namespace with an empty %s:\n%s", guestkit.NSDir, out)

	guestkit.Check(t, "every-pass-kept-it", func() error {
		var errs []error
		for _, r := range records(out, "pass done") {
			if r["released"] != "0" || r["kept"] != "1" || r["problems"] != "1" {
				errs = append(errs, fmt.Errorf("pass done %v, want released=0 kept=1 problems=1", map[string]string(r)))
			}
		}
		return errors.Join(errs...)
	})
	guestkit.Check(t, "said-once", func() error {
		said := records(out, keptUnseen)
		if len(said) != 1 || said[0]["reason"] != "netns_unseen" || said[0]["netns"] != p.NetNS {
			return fmt.Errorf("%d lines %q, want one with reason=netns_unseen netns=%s: %v", len(said), keptUnseen, p.NetNS, said)
		}
		return nil
	})
	guestkit.Check(t, "nothing-released", func() error {
		if n := len(records(out, "released an attachment")); n != 0 {
			return fmt.Errorf("%d releases", n)
		}
		return nil
	})
	guestkit.Check(t, "record-kept", func() error { return c.RecordCount(1) })
	guestkit.Check(t, "lease-kept", func() error {
		_, err := os.Stat(filepath.Join(unseenIPAM, "rdmanet", addr))
		return err
	})
	guestkit.Check(t, "child-kept", func() error {
		_, err := guestkit.PodLink(p.NetNS, "rdma0")
		return err
	})
	guestkit.Check(t, "gid-kept", func() error { return guestkit.HasGID("rxe0", gid, "rdma0") })

	guestkit.ExpectOK(t, "del", c.Gone(t, p))
	guestkit.Check(t, "del-released-record", func() error { return c.RecordCount(0) })
	guestkit.Check(t, "del-released-lease", func() error { return guestkit.LeaseGone(unseenIPAM, addr) })
}

// records are the log records of out with msg.
func records(out, msg string) []guestkit.LogRecord {
	var same []guestkit.LogRecord
	for _, r := range guestkit.LogRecords(out) {
		if r["msg"] == msg {
			same = append(same, r)
		}
	}
	return same
}

// serveCRI serves ListPodSandbox listing the sandboxes ids, ready, on a
// unix socket it returns the path of, until t ends.
func serveCRI(t *testing.T, ids ...string) string {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &criServer{}
	for _, id := range ids {
		f.items = append(f.items, &runtimeapi.PodSandbox{Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + id, Namespace: "default"}})
	}
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return sock
}

type criServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	items []*runtimeapi.PodSandbox
}

func (c *criServer) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: c.items}, nil
}
