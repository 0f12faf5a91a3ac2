package ops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

func runInstall(o IO, args []string) int {
	fs := newFlags(o, "install")
	path := fs.String("conflist", "", "the conflist to change (a symlink is refused)")
	after := fs.String("after", "", "place the entry after the last plugin of this type (default: keep its place, or append)")
	set := fs.String("set", "", `JSON object of entry keys to set, e.g. '{"mode":"shared"}'; a null value removes the key`)
	dry := fs.Bool("dry-run", false, "print the resulting conflist instead of writing it")
	from := fs.String("binaries-from", "", "first copy "+strings.Join(pluginBinaries, " and ")+" from this directory (atomically, in that order)")
	binDir := fs.String("cni-bin-dir", "", "the runtime's CNI bin dir the binaries go to (not a symlink)")
	wait := fs.Duration("wait", 0, "wait this long for --conflist to appear (the primary plugin writes it)")
	pos, code, ok := parseFlags(o, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q", pos[0])
	}
	if (*from == "") != (*binDir == "") {
		return usageError(fs, "--binaries-from and --cni-bin-dir go together")
	}
	if *path == "" && *from == "" {
		return usageError(fs, "--conflist or --binaries-from is required")
	}
	if *from != "" && !*dry {
		done, err := installBinaries(*from, *binDir, pluginBinaries)
		for _, d := range done {
			sayln(o.Stdout, d)
		}
		if err != nil {
			say(o.Stderr, Binary+" install: %v\n", err)
			return ExitProblems
		}
	}
	if *path == "" {
		return ExitOK
	}
	if err := waitForFile(*path, *wait); err != nil {
		say(o.Stderr, Binary+" install: %v\n", err)
		return ExitProblems
	}
	data, st, err := readNoFollow(*path)
	if err != nil {
		say(o.Stderr, Binary+" install: %v\n", err)
		return ExitProblems
	}
	out, what, err := installEntry(data, *after, []byte(*set))
	if err != nil {
		say(o.Stderr, Binary+" install: %s: %v\n", *path, err)
		return ExitProblems
	}
	if probs := validateConflist(out, ""); len(probs) > 0 {
		say(o.Stderr, Binary+" install: %s: the result would not be valid, nothing written:\n", *path)
		for _, p := range probs {
			sayln(o.Stderr, formatProblem(*path+" (result)", out, p))
		}
		return ExitProblems
	}
	switch {
	case *dry:
		_, _ = o.Stdout.Write(out)
		return ExitOK
	case what == "":
		say(o.Stdout, "%s: unchanged\n", *path)
		return ExitOK
	}
	if err := writeFileAtomic(*path, out, st); err != nil {
		say(o.Stderr, Binary+" install: %v\n", err)
		return ExitProblems
	}
	say(o.Stdout, "%s: %s\n", *path, what)
	return ExitOK
}

// waitForFile polls for path to exist, for at most d.
func waitForFile(path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, err := os.Lstat(path)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			return nil // readNoFollow says what is wrong with it
		}
		if !time.Now().Before(deadline) {
			if d > 0 {
				return fmt.Errorf("no %s after %v", path, d)
			}
			return nil
		}
		time.Sleep(min(time.Second, time.Until(deadline)))
	}
}

