package validate

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
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
)

// Problem is one finding.
type Problem struct {
	Off int // a byte offset into the file, or -1
	Msg string
}

// chainOnlyTypes are reference plugins that only modify an interface an
// earlier plugin created; rdma-chain needs one of the other kind before it.
var chainOnlyTypes = map[string]bool{
	"portmap": true, "bandwidth": true, "tuning": true, "firewall": true,
	"sbr": true, "loopback": true, conflist.PluginType: true,
}

// Format renders p as NAME:LINE:COL: MESSAGE for the file name holding data.
func (p Problem) Format(name string, data []byte) string {
	if p.Off < 0 {
		return fmt.Sprintf("%s: %s", name, p.Msg)
	}
	line, col := conflist.Position(data, p.Off)
	return fmt.Sprintf("%s:%d:%d: %s", name, line, col, p.Msg)
}

// FormatAll renders probs (in file order, as Conflist returns them) with
// one pass over data.
func FormatAll(name string, data []byte, probs []Problem) []string {
	pos := conflist.NewPositions(data)
	out := make([]string, 0, len(probs))
	for _, p := range probs {
		if p.Off < 0 {
			out = append(out, fmt.Sprintf("%s: %s", name, p.Msg))
			continue
		}
		line, col := pos.At(p.Off)
		out = append(out, fmt.Sprintf("%s:%d:%d: %s", name, line, col, p.Msg))
	}
	return out
}

// Conflist returns every problem of one conflist, in file order.
func Conflist(data []byte, binDir string) []Problem {
	top, err := conflist.Parse(data)
	if err != nil {
		off := conflist.SyntaxOffset(err)
		if off > 0 {
			off--
		}
		return []Problem{{off, "invalid JSON: " + err.Error()}}
	}
	v := &validator{data: data, top: top, binDir: binDir}
	v.run()
	sort.SliceStable(v.probs, func(i, j int) bool { return v.probs[i].Off < v.probs[j].Off })
	return v.probs
}

type validator struct {
	data      []byte
	top       *conflist.Node
	binDir    string
	probs     []Problem
	suggested int // unknown keys given a "did you mean"
}

// maxSuggestions bounds the unknown keys that get a "did you mean": each
// costs an edit distance to every known key, and a file with thousands of
// unknown keys is not a typo.
const maxSuggestions = 100

func (v *validator) add(off int, format string, args ...any) {
	v.probs = append(v.probs, Problem{off, fmt.Sprintf(format, args...)})
}

func (v *validator) run() {
	if v.top.Kind != '{' {
		v.add(v.top.Off, "want a conflist: a JSON object with cniVersion, name and plugins")
		return
	}
	plugins, off := v.top.Get("plugins")
	if plugins == nil {
		if t, _ := v.top.Get("type"); t != nil && t.Str == conflist.PluginType {
			v.add(v.top.Off, "rdma-chain is a chained plugin: put it in a conflist's plugins, after the plugin that creates the pod interface")
		} else {
			v.add(v.top.Off, "no plugins list: not a conflist")
		}
		return
	}
	v.checkListHeader()
	if plugins.Kind != '[' {
		v.add(off, "plugins must be a JSON array")
		return
	}
	entries := v.findEntries(plugins)
	if len(entries) == 0 {
		v.add(off, "no plugin of type rdma-chain in plugins")
		return
	}
	for _, extra := range entries[1:] {
		v.add(plugins.Elems[extra].Off, "a second rdma-chain entry: a chain runs the plugin once per entry")
	}
	v.checkPlacement(plugins, entries[0])
	v.checkEntry(plugins.Elems[entries[0]])
}

// checkListHeader checks the conflist's cniVersion(s) and name.
func (v *validator) checkListHeader() {
	cv, off := v.top.Get("cniVersion")
	switch {
	case cv == nil:
		v.add(v.top.Off, "no cniVersion")
	case !cv.IsStr:
		v.add(off, "cniVersion must be a string")
	case !slices.Contains(config.SupportedVersions, cv.Str):
		v.add(off, "cniVersion %q is not supported by rdma-chain (supported: %s)", cv.Str, strings.Join(config.SupportedVersions, ", "))
	}
	if cvs, off := v.top.Get("cniVersions"); cvs != nil {
		if cvs.Kind != '[' {
			v.add(off, "cniVersions must be an array of strings")
		}
		for _, e := range cvs.Elems {
			if !e.IsStr || !slices.Contains(config.SupportedVersions, e.Str) {
				v.add(e.Off, "cniVersions: %s is not supported by rdma-chain (supported: %s)", conflist.Describe(v.data, e), strings.Join(config.SupportedVersions, ", "))
			}
		}
	}
	if n, off := v.top.Get("name"); n == nil || !n.IsStr || n.Str == "" {
		v.add(max(off, v.top.Off), "the conflist needs a non-empty string name")
	}
}

// findEntries checks every plugin's type and returns the rdma-chain ones.
func (v *validator) findEntries(plugins *conflist.Node) []int {
	var out []int
	for i, p := range plugins.Elems {
		t, off := p.Get("type")
		switch {
		case p.Kind != '{':
			v.add(p.Off, "plugins[%d] must be a JSON object", i)
		case t == nil || !t.IsStr || t.Str == "":
			v.add(max(off, p.Off), "plugins[%d] has no type", i)
		case t.Str == conflist.PluginType:
			out = append(out, i)
		case strings.EqualFold(t.Str, conflist.PluginType):
			v.add(off, "plugins[%d] type %q: plugin types are case-sensitive, did you mean %q?", i, t.Str, conflist.PluginType)
		}
	}
	return out
}

