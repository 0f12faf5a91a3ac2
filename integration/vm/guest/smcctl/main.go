// Command smcctl is the VM tier's SMC tool, on the project's pkg/smc client
// (no smc-tools in Debian bookworm):
//
//	smcctl pnet [NETNS_PATH]          one line per pnet entry: PNETID eth=NAME ib=DEV port=N
//	smcctl ueids                      one line per UEID of the global table
//	smcctl pnet-add NETNS_PATH|- PNETID eth=NAME|ib=DEV[:PORT]
//	                                  one raw SMC_PNETID_ADD in that netns (- : the
//	                                  caller's); prints "ok" or the kernel's error
//	smcctl pnet-del NETNS_PATH|- PNETID   SMC_PNETID_DEL of PNETID in that netns
//	smcctl devices [NETNS_PATH]       one line per SMC-R device port: DEV port=N pnetid=P
//	                                  user=0|1 netdev=NAME|ifindex active=0|1 links=N
//	smcctl fallback [NETNS_PATH]      totals, then server|client reason=0x%08x count=N lines
//
// Names the kernel reports as "n/a" print as n/a (port 0 for an ETH entry).
// Exit status: 0 ok, 1 error, 2 usage, 3 timeout (SMCCTL_TIMEOUT, default
// 20s).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

func init() { runtime.LockOSThread() }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	timeout := 20 * time.Second
	if v := os.Getenv("SMCCTL_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			die(2, "SMCCTL_TIMEOUT: %v", err)
		}
		timeout = d
	}
	time.AfterFunc(timeout, func() { die(3, "%s: timeout after %s", os.Args[1], timeout) })
	arg := ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	var err error
	switch os.Args[1] {
	case "pnet":
		err = pnet(arg)
	case "ueids":
		err = ueids()
	case "pnet-add":
		err = pnetAdd(os.Args[2:])
	case "pnet-del":
		err = pnetDel(os.Args[2:])
	case "devices":
		err = smc.Do(arg, printDevices)
	case "fallback":
		err = fallback(arg)
	default:
		usage()
	}
	if err != nil {
		die(1, "%s: %v", os.Args[1], err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: smcctl pnet [NETNS_PATH] | pnet-add NETNS_PATH|- PNETID eth=NAME|ib=DEV[:PORT] | pnet-del NETNS_PATH|- PNETID | ueids | devices [NETNS_PATH] | fallback [NETNS_PATH]")
	os.Exit(2)
}

func die(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "smcctl: "+format+"\n", a...)
	os.Exit(code)
}

func na(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

func pnet(nsPath string) error {
	return smc.Do(nsPath, printPnet)
}

func printPnet(c *smc.Client) error {
	list, err := c.PnetDump()
	if err != nil {
		return err
	}
	for _, e := range list {
		fmt.Printf("%s eth=%s ib=%s port=%d\n", e.PnetID, na(e.EthName), na(e.IBName), e.IBPort)
	}
	return nil
}

func ueids() error {
	return smc.Do("", printUEIDs)
}

func printUEIDs(c *smc.Client) error {
	list, err := c.UEIDs()
	if err != nil {
		return err
	}
	for _, u := range list {
		fmt.Println(u)
	}
	return nil
}

// pnetAdd sends one SMC_PNETID_ADD, for measuring what the kernel keeps.
func pnetAdd(args []string) error {
	if len(args) != 3 {
		usage()
	}
	e := smc.PnetEntry{PnetID: args[1]}
	switch k, v, _ := strings.Cut(args[2], "="); k {
	case "eth":
		e.EthName = v
	case "ib":
		dev, port, ok := strings.Cut(v, ":")
		e.IBName, e.IBPort = dev, 1
		if ok {
			p, err := strconv.Atoi(port)
			if err != nil || p < 1 || p > 2 {
				return fmt.Errorf("bad IB port %q", port)
			}
			e.IBPort = uint8(p)
		}
	default:
		usage()
	}
	ns := args[0]
	if ns == "-" {
		ns = ""
	}
	if err := smc.Do(ns, func(c *smc.Client) error { return c.PnetAdd(e) }); err != nil {
		return err
	}
	fmt.Println("ok")
	return nil
}

// pnetDel removes the entries of one PNETID.
func pnetDel(args []string) error {
	if len(args) != 2 {
		usage()
	}
	ns := args[0]
	if ns == "-" {
		ns = ""
	}
	if err := smc.Do(ns, func(c *smc.Client) error { return c.PnetDel(args[1]) }); err != nil {
		return err
	}
	fmt.Println("ok")
	return nil
}

// printDevices prints the SMC-R device ports the smc module knows; the
// netdev name is resolved in the Client's netns (ifindex otherwise).
func printDevices(c *smc.Client) error {
	devs, err := c.SMCRDevices()
	if err != nil {
		return err
	}
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	for _, d := range devs {
		nd := d.NetdevName
		if nd == "" {
			nd = "ifindex" + strconv.Itoa(d.NetdevIndex)
		}
		fmt.Printf("%s port=%d pnetid=%s user=%d netdev=%s active=%d links=%d\n",
			d.Name, d.Port, na(d.PnetID), b(d.PnetByUser), nd, b(d.Active), d.LinkCount)
	}
	return nil
}

func fallback(nsPath string) error {
	return smc.Do(nsPath, printFallback)
}

func printFallback(c *smc.Client) error {
	r, err := c.FallbackReport()
	if err != nil {
		return err
	}
	fmt.Printf("total server=%d client=%d\n", r.ServerTotal, r.ClientTotal)
	for _, s := range r.Reasons {
		side := "client"
		if s.Server {
			side = "server"
		}
		fmt.Printf("%s reason=0x%08x count=%d\n", side, s.Reason, s.Count)
	}
	return nil
}
