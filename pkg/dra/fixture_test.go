package dra

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// sysfs is a synthetic sysfs tree.
type sysfs struct {
	t    *testing.T
	root string
}

func newSysfs(t *testing.T) *sysfs {
	s := &sysfs{t: t, root: t.TempDir()}
	for _, d := range []string{"class/infiniband", "class/net"} {
		s.mkdir(d)
	}
	return s
}

func (s *sysfs) mkdir(rel string) {
	s.t.Helper()
	if err := os.MkdirAll(filepath.Join(s.root, rel), 0o755); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sysfs) write(rel, content string) {
	s.t.Helper()
	s.mkdir(filepath.Dir(rel))
	if err := os.WriteFile(filepath.Join(s.root, rel), []byte(content+"\n"), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sysfs) symlink(target, rel string) {
	s.t.Helper()
	s.mkdir(filepath.Dir(rel))
	if err := os.Symlink(target, filepath.Join(s.root, rel)); err != nil {
		s.t.Fatal(err)
	}
}

// port writes port 1 of RDMA device name.
func (s *sysfs) port(name, linkLayer, state string, gids int) {
	p := "class/infiniband/" + name + "/ports/1/"
	s.write(p+"link_layer", linkLayer)
	s.write(p+"state", state)
	for i := range gids {
		s.write(p+"gids/"+itoa(i), "0000:0000:0000:0000:0000:0000:0000:0000")
	}
}

// charDev adds class device CLASS/N whose ibdev is dev.
func (s *sysfs) charDev(class, n, dev string) { s.write("class/"+class+"/"+n+"/ibdev", dev) }

// pciFunction adds PCI function pci under root complex root, with its
// numa_node, and the bus/pci/devices link.
func (s *sysfs) pciFunction(root, pci string, numa int) {
	fn := "devices/" + root + "/" + pci
	s.write(fn+"/numa_node", itoa(numa))
	s.symlink("../../../"+fn, "bus/pci/devices/"+pci)
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// sysfsOnlyNL has no RDMA netlink device list: rdma.System lists devices
// from sysfs, as on kernels whose RDMA netlink does not answer.
type sysfsOnlyNL struct {
	rdma.Netlink
	mode string
}

func (f sysfsOnlyNL) SystemGetNetnsMode() (string, error) { return f.mode, nil }
func (f sysfsOnlyNL) LinkList() ([]*netlink.RdmaLink, error) {
	return nil, syscall.EOPNOTSUPP
}

func removeAll(p string) error { return os.RemoveAll(p) }

func find(t *testing.T, devs []resourceapi.Device, name string) resourceapi.Device {
	t.Helper()
	for _, d := range devs {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no device %s in %+v", name, devs)
	return resourceapi.Device{}
}

// writtenSpec reads the CDI spec d wrote for claim uid: its bytes and
// their decoding.
func writtenSpec(t *testing.T, d *Driver, uid string) ([]byte, cdispec.Spec) {
	t.Helper()
	b, err := os.ReadFile(d.specs().path(uid))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	return b, spec
}
