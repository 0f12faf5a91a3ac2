package rdma

import (
	"fmt"
	"strings"

	cnins "github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RDMA netlink constants missing from vishvananda/netlink/nl
// (include/uapi/rdma/rdma_netlink.h).
const (
	nldevCmdPortGet = 5 // RDMA_NLDEV_CMD_PORT_GET
	nldevAttrNdevNm = nl.RDMA_NLDEV_ATTR_NDEV_NAME
)

// kernelNL is the Netlink of the current netns (vishvananda/netlink package
// functions, one socket per request).
type kernelNL struct{}

func (kernelNL) SystemGetNetnsMode() (string, error) { return netlink.RdmaSystemGetNetnsMode() }

func (kernelNL) LinkList() ([]*netlink.RdmaLink, error) { return netlink.RdmaLinkList() } //nolint:forbidigo // listLinks retries it

func (kernelNL) LinkSetNsFd(l *netlink.RdmaLink, fd uint32) error {
	return netlink.RdmaLinkSetNsFd(l, fd)
}

func (kernelNL) LinkByName(name string) (*netlink.RdmaLink, error) {
	return netlink.RdmaLinkByName(name)
}

// PortNetdev asks RDMA_NLDEV_CMD_PORT_GET for the netdev of a port. The
// kernel includes RDMA_NLDEV_ATTR_NDEV_NAME only when that netdev lives in
// the requester's netns.
func (kernelNL) PortNetdev(l *netlink.RdmaLink, port uint32) (string, error) {
	proto := nl.RDMA_NL_NLDEV<<nl.RDMA_NL_GET_CLIENT_SHIFT | nldevCmdPortGet
	req := nl.NewNetlinkRequest(proto, unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_DEV_INDEX, nl.Uint32Attr(l.Attrs.Index)))
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_PORT_INDEX, nl.Uint32Attr(port)))
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil {
		return "", err
	}
	for _, m := range msgs {
		if name, err := ndevName(m); err != nil || name != "" {
			return name, err
		}
	}
	return "", nil
}

// ndevName extracts RDMA_NLDEV_ATTR_NDEV_NAME from one reply payload.
func ndevName(msg []byte) (string, error) {
	attrs, err := nl.ParseRouteAttr(msg)
	if err != nil {
		return "", fmt.Errorf("parse RDMA port reply: %w", err)
	}
	for _, a := range attrs {
		if a.Attr.Type == nldevAttrNdevNm {
			return strings.TrimRight(string(a.Value), "\x00"), nil
		}
	}
	return "", nil
}

// handleNL is the Netlink of a netlink.Handle bound to another netns.
type handleNL struct{ h *netlink.Handle }

func (n handleNL) SystemGetNetnsMode() (string, error) { return n.h.RdmaSystemGetNetnsMode() }

func (n handleNL) LinkList() ([]*netlink.RdmaLink, error) { return n.h.RdmaLinkList() } //nolint:forbidigo // listLinks retries it

func (n handleNL) LinkSetNsFd(l *netlink.RdmaLink, fd uint32) error {
	return n.h.RdmaLinkSetNsFd(l, fd)
}

func (n handleNL) LinkByName(name string) (*netlink.RdmaLink, error) {
	return n.h.RdmaLinkByName(name)
}

// Netns is how a System reaches RDMA netlink in a netns other than the
// caller's.
type Netns interface {
	// Enter runs fn on a locked OS thread that has entered the netns at
	// path, with the kernel's RDMA netlink (sockets opened by that thread,
	// so they live in that netns too). The kernel checks RDMA device moves
	// against the calling thread's netns, so a move out of a netns must be
	// sent from inside it. A path that names no netns any more gives an
	// error wrapping netnsid.ErrGone.
	Enter(path string, fn func(Netlink) error) error
	// At opens RDMA netlink in the netns open at fd, for reading (dumps
	// are answered for the socket's netns); the func closes it.
	At(fd int) (Netlink, func(), error)
}

// kernelNetns is the kernel's Netns.
type kernelNetns struct{}

func (kernelNetns) Enter(path string, fn func(Netlink) error) error {
	if gone, err := netnsid.Gone(path); err != nil || gone {
		if err == nil {
			err = fmt.Errorf("enter netns %s: %w", path, netnsid.ErrGone)
		}
		return err
	}
	target, err := cnins.GetNS(path)
	if err != nil {
		return err
	}
	defer target.Close()
	return target.Do(func(cnins.NetNS) error { return fn(kernelNL{}) })
}

// At asks for NETLINK_RDMA explicitly: without it RDMA requests would go
// to the caller's netns.
func (kernelNetns) At(fd int) (Netlink, func(), error) {
	h, err := netlink.NewHandleAt(netns.NsHandle(fd), unix.NETLINK_RDMA)
	if err != nil {
		return nil, nil, err
	}
	return handleNL{h: h}, h.Close, nil
}

// listLinks dumps RDMA devices, retrying when the dump was interrupted.
func listLinks(n Netlink) ([]*netlink.RdmaLink, error) {
	return nldump.Retry(n.LinkList)
}
