package validate

import (
	"reflect"
	"sort"
	"strings"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// keySet is the set of keys one object of the entry may hold, and the
// sets of its nested objects that are checked too.
type keySet struct {
	keys   map[string]bool
	nested map[string]keySet
}

// entryKeys derives the entry's keys from config.NetConf's JSON names, so
// that validate knows exactly what the plugin decodes. "args" and
// "cniVersions" are CNI keys the plugin accepts without using.
func entryKeys() keySet {
	ks := structKeys(reflect.TypeFor[config.NetConf]())
	ks.keys["args"] = true
	ks.keys["cniVersions"] = true
	// The capabilities a runtime maps into runtimeConfig.
	ks.nested["capabilities"] = structKeys(reflect.TypeFor[config.RuntimeConfig]())
	// ipam belongs to the IPAM plugin, dns to the runtime: not checked.
	delete(ks.nested, "ipam")
	delete(ks.nested, "dns")
	return ks
}

func structKeys(t reflect.Type) keySet {
	ks := keySet{keys: map[string]bool{}, nested: map[string]keySet{}}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			inner := structKeys(f.Type)
			for k := range inner.keys {
				ks.keys[k] = true
			}
			for k, v := range inner.nested {
				ks.nested[k] = v
			}
			continue
		}
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		ks.keys[name] = true
		if f.Type.Kind() == reflect.Struct {
			ks.nested[name] = structKeys(f.Type)
		}
	}
	return ks
}

// runtimeOnlyKeys are set by the runtime for one call; in a file they are
// a mistake.
var runtimeOnlyKeys = map[string]bool{
	"prevResult": true, "cni.dev/valid-attachments": true, "cni.dev/attachments": true,
}

// sortedNames lists the keys of known in order.
func sortedNames(known map[string]bool) []string {
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// closest returns the known key (names, sorted) nearest to k: same letters
// in another case first, then the smallest edit distance (at most half of
// k's length).
func closest(k string, names []string) string {
	best, bestD := "", len(k)/2+1
	for _, n := range names {
		if strings.EqualFold(n, k) {
			return n
		}
		if d := editDistance(strings.ToLower(k), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
