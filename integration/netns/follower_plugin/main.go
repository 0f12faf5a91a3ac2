// Command follower_plugin is a chained CNI plugin for the netns tier that
// records what it receives: for each call it writes its stdin to
// $RDMA_CHAIN_FOLLOWER_DIR/<CNI_COMMAND>.json (a test folder) and, on ADD,
// returns its prevResult unchanged, as a follower that only reads the
// result would (portmap, bandwidth, Cilium's chaining mode).
package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:   func(a *skel.CmdArgs) error { return follow(a, true) },
		Check: func(a *skel.CmdArgs) error { return follow(a, false) },
		Del:   func(a *skel.CmdArgs) error { return follow(a, false) },
	}, version.All, "follower_plugin: records what a plugin after rdma-chain receives")
}

func follow(a *skel.CmdArgs, add bool) error {
	dir := os.Getenv("RDMA_CHAIN_FOLLOWER_DIR")
	if dir == "" {
		return errors.New("RDMA_CHAIN_FOLLOWER_DIR is not set")
	}
	if err := os.WriteFile(filepath.Join(dir, os.Getenv("CNI_COMMAND")+".json"), a.StdinData, 0o600); err != nil {
		return err
	}
	if !add {
		return nil
	}
	conf := &types.PluginConf{}
	if err := json.Unmarshal(a.StdinData, conf); err != nil {
		return err
	}
	if err := version.ParsePrevResult(conf); err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return errors.New("no prevResult")
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}
