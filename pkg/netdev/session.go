package netdev

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

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
