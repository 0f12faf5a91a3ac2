package hostile

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/nldump"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// setup builds the case's folders and returns the path of the planted
// record ("" when none).
func setup(t *testing.T, w *world, c *Case, repl *strings.Replacer) string {
	t.Helper()
	for _, d := range c.Setup.Dirs {
		if err := os.MkdirAll(repl.Replace(d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for p, content := range c.Setup.Files {
		p = repl.Replace(p)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range c.Setup.Symlinks {
		if err := os.Symlink(repl.Replace(target), repl.Replace(p)); err != nil {
			t.Fatal(err)
		}
	}
	if c.Setup.Record == "" && c.Setup.RecordPatch == nil {
		return ""
	}
	path := plantRecord(t, w.dataDir(), c.Setup.Record)
	if c.Setup.RecordPatch != nil {
		patchRecord(t, path, c.Setup.RecordPatch, repl)
	}
	return path
}

// patchRecord sets the keys of patch in the record at path.
func patchRecord(t *testing.T, path string, patch map[string]json.RawMessage, repl *strings.Replacer) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, raw := range patch {
		v, err := decodeExpand(raw, repl)
		if err != nil {
			t.Fatalf("recordPatch %s: %v", k, err)
		}
		m[k] = v
	}
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// plantRecord writes a valid record for the default attachment through the
// store, then replaces it with the kind of damage asked for.
func plantRecord(t *testing.T, dataDir, kind string) string {
	t.Helper()
	k := recordKey()
	rec := &state.Record{Network: k.Network, ContainerID: k.ContainerID, IfName: k.IfName, Mode: rdma.ModeShared}
	if err := state.New(dataDir).Put(rec); err != nil {
		t.Fatalf("plant record: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dataDir, "attachments", "*.json"))
	if len(files) != 1 {
		t.Fatalf("planted record: found %v", files)
	}
	path := files[0]
	valid, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	content, isDir, err := damaged(valid, kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if isDir {
		err = os.Mkdir(path, 0o700)
	} else {
		err = os.WriteFile(path, content, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func damaged(valid []byte, kind string) ([]byte, bool, error) {
	var m map[string]any
	if err := json.Unmarshal(valid, &m); err != nil {
		return nil, false, err
	}
	with := func(k string, v any) ([]byte, bool, error) {
		m[k] = v
		b, err := json.Marshal(m)
		return b, false, err
	}
	switch kind {
	case "valid", "":
		return valid, false, nil
	case "truncated":
		return valid[:len(valid)/2], false, nil
	case "empty":
		return nil, false, nil
	case "binary":
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(255 - i)
		}
		return b, false, nil
	case "array":
		return []byte(`[{"version":1,"network":"hostile"}]`), false, nil
	case "null":
		return []byte("null"), false, nil
	case "nested":
		return []byte(strings.Repeat("[", 200000)), false, nil
	case "dir":
		return nil, true, nil
	case "version":
		return with("version", 999)
	case "wrongkey":
		return with("containerID", "someone-else")
	case "wrongtypes":
		return with("links", "all")
	case "nulllinks":
		return with("links", []any{nil})
	}
	return nil, false, fmt.Errorf("unknown record kind %q", kind)
}

// treeOf lists every entry under root: path, type, mode, size, link target.
func treeOf(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v %d", strings.TrimPrefix(p, root), info.Mode(), info.Size())
		if info.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	sort.Strings(out)
	return out
}

// netnsState reads the links, global addresses and the routes not made by
// the kernel (all tables) of the calling thread's netns; link-local
// addresses and kernel routes appear on their own after a link comes up.
func netnsState() (any, error) {
	links, err := nldump.LinkList(nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		out = append(out, fmt.Sprintf("link %d %s %s mtu %d %s %v", a.Index, a.Name, l.Type(), a.MTU, a.HardwareAddr, a.Flags))
		addrs, err := nldump.AddrList(nil, l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, err
		}
		for _, ad := range addrs {
			if ad.Scope == int(netlink.SCOPE_UNIVERSE) {
				out = append(out, fmt.Sprintf("addr %s %s", a.Name, ad.IPNet))
			}
		}
	}
	routes, err := nldump.RouteListFiltered(nil, netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL || r.Table == unix.RT_TABLE_LOCAL {
			continue // follows the addresses, on the kernel's own schedule
		}
		out = append(out, fmt.Sprintf("route %s via %s dev %d table %d metric %d", r.Dst, r.Gw, r.LinkIndex, r.Table, r.Priority))
	}
	sort.Strings(out)
	return out, nil
}
