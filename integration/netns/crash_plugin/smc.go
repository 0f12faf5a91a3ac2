package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

// fakeSMC keeps the SMC-R pnet tables as files, one per netns
// (pnet/init.json for the plugin's own, pnet/<inode>.json for a pod's), so a
// crash test sees an entry left behind. The socket hook stays the kernel's.
type fakeSMC struct {
	chain.SMC
	dir string
}

func (f fakeSMC) table(nsPath string) (string, error) {
	name := "init"
	if nsPath != "" {
		var st unix.Stat_t
		if err := unix.Stat(nsPath, &st); err != nil {
			return "", err
		}
		name = strconv.FormatUint(st.Ino, 10)
	}
	return filepath.Join(f.dir, "pnet", name+".json"), nil
}

func (f fakeSMC) read(path string) ([]smc.PnetEntry, error) {
	var list []smc.PnetEntry
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return list, json.Unmarshal(b, &list)
}

func (f fakeSMC) write(path string, list []smc.PnetEntry) error {
	if len(list) == 0 {
		err := os.Remove(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(list)
	return os.WriteFile(path, b, 0o600)
}

func sameTarget(a, b smc.PnetEntry) bool {
	return a.EthName == b.EthName && a.IBName == b.IBName && (a.IBName == "" || a.IBPort == b.IBPort)
}

// EnsurePnet adds e; an entry for the same netdev or port is returned as
// is, or as a *smc.ConflictError when its PNETID differs, as the kernel's.
func (f fakeSMC) EnsurePnet(nsPath string, e smc.PnetEntry) (smc.PnetEntry, error) {
	path, err := f.table(nsPath)
	if err != nil {
		return smc.PnetEntry{}, err
	}
	list, err := f.read(path)
	if err != nil {
		return smc.PnetEntry{}, err
	}
	for _, have := range list {
		if sameTarget(have, e) {
			if have.PnetID != e.PnetID {
				return smc.PnetEntry{}, &smc.ConflictError{Existing: have}
			}
			return have, nil
		}
	}
	return e, f.write(path, append(list, e))
}

// RemovePnet removes e; a vanished netns took its table with it.
func (f fakeSMC) RemovePnet(nsPath string, e smc.PnetEntry) error {
	path, err := f.table(nsPath)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	list, err := f.read(path)
	if err != nil {
		return err
	}
	return f.write(path, slices.DeleteFunc(list, func(have smc.PnetEntry) bool {
		return sameTarget(have, e) && have.PnetID == e.PnetID
	}))
}

func (f fakeSMC) PnetEntries(nsPath string) ([]smc.PnetEntry, error) {
	path, err := f.table(nsPath)
	if err != nil {
		return nil, err
	}
	return f.read(path)
}

func (f fakeSMC) EnsureUEID(string) error { return nil }

func (f fakeSMC) TCP2SMC(string) (bool, error) { return false, nil }
