package config

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/version"
)

// Bounds on a prevResult: far above any real pod, far below a memory problem.
const (
	maxResultEntries = 1024
	maxResultString  = 4096
)

// parsePrevResult validates the raw prevResult before the CNI library sees
// it, hands the library a copy holding only the exactly-known keys, and
// parses it with the library's own rules (version.ParsePrevResult: the
// result is read at the configuration's cniVersion). The library converts
// results between versions without checking for null entries or interface
// indexes, so everything it would trip on is refused here.
func (c *NetConf) parsePrevResult(raw json.RawMessage, w *warnings) error {
	if raw == nil || isNull(raw) {
		return nil
	}
	clean, err := cleanResult(raw, w)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(clean, &c.RawPrevResult); err != nil {
		return errField("prevResult", "%s", jsonReason(err))
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return errField("prevResult", "%v", err)
	}
	return checkResult(c.PrevResult)
}

// cleanResult checks a raw result and re-encodes it with the known keys only.
func cleanResult(raw json.RawMessage, w *warnings) ([]byte, error) {
	const p = "prevResult"
	obj, err := decodeObject(raw)
	if err != nil {
		return nil, errField(p, "%v", err)
	}
	var nIfs int
	out := map[string]json.RawMessage{}
	known, err := decodeFields(p, obj, []field{
		{"cniVersion", checkString},
		{"interfaces", cleanList(out, "interfaces", func(path string, item json.RawMessage, w *warnings) (json.RawMessage, error) {
			return cleanObject(path, item, interfaceFields, nil, w)
		}, &nIfs)},
		{"ips", cleanList(out, "ips", func(path string, item json.RawMessage, w *warnings) (json.RawMessage, error) {
			return cleanObject(path, item, ipFields(nIfs), []string{"address"}, w)
		}, nil)},
		{"routes", cleanList(out, "routes", func(path string, item json.RawMessage, w *warnings) (json.RawMessage, error) {
			return cleanObject(path, item, routeFields, []string{"dst"}, w)
		}, nil)},
		{"dns", cleanDNS(out)},
	}, w)
	if err != nil {
		return nil, err
	}
	if v, ok := known["cniVersion"]; ok {
		out["cniVersion"] = v
	}
	return json.Marshal(out)
}

type cleanFn func(path string, item json.RawMessage, w *warnings) (json.RawMessage, error)

// cleanList checks every element of a list with clean and stores the
// cleaned list in out[key]; n receives the number of elements.
func cleanList(out map[string]json.RawMessage, key string, clean cleanFn, n *int) decodeFn {
	return func(path string, raw json.RawMessage, w *warnings) error {
		items, err := list(path, raw, maxResultEntries)
		if err != nil {
			return err
		}
		cleaned := make([]json.RawMessage, len(items))
		for i, item := range items {
			if cleaned[i], err = clean(fmt.Sprintf("%s[%d]", path, i), item, w); err != nil {
				return err
			}
		}
		if n != nil {
			*n = len(items)
		}
		if items != nil {
			out[key], err = json.Marshal(cleaned)
		}
		return err
	}
}

// cleanObject checks one object of a result: never null, the required keys
// present, known keys only.
func cleanObject(path string, item json.RawMessage, fields []field, required []string, w *warnings) (json.RawMessage, error) {
	obj, err := decodeObject(item)
	if err != nil {
		return nil, errField(path, "%v", err)
	}
	known, err := decodeFields(path, obj, fields, w)
	if err != nil {
		return nil, err
	}
	for _, k := range required {
		if _, ok := known[k]; !ok {
			return nil, errField(join(path, k), "is required")
		}
	}
	return json.Marshal(known)
}

func cleanDNS(out map[string]json.RawMessage) decodeFn {
	return func(path string, raw json.RawMessage, w *warnings) error {
		if isNull(raw) {
			return nil
		}
		var err error
		out["dns"], err = cleanObject(path, raw, dnsFields, nil, w)
		return err
	}
}

var (
	interfaceFields = []field{
		{"name", checkString}, {"mac", checkMAC}, {"mtu", checkInt},
		{"sandbox", checkString}, {"socketPath", checkString}, {"pciID", checkString},
	}
	routeFields = []field{
		{"dst", checkCIDR}, {"gw", checkIP}, {"mtu", checkInt}, {"advmss", checkInt},
		{"priority", checkInt}, {"table", checkInt}, {"scope", checkInt},
	}
	dnsFields = []field{
		{"nameservers", checkStrings}, {"domain", checkString},
		{"search", checkStrings}, {"options", checkStrings},
	}
)

// ipFields are the keys of an IP entry; its interface index must name one
// of the nIfs interfaces.
func ipFields(nIfs int) []field {
	return []field{
		{"interface", func(path string, raw json.RawMessage, w *warnings) error {
			var i *int
			if err := json.Unmarshal(raw, &i); err != nil {
				return errField(path, "want an interface index, got %s", jsonKind(raw))
			}
			if i != nil && (*i < 0 || *i >= nIfs) {
				return errField(path, "index %d out of range: %d interfaces", *i, nIfs)
			}
			return nil
		}},
		{"address", checkCIDR}, {"gateway", checkIP}, {"version", checkIPVersion},
	}
}