// readNoFollow reads a regular file that is not a symlink.
func readNoFollow(path string) ([]byte, os.FileInfo, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, fmt.Errorf("refusing %s: it is a symlink", path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("refusing %s: not a regular file", path)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return buf.Bytes(), st, nil
}

// writeFileAtomic replaces path with data through a synced temp file in the
// same directory, keeping the original's mode and owner.
func writeFileAtomic(path string, data []byte, orig os.FileInfo) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".rdma-chain-install-*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(orig.Mode().Perm())
	}
	if sys, ok := orig.Sys().(*syscall.Stat_t); ok && err == nil {
		if cerr := f.Chown(int(sys.Uid), int(sys.Gid)); cerr != nil && int(sys.Uid) != os.Getuid() {
			err = cerr
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = renameOverRegular(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// renameOverRegular renames tmp to path unless path became a symlink.
func renameOverRegular(tmp, path string) error {
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("refusing %s: it became a symlink", path)
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// installEntry returns data with the rdma-chain entry inserted or updated,
// and what changed ("" for nothing). Every other byte is kept.
func installEntry(data []byte, after string, set []byte) ([]byte, string, error) {
	_, plugins, err := conflistPlugins(data)
	if err != nil {
		return nil, "", err
	}
	setNode, err := parseSet(set)
	if err != nil {
		return nil, "", err
	}
	at := entryIndex(plugins)
	target, err := insertIndex(plugins, at, after)
	if err != nil {
		return nil, "", err
	}
	if at >= 0 {
		old := plugins.elems[at]
		merged, changed := mergeEntry(data, old, set, setNode)
		if target < 0 {
			if !changed {
				return data, "", nil
			}
			return splice(data, old.off, old.end, merged), "rdma-chain entry updated", nil
		}
		data = removeElem(data, plugins, at)
		if _, plugins, err = conflistPlugins(data); err != nil {
			return nil, "", err
		}
		target, _ = insertIndex(plugins, -1, after)
		return insertElem(data, plugins, target, merged), "rdma-chain entry moved after " + after, nil
	}
	if target < 0 {
		target = len(plugins.elems)
	}
	entry := newEntry(set, setNode)
	return insertElem(data, plugins, target, entry), "rdma-chain entry inserted", nil
}

func conflistPlugins(data []byte) (*jnode, *jnode, error) {
	top, err := parseJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %w", err)
	}
	plugins, _ := top.get("plugins")
	if top.kind != '{' || plugins == nil || plugins.kind != '[' {
		return nil, nil, errors.New("not a conflist: no plugins array")
	}
	return top, plugins, nil
}

func parseSet(set []byte) (*jnode, error) {
	if len(bytes.TrimSpace(set)) == 0 {
		return &jnode{kind: '{'}, nil
	}
	n, err := parseJSON(set)
	if err != nil {
		return nil, fmt.Errorf("--set must be a JSON object: %w", err)
	}
	if n.kind != '{' {
		return nil, errors.New("--set must be a JSON object")
	}
	if t, _ := n.get("type"); t != nil && t.str != pluginType {
		return nil, errors.New(`--set cannot change "type"`)
	}
	return n, nil
}

func entryIndex(plugins *jnode) int {
	for i, p := range plugins.elems {
		if t, _ := p.get("type"); t != nil && t.str == pluginType {
			return i
		}
	}
	return -1
}

// insertIndex is where the entry must go for --after, or -1 when the
// entry at position at (or a new entry at the end) is placed right.
func insertIndex(plugins *jnode, at int, after string) (int, error) {
	if after == "" {
		return -1, nil
	}
	last := -1
	for i, p := range plugins.elems {
		if t, _ := p.get("type"); t != nil && t.str == after && i != at {
			last = i
		}
	}
	if last < 0 {
		return 0, fmt.Errorf("no plugin of type %q to put the entry after", after)
	}
	if at > last {
		return -1, nil
	}
	return last + 1, nil
}

// mergeEntry applies set to the entry old: existing keys keep their order,
// new ones follow; a null removes a key.
func mergeEntry(data []byte, old *jnode, set []byte, setNode *jnode) ([]byte, bool) {
	var members [][2][]byte
	changed := false
	for _, m := range old.members {
		val := data[m.val.off:m.val.end]
		if s, _ := setNode.get(m.key); s != nil {
			nv := set[s.off:s.end]
			if !sameJSON(val, nv) {
				changed = true
			}
			if string(nv) == "null" {
				continue
			}
			val = nv
		}
		members = append(members, [2][]byte{quote(m.key), val})
	}
	for _, s := range setNode.members {
		if hasKey(old, s.key) || string(set[s.val.off:s.val.end]) == "null" {
			continue
		}
		changed = true
		members = append(members, [2][]byte{quote(s.key), set[s.val.off:s.val.end]})
	}
	if !changed {
		return data[old.off:old.end], false
	}
	return renderObject(members), true
}

func newEntry(set []byte, setNode *jnode) []byte {
	members := [][2][]byte{{quote("type"), quote(pluginType)}}
	for _, s := range setNode.members {
		if s.key != "type" && string(set[s.val.off:s.val.end]) != "null" {
			members = append(members, [2][]byte{quote(s.key), set[s.val.off:s.val.end]})
		}
	}
	if !hasKey(setNode, "capabilities") {
		members = append(members, [2][]byte{quote("capabilities"), []byte(`{"` + config.AnnotationsCapability + `": true}`)})
	}
	return renderObject(members)
}

func renderObject(members [][2][]byte) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(m[0])
		b.WriteString(": ")
		b.Write(m[1])
	}
	b.WriteByte('}')
	return b.Bytes()
}

func quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

func splice(data []byte, from, to int, with []byte) []byte {
	out := make([]byte, 0, len(data)-(to-from)+len(with))
	out = append(out, data[:from]...)
	out = append(out, with...)
	return append(out, data[to:]...)
}

// removeElem cuts element i and one separating comma out of the array.
func removeElem(data []byte, arr *jnode, i int) []byte {
	e := arr.elems[i]
	switch {
	case i > 0:
		return splice(data, arr.elems[i-1].end, e.end, nil)
	case len(arr.elems) > 1:
		return splice(data, e.off, arr.elems[1].off, nil)
	default:
		return splice(data, e.off, e.end, nil)
	}
}

// insertElem inserts entry as element i, indented like its neighbours.
func insertElem(data []byte, arr *jnode, i int, entry []byte) []byte {
	if len(arr.elems) == 0 {
		return splice(data, arr.off+1, arr.off+1, entry)
	}
	if i == 0 {
		first := arr.elems[0]
		return splice(data, first.off, first.off, append(append(entry, ','), separator(data, first)...))
	}
	prev := arr.elems[i-1]
	return splice(data, prev.end, prev.end, append(append([]byte{','}, separator(data, prev)...), entry...))
}

// separator is the whitespace between elements: a newline and the
// element's indentation when it starts its own line, else a space.
func separator(data []byte, e *jnode) []byte {
	start := bytes.LastIndexByte(data[:e.off], '\n') + 1
	indent := data[start:e.off]
	if len(bytes.Trim(indent, " \t")) == 0 {
		return append([]byte{'\n'}, indent...)
	}
	return []byte{' '}
}
