package smc

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
)

// Family names and versions (include/uapi/linux/smc.h).
const (
	pnetFamilyName = "SMC_PNETID"      // SMCR_GENL_FAMILY_NAME
	genFamilyName  = "SMC_GEN_NETLINK" // SMC_GENL_FAMILY_NAME, Linux >= 5.11
	familyVersion  = 1                 // both families are version 1

	sockTimeout = 10 * time.Second
	flagsDump   = unix.NLM_F_DUMP
	flagsDoit   = unix.NLM_F_ACK // a doit answers nothing on success without ACK
)

// transport sends one netlink request and returns the reply payloads
// (without nlmsghdr). Errors are the kernel's errno (syscall.Errno, maybe
// wrapped with the extended ack message).
type transport interface {
	Execute(req *nl.NetlinkRequest) ([][]byte, error)
	Close()
}

// nlTransport is a NETLINK_GENERIC socket bound to one netns.
type nlTransport struct{ sockets map[int]*nl.SocketHandle }

// Execute sends req over the bound socket.
func (t *nlTransport) Execute(req *nl.NetlinkRequest) ([][]byte, error) {
	req.Sockets = t.sockets
	return req.Execute(unix.NETLINK_GENERIC, 0)
}

// Close closes the socket.
func (t *nlTransport) Close() {
	for _, s := range t.sockets {
		s.Close()
	}
}

// Client talks to the SMC families through a socket created in one netns.
// Its methods may be called from any goroutine and thread: the socket keeps
// the netns it was created in.
type Client struct {
	tr       transport
	pnetID   uint16           // SMC_PNETID family id
	genID    uint16           // SMC_GEN_NETLINK family id, 0 when missing
	links    *netlink.Handle  // NETLINK_ROUTE in the same netns, may be nil
	linkName func(int) string // ifindex to name, best effort
}

// Open returns a Client in the calling thread's netns (lock the OS thread
// first if it was switched). It fails with ErrUnavailable when the
// SMC_PNETID family is missing. Resolving the family names may autoload the
// smc module (MODULE_ALIAS_GENL_FAMILY) when it is built as a module.
func Open() (*Client, error) {
	return open(netns.None())
}

// OpenAt returns a Client whose sockets are created inside the netns at
// nsPath; the calling thread is switched back before OpenAt returns.
func OpenAt(nsPath string) (*Client, error) {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("open netns %s for SMC netlink: %w", nsPath, err)
	}
	defer h.Close()
	return open(h)
}

// open creates the generic and route sockets in ns (None: current).
func open(ns netns.NsHandle) (*Client, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("open generic netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(sockTimeout.Nanoseconds())
	_ = s.SetSendTimeout(&tv)
	_ = s.SetReceiveTimeout(&tv)
	_ = s.SetExtAck(true)
	tr := &nlTransport{sockets: map[int]*nl.SocketHandle{unix.NETLINK_GENERIC: {Socket: s}}}
	c, err := newClient(tr)
	if err != nil {
		return nil, err
	}
	c.attachLinks(ns)
	return c, nil
}

// attachLinks opens a route handle in ns for ifindex-to-name lookups; a
// failure only loses netdev names in SMCRDevices.
func (c *Client) attachLinks(ns netns.NsHandle) {
	var h *netlink.Handle
	var err error
	if ns == netns.None() {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	}
	if err != nil {
		return
	}
	c.links = h
	c.linkName = func(idx int) string {
		l, err := h.LinkByIndex(idx)
		if err != nil {
			return ""
		}
		return l.Attrs().Name
	}
}

// newClient resolves both families over tr; it closes tr on failure.
// SMC_GEN_NETLINK is resolved first because only it carries a module alias.
func newClient(tr transport) (*Client, error) {
	c := &Client{tr: tr, linkName: func(int) string { return "" }}
	gen, err := c.resolve(genFamilyName)
	if err != nil && !errors.Is(err, ErrUnavailable) {
		tr.Close()
		return nil, err
	}
	c.genID = gen
	if c.pnetID, err = c.resolve(pnetFamilyName); err != nil {
		tr.Close()
		return nil, err
	}
	return c, nil
}

// Close releases the sockets.
func (c *Client) Close() error {
	c.tr.Close()
	if c.links != nil {
		c.links.Close()
	}
	return nil
}

// resolve asks the genl controller for a family id.
func (c *Client) resolve(name string) (uint16, error) {
	msgs, err := c.tr.Execute(newRequest(unix.GENL_ID_CTRL, 0, encodeGetFamily(name)))
	if errors.Is(err, unix.ENOENT) {
		return 0, fmt.Errorf("generic netlink family %s not found: %w", name, ErrUnavailable)
	}
	if err != nil {
		return 0, fmt.Errorf("resolve generic netlink family %s: %w", name, err)
	}
	return decodeFamilyID(msgs)
}

// encodeGetFamily is CTRL_CMD_GETFAMILY{CTRL_ATTR_FAMILY_NAME=name}.
func encodeGetFamily(name string) []byte {
	return genlPayload(nl.GENL_CTRL_CMD_GETFAMILY, nl.GENL_CTRL_VERSION,
		nl.NewRtAttr(nl.GENL_CTRL_ATTR_FAMILY_NAME, nl.ZeroTerminated(name)))
}

// decodeFamilyID reads CTRL_ATTR_FAMILY_ID from the controller's answer.
func decodeFamilyID(msgs [][]byte) (uint16, error) {
	for _, m := range msgs {
		_, attrs, err := parseGenl(m)
		if err != nil {
			return 0, fmt.Errorf("decode generic netlink family: %w", err)
		}
		for _, a := range attrs {
			if a.Type == nl.GENL_CTRL_ATTR_FAMILY_ID && len(a.Data) >= 2 {
				return attrU16(a.Data), nil
			}
		}
	}
	return 0, errors.New("generic netlink controller answered without a family id")
}

// newRequest wraps a genl payload into a netlink request.
func newRequest(family uint16, flags int, payload []byte) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(int(family), flags)
	req.AddRawData(payload)
	return req
}

// do runs a doit command and maps the kernel's errno.
func (c *Client) do(op string, family uint16, payload []byte) error {
	_, err := c.tr.Execute(newRequest(family, flagsDoit, payload))
	return wrapErr(op, err)
}

// dump runs a dump command, retrying when the kernel interrupts it.
func (c *Client) dump(op string, family uint16, payload []byte) ([][]byte, error) {
	msgs, err := nldump.Retry(func() ([][]byte, error) {
		return c.tr.Execute(newRequest(family, flagsDump, payload))
	})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	return msgs, nil
}

// gen returns the SMC_GEN_NETLINK id or ErrUnavailable (Linux < 5.11).
func (c *Client) gen(op string) (uint16, error) {
	if c.genID == 0 {
		return 0, fmt.Errorf("%s: generic netlink family %s missing (Linux < 5.11?): %w", op, genFamilyName, ErrUnavailable)
	}
	return c.genID, nil
}

// wrapErr maps errno values once: EEXIST to ErrExists, EPERM to a hint.
func wrapErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%s: %w", op, ErrExists)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%s: CAP_NET_ADMIN required: %w", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Do runs fn on a Client in the netns at nsPath ("" = the calling thread's
// netns) and closes it.
func Do(nsPath string, fn func(*Client) error) (err error) {
	var c *Client
	if nsPath == "" {
		c, err = Open()
	} else {
		c, err = OpenAt(nsPath)
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	return fn(c)
}
