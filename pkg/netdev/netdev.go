package netdev

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
)

// ErrGone reports that the netdev exists nowhere any more (a virtual netdev
// destroyed with its netns). Callers treat it as "already cleaned up".
var ErrGone = errors.New("netdev no longer exists")

// ErrKindUnsupported reports that the kernel cannot create the link kind.
var ErrKindUnsupported = errors.New("link kind not supported by this kernel")

// validName checks an interface name the way the kernel's dev_valid_name
// does. Names from the plugin's configuration are validated once, in
// pkg/config; this check is for names that cross a trust boundary (read
// back from an attachment record on disk).
func validName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("invalid interface name %q", name)
	case len(name) >= unix.IFNAMSIZ:
		return fmt.Errorf("interface name %q longer than %d bytes", name, unix.IFNAMSIZ-1)
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return fmt.Errorf("interface name %q contains '/', ':' or white space", name)
	}
	return nil
}

// normMAC returns mac in canonical lower-case colon form, or mac unchanged
// when it does not parse.
func normMAC(mac string) string {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return strings.ToLower(mac)
	}
	return hw.String()
}

// sameMAC reports whether two textual MACs are equal after normalisation.
func sameMAC(a, b string) bool { return a != "" && normMAC(a) == normMAC(b) }

// linkMAC returns the link's MAC in canonical form.
func linkMAC(l netlink.Link) string { return l.Attrs().HardwareAddr.String() }

// permMAC returns the link's permanent address in canonical form, or ""
// when it has none (virtual links report none or all zeroes).
func permMAC(l netlink.Link) string {
	p := l.Attrs().PermHWAddr
	if len(p) == 0 || slices.Equal(p, make(net.HardwareAddr, len(p))) {
		return ""
	}
	return p.String()
}

// isUp reports whether the link is administratively up.
func isUp(l netlink.Link) bool { return l.Attrs().Flags&net.FlagUp != 0 }

// isNotFound reports whether err is netlink's "link not found".
func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// hostHandles opens a netlink handle and a netns handle for the calling
// thread's current netns (the host). The caller closes both.
func hostHandles() (*netlink.Handle, netns.NsHandle, error) {
	cur, err := netns.Get()
	if err != nil {
		return nil, netns.None(), fmt.Errorf("open current netns: %w", err)
	}
	h, err := hostHandle()
	if err != nil {
		cur.Close()
		return nil, netns.None(), err
	}
	return h, cur, nil
}

// hostHandle opens a netlink handle in the calling thread's current netns
// (the host), where the thread is: no switch of netns.
func hostHandle() (*netlink.Handle, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in current netns: %w", err)
	}
	return h, nil
}

// handleAt opens a netlink handle bound to the netns behind fd.
func handleAt(fd uintptr, what string) (*netlink.Handle, error) {
	h, err := netlink.NewHandleAt(netns.NsHandle(int(fd)), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s netns: %w", what, err)
	}
	return h, nil
}

// openNSPath opens the netns at path. gone is true (and err nil) when the
// path is empty or no longer names a netns (netnsid.Gone).
func openNSPath(path string) (nsh ns.NetNS, gone bool, err error) {
	if path == "" {
		return nil, true, nil
	}
	nsh, err = ns.GetNS(path)
	if err != nil {
		if gone, gerr := netnsid.Gone(path); gerr == nil && gone {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("open netns %q: %w", path, err)
	}
	return nsh, false, nil
}

// handleAtPath opens a netlink handle in the netns at path; gone as in openNSPath.
func handleAtPath(path string) (h *netlink.Handle, gone bool, err error) {
	nsh, gone, err := openNSPath(path)
	if err != nil || gone {
		return nil, gone, err
	}
	defer nsh.Close() // the handle's sockets keep the netns alive
	h, err = handleAt(nsh.Fd(), "pod")
	return h, false, err
}

// requireAbsent fails when a link called name exists in h's netns.
func requireAbsent(h *netlink.Handle, name, where string) error {
	_, err := h.LinkByName(name)
	switch {
	case err == nil:
		return fmt.Errorf("interface %q already exists in the %s netns", name, where)
	case isNotFound(err):
		return nil
	default:
		return fmt.Errorf("look up %q in the %s netns: %w", name, where, err)
	}
}

// listLinks dumps all links. netlinksafe's LinkList cannot serve here: after
// its last interrupted attempt it returns a possibly partial list without an
// error, and the callers read "not in the list" as "not in this netns".
func listLinks(h *netlink.Handle) ([]netlink.Link, error) {
	links, err := nldump.LinkList(h)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	return links, nil
}

// listAddrs dumps the link's addresses (netlinksafe has no AddrList on a
// handle bound to another netns).
func listAddrs(h *netlink.Handle, l netlink.Link) ([]netlink.Addr, error) {
	addrs, err := nldump.AddrList(h, l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %q: %w", l.Attrs().Name, err)
	}
	return addrs, nil
}
