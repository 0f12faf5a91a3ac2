package ops

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

const pluginType = "rdma-chain"

// problem is one finding; off is a byte offset into the file, or -1.
type problem struct {
	off int
	msg string
}

// chainOnlyTypes are reference plugins that only modify an interface an
// earlier plugin created; rdma-chain needs one of the other kind before it.
var chainOnlyTypes = map[string]bool{
	"portmap": true, "bandwidth": true, "tuning": true, "firewall": true,
	"sbr": true, "loopback": true, pluginType: true,
}

func runValidate(o IO, args []string) int {
	fs := newFlags(o, "validate")
	binDir := fs.String("cni-bin-dir", "", "check that the entry's ipam.type exists in this CNI bin dir")
	files, code, ok := parseFlags(o, fs, args)
	if !ok {
		return code
	}
	if len(files) == 0 {
		return usageError(fs, "no FILE given")
	}
	bad := 0
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			say(o.Stdout, "%s: %v\n", name, err)
			bad++
			continue
		}
		probs := validateConflist(data, *binDir)
		for _, p := range probs {
			sayln(o.Stdout, formatProblem(name, data, p))
		}
		for _, n := range orderNotes(data) {
			say(o.Stdout, "%s: note: %s\n", name, n)
		}
		bad += len(probs)
	}
	if bad > 0 {
		return ExitProblems
	}
	return ExitOK
}

func formatProblem(name string, data []byte, p problem) string {
	if p.off < 0 {
		return fmt.Sprintf("%s: %s", name, p.msg)
	}
	line, col := position(data, p.off)
	return fmt.Sprintf("%s:%d:%d: %s", name, line, col, p.msg)
}

// validateConflist returns every problem of one conflist, in file order.
func validateConflist(data []byte, binDir string) []problem {
	top, err := parseJSON(data)
	if err != nil {
		off := syntaxOffset(err)
		if off > 0 {
			off--
		}
		return []problem{{off, "invalid JSON: " + err.Error()}}
	}
	v := &validator{data: data, top: top, binDir: binDir}
	v.run()
	sort.SliceStable(v.probs, func(i, j int) bool { return v.probs[i].off < v.probs[j].off })
	return v.probs
}

type validator struct {
	data   []byte
	top    *jnode
	binDir string
	probs  []problem
}

func (v *validator) add(off int, format string, args ...any) {
	v.probs = append(v.probs, problem{off, fmt.Sprintf(format, args...)})
}

func (v *validator) run() {
	if v.top.kind != '{' {
		v.add(v.top.off, "want a conflist: a JSON object with cniVersion, name and plugins")
		return
	}
	plugins, off := v.top.get("plugins")
	if plugins == nil {
		if t, _ := v.top.get("type"); t != nil && t.str == pluginType {
			v.add(v.top.off, "rdma-chain is a chained plugin: put it in a conflist's plugins, after the plugin that creates the pod interface")
		} else {
			v.add(v.top.off, "no plugins list: not a conflist")
		}
		return
	}
	v.checkListHeader()
	if plugins.kind != '[' {
		v.add(off, "plugins must be a JSON array")
		return
	}
	entries := v.findEntries(plugins)
	if len(entries) == 0 {
		v.add(off, "no plugin of type rdma-chain in plugins")
		return
	}
	for _, extra := range entries[1:] {
		v.add(plugins.elems[extra].off, "a second rdma-chain entry: a chain runs the plugin once per entry")
	}
	v.checkPlacement(plugins, entries[0])
	v.checkEntry(plugins.elems[entries[0]])
}

