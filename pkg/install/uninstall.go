package install

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// UninstallOptions say what Uninstall takes off the node.
type UninstallOptions struct {
	// Conflist (or conflist.Auto: the primary's in ConfDir) loses its
	// rdma-chain entry ("": none).
	Conflist, ConfDir string
	// BinDir loses PluginBinaries ("": none).
	BinDir string
}

// Uninstall takes the rdma-chain entry out of the conflist first, so that
// no new pod gets an attachment, then the plugin binaries. The records of
// attachments stay where they are, for their pods' DEL: it says how many
// are still recorded. Each step says what it did on out.
func Uninstall(o UninstallOptions, out io.Writer) error {
	if o.Conflist != "" {
		if err := removeEntry(o.Conflist, o.ConfDir, out); err != nil {
			return err
		}
	}
	if o.BinDir == "" {
		return nil
	}
	return removeBinaries(o.BinDir, out)
}

func removeEntry(path, confDir string, out io.Writer) error {
	path, err := waitConflist(path, confDir, 0)
	if err != nil {
		return err
	}
	data, st, err := conflist.ReadNoFollow(path)
	if err != nil {
		return err
	}
	n, nerr := conflist.FromFile(path)
	result, had, err := conflist.Remove(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !had {
		say(out, "%s: no rdma-chain entry\n", path)
		return nil
	}
	if err := conflist.WriteAtomic(path, result, st); err != nil {
		return err
	}
	say(out, "%s: rdma-chain entry removed\n", path)
	if nerr == nil {
		recs, _ := state.New(n.DataDir).List()
		say(out, "%s: %d attachments still recorded, kept for their pods' DEL\n", n.DataDir, len(recs))
	}
	return nil
}

// removeBinaries unlinks PluginBinaries from dir, the plugin before the
// hook it runs; a symlink or non-regular file of that name is left alone.
func removeBinaries(dir string, out io.Writer) error {
	fd, err := openDirNoFollow(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for i := len(PluginBinaries) - 1; i >= 0; i-- {
		name := PluginBinaries[i]
		var st unix.Stat_t
		err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT):
			say(out, "%s/%s: not there\n", dir, name)
			continue
		case err != nil:
			return fmt.Errorf("stat %s/%s: %w", dir, name, err)
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			return fmt.Errorf("refusing %s/%s: not a regular file", dir, name)
		}
		if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s/%s: %w", dir, name, err)
		}
		say(out, "%s/%s: removed\n", dir, name)
	}
	return unix.Fsync(fd)
}
