package rdma

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
)

// fixture builds a fake sysfs tree under t.TempDir().
type fixture struct {
	t    *testing.T
	root string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, root: t.TempDir()}
	f.mkdir("class/infiniband")
	f.mkdir("class/net")
	return f
}

func (f *fixture) mkdir(rel string) string {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) write(rel, content string) {
	f.t.Helper()
	f.mkdir(filepath.Dir(rel))
	if err := os.WriteFile(filepath.Join(f.root, rel), []byte(content+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) symlink(target, rel string) {
	f.t.Helper()
	f.mkdir(filepath.Dir(rel))
	if err := os.Symlink(target, filepath.Join(f.root, rel)); err != nil {
		f.t.Fatal(err)
	}
}

// ibDev adds class/infiniband/NAME with node_guid (none if guid is "").
func (f *fixture) ibDev(name, guid string) {
	f.mkdir("class/infiniband/" + name)
	if guid != "" {
		f.write("class/infiniband/"+name+"/node_guid", guid)
	}
}

// gidNdev writes ports/1/gid_attrs/ndevs/0 of dev.
func (f *fixture) gidNdev(dev, netdev string) {
	f.write("class/infiniband/"+dev+"/ports/1/gid_attrs/ndevs/0", netdev)
}

// pciDev links dev to PCI function pci bound to driver, with sibling netdevs.
func (f *fixture) pciDev(dev, pci, driver string, netdevs ...string) {
	fn := "devices/pci0000:00/" + pci
	f.mkdir(fn)
	f.symlink("../../../"+fn, "class/infiniband/"+dev+"/device")
	if driver != "" {
		f.symlink("../../../bus/pci/drivers/"+driver, fn+"/driver")
	}
	for _, n := range netdevs {
		f.mkdir(fn + "/net/" + n)
	}
}

// netdev adds class/net/NAME with address mac; physical adds a device link.
func (f *fixture) netdev(name, mac string, physical bool) {
	f.write("class/net/"+name+"/address", mac)
	if physical {
		f.symlink("../../../devices/pci0000:00/phys-"+name, "class/net/"+name+"/device")
	}
}

func (f *fixture) system(n Netlink) *System { return &System{SysRoot: f.root, NL: n} }

// fakeNL is an in-memory Netlink.
type fakeNL struct {
	mode      string
	modeErr   error
	links     []*netlink.RdmaLink
	listErrs  []error // returned by successive LinkList calls, then nil
	byNameErr error
	setErr    error
	moves     []move
	// linksAfterSet replaces links after a LinkSetNsFd that failed.
	linksAfterSet []*netlink.RdmaLink
	// listSeq is the device names of successive LinkList calls (the last
	// repeats).
	listSeq [][]string
}

type move struct {
	dev string
	fd  uint32
}

func (f *fakeNL) SystemGetNetnsMode() (string, error) { return f.mode, f.modeErr }

func (f *fakeNL) LinkList() ([]*netlink.RdmaLink, error) {
	if len(f.listErrs) > 0 {
		err := f.listErrs[0]
		f.listErrs = f.listErrs[1:]
		return nil, err
	}
	if len(f.listSeq) > 0 {
		names := f.listSeq[0]
		if len(f.listSeq) > 1 {
			f.listSeq = f.listSeq[1:]
		}
		return links(names...), nil
	}
	return f.links, nil
}

func (f *fakeNL) LinkSetNsFd(l *netlink.RdmaLink, fd uint32) error {
	if f.setErr != nil {
		if f.linksAfterSet != nil {
			f.links = f.linksAfterSet
		}
		return f.setErr
	}
	f.moves = append(f.moves, move{l.Attrs.Name, fd})
	return nil
}

func (f *fakeNL) LinkByName(name string) (*netlink.RdmaLink, error) {
	if f.byNameErr != nil {
		return nil, f.byNameErr
	}
	for _, l := range f.links {
		if l.Attrs.Name == name {
			return l, nil
		}
	}
	return nil, os.ErrNotExist
}

// portNL adds PortNetdev to fakeNL.
type portNL struct {
	*fakeNL
	ports map[string]string // device → netdev of port 1
}

func (p portNL) PortNetdev(l *netlink.RdmaLink, port uint32) (string, error) {
	return p.ports[l.Attrs.Name], nil
}

// links makes netlink records for names.
func links(names ...string) []*netlink.RdmaLink {
	out := make([]*netlink.RdmaLink, 0, len(names))
	for i, n := range names {
		out = append(out, &netlink.RdmaLink{Attrs: netlink.RdmaLinkAttrs{Index: uint32(i), Name: n, NumPorts: 1}})
	}
	return out
}

// virtioNetdev adds class/net/NAME on virtio device virtioN of PCI function
// pci, as virtio-net registers its NICs.
func (f *fixture) virtioNetdev(name, mac, pci, virtio string) {
	f.write("class/net/"+name+"/address", mac)
	fn := "devices/pci0000:00/" + pci + "/" + virtio
	f.mkdir(fn)
	f.symlink("../../../"+fn, "class/net/"+name+"/device")
}
