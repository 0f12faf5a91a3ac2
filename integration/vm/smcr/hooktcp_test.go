package smcr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
)

const (
	// tcpprotoBin is an unmodified TCP program (Go's net package:
	// socket(AF_INET, SOCK_STREAM, 0)) that prints the protocol the kernel
	// gave each socket it created: "ROLE created proto=N". It runs as a
	// process of its own in the pod's netns, as a pod's program would.
	tcpprotoBin = "/usr/local/bin/tcpproto"
	ipprotoTCP  = 6
	ipprotoSMC  = 256 // IPPROTO_SMC (Linux >= 6.11)
	// hookProgName is the hook's program (pkg/smc/hook/bpf/smc_hook.c).
	// The kernel keeps 15 bytes of a name; cilium/ebpf reads a truncated
	// one back in full from the program's BTF where it can.
	hookProgName = "smc_socket_protocol"
)

// inPod is name run in p's netns as `ip netns exec` runs it.
func inPod(ctx context.Context, p guestkit.Pod, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "/usr/sbin/ip", append([]string{"netns", "exec", p.Name, name}, args...)...)
}

// tcpRun is one tcpproto exchange: what each side printed and how it
// ended.
type tcpRun struct {
	srv, cli       string
	srvErr, cliErr error
}

// tcpExchange runs tcpproto's server on srv's eth0 address and port, and
// its client in cli's netns once the server listens; godebug is the
// GODEBUG of both.
func tcpExchange(t *testing.T, srv, cli guestkit.Pod, port uint16, godebug string) tcpRun {
	t.Helper()
	var r tcpRun
	a, err := podAddr(srv.NetNS, netlink.FAMILY_V4)
	if err != nil {
		r.srvErr = fmt.Errorf("%s's eth0 address: %w", srv.Name, err)
		return r
	}
	ap := netip.AddrPortFrom(a, port).String()
	env := append(os.Environ(), "GODEBUG="+godebug)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out guestkit.LockedBuffer
	s := inPod(ctx, srv, tcpprotoBin, "server", ap)
	s.Env, s.Stdout, s.Stderr = env, &out, &out
	if r.srvErr = s.Start(); r.srvErr == nil {
		r.srvErr = guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
			if !strings.Contains(out.String(), "listener created") {
				return fmt.Errorf("tcpproto server in %s: no listener: %s", srv.Name, out.String())
			}
			return nil
		})
	}
	if r.srvErr != nil && s.Process != nil {
		_ = s.Process.Kill() // it would wait a minute for a client
	}
	if r.srvErr == nil {
		c := inPod(ctx, cli, tcpprotoBin, "client", ap)
		c.Env = env
		b, err := c.CombinedOutput()
		r.cli, r.cliErr = string(b), err
	}
	if s.Process != nil {
		if err := s.Wait(); r.srvErr == nil {
			r.srvErr = err
		}
	}
	r.srv = out.String()
	t.Logf("tcpproto server %s in %s (GODEBUG=%q): %v\n%s", ap, srv.Name, godebug, r.srvErr, r.srv)
	t.Logf("tcpproto client %s in %s: %v\n%s", ap, cli.Name, r.cliErr, r.cli)
	return r
}

// created is the protocol of the socket tcpproto made as role ("listener",
// "client", "probe"), -1 when it printed none.
func created(role, out string) int {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), role+" created proto="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}

// client checks that the exchange went through and the client's socket
// was made with protocol want.
func (r tcpRun) client(want int) error {
	if err := errors.Join(r.srvErr, r.cliErr); err != nil {
		return fmt.Errorf("exchange: %w", err)
	}
	if got := created("client", r.cli); got != want {
		return fmt.Errorf("client's socket: protocol %d, want %d: %s", got, want, r.cli)
	}
	return nil
}

// listener checks that the server's listening socket was made with
// protocol want.
func (r tcpRun) listener(want int) error {
	if got := created("listener", r.srv); got != want {
		return errors.Join(fmt.Errorf("listener's socket: protocol %d, want %d: %s", got, want, r.srv), r.srvErr)
	}
	return nil
}

// probe is the protocol a new AF_INET stream socket of tcpproto gets in
// p's netns.
func probe(p guestkit.Pod) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := inPod(ctx, p, tcpprotoBin, "probe").CombinedOutput()
	n := created("probe", string(out))
	if n < 0 {
		return n, errors.Join(fmt.Errorf("tcpproto probe in %s printed no protocol: %s", p.Name, out), err)
	}
	return n, nil
}

// wantProbe checks that a new socket in p's netns gets protocol want.
func wantProbe(p guestkit.Pod, want int) error {
	got, err := probe(p)
	if err == nil && got != want {
		err = fmt.Errorf("a new socket in %s: protocol %d, want %d", p.Name, got, want)
	}
	return err
}

// fallbackTotal is SMC's fallback count (client and server) in p's netns:
// it moves only for sockets SMC saw.
func fallbackTotal(p guestkit.Pod) (uint64, error) {
	r, err := fallbackReport(p.NetNS)
	return r.ClientTotal + r.ServerTotal, err
}

// logFallbacks logs the pods' fallback reasons, as smcctl printed them.
func logFallbacks(t *testing.T, pods ...guestkit.Pod) {
	for _, p := range pods {
		r, err := fallbackReport(p.NetNS)
		t.Logf("fallbacks in %s: %s / %s %v", p.Name, reasons(r, false), reasons(r, true), err)
	}
}

// hookPrograms counts the programs the kernel holds that are the hook's:
// the pins are not the only way a program stays attached.
func hookPrograms() (int, error) {
	n := 0
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("BPF program after id %d: %w", id, err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // freed meanwhile
		}
		if err != nil {
			return n, fmt.Errorf("BPF program %d: %w", id, err)
		}
		info, err := p.Info()
		_ = p.Close()
		if err != nil {
			return n, fmt.Errorf("BPF program %d: %w", id, err)
		}
		if info.Name == hookProgName || info.Name == hookProgName[:15] {
			n++
		}
	}
}
