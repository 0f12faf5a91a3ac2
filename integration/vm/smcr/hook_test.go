package smcr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

// TestSMCHook is the VM tier's smc-hook scenario: transparent SMC through
// the node's BPF socket hook (smcr.transparent), per kernel.
//
// With IPPROTO_SMC (6.12): the hook's own kernel tests (hook.test, a
// separate binary), then two pods annotated for SMC-R and one plain pod;
// an unmodified TCP program (tcpproto, run in the pod's netns) gets SMC
// sockets in the annotated pods and TCP in the plain one; the first
// annotated pod's ADD loads the program, the next ones list their netns in
// the pinned map with the hook binary moved away, DEL unlists a pod and
// the last DEL detaches the program and removes the pins (hook*_test.go).
// Without IPPROTO_SMC (6.1): auto logs and goes on, bpf with
// onUnsupported fail is 108 naming what is missing (hookrefuse_test.go).
// Without SMC (7.3): what smcr.onUnsupported documents, and no pins.
//
// Its figures, logged by this top test (RC-INFO lines): socket()+close()
// with the program attached against detached, one run of the hook binary,
// the ADD of an annotated pod against a plain pod's (median of 9 pairs),
// the ADD that loaded the program (hookfigures_test.go), and the protocol
// an unmodified Go server listens with.
func TestSMCHook(t *testing.T) {
	testenv.VMGuest(t)
	start := time.Now()
	defer func() { t.Logf("smc-hook: %.0f s", time.Since(start).Seconds()) }()
	if err := mountBPFFS(); err != nil {
		t.Errorf("bpffs at %s: %v", filepath.Dir(pinDir), err)
	}
	e := guestkit.NewCalls(t, "1.0.0", hookDataDir)
	if !guestkit.Check(t, "setup-rxe", guestkit.SetUpRxe) {
		t.Fatal("no soft-RoCE rxe0: no case runs")
	}
	if !guestkit.HasSMC() {
		noSMCOutcomes(t, e)
		guestkit.Check(t, "no-smc-no-pins", noPins)
		return
	}
	guestkit.Check(t, "smc-module", smcFamily)
	if release, ok := ipprotoSMCKernel(); !ok {
		t.Logf("kernel %s has no IPPROTO_SMC", release)
		hookRefused(t, e)
		return
	}
	hookKernelTests(t)
	socketCost(t)
	s := newHookScenario(t, e)
	s.adds(t)
	hookRunFigure(t)
	s.addPairs(t)
	s.exchanges(t)
	s.dels(t)
}

const (
	hookDataDir = "/run/rdma-chain-smchook"
	// pinDir is where the plugin pins the hook by default (smcr.bpffsDir,
	// pkg/smc/hook.DefaultDir).
	pinDir   = "/sys/fs/bpf/rdma-chain"
	hookBin  = guestkit.BinDir + "/" + hookcmd.Binary
	hookAway = guestkit.BinDir + "/.rdma-chain-smc-hook.away"
	// hookTestBin is pkg/smc/hook's tests built with -tags smchook.
	hookTestBin = "/usr/local/bin/hook.test"
)

// hookConf makes the IPv4 conflist of smcr.transparent mode and
// onUnsupported on the calls' one, and logs it.
func hookConf(t *testing.T, e *guestkit.Calls, mode, on string) {
	t.Helper()
	e.Conf(t, sharedFields(e.DataDir)+`,"smcr":{"transparent":"`+mode+`","onUnsupported":"`+on+`"},"capabilities":{"`+annCap+`":true}`)
	t.Logf("conflist: %s", e.List.Bytes)
}

// hookPod is a pod of this scenario, annotated for SMC-R or plain.
func hookPod(name string, smcr bool) guestkit.Pod {
	if smcr {
		return annotatedIn("smchook-", name, "true")
	}
	return annotatedIn("smchook-", name, "")
}

// mountBPFFS mounts a bpffs on /sys/fs/bpf where none is, as systemd does
// on a node: the plugin pins the hook there.
func mountBPFFS() error {
	var fs unix.Statfs_t
	if unix.Statfs("/sys/fs/bpf", &fs) == nil && fs.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	return unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "")
}

// ipprotoSMCKernel returns this kernel's release and whether it is one
// that offers IPPROTO_SMC (>= 6.11, docs/kernels.md). The release
// decides, as the table does, not a probe: a 6.12 that lost IPPROTO_SMC
// must fail the hook's checks, not pass the refusal's.
func ipprotoSMCKernel() (string, bool) {
	var u unix.Utsname
	_ = unix.Uname(&u)
	rel := unix.ByteSliceToString(u.Release[:])
	v := strings.FieldsFunc(rel, func(r rune) bool { return r == '.' || r == '-' })
	if len(v) < 2 {
		return rel, false
	}
	major, err1 := strconv.Atoi(v[0])
	minor, err2 := strconv.Atoi(v[1])
	return rel, err1 == nil && err2 == nil && (major > 6 || major == 6 && minor >= 11)
}

// noPins checks that the plugin pinned nothing (no directory at
// pinDir).
func noPins() error {
	es, err := os.ReadDir(pinDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", pinDir, err)
	}
	return fmt.Errorf("pins left in %s: %s", pinDir, entryNames(es))
}

// pinned checks that the program's link and the netns map are pinned,
// and the map is the hook's with its link pinned (hookmap's own
// checks).
func pinned() error {
	for _, p := range []string{hookmap.LinkPin, hookmap.MapPin} {
		if _, err := os.Stat(filepath.Join(pinDir, p)); err != nil {
			return err
		}
	}
	m, err := hookmap.Open(pinDir)
	if err != nil {
		return err
	}
	defer m.Close()
	linked, err := m.Linked()
	if err == nil && !linked {
		err = fmt.Errorf("no pinned link beside the map in %s", pinDir)
	}
	return err
}

// listed reports whether p's netns (by inode) is in the pinned map.
func listed(p guestkit.Pod) (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(p.NetNS, &st); err != nil {
		return false, fmt.Errorf("netns of %s: %w", p.Name, err)
	}
	m, err := hookmap.Open(pinDir)
	if err != nil {
		return false, err
	}
	defer m.Close()
	return m.Lookup(uint32(st.Ino))
}

func entryNames(es []os.DirEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.Name())
	}
	return strings.Join(s, ", ")
}
