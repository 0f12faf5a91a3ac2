package guestkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
)

// Check runs one named check as a subtest, failed with f's error.
func Check(t *testing.T, name string, f func() error) bool {
	t.Helper()
	return t.Run(name, func(t *testing.T) {
		if err := f(); err != nil {
			t.Error(err)
		}
	})
}

// ExpectOK is a check that err is nil.
func ExpectOK(t *testing.T, name string, err error) bool {
	t.Helper()
	return Check(t, name, func() error { return err })
}

// ExpectCode is a check that the call failed with CNI error code and its
// message or details mention every word.
func ExpectCode(t *testing.T, name string, err error, code uint, words ...string) bool {
	t.Helper()
	return Check(t, name, func() error {
		if err == nil {
			return fmt.Errorf("succeeded, wanted CNI error %d", code)
		}
		ce, ok := CNIError(err)
		if !ok {
			return fmt.Errorf("no CNI error, want code %d: %w", code, err)
		}
		if ce.Code != code {
			return fmt.Errorf("CNI error code %d, want %d: %w", ce.Code, code, err)
		}
		for _, w := range words {
			if !strings.Contains(ce.Msg+" "+ce.Details, w) {
				return fmt.Errorf("error does not mention %q: %w", w, err)
			}
		}
		return nil
	})
}

// Records lists the attachment records under dataDir.
func Records(dataDir string) ([]string, error) {
	es, err := os.ReadDir(dataDir + "/attachments")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, err
}

// RecordCount checks that dataDir holds exactly n records.
func RecordCount(dataDir string, n int) error {
	recs, err := Records(dataDir)
	if err != nil {
		return err
	}
	if len(recs) != n {
		return fmt.Errorf("%d records, want %d: %q", len(recs), n, recs)
	}
	return nil
}

// Result is the result a plugin printed.
type Result struct {
	Interfaces []map[string]any `json:"interfaces"`
	IPs        []struct {
		Address   string `json:"address"`
		Gateway   string `json:"gateway"`
		Interface *int   `json:"interface"`
	} `json:"ips"`
}

// ParseResult decodes what the plugin printed.
func ParseResult(stdout []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(stdout, &r); err != nil {
		return r, fmt.Errorf("the plugin's result %q: %w", stdout, err)
	}
	return r, nil
}

// Iface is the index and object of the result's interface name.
func (r Result) Iface(name string) (int, map[string]any) {
	for i, f := range r.Interfaces {
		if f["name"] == name {
			return i, f
		}
	}
	return -1, nil
}

// ResultShape checks the plugin's last result (printed at cniVersion v):
// rdma0's entry in pod's sandbox with its MAC, no fd00: address in "ips"
// (rdma0's addresses are listed only with reportIPs), and at 1.1.0 rdma0's
// MTU as in the pod and pciID pci (none when pci is empty); below 1.1.0
// neither.
func ResultShape(t *testing.T, name string, stdout []byte, v string, pod Pod, pci string) {
	t.Helper()
	t.Logf("%s: result at %s: %s", name, v, stdout)
	r, rerr := ParseResult(stdout)
	_, f := r.Iface("rdma0")
	l, lerr := PodLink(pod.NetNS, "rdma0")
	t.Run(name, func(t *testing.T) {
		if err := errors.Join(rerr, lerr); err != nil {
			t.Fatal(err)
		}
		Check(t, "rdma0-entry", func() error { return WantField(f, "sandbox", pod.NetNS) })
		Check(t, "rdma0-mac", func() error { return WantField(f, "mac", l.Attrs().HardwareAddr.String()) })
		Check(t, "no-rdma0-ips", func() error {
			for _, ip := range r.IPs {
				if strings.HasPrefix(ip.Address, "fd00:") {
					return fmt.Errorf("rdma0's address listed in ips: %s", stdout)
				}
			}
			return nil
		})
		Check(t, "mtu-pciid", func() error { return mtuPCI(v, f, l.Attrs().MTU, pci) })
	})
}

func mtuPCI(v string, f map[string]any, mtu int, pci string) error {
	if v != "1.1.0" {
		if _, m := f["mtu"]; m {
			return fmt.Errorf("%s rdma0 entry %v has 1.1.0's mtu", v, f)
		}
		if _, p := f["pciID"]; p {
			return fmt.Errorf("%s rdma0 entry %v has 1.1.0's pciID", v, f)
		}
		return nil
	}
	if err := WantField(f, "mtu", float64(mtu)); err != nil {
		return err
	}
	if pci == "" {
		if _, p := f["pciID"]; p {
			return fmt.Errorf("rdma0 entry %v has a pciID, the device has no PCI address", f)
		}
		return nil
	}
	return WantField(f, "pciID", pci)
}

// WantField checks that the result object f has key with value v.
func WantField(f map[string]any, key string, v any) error {
	if f == nil {
		return errors.New("no rdma0 entry in the result")
	}
	if got, ok := f[key]; !ok || got != v {
		return fmt.Errorf("rdma0 entry %v: %s %v, want %v", f, key, got, v)
	}
	return nil
}

// SetUpRxe makes what the soft-RoCE scenarios run on, once per boot:
// veth0/veth1 up, 192.168.77.1/24 on veth0, rxe0 on veth0. A boot whose
// earlier scenario made it keeps it.
func SetUpRxe() error {
	if _, err := os.Stat("/sys/class/infiniband/rxe0"); err == nil {
		return nil
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0"}, PeerName: "veth1"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth0: %w", err)
	}
	for _, n := range []string{"veth0", "veth1"} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err == nil && n == "veth0" {
			err = netnstest.AddAddrTo(l, "192.168.77.1/24")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return AddRxe("rxe0", "veth0")
}

// ErrAbsent is a pod's link that is not there.
var ErrAbsent = errors.New("absent")

// InPod runs f on a thread in the netns at path.
func InPod(path string, f func() error) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return f() })
}

// PodLink reads link name in the netns at path; ErrAbsent when it has
// none.
func PodLink(path, name string) (l netlink.Link, err error) {
	err = InPod(path, func() error {
		l, err = netlink.LinkByName(name)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return ErrAbsent
		}
		return err
	})
	return l, err
}

// NoLink checks that the netns at path has no link name.
func NoLink(path, name string) error {
	l, err := PodLink(path, name)
	switch {
	case errors.Is(err, ErrAbsent):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%s has %s (%s)", path, name, l.Type())
}
