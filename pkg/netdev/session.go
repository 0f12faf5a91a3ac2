package netdev

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/undo"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// testHook, when set (tests only), runs before each named step of a netns
// crossing; an error it returns fails that step.
var testHook func(step string) error

// session holds the netlink handles of one netns crossing: the host (the
// caller's current netns) and the pod.
type session struct {
	host   *netlink.Handle
	hostNS netns.NsHandle
	pod    *netlink.Handle
	podFd  int
}

// newSession opens handles for the current (host) netns and podNS.
func newSession(podNS ns.NetNS) (*session, error) {
	host, hostNS, err := hostHandles()
	if err != nil {
		return nil, err
	}
	s := &session{host: host, hostNS: hostNS, podFd: int(podNS.Fd())}
	if s.pod, err = handleAt(podNS.Fd(), "pod"); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close releases all handles.
func (s *session) close() {
	if s.pod != nil {
		s.pod.Close()
	}
	s.host.Close()
	s.hostNS.Close()
}

// crossNetns moves the netdev with index idx from the netns of sock (nil:
// the caller's) into the netns behind toFd, named name there, in one
// RTM_SETLINK (what `ip link set DEV netns NS name NAME` sends): the kernel
// moves it, under name instead of its old one if that one is taken there,
// then renames it, all under one hold of the rtnl lock, so no name can
// clash on the way and nothing sees it half way. alias, when not nil,
// becomes its IFLA_IFALIAS ("" clears it); with up, the same request sets
// it up last. A name the kernel refuses only at the rename (or one taken
// since it was checked), or an up that fails, fails after the move: the
// netdev is then in the target netns, possibly under its old name, where
// the caller's undo finds it (moved in: findInPod).
func crossNetns(sock *nl.NetlinkSocket, idx, toFd int, name string, alias *string, up bool) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(idx)
	if up {
		msg.Flags, msg.Change = unix.IFF_UP, unix.IFF_UP
	}
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(toFd))))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	if alias != nil {
		req.AddData(nl.NewRtAttr(unix.IFLA_IFALIAS, []byte(*alias)))
	}
	if sock != nil {
		req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	}
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// crossOut moves pl from the pod into the host under l.HostName, clearing
// the alias MoveToPod gave it.
func (s *session) crossOut(pl netlink.Link, l state.HostLink) error {
	sock, err := nl.GetNetlinkSocketAt(netns.NsHandle(s.podFd), s.hostNS, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink socket in the pod netns: %w", err)
	}
	defer sock.Close()
	var alias *string
	if pl.Attrs().Alias == l.HostName {
		alias = new(string)
	}
	if err := crossNetns(sock, pl.Attrs().Index, int(s.hostNS), l.HostName, alias, false); err != nil {
		return fmt.Errorf("move %q from the pod netns to the host as %q: %w", pl.Attrs().Name, l.HostName, err)
	}
	return nil
}

// step is one named change of a netns crossing.
type step struct {
	name string
	do   func(*undo.Stack) error
}

// runSteps runs steps in order, each registering its undo on u; it stops at
// the first failure (or test hook failure) and returns it. The caller rolls back.
func runSteps(steps []step, u *undo.Stack) error {
	for _, st := range steps {
		if err := hook(st.name); err != nil {
			return err
		}
		if err := st.do(u); err != nil {
			return err
		}
	}
	return nil
}

// hook runs testHook for step, if set.
func hook(step string) error {
	if testHook == nil {
		return nil
	}
	if err := testHook(step); err != nil {
		return fmt.Errorf("step %s: %w", step, err)
	}
	return nil
}