// checkListHeader checks the conflist's cniVersion(s) and name.
func (v *validator) checkListHeader() {
	cv, off := v.top.get("cniVersion")
	switch {
	case cv == nil:
		v.add(v.top.off, "no cniVersion")
	case !cv.isStr:
		v.add(off, "cniVersion must be a string")
	case !slices.Contains(config.SupportedVersions, cv.str):
		v.add(off, "cniVersion %q is not supported by rdma-chain (supported: %s)", cv.str, strings.Join(config.SupportedVersions, ", "))
	}
	if cvs, off := v.top.get("cniVersions"); cvs != nil {
		if cvs.kind != '[' {
			v.add(off, "cniVersions must be an array of strings")
		}
		for _, e := range cvs.elems {
			if !e.isStr || !slices.Contains(config.SupportedVersions, e.str) {
				v.add(e.off, "cniVersions: %s is not supported by rdma-chain (supported: %s)", describe(v.data, e), strings.Join(config.SupportedVersions, ", "))
			}
		}
	}
	if n, off := v.top.get("name"); n == nil || !n.isStr || n.str == "" {
		v.add(max(off, v.top.off), "the conflist needs a non-empty string name")
	}
}

// findEntries checks every plugin's type and returns the rdma-chain ones.
func (v *validator) findEntries(plugins *jnode) []int {
	var out []int
	for i, p := range plugins.elems {
		t, off := p.get("type")
		switch {
		case p.kind != '{':
			v.add(p.off, "plugins[%d] must be a JSON object", i)
		case t == nil || !t.isStr || t.str == "":
			v.add(max(off, p.off), "plugins[%d] has no type", i)
		case t.str == pluginType:
			out = append(out, i)
		case strings.EqualFold(t.str, pluginType):
			v.add(off, "plugins[%d] type %q: plugin types are case-sensitive, did you mean %q?", i, t.str, pluginType)
		}
	}
	return out
}

func (v *validator) checkPlacement(plugins *jnode, at int) {
	var before []string
	for _, p := range plugins.elems[:at] {
		if t, _ := p.get("type"); t != nil && t.isStr {
			if !chainOnlyTypes[t.str] {
				return
			}
			before = append(before, t.str)
		}
	}
	where := "it is the first plugin"
	if len(before) > 0 {
		where = "before it: " + strings.Join(before, ", ")
	}
	v.add(plugins.elems[at].off, "rdma-chain must come after the plugin that creates the pod interface (%s)", where)
}

// checkEntry checks the rdma-chain entry's keys and values.
func (v *validator) checkEntry(e *jnode) {
	reported := v.checkKeys(e, entryKeys(), "")
	if caps, _ := e.get("capabilities"); caps != nil && caps.kind != '{' {
		v.add(caps.off, "capabilities must be a JSON object")
	}
	if smcr, off := e.get("smcr"); smcr != nil && !v.hasAnnotations(e) {
		v.add(off, "smcr is set but capabilities does not declare %q: pods' SMC-R annotations would never reach the plugin", config.AnnotationsCapability)
	}
	v.checkIPAMBinary(e)
	v.checkParse(e, reported)
}

// checkKeys reports unknown and runtime-only keys and duplicates, nested
// objects included, and returns the keys it reported.
func (v *validator) checkKeys(obj *jnode, ks keySet, prefix string) []string {
	var reported []string
	seen := map[string]bool{}
	for _, m := range obj.members {
		path := prefix + m.key
		switch {
		case seen[m.key]:
			v.add(m.keyOff, "key %q appears twice: only the last one counts", path)
		case runtimeOnlyKeys[m.key] && prefix == "":
			v.add(m.keyOff, "key %q is set by the runtime for each call: remove it from the file", path)
		case !ks.keys[m.key]:
			reported = append(reported, path)
			if c := closest(m.key, ks.keys); c != "" {
				v.add(m.keyOff, "unknown key %q: did you mean %q?", path, prefix+c)
			} else {
				v.add(m.keyOff, "unknown key %q", path)
			}
		}
		seen[m.key] = true
		if sub, ok := ks.nested[m.key]; ok && m.val.kind == '{' && ks.keys[m.key] {
			reported = append(reported, v.checkKeys(m.val, sub, path+".")...)
		}
	}
	return reported
}

