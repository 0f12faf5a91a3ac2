package ops

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
)

// defaultConfDirPath is where runtimes (containerd, CRI-O) read conflists.
const defaultConfDirPath = "/etc/cni/net.d"

// defaultConfDir is the conflist directory inspect and reconcile search by
// default: NETCONFPATH (cnitool's variable) when set, else /etc/cni/net.d.
func defaultConfDir() string {
	if d := os.Getenv("NETCONFPATH"); d != "" {
		return d
	}
	return defaultConfDirPath
}

// discoverNetworks finds the rdma-chain entries of the conflists in dir
// (files ending .conflist or .json, in the order runtimes read them). Files
// without an rdma-chain entry are not networks of this plugin; a symlink is
// never followed, and such a file, like one whose entry does not parse, is
// named in skipped. It fails when dir cannot be read or holds no network.
func discoverNetworks(dir string) (nets []network, skipped []error, err error) {
	files, err := libcni.ConfFiles(dir, []string{".conflist", ".json"})
	if err != nil {
		return nil, nil, fmt.Errorf("conflist directory %s: %w", dir, err)
	}
	for _, f := range files {
		if st, err := os.Lstat(f); err == nil && st.Mode()&os.ModeSymlink != 0 {
			skipped = append(skipped, fmt.Errorf("%s: a symlink, not followed", f))
			continue
		}
		if b, err := os.ReadFile(f); err == nil && !bytes.Contains(b, []byte(`"rdma-chain"`)) {
			continue // another plugin's file
		}
		n, err := networkFromConflist(f)
		switch {
		case errors.Is(err, errNoEntry):
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
