package conflist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// ErrMultus means the primary's file is Multus's, and the conflist its primary
// network is read from is not one rdma-chain can prove and edit.
var ErrMultus = errors.New("give --conflist naming the conflist to put the entry into")

// multusTypes are the types of the file Multus writes first into the conf
// dir: the thin plugin's and the thick plugin's shim.
var multusTypes = []string{"multus", "multus-shim"}

// throughMultus returns the conflist the runtime's primary network really
// comes from when first, the first file of dir holding data, is Multus's:
// the file its clusterNetwork names in dir, which Multus reads at each ADD.
// Multus's other shape, the primary network copied into its file as its
// first delegate, is refused with ErrMultus: the entry would have to go
// into Multus's own file, which Multus rewrites from its source, and the
// source's copy is not proven to follow. A file that is not Multus's is
// the primary's itself.
func throughMultus(dir, first string, data []byte) (string, error) {
	top, err := Parse(data)
	if err != nil {
		return first, nil // not Multus's either: reading it says what is wrong
	}
	m := multusPlugin(top)
	if m == nil {
		return first, nil
	}
	typ, _ := m.Get("type")
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("refusing %s, the first conflist of %s: it is Multus's (type %q), %s: %w",
			first, filepath.Clean(dir), typ.Str, fmt.Sprintf(format, args...), ErrMultus)
	}
	if cn, _ := m.Get("clusterNetwork"); cn != nil && cn.IsStr {
		return clusterNetworkFile(dir, first, cn.Str, refuse)
	}
	delegates, _ := m.Get("delegates")
	if delegates == nil || delegates.Kind != '[' || len(delegates.Elems) == 0 || delegates.Elems[0].Kind != '{' {
		return "", refuse("which names no primary network (neither clusterNetwork nor delegates)")
	}
	name, _ := delegates.Elems[0].Get("name")
	if name == nil || !name.IsStr {
		return "", refuse("whose first delegate, the primary network, has no name")
	}
	source := "no other file of the directory holds a network of that name"
	if found := filesOfNetwork(dir, first, name.Str); len(found) > 0 {
		source = strings.Join(found, ", ") + " holds a network of that name (Multus copies its delegate again when that file changes, unless its watch of the file is off)"
	}
	return "", refuse("whose primary network %q is a copy inside it (its first delegate), which rdma-chain does not edit; %s", name.Str, source)
}

// multusPlugin is Multus's plugin in top: top itself (a single-plugin
// .conf) or the element of its plugins of a Multus type (the conflist the
// thin plugin writes from CNI 1.0.0); nil when there is none.
func multusPlugin(top *Node) *Node {
	if top.Kind != '{' {
		return nil
	}
	if t, _ := top.Get("type"); t != nil && slices.Contains(multusTypes, t.Str) {
		return top
	}
	plugins, _ := top.Get("plugins")
	if plugins == nil {
		return nil
	}
	for _, p := range plugins.Elems {
		if t, _ := p.Get("type"); t != nil && slices.Contains(multusTypes, t.Str) {
			return p
		}
	}
	return nil
}

// clusterNetworkFile is the file of dir that Multus's clusterNetwork
// names (an absolute path: Multus loads it at each ADD), when it is a
// regular file. Multus and this process may see the conf dir at different
// paths (the DaemonSet's install sees the node's /etc/cni/net.d as
// /host/etc/cni/net.d, its reconcile as /etc/cni/net.d): the path's folder
// counts as dir when one ends with the other (sameDirSeen). A name (a
// NetworkAttachmentDefinition or a network of Multus's own confDir), a
// directory or a path elsewhere is refused.
func clusterNetworkFile(dir, first, cn string, refuse func(string, ...any) error) (string, error) {
	if !filepath.IsAbs(cn) {
		return "", refuse("whose clusterNetwork %q is not a file path (a NetworkAttachmentDefinition, or a network of Multus's confDir)", cn)
	}
	p := filepath.Join(dir, filepath.Base(cn))
	if !sameDirSeen(filepath.Dir(filepath.Clean(cn)), dir) || p == filepath.Clean(first) {
		return "", refuse("whose clusterNetwork %s is not another file of this directory (%s)", filepath.Clean(cn), dir)
	}
	st, err := os.Lstat(p)
	switch {
	case err != nil:
		return "", refuse("whose clusterNetwork cannot be read: %v", err)
	case st.Mode()&os.ModeSymlink != 0:
		return "", refuse("whose clusterNetwork %s is a symlink", p)
	case !st.Mode().IsRegular():
		return "", refuse("whose clusterNetwork %s is not a regular file", p)
	}
	return p, nil
}

// filesOfNetwork are the conflists of dir, but first, whose network is
// named name.
func filesOfNetwork(dir, first, name string) []string {
	files, _ := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	var found []string
	for _, f := range files {
		if f == first {
			continue
		}
		if st, err := os.Lstat(f); err != nil || !st.Mode().IsRegular() {
			continue
		}
		data, _, err := ReadNoFollow(f)
		if err != nil {
			continue
		}
		top, err := Parse(data)
		if err != nil || top.Kind != '{' {
			continue
		}
		if n, _ := top.Get("name"); n != nil && n.IsStr && n.Str == name {
			found = append(found, f)
		}
	}
	return found
}

// sameDirSeen reports whether the absolute folders a and b are one folder
// seen from two mount namespaces: equal, or one ends with the other, of
// two or more names (/host/etc/cni/net.d and /etc/cni/net.d).
func sameDirSeen(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	if len(a) < len(b) {
		a, b = b, a
	}
	if a == b {
		return true
	}
	return strings.Count(b, "/") >= 2 && strings.HasSuffix(a, b) // b starts at a name
}