func (v *validator) hasAnnotations(e *jnode) bool {
	caps, _ := e.get("capabilities")
	c, _ := caps.get(config.AnnotationsCapability)
	return c != nil && string(v.data[c.off:c.end]) == "true"
}

// Compiled on first use: this package is linked into the plugin, whose
// start-up runs for every pod.
var pluginNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`) })

func (v *validator) checkIPAMBinary(e *jnode) {
	ipam, _ := e.get("ipam")
	t, off := ipam.get("type")
	if v.binDir == "" || t == nil || !t.isStr {
		return
	}
	if !pluginNameRE().MatchString(t.str) {
		return // not a plugin name: the parser's check reports it
	}
	st, err := os.Stat(filepath.Join(v.binDir, t.str))
	switch {
	case err != nil:
		v.add(off, "ipam.type %q: no such plugin in %s", t.str, v.binDir)
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		v.add(off, "ipam.type %q: %s is not an executable file", t.str, filepath.Join(v.binDir, t.str))
	}
}

// checkParse runs the entry, with the conflist's name and cniVersion as
// the runtime injects them, through the plugin's own parser. The parser
// stops at the first bad value: the key it names is dropped and the entry
// parsed again, so that every bad value is reported.
func (v *validator) checkParse(e *jnode, reported []string) {
	conf := map[string]json.RawMessage{}
	_ = json.Unmarshal(v.data[e.off:e.end], &conf) // an object: parseJSON checked it
	v.injectHeader(conf)
	for range maxParseRounds {
		stdin, _ := json.Marshal(conf)
		_, warnings, err := config.Parse(stdin)
		if err == nil {
			v.addWarnings(e, warnings, reported)
			return
		}
		field := v.addParseError(e, err)
		top, _, _ := strings.Cut(field, ".")
		if _, ok := conf[top]; !ok || top == "" {
			v.addWarnings(e, warnings, reported)
			return
		}
		delete(conf, top)
	}
}

const maxParseRounds = 32

// injectHeader sets name and cniVersion as the runtime would; values the
// header check already reported are replaced so that parsing goes on.
func (v *validator) injectHeader(conf map[string]json.RawMessage) {
	conf["name"] = json.RawMessage(`"validate"`)
	if n, _ := v.top.get("name"); n != nil && n.isStr && n.str != "" {
		conf["name"] = json.RawMessage(v.data[n.off:n.end])
	}
	conf["cniVersion"] = json.RawMessage(quote(config.SupportedVersions[len(config.SupportedVersions)-1]))
	if cv, _ := v.top.get("cniVersion"); cv != nil && slices.Contains(config.SupportedVersions, cv.str) {
		conf["cniVersion"] = json.RawMessage(v.data[cv.off:cv.end])
	}
}

func (v *validator) addWarnings(e *jnode, warnings, reported []string) {
	for _, w := range warnings {
		if !mentionsAny(w, reported) {
			v.add(e.off, "%s", w)
		}
	}
}

// addParseError reports a parser error at the field it names, and returns
// that field.
func (v *validator) addParseError(e *jnode, err error) string {
	var te *types.Error
	if !errors.As(err, &te) {
		v.add(e.off, "%v", err)
		return ""
	}
	field := fieldOf(te.Msg)
	msg := te.Msg
	if te.Details != "" {
		msg += ": " + te.Details
	}
	v.add(e.lookup(field), "%s", msg)
	return field
}

var fieldRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`field "((?:[^"\\]|\\.)*)"`) })

// fieldOf extracts the field path a config error names.
func fieldOf(msg string) string {
	m := fieldRE().FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	return m[1]
}

func hasKey(n *jnode, k string) bool {
	v, _ := n.get(k)
	return v != nil
}

func mentionsAny(s string, keys []string) bool {
	for _, k := range keys {
		if strings.Contains(s, fmt.Sprintf("%q", k)) {
			return true
		}
	}
	return false
}