func (v *validator) checkPlacement(plugins *conflist.Node, at int) {
	var before []string
	for _, p := range plugins.Elems[:at] {
		if t, _ := p.Get("type"); t != nil && t.IsStr {
			if !chainOnlyTypes[t.Str] {
				return
			}
			before = append(before, t.Str)
		}
	}
	where := "it is the first plugin"
	if len(before) > 0 {
		where = "before it: " + strings.Join(before, ", ")
	}
	v.add(plugins.Elems[at].Off, "rdma-chain must come after the plugin that creates the pod interface (%s)", where)
}

// checkEntry checks the rdma-chain entry's keys and values.
func (v *validator) checkEntry(e *conflist.Node) {
	reported := v.checkKeys(e, entryKeys(), "")
	if caps, _ := e.Get("capabilities"); caps != nil && caps.Kind != '{' {
		v.add(caps.Off, "capabilities must be a JSON object")
	}
	if smcr, off := e.Get("smcr"); smcr != nil && !v.hasAnnotations(e) {
		v.add(off, "smcr is set but capabilities does not declare %q: pods' SMC-R annotations would never reach the plugin", config.AnnotationsCapability)
	}
	v.checkIPAMBinary(e)
	v.checkParse(e, reported)
}

// checkKeys reports unknown and runtime-only keys and duplicates, nested
// objects included, and returns the keys it reported.
func (v *validator) checkKeys(obj *conflist.Node, ks keySet, prefix string) []string {
	var reported []string
	seen := map[string]bool{}
	names := sortedNames(ks.keys)
	for _, m := range obj.Members {
		path := prefix + m.Key
		switch {
		case seen[m.Key]:
			v.add(m.KeyOff, "key %q appears twice: only the last one counts", path)
		case runtimeOnlyKeys[m.Key] && prefix == "":
			v.add(m.KeyOff, "key %q is set by the runtime for each call: remove it from the file", path)
		case !ks.keys[m.Key]:
			reported = append(reported, path)
			c := ""
			if v.suggested < maxSuggestions {
				v.suggested++
				c = closest(m.Key, names)
			}
			if c != "" {
				v.add(m.KeyOff, "unknown key %q: did you mean %q?", path, prefix+c)
			} else {
				v.add(m.KeyOff, "unknown key %q", path)
			}
		}
		seen[m.Key] = true
		if sub, ok := ks.nested[m.Key]; ok && m.Val.Kind == '{' && ks.keys[m.Key] {
			reported = append(reported, v.checkKeys(m.Val, sub, path+".")...)
		}
	}
	return reported
}

func (v *validator) hasAnnotations(e *conflist.Node) bool {
	caps, _ := e.Get("capabilities")
	c, _ := caps.Get(config.AnnotationsCapability)
	return c != nil && string(v.data[c.Off:c.End]) == "true"
}

// pluginNameRE is compiled on first use: this package is linked into the
// plugin, whose start-up runs for every pod.
var pluginNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`) })

func (v *validator) checkIPAMBinary(e *conflist.Node) {
	ipam, _ := e.Get("ipam")
	t, off := ipam.Get("type")
	if v.binDir == "" || t == nil || !t.IsStr {
		return
	}
	if !pluginNameRE().MatchString(t.Str) {
		return // not a plugin name: the parser's check reports it
	}
	st, err := os.Stat(filepath.Join(v.binDir, t.Str))
	switch {
	case err != nil:
		v.add(off, "ipam.type %q: no such plugin in %s", t.Str, v.binDir)
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		v.add(off, "ipam.type %q: %s is not an executable file", t.Str, filepath.Join(v.binDir, t.Str))
	}
}

// checkParse runs the entry, with the conflist's name and cniVersion as
// the runtime injects them, through the plugin's own parser. The parser
// stops at the first bad value: the key it names is dropped and the entry
// parsed again, so that every bad value is reported.
func (v *validator) checkParse(e *conflist.Node, reported []string) {
	conf := map[string]json.RawMessage{}
	_ = json.Unmarshal(v.data[e.Off:e.End], &conf) // an object: parseJSON checked it
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
	if n, _ := v.top.Get("name"); n != nil && n.IsStr && n.Str != "" {
		conf["name"] = json.RawMessage(v.data[n.Off:n.End])
	}
	conf["cniVersion"] = json.RawMessage(conflist.Quote(config.SupportedVersions[len(config.SupportedVersions)-1]))
	if cv, _ := v.top.Get("cniVersion"); cv != nil && slices.Contains(config.SupportedVersions, cv.Str) {
		conf["cniVersion"] = json.RawMessage(v.data[cv.Off:cv.End])
	}
}

func (v *validator) addWarnings(e *conflist.Node, warnings, reported []string) {
	for _, w := range warnings {
		if !mentionsAny(w, reported) {
			v.add(e.Off, "%s", w)
		}
	}
}

// addParseError reports a parser error at the field it names, and returns
// that field.
func (v *validator) addParseError(e *conflist.Node, err error) string {
	var te *types.Error
	if !errors.As(err, &te) {
		v.add(e.Off, "%v", err)
		return ""
	}
	field := fieldOf(te.Msg)
	msg := te.Msg
	if te.Details != "" {
		msg += ": " + te.Details
	}
	v.add(e.Lookup(field), "%s", msg)
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

func mentionsAny(s string, keys []string) bool {
	for _, k := range keys {
		if strings.Contains(s, fmt.Sprintf("%q", k)) {
			return true
		}
	}
	return false
}
