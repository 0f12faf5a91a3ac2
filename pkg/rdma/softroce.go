package rdma

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// SoftRoCEName is the name of the soft-RoCE (rxe) device a pod's
// attachment gets on its own child: "rxe_" and the first 12 hex digits of
// the SHA-256 of network, container ID and interface name joined by "/".
// The name is the same at every ADD, DEL and GC of that attachment, unique
// among the node's attachments, and fits an RDMA device name (no "%").
func SoftRoCEName(network, containerID, ifName string) string {
	sum := sha256.Sum256([]byte(network + "/" + containerID + "/" + ifName))
	return "rxe_" + hex.EncodeToString(sum[:6])
}

// softRoCENameLen is the length of a SoftRoCEName: "rxe_" and 12 hex
// digits.
const softRoCENameLen = len("rxe_") + 12

// IsSoftRoCEName reports whether name has SoftRoCEName's shape: "rxe_" and
// 12 lower-case hex digits. A device of that name may be any attachment's,
// of any network or dataDir; a shape alone does not say whose it is.
func IsSoftRoCEName(name string) bool {
	hexPart, ok := strings.CutPrefix(name, "rxe_")
	return ok && len(name) == softRoCENameLen && strings.Trim(hexPart, "0123456789abcdef") == ""
}

// SoftRoCEUnsupported says why rdma_rxe on a kernel of the given release
// (`uname -r`) cannot carry traffic for an rxe device made inside a pod's
// netns, "" when it can. rdma_rxe keeps a UDP 4791 socket per netns since
// Linux 7.1 ("RDMA/rxe: Add the support that rxe can work in net
// namespace"); before, the socket lives in init_net only and such a device
// carries nothing. A release that does not parse is refused.
func SoftRoCEUnsupported(release string) string {
	maj, mnr, ok := parseRelease(release)
	switch {
	case !ok:
		return fmt.Sprintf("kernel release %q does not parse: cannot tell whether rdma_rxe works inside a netns (Linux >= 7.1)", release)
	case maj < 7 || (maj == 7 && mnr < 1):
		return fmt.Sprintf("kernel %s: rdma_rxe works inside a netns only from Linux 7.1 (its UDP socket lives in init_net before)", release)
	}
	return ""
}

// parseRelease reads major and minor of a kernel release such as
// "7.3.4+deb13-amd64".
func parseRelease(release string) (maj, mnr int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(minor)
	return maj, mnr, err1 == nil && err2 == nil
}

// softRoCERegisterWait bounds the wait for a new rxe device to be listed.
const softRoCERegisterWait = 10 * time.Second

// AddSoftRoCE makes rxe device name on netdev, a netdev of the netns at
// nsPath (`rdma link add NAME type rxe netdev NETDEV`,
// RDMA_NLDEV_CMD_NEWLINK), and returns once RDMA netlink lists it. It is
// sent from a thread inside that netns: the kernel looks netdev up in the
// requesting socket's netns.
func (s *System) AddSoftRoCE(nsPath, name, netdev string) error {
	err := s.netns().Enter(nsPath, func(n Netlink) error {
		if err := netlink.RdmaLinkAdd(name, "rxe", netdev); err != nil {
			return err
		}
		for deadline := time.Now().Add(softRoCERegisterWait); ; time.Sleep(50 * time.Millisecond) {
			links, err := listLinks(n)
			if err == nil && findLink(links, name) != nil {
				return nil
			}
			if time.Now().After(deadline) {
				return errors.Join(fmt.Errorf("not listed within %v", softRoCERegisterWait), err)
			}
		}
	})
	if err != nil {
		return fmt.Errorf("add rxe device %s on %s in netns %s: %w", name, netdev, nsPath, err)
	}
	return nil
}

// DelSoftRoCE deletes RDMA device name (RDMA_NLDEV_CMD_DELLINK) and
// returns nil once a listing shows no device of that name. Only in the
// shared RDMA netns mode does the host's listing show every netns's
// devices, so only there does its absence prove the device gone (with its
// netdev, when a pod netns died); in exclusive mode it fails.
func (s *System) DelSoftRoCE(name string) error {
	mode, err := s.NetnsMode()
	if err != nil {
		return fmt.Errorf("delete rxe device %s: %w", name, err)
	}
	if mode != ModeShared {
		return fmt.Errorf("delete rxe device %s: the RDMA subsystem is in %s mode: the host's listing cannot prove it gone", name, mode)
	}
	link, err := s.listed(name)
	if err != nil || link == nil {
		return err
	}
	if err := delLink(link.Attrs.Index); err != nil {
		if link, lerr := s.listed(name); lerr == nil && link == nil {
			return nil // gone meanwhile, with its netdev
		}
		return fmt.Errorf("delete rxe device %s: %w", name, err)
	}
	if link, err := s.listed(name); err != nil || link != nil {
		return errors.Join(fmt.Errorf("delete rxe device %s: still listed after its deletion", name), err)
	}
	return nil
}

// delLink sends RDMA_NLDEV_CMD_DELLINK for the device of that index: the
// index of the device just listed, not its name looked up again.
func delLink(index uint32) error {
	req := nl.NewNetlinkRequest(nl.RDMA_NL_NLDEV<<nl.RDMA_NL_GET_CLIENT_SHIFT|nl.RDMA_NLDEV_CMD_DELLINK, unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_DEV_INDEX, nl.Uint32Attr(index)))
	_, err := req.Execute(unix.NETLINK_RDMA, 0)
	return err
}

// listed returns the RDMA device of that name the caller's netns lists,
// nil when there is none.
func (s *System) listed(name string) (*netlink.RdmaLink, error) {
	links, err := listLinks(s.nl())
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	return findLink(links, name), nil
}

// NetdevPCI returns the PCI function of host netdev name (through a
// virtio parent), "" when it has none.
func (s *System) NetdevPCI(name string) string {
	if name == "" || strings.ContainsAny(name, "/") || name == "." || name == ".." {
		return ""
	}
	return pciFunctionOf(filepath.Join(s.netPath(), name, "device"))
}
