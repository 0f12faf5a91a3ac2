package addr

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrDADFailed reports that IPv6 duplicate address detection found one of
// the interface's addresses in use elsewhere (IFA_F_DADFAILED).
var ErrDADFailed = errors.New("IPv6 duplicate address detected")

// defaultDADTimeout bounds the wait for DAD when Options.DADTimeout is 0.
const defaultDADTimeout = 10 * time.Second

// dadPoll is the interval between address checks while DAD runs.
const dadPoll = 50 * time.Millisecond

// Options tunes Configure.
type Options struct {
	// DAD false (default): addresses get IFA_F_NODAD and accept_dad=0, no
	// wait (the IPAM owns uniqueness). DAD true: accept_dad=1 and Configure
	// waits for DAD to settle; IFA_F_DADFAILED is an ErrDADFailed naming
	// the address.
	DAD bool
	// DADTimeout bounds the DAD wait; 0 means 10s.
	DADTimeout time.Duration
}

// dadTimeout returns the effective DAD timeout.
func (o Options) dadTimeout() time.Duration {
	if o.DADTimeout <= 0 {
		return defaultDADTimeout
	}
	return o.DADTimeout
}

// Configure applies res to interface ifName inside podNS and to nothing
// else: it enables IPv6 on ifName only (never all/default), sets
// accept_dad per opts and keep_addr_on_down=1, adds every IP of res (the
// caller passes only this interface's IPs; IPConfig.Interface is ignored),
// brings ifName up, adds res's routes with ifName as device (a route
// without gateway uses the gateway of an IP of its family, if any; an
// existing route is kept) and, with opts.DAD, waits for DAD to settle.
//
// The calling thread never leaves its netns: netlink goes through a handle
// bound to podNS, and the sysctls are written inside podNS.Do.
func Configure(podNS ns.NetNS, ifName string, res *types100.Result, opts Options) error {
	if res == nil {
		return fmt.Errorf("configure %s: no IPAM result", ifName)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(int(podNS.Fd())), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink handle in pod netns %s: %w", podNS.Path(), err)
	}
	defer h.Close()
	link, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("find %s in pod netns %s: %w", ifName, podNS.Path(), err)
	}
	if err := podNS.Do(func(ns.NetNS) error { return setSysctls(ifName, opts.DAD) }); err != nil {
		return err
	}
	if err := addAddrs(h, link, res.IPs, opts.DAD); err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", ifName, err)
	}
	if err := addRoutes(h, link, res); err != nil {
		return err
	}
	if !opts.DAD {
		return nil
	}
	return waitDAD(h, link, opts.dadTimeout())
}

// setSysctls writes the per-interface IPv6 sysctls of ifName in the
// calling thread's netns.
func setSysctls(ifName string, dad bool) error {
	acceptDAD := "0"
	if dad {
		acceptDAD = "1"
	}
	for _, kv := range [][2]string{
		{"disable_ipv6", "0"},
		{"accept_dad", acceptDAD},
		{"keep_addr_on_down", "1"},
	} {
		if err := writeSysctl(ifName, kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

// writeSysctl sets net.ipv6.conf.<ifName>.<key> = val. The refusal is the
// guard of a path under /proc/sys, kept although ifName comes from the
// validated conf: a name such as "..", "all" or one holding '/' would write
// another interface's or the netns-wide setting.
func writeSysctl(ifName, key, val string) error {
	switch {
	case ifName == "" || ifName == "." || ifName == ".." || ifName == "all" || ifName == "default",
		strings.ContainsAny(ifName, "/"):
		return fmt.Errorf("refusing IPv6 sysctl %s for interface %q", key, ifName)
	}
	if _, err := sysctl.Sysctl("net/ipv6/conf/"+ifName+"/"+key, val); err != nil {
		return fmt.Errorf("set sysctl net.ipv6.conf.%s.%s=%s: %w", ifName, key, val, err)
	}
	return nil
}

// addAddrs adds every IP to link; IPv6 ones with IFA_F_NODAD unless dad.
func addAddrs(h *netlink.Handle, link netlink.Link, ips []*types100.IPConfig, dad bool) error {
	for _, ipc := range ips {
		if ipc == nil || ipc.Address.IP == nil {
			continue
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: ipc.Address.IP, Mask: ipc.Address.Mask}}
		if ipc.Address.IP.To4() == nil && !dad {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, a); err != nil {
			return fmt.Errorf("add address %s to %s: %w", ipc.Address.String(), link.Attrs().Name, err)
		}
	}
	return nil
}

// addRoutes adds res's routes with link as device; existing ones are kept.
func addRoutes(h *netlink.Handle, link netlink.Link, res *types100.Result) error {
	for _, r := range res.Routes {
		if r == nil {
			continue
		}
		nr := toNetlinkRoute(link.Attrs().Index, r, res.IPs)
		if err := h.RouteAdd(nr); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add route %s dev %s: %w", r.String(), link.Attrs().Name, err)
		}
	}
	return nil
}

// toNetlinkRoute builds the kernel route for r on link index idx.
func toNetlinkRoute(idx int, r *types.Route, ips []*types100.IPConfig) *netlink.Route {
	dst := r.Dst
	nr := &netlink.Route{
		LinkIndex: idx,
		Dst:       &dst,
		Gw:        r.GW,
		MTU:       r.MTU,
		AdvMSS:    r.AdvMSS,
		Priority:  r.Priority,
	}
	if nr.Gw == nil {
		nr.Gw = gatewayFor(ips, dst.IP)
	}
	if r.Table != nil {
		nr.Table = *r.Table
	}
	switch {
	case r.Scope != nil:
		nr.Scope = netlink.Scope(*r.Scope)
	case nr.Gw == nil:
		nr.Scope = netlink.SCOPE_LINK
	}
	return nr
}

// gatewayFor returns the first IP gateway of dst's address family, or nil.
func gatewayFor(ips []*types100.IPConfig, dst net.IP) net.IP {
	v4 := dst.To4() != nil
	for _, ipc := range ips {
		if ipc != nil && ipc.Gateway != nil && (ipc.Gateway.To4() != nil) == v4 {
			return ipc.Gateway
		}
	}
	return nil
}
