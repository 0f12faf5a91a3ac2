// Command cnicall is cnitool (same arguments and environment: NETCONFPATH,
// CNI_PATH, CNI_ARGS, CAP_ARGS, CNI_IFNAME) that also shows the CNI error a
// plugin returned. cnitool prints only err.Error(), which drops the error
// code; the VM scenarios need the code, so on failure cnicall prints
//
//	CNI-ERROR {"code":102,"msg":"...","details":"..."}
//
// on stdout and exits 1. On success it behaves as cnitool (ADD prints the
// result).
//
// CNICALL_ONLY=TYPE makes CHECK run only the list's plugins of that type
// (with the cached result as prevResult, as in a full CHECK), so that a
// scenario reads that plugin's own CHECK error codes rather than the first
// plugin's error.
package main

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: cnicall add|check|del|status NET NETNS (status ignores NETNS)")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		var ce *types.Error
		if errors.As(err, &ce) {
			b, _ := json.Marshal(ce)
			fmt.Printf("CNI-ERROR %s\n", b)
		} else {
			b, _ := json.Marshal(map[string]any{"code": 0, "msg": err.Error()})
			fmt.Printf("CNI-ERROR %s\n", b)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(cmd, name, netns string) error {
	netdir := os.Getenv("NETCONFPATH")
	if netdir == "" {
		netdir = "/etc/cni/net.d"
	}
	conf, err := libcni.LoadNetworkConf(netdir, name)
	if err != nil {
		return err
	}
	var capArgs map[string]any
	if v := os.Getenv("CAP_ARGS"); v != "" {
		if err := json.Unmarshal([]byte(v), &capArgs); err != nil {
			return err
		}
	}
	var args [][2]string
	if v := os.Getenv("CNI_ARGS"); v != "" {
		for _, pair := range strings.Split(v, ";") {
			k, val, ok := strings.Cut(pair, "=")
			if !ok {
				return fmt.Errorf("invalid CNI_ARGS pair %q", pair)
			}
			args = append(args, [2]string{k, val})
		}
	}
	ifName := "eth0"
	if v, ok := os.LookupEnv("CNI_IFNAME"); ok {
		ifName = v
	}
	netns, err = filepath.Abs(netns)
	if err != nil {
		return err
	}
	// Same container ID as cnitool, so both tools can act on one attachment.
	sum := sha512.Sum512([]byte(netns))
	rt := &libcni.RuntimeConf{
		ContainerID:    fmt.Sprintf("cnitool-%x", sum[:10]),
		NetNS:          netns,
		IfName:         ifName,
		Args:           args,
		CapabilityArgs: capArgs,
	}
	c := libcni.NewCNIConfig(filepath.SplitList(os.Getenv("CNI_PATH")), nil)
	ctx := context.Background()
	switch cmd {
	case "add":
		res, err := c.AddNetworkList(ctx, conf, rt)
		if res != nil {
			_ = res.Print()
		}
		return err
	case "check":
		if only := os.Getenv("CNICALL_ONLY"); only != "" {
			sub := *conf
			sub.Plugins = nil
			for _, p := range conf.Plugins {
				if p.Network.Type == only {
					sub.Plugins = append(sub.Plugins, p)
				}
			}
			if len(sub.Plugins) == 0 {
				return fmt.Errorf("CNICALL_ONLY=%s: no such plugin in %s", only, conf.Name)
			}
			return c.CheckNetworkList(ctx, &sub, rt)
		}
		return c.CheckNetworkList(ctx, conf, rt)
	case "del":
		return c.DelNetworkList(ctx, conf, rt)
	case "status":
		return c.GetStatusNetworkList(ctx, conf)
	}
	return fmt.Errorf("unknown command %q", cmd)
}
