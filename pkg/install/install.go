// Package install puts rdma-chain on a node: the plugin binaries into the
// runtime's CNI bin dir and the rdma-chain entry into a conflist, each
// atomically and never through a symlink.
package install

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/validate"
)

// Options say what Run installs.
type Options struct {
	// BinariesFrom and BinDir: copy PluginBinaries from BinariesFrom into
	// BinDir first ("" both: no binaries).
	BinariesFrom, BinDir string
	// Conflist is the conflist to change ("": none; conflist.Auto: the
	// primary's conflist in ConfDir).
	Conflist, ConfDir string
	// Wait is how long to wait for Conflist to appear.
	Wait time.Duration
	// After places the entry after the last plugin of this type.
	After string
	// Set is a JSON object of entry keys to set (a null removes the key).
	Set []byte
	// DryRun writes the resulting conflist to out instead of the file.
	DryRun bool
}

// Run installs what o names and says what it did on out, one line per
// binary and one for the conflist.
func Run(o Options, out io.Writer) error {
	if o.BinariesFrom != "" && !o.DryRun {
		done, err := Binaries(o.BinariesFrom, o.BinDir, PluginBinaries)
		for _, d := range done {
			say(out, "%s\n", d)
		}
		if err != nil {
			return err
		}
	}
	if o.Conflist == "" {
		return nil
	}
	path, err := waitConflist(o.Conflist, o.ConfDir, o.Wait)
	if err != nil {
		return err
	}
	data, st, err := conflist.ReadNoFollow(path)
	if err != nil {
		return err
	}
	result, what, err := conflist.Upsert(data, o.After, o.Set)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := checkResult(path, result); err != nil {
		return err
	}
	switch {
	case o.DryRun:
		_, err := out.Write(result)
		return err
	case what == "":
		say(out, "%s: unchanged\n", path)
		return nil
	}
	if err := conflist.WriteAtomic(path, result, st); err != nil {
		return err
	}
	say(out, "%s: %s\n", path, what)
	return nil
}

// waitConflist resolves --conflist (a path, or conflist.Auto for the
// primary's conflist in confDir) and waits up to d for it.
func waitConflist(path, confDir string, d time.Duration) (string, error) {
	if path == conflist.Auto {
		return conflist.WaitPrimary(confDir, d)
	}
	return path, conflist.WaitFor(path, d)
}

// EnsureEntry puts the rdma-chain entry back into the conflist at path
// (after the last plugin of type after, with the keys of set) when it has
// none, as after an agent rewrote the file; it reports whether it did. A
// conflist that still has its entry is left as it is.
func EnsureEntry(path, after string, set []byte) (bool, error) {
	data, st, err := conflist.ReadNoFollow(path)
	if err != nil {
		return false, err
	}
	_, plugins, err := conflist.Plugins(data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if conflist.EntryIndex(plugins) >= 0 {
		return false, nil
	}
	result, _, err := conflist.Upsert(data, after, set)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkResult(path, result); err != nil {
		return false, err
	}
	return true, conflist.WriteAtomic(path, result, st)
}

// checkResult refuses a conflist the plugin would reject, naming each
// problem.
func checkResult(path string, result []byte) error {
	probs := validate.Conflist(result, "")
	if len(probs) == 0 {
		return nil
	}
	lines := append([]string{path + ": the result would not be valid, nothing written:"},
		validate.FormatAll(path+" (result)", result, probs)...)
	return errors.New(strings.Join(lines, "\n"))
}

// say prints a progress line; a failed write to the output is not
// something install can report anywhere.
func say(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
