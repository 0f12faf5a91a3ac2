package leakcheck

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/internal/say"
)

// NetnsDir is where `ip netns` and CNI's testutils pin a netns.
const NetnsDir = "/run/netns"

// turnSocket is the abstract unix socket a host-checked test binary binds
// for as long as it runs: two binaries comparing the host at once would
// each count the other's netns and links as its own leaks.
const turnSocket = "@rdma-chain-leakcheck"

// hostLinksOnce holds a netlink handle opened in TestMain's netns, the
// host's, before any test runs: the goroutine that reads the links after
// the tests may sit on any thread. Route only: with no family named,
// netlink opens XFRM and netfilter sockets too, which a kernel built
// without them (the VM guests') refuses with EPROTONOSUPPORT.
var hostLinksOnce = sync.OnceValues(func() (*netlink.Handle, error) { return netlink.NewHandle(unix.NETLINK_ROUTE) })

// netnsPins lists the entries of NetnsDir.
func netnsPins() ([]string, error) {
	entries, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no netns was ever pinned on this boot
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, "netns pin "+filepath.Join(NetnsDir, e.Name()))
	}
	return out, nil
}

// hostLinks lists the links of the host netns by name and kind.
func hostLinks() ([]string, error) {
	h, err := hostLinksOnce()
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	links, err := nldump.LinkList(h)
	if err != nil {
		return nil, fmt.Errorf("host links: %w", err)
	}
	out := make([]string, 0, len(links))
	for _, l := range links {
		out = append(out, fmt.Sprintf("link %s (%s)", l.Attrs().Name, l.Type()))
	}
	return out, nil
}

// mounts lists the mounts of this process's mount namespace.
func mounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// parseMountinfo reads mountinfo lines (proc(5)) as "mount POINT (TYPE
// SOURCE ROOT)". NetnsDir's own bind mount is left out: iproute2 and CNI's
// testutils make it once per boot, shared by every netns pin after.
func parseMountinfo(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			return nil, fmt.Errorf("mountinfo line %q", sc.Text())
		}
		point := f[4]
		if point == NetnsDir || point == "/var"+NetnsDir {
			continue
		}
		out = append(out, fmt.Sprintf("mount %s (%s %s %s)", point, g[0], g[1], f[3]))
	}
	return out, sc.Err()
}

// hostTurn waits until no other test binary compares the host, then holds
// the turn until release. An ancestor's turn (a test binary a test runs)
// is the ancestor's check: release is nil then, and the host goes
// unchecked here.
func hostTurn(log io.Writer) (release func(), err error) {
	if _, err := hostLinksOnce(); err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	said := false
	for {
		l, err := net.Listen("unix", turnSocket)
		if err == nil {
			go acceptAndClose(l)
			return func() { _ = l.Close() }, nil
		}
		holder, perr := turnHolder()
		if perr == nil && isAncestor(holder) {
			return nil, nil
		}
		if !said {
			say.Printf(log, "leakcheck: waiting for test binary %d to finish its host check\n", holder)
			said = true
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// acceptAndClose answers turnHolder's connections until l closes.
func acceptAndClose(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

// turnHolder is the pid of the process that holds the turn.
func turnHolder() (int, error) {
	c, err := net.Dial("unix", turnSocket)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}

// isAncestor reports whether pid is this process's parent, grandparent...
func isAncestor(pid int) bool {
	for p := os.Getppid(); p > 1; {
		if p == pid {
			return true
		}
		next, err := parentOf(p)
		if err != nil {
			return false
		}
		p = next
	}
	return false
}

// parentOf reads the ppid of pid from /proc/PID/stat.
func parentOf(pid int) (int, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return st.ppid, nil
}

// stat is what the check reads of /proc/PID/stat.
type stat struct {
	comm  string
	state string
	ppid  int
}

// readStat parses /proc/PID/stat: the command sits in parentheses and may
// hold spaces and parentheses itself, so the fields after it are found
// from the last ')'.
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	s := trimmed(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return stat{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	rest := strings.Fields(s[end+1:])
	if len(rest) < 2 {
		return stat{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return stat{}, fmt.Errorf("/proc/%d/stat: ppid %q: %w", pid, rest[1], err)
	}
	return stat{comm: s[open+1 : end], state: rest[0], ppid: ppid}, nil
}
