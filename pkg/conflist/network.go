package conflist

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// DefaultConfDirPath is where runtimes (containerd, CRI-O) read conflists.
const DefaultConfDirPath = "/etc/cni/net.d"

// DefaultConfDir is the conflist directory inspect and reconcile search by
// default: NETCONFPATH (cnitool's variable) when set, else /etc/cni/net.d.
func DefaultConfDir() string {
	if d := os.Getenv("NETCONFPATH"); d != "" {
		return d
	}
	return DefaultConfDirPath
}

// Discover finds the rdma-chain entries of the conflists in dir
// (files ending .conflist or .json, in the order runtimes read them). Files
// without an rdma-chain entry are not networks of this plugin; a symlink is
// never followed, and such a file, like one whose entry does not parse, is
// named in skipped. It fails when dir cannot be read or holds no network.
func Discover(dir string) (nets []Network, skipped []error, err error) {
	files, err := libcni.ConfFiles(dir, []string{".conflist", ".json"})
	if err != nil {
		return nil, nil, fmt.Errorf("conflist directory %s: %w", dir, err)
	}
	for _, f := range files {
		// Only regular files are read: a FIFO would block the read
		// forever, a device could be endless.
		st, err := os.Lstat(f)
		switch {
		case err != nil:
			skipped = append(skipped, err)
			continue
		case st.Mode()&os.ModeSymlink != 0:
			skipped = append(skipped, fmt.Errorf("%s: a symlink, not followed", f))
			continue
		case !st.Mode().IsRegular():
			skipped = append(skipped, fmt.Errorf("%s: not a regular file, not read", f))
			continue
		}
		if b, _, err := ReadNoFollow(f); err == nil && !bytes.Contains(b, []byte(`"rdma-chain"`)) {
			continue // another plugin's file
		}
		n, err := FromFile(f)
		switch {
		case errors.Is(err, ErrNoEntry):
		case err != nil:
			skipped = append(skipped, err)
		default:
			nets = append(nets, n)
		}
	}
	if len(nets) == 0 {
		return nil, skipped, fmt.Errorf("no conflist in %s has an rdma-chain entry (give --conflist, or --net-name and --data-dir)", filepath.Clean(dir))
	}
	return nets, skipped, nil
}

// ErrNoEntry means the conflist has no rdma-chain entry.
var ErrNoEntry = errors.New("no rdma-chain entry")

// Network is one CNI network whose attachments reconcile looks after: the
// rdma-chain entry as the runtime would pass it to the plugin.
type Network struct {
	Name    string
	DataDir string
	Stdin   []byte
	Path    string // the conflist it comes from ("" with --net-name)
	// IPAMDataDir is where the entry's host-local IPAM keeps its leases
	// ("": no host-local IPAM).
	IPAMDataDir string
}

// Load builds the plugin confs to release attachments with.
func Load(conflists []string, netName, dataDir string) ([]Network, error) {
	var nets []Network
	for _, path := range conflists {
		n, err := FromFile(path)
		if err != nil {
			return nil, err
		}
		nets = append(nets, n)
	}
	if netName != "" {
		stdin := fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":%s,"type":"rdma-chain","dataDir":%s}`, Quote(netName), Quote(dataDir))
		if _, _, err := config.Parse(stdin); err != nil {
			return nil, fmt.Errorf("--net-name %q --data-dir %q: %w", netName, dataDir, err)
		}
		nets = append(nets, Network{Name: netName, DataDir: dataDir, Stdin: stdin})
	}
	return nets, nil
}

// FromFile reads the rdma-chain entry of the conflist at path (never
// through a symlink).
func FromFile(path string) (Network, error) {
	data, _, err := ReadNoFollow(path)
	if err != nil {
		return Network{}, err
	}
	stdin, err := EntryStdin(data)
	if err != nil {
		return Network{}, fmt.Errorf("%s: %w", path, err)
	}
	conf, _, err := config.Parse(stdin)
	if err != nil {
		return Network{}, fmt.Errorf("%s: rdma-chain entry: %w", path, err)
	}
	return Network{Name: conf.Name, DataDir: conf.DataDir, Stdin: stdin, Path: path, IPAMDataDir: conf.HostLocalDataDir()}, nil
}

// EntryStdin is the conflist's rdma-chain entry with the conflist's name and
// cniVersion, as a runtime passes it.
func EntryStdin(data []byte) ([]byte, error) {
	top, plugins, err := Plugins(data)
	if err != nil {
		return nil, err
	}
	at := EntryIndex(plugins)
	if at < 0 {
		return nil, ErrNoEntry
	}
	e := plugins.Elems[at]
	members := [][2][]byte{}
	for _, k := range []string{"cniVersion", "name"} {
		if n, _ := top.Get(k); n != nil {
			members = append(members, [2][]byte{Quote(k), data[n.Off:n.End]})
		}
	}
	for _, m := range e.Members {
		if m.Key != "cniVersion" && m.Key != "name" {
			members = append(members, [2][]byte{Quote(m.Key), data[m.Val.Off:m.Val.End]})
		}
	}
	return RenderObject(members), nil
}
