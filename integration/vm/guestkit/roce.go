package guestkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// Rping runs an rping server on addr in server's netns and a client of
// count verified rounds in client's (Pod{}: init_net), over soft-RoCE
// device dev, and wants dev's sent and received packet counters to rise.
// The client starts once the server's cm_id listens on addr. A client
// whose address resolution timed out (RDMA_CM_EVENT_ADDR_ERROR, -110, when
// the neighbour's answer came later than rping's 2 s under TCG with other
// guests running, on 6.1 and 6.12 alike) never reached the server, which
// still listens: such a try is logged and the client tried again, up to 3
// times. Any other failure fails at once.
func Rping(t *testing.T, dev string, server, client Pod, addr string, count int) error {
	t.Helper()
	sent0, rcvd0, err := counters(dev)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	var srvOut bytes.Buffer
	srv := inNetns(ctx, server, "rping", "-s", "-a", addr, "-C", strconv.Itoa(count))
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return fmt.Errorf("rping server: %w", err)
	}
	defer func() { _ = srv.Wait() }()
	if err := Poll(15*time.Second, 100*time.Millisecond, func() error { return listening(addr) }); err != nil {
		return fmt.Errorf("rping server in %s: %w: %s", server.Name, err, srvOut.String())
	}
	var out []byte
	var cerr error
	for try := 1; try <= 3; try++ {
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		out, cerr = inNetns(cctx, client, "rping", "-c", "-a", addr, "-C", strconv.Itoa(count), "-v").CombinedOutput()
		ccancel()
		if cerr == nil || !strings.Contains(string(out), "RDMA_CM_EVENT_ADDR_ERROR") {
			break
		}
		t.Logf("rping %s -> %s [%s], try %d: address resolution timed out: %s", client.Name, server.Name, addr, try, bytes.TrimSpace(out))
	}
	sent1, rcvd1, err := counters(dev)
	if err != nil {
		return err
	}
	t.Logf("rping %s -> %s [%s] over %s: %v, %d ping data lines; sent_pkts %d -> %d, rcvd_pkts %d -> %d",
		client.Name, server.Name, addr, dev, cerr, strings.Count(string(out), "ping data"), sent0, sent1, rcvd0, rcvd1)
	if !rpingDone(string(out), cerr, count) {
		return fmt.Errorf("rping %s -> %s [%s]: %w: %s / server: %s", client.Name, server.Name, addr, cerr, out, srvOut.String())
	}
	if sent1 <= sent0 || rcvd1 <= rcvd0 {
		return fmt.Errorf("%s counters: sent %d -> %d, rcvd %d -> %d", dev, sent0, sent1, rcvd0, rcvd1)
	}
	return nil
}

// inNetns is a command run in p's netns, as `ip netns exec` runs it; a
// pod without a name is init_net.
func inNetns(ctx context.Context, p Pod, name string, args ...string) *exec.Cmd {
	if p.Name == "" {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "/usr/sbin/ip", append([]string{"netns", "exec", p.Name, name}, args...)...)
}

// rpingDone reports whether an rping client (-v) that ended with err and printed
// out completed count verified pings: its count "ping data" lines are the
// proof, the exit status alone is not. rping's cm_thread (rdma-core 44,
// the guests' Debian) polls the CM event channel the main thread closes
// on teardown, and when it loses that race it exits 255 after
// "rdma_get_cm_event: Bad file descriptor", pings all done. Only that
// exact teardown is read as done.
func rpingDone(out string, err error, count int) bool {
	if strings.Count(out, "ping data") != count {
		return false
	}
	if err == nil {
		return true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 255 {
		return false
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "rdma_get_cm_event: Bad file descriptor" {
			return true
		}
	}
	return false
}

// listening reports whether an rping server's cm_id listens on addr in some netns, as
// `rdma -j resource show cm_id` (iproute2's JSON) lists it: its src-addr
// is ADDR:PORT, an IPv6 address unbracketed.
func listening(addr string) error {
	out, err := exec.Command("/usr/sbin/rdma", "-j", "resource", "show", "cm_id").Output()
	if err != nil {
		return fmt.Errorf("rdma resource show cm_id: %w", err)
	}
	var ids []map[string]any
	if err := json.Unmarshal(out, &ids); err != nil {
		return fmt.Errorf("rdma resource show cm_id: %w: %s", err, out)
	}
	want := net.ParseIP(addr)
	for _, id := range ids {
		src, _ := id["src-addr"].(string)
		if i := strings.LastIndex(src, ":"); i > 0 {
			src = src[:i]
		}
		if id["state"] == "LISTEN" && net.ParseIP(src).Equal(want) {
			return nil
		}
	}
	return fmt.Errorf("no cm_id listens on %s: %s", addr, out)
}

// counters reads dev port 1's sent and received packet counters.
func counters(dev string) (sent, rcvd uint64, err error) {
	read := func(name string) uint64 {
		if err != nil {
			return 0
		}
		var b []byte
		b, err = os.ReadFile("/sys/class/infiniband/" + dev + "/ports/1/hw_counters/" + name)
		if err != nil {
			return 0
		}
		var n uint64
		n, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	sent, rcvd = read("sent_pkts"), read("rcvd_pkts")
	return sent, rcvd, err
}

// GIDOf is addr in the form the GID table shows (8 groups of 4 hex
// digits).
func GIDOf(addr string) string {
	ip := net.ParseIP(addr).To16()
	if ip == nil {
		return "bad address " + addr
	}
	var g []string
	for i := 0; i < 16; i += 2 {
		g = append(g, fmt.Sprintf("%02x%02x", ip[i], ip[i+1]))
	}
	return strings.Join(g, ":")
}

// DevGIDs is dev's non-zero GIDs.
func DevGIDs(dev string) ([]rdma.GID, error) {
	return rdma.New().DeviceGIDs(dev)
}

// HasGID checks that dev has gid with ndev netdev.
func HasGID(dev, gid, netdev string) error {
	gs, err := DevGIDs(dev)
	if err != nil {
		return err
	}
	for _, g := range gs {
		if g.GID == gid && g.Netdev == netdev {
			return nil
		}
	}
	return fmt.Errorf("no GID %s with ndev %s on %s; GIDs: %s", gid, netdev, dev, GIDList(gs))
}

// GIDList lists GIDs as "INDEX GID NDEV" for a message.
func GIDList(gs []rdma.GID) string {
	var s []string
	for _, g := range gs {
		s = append(s, fmt.Sprintf("%d %s %s", g.Index, g.GID, g.Netdev))
	}
	return strings.Join(s, "; ")
}
