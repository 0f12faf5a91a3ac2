package install

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/say"
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
			say.Printf(out, "%s\n", d)
		}
		if err != nil {
			return err
		}
	}
	if o.Conflist == "" {
		return nil
	}
	path, err := waitConflist(o.Conflist, o.ConfDir, o.Wait, out)
	if err != nil {
		return err
	}
	var what string
	written, err := editFile(path, func(data []byte) ([]byte, error) {
		result, w, err := upsertChecked(path, data, o.After, o.Set)
		what = w
		switch {
		case err != nil:
			return nil, err
		case o.DryRun:
			_, err := out.Write(result)
			return nil, err
		case w == "":
			return nil, nil
		}
		return result, nil
	})
	switch {
	case err != nil:
		return err
	case written:
		say.Printf(out, "%s: %s\n", path, what)
	case !o.DryRun:
		say.Printf(out, "%s: unchanged\n", path)
	}
	return nil
}

// waitConflist resolves --conflist (a path, or conflist.Auto for the
// primary's conflist in confDir) and waits up to d for it, saying on out
// why it waits when the first file is a Multus file it refuses.
func waitConflist(path, confDir string, d time.Duration, out io.Writer) (string, error) {
	if path == conflist.Auto {
		return conflist.WaitPrimary(confDir, d, func(err error) {
			say.Printf(out, "waiting up to %v for the conf dir to change: %v\n", d, err)
		})
	}
	return path, conflist.WaitFor(path, d)
}

// EnsureEntry puts the rdma-chain entry back into the conflist at path
// (after the last plugin of type after, with the keys of set) when it has
// none, as after an agent rewrote the file; it reports whether it did. A
// conflist that still has its entry is left as it is, and a version the
// agent writes while the entry goes back is never replaced: the entry goes
// into it instead (editFile).
func EnsureEntry(path, after string, set []byte) (bool, error) {
	return editFile(path, func(data []byte) ([]byte, error) {
		_, plugins, err := conflist.Plugins(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if conflist.EntryIndex(plugins) >= 0 {
			return nil, nil
		}
		result, _, err := upsertChecked(path, data, after, set)
		return result, err
	})
}

// editAttempts bounds the reads of a conflist that changes again each time
// an edit of it is about to be written.
const editAttempts = 5

// beforeReplace, when set (by tests), runs between an edit's read of the
// conflist and the write of its result.
var beforeReplace func(path string)

// editFile writes edit's result for the conflist at path (nil: nothing to
// write) only over the version it was computed from. When another writer
// changed the file in between, it reads the file again and edits that,
// up to editAttempts times. It reports whether it wrote.
func editFile(path string, edit func(data []byte) ([]byte, error)) (bool, error) {
	for attempt := 1; ; attempt++ {
		data, st, err := conflist.ReadNoFollow(path)
		if err != nil {
			return false, err
		}
		result, err := edit(data)
		if err != nil || result == nil {
			return false, err
		}
		if beforeReplace != nil {
			beforeReplace(path)
		}
		err = conflist.ReplaceIfUnchanged(path, data, result, st)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, conflist.ErrChanged):
			return false, err
		case attempt == editAttempts:
			return false, fmt.Errorf("%w (%d attempts, another writer rewrites it each time)", err, attempt)
		}
	}
}

// upsertChecked is conflist.Upsert of data, refused when the plugin would
// reject the result.
func upsertChecked(path string, data []byte, after string, set []byte) ([]byte, string, error) {
	result, what, err := conflist.Upsert(data, after, set)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if err := checkResult(path, result); err != nil {
		return nil, "", err
	}
	return result, what, nil
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
