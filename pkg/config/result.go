package config

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// Result returns the prevResult at the current result version (1.1.0). Parse
// has refused every prevResult the conversion could trip on; Result checks
// the typed result again so that a NetConf built by hand is as safe.
func (c *NetConf) Result() (*types100.Result, error) {
	if c.PrevResult == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "no prevResult",
			"rdma-chain must be chained after a primary plugin")
	}
	if err := checkResult(c.PrevResult); err != nil {
		return nil, asCNI(types.ErrDecodingFailure, err)
	}
	r, err := types100.NewResultFromResult(c.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, `cannot convert field "prevResult"`, err.Error())
	}
	return r, nil
}

// checkResult refuses what the library's conversions do not guard against:
// null entries and interface indexes out of range. It knows the result
// types of every version the plugin supports.
func checkResult(r types.Result) error {
	switch t := r.(type) {
	case *types100.Result:
		if t == nil {
			break
		}
		return checkLists(t.Interfaces, t.IPs, t.Routes, func(ip *types100.IPConfig) *int { return ip.Interface })
	case *types040.Result:
		if t == nil {
			break
		}
		return checkLists(t.Interfaces, t.IPs, t.Routes, func(ip *types040.IPConfig) *int { return ip.Interface })
	case nil:
		return nil
	}
	return errField("prevResult", "result type %T is not one of versions %v", r, SupportedVersions)
}

func checkLists[I, P any](ifs []*I, ips []*P, routes []*types.Route, index func(*P) *int) error {
	for _, l := range []struct {
		name  string
		n     int
		first int
	}{
		{"interfaces", len(ifs), firstNil(ifs)},
		{"ips", len(ips), firstNil(ips)},
		{"routes", len(routes), firstNil(routes)},
	} {
		if l.n > maxResultEntries {
			return errField("prevResult."+l.name, "%d entries, at most %d allowed", l.n, maxResultEntries)
		}
		if l.first >= 0 {
			return errField(fmt.Sprintf("prevResult.%s[%d]", l.name, l.first), "want a JSON object, got null")
		}
	}
	for i, ip := range ips {
		if n := index(ip); n != nil && (*n < 0 || *n >= len(ifs)) {
			return errField(fmt.Sprintf("prevResult.ips[%d].interface", i), "index %d out of range: %d interfaces", *n, len(ifs))
		}
	}
	return nil
}

func firstNil[T any](s []*T) int {
	for i, e := range s {
		if e == nil {
			return i
		}
	}
	return -1
}
