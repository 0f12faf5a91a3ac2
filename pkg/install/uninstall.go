package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// ErrLiveAttachments means pods that still hold an attachment kept the entry
// (draining) and the binaries on the node.
var ErrLiveAttachments = errors.New("attachments of running pods are still recorded")

// UninstallOptions say what Uninstall takes off the node.
type UninstallOptions struct {
	// Conflist (or conflist.Auto: the primary's in ConfDir) loses its
	// rdma-chain entry ("": none).
	Conflist, ConfDir string
	// BinDir loses PluginBinaries ("": none).
	BinDir string
	// Wait is how long to wait for the pods that hold an attachment to go.
	Wait time.Duration
	// Poll is the interval between looks at the records while waiting
	// (0: two seconds).
	Poll time.Duration
	// Force takes the entry and the binaries out although pods still hold
	// attachments: their records stay, and nothing gives them back; a
	// socket hook hold it cannot release stays, said on out.
	Force bool
	// Release gives back the attachments of pods that are gone (a
	// reconcile pass over n); nil releases nothing but what the pods'
	// own DEL does.
	Release func(ctx context.Context, n conflist.Network) error
	// ReleaseHook releases the SMC socket hook reconcile held in a bpffs
	// directory and reports whether one was held; nil runs BinDir's hook
	// binary (or the one beside this binary) when the hook is held.
	ReleaseHook func(dir string) (bool, error)
}

// Uninstall takes rdma-chain off the node without stranding an
// attachment. Runtimes call DEL with the conflist they have at the time,
// so an entry taken out while pods hold attachments would leave their
// devices, leases and SMC-R entries to nobody. It first marks the entry
// draining (new pods pass through, recorded ones still get their DEL),
// releases what gone pods held and waits up to Wait for the rest; only
// when no attachment is recorded (or with Force) does it take the entry
// out, then the binaries. Each step says what it did on out.
func Uninstall(ctx context.Context, o UninstallOptions, out io.Writer) error {
	if o.Conflist != "" {
		done, err := drainEntry(ctx, o, out)
		if err != nil || !done {
			return err
		}
	}
	if o.BinDir == "" {
		return nil
	}
	return removeBinaries(o.BinDir, out)
}

// drainEntry drains the conflist's entry and takes it out once no pod
// holds an attachment. It reports whether the binaries may go.
func drainEntry(ctx context.Context, o UninstallOptions, out io.Writer) (bool, error) {
	path, err := waitConflist(o.Conflist, o.ConfDir, 0, io.Discard)
	if err != nil {
		return false, err
	}
	n, err := conflist.FromFile(path)
	if errors.Is(err, conflist.ErrNoEntry) {
		say.Printf(out, "%s: no rdma-chain entry\n", path)
		return true, nil
	}
	if err != nil && o.Force {
		// An entry the plugin cannot read cannot drain or DEL anything;
		// its bpffsDir is unknown, so the default one's hold goes.
		say.Printf(out, "%s: --force: %v\n", path, err)
		if err := o.releaseHook(config.DefaultBPFFSDir, "", out); err != nil {
			return false, err
		}
		return true, removeEntry(path, out)
	}
	if err != nil {
		return false, err
	}
	if err := setDrain(path, out); err != nil {
		return false, err
	}
	live, err := waitReleased(ctx, o, n, out)
	if err != nil {
		return false, err
	}
	if len(live) > 0 && !o.Force {
		for _, r := range live {
			say.Printf(out, "%s: held by %s\n", n.DataDir, describe(r))
		}
		return false, fmt.Errorf("%w: %d in %s; the entry stays in %s, draining (new pods pass through, these get their DEL), and the binaries stay: "+
			"run uninstall again once those pods are gone, or with --wait, or --force to strand them", ErrLiveAttachments, len(live), n.DataDir, path)
	}
	// The hold goes before the entry: if releasing fails, the entry stays
	// (draining) and a second uninstall finds the directory again.
	c, _, err := config.ParseWithoutPrevResult(n.Stdin)
	if err != nil {
		return false, err
	}
	if err := o.releaseHook(c.SMCR.BPFFSDir, n.DataDir, out); err != nil {
		return false, err
	}
	if err := removeEntry(path, out); err != nil {
		return false, err
	}
	if len(live) > 0 {
		say.Printf(out, "%s: --force: %d attachments of running pods left recorded; nothing will give them back\n", n.DataDir, len(live))
	}
	return true, nil
}

// setDrain sets "drain": true in the entry, so that no new pod gets an
// attachment while the recorded ones are still given back by their DEL.
func setDrain(path string, out io.Writer) error {
	written, err := editFile(path, func(data []byte) ([]byte, error) {
		result, what, err := conflist.Upsert(data, "", []byte(`{"drain":true}`))
		if err != nil || what == "" {
			return nil, wrapPath(path, err)
		}
		return result, nil
	})
	switch {
	case err != nil:
		return err
	case written:
		say.Printf(out, "%s: rdma-chain entry draining: new pods pass through\n", path)
	default:
		say.Printf(out, "%s: rdma-chain entry already draining\n", path)
	}
	return nil
}

// waitReleased releases what gone pods held and returns the attachments
// still recorded, looking again every Poll until none is left or Wait is
// over.
func waitReleased(ctx context.Context, o UninstallOptions, n conflist.Network, out io.Writer) ([]*state.Record, error) {
	poll := o.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	deadline := time.Now().Add(o.Wait)
	for waiting := false; ; waiting = true {
		if o.Release != nil {
			if err := o.Release(ctx, n); err != nil {
				say.Printf(out, "%s: releasing the attachments of gone pods: %v\n", n.DataDir, err)
			}
		}
		live, err := recorded(n)
		if err != nil || len(live) == 0 || !time.Now().Add(poll).Before(deadline) {
			if err == nil {
				say.Printf(out, "%s: %d attachments recorded\n", n.DataDir, len(live))
			}
			return live, err
		}
		if !waiting {
			say.Printf(out, "%s: %d attachments recorded: waiting up to %s for their pods to go\n", n.DataDir, len(live), o.Wait)
		}
		select {
		case <-ctx.Done():
			return live, nil
		case <-time.After(poll):
		}
	}
}

// recorded lists the attachments of network n.
func recorded(n conflist.Network) ([]*state.Record, error) {
	recs, err := state.New(n.DataDir).List()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.DataDir, err)
	}
	var out []*state.Record
	for _, r := range recs {
		if r.Network == n.Name {
			out = append(out, r)
		}
	}
	return out, nil
}

func describe(r *state.Record) string {
	s := []string{r.Network + "/" + r.ContainerID + "/" + r.IfName}
	if r.Pod.Name != "" {
		s = append(s, "pod "+r.Pod.Namespace+"/"+r.Pod.Name)
	}
	if r.NetNS != "" {
		s = append(s, "netns "+r.NetNS)
	}
	return strings.Join(s, ", ")
}

func removeEntry(path string, out io.Writer) error {
	written, err := editFile(path, func(data []byte) ([]byte, error) {
		result, had, err := conflist.Remove(data)
		if err != nil || !had {
			return nil, wrapPath(path, err)
		}
		return result, nil
	})
	switch {
	case err != nil:
		return err
	case written:
		say.Printf(out, "%s: rdma-chain entry removed\n", path)
	default:
		say.Printf(out, "%s: no rdma-chain entry\n", path)
	}
	return nil
}

// wrapPath names the conflist in err (nil: nil).
func wrapPath(path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", path, err)
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
			say.Printf(out, "%s/%s: not there\n", dir, name)
			continue
		case err != nil:
			return fmt.Errorf("stat %s/%s: %w", dir, name, err)
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			return fmt.Errorf("refusing %s/%s: not a regular file", dir, name)
		}
		if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s/%s: %w", dir, name, err)
		}
		say.Printf(out, "%s/%s: removed\n", dir, name)
	}
	return unix.Fsync(fd)
}

// hookLockTimeout bounds the wait for the node lock before a release: a
// plugin call holds it for milliseconds, so a longer wait is a stuck one.
const hookLockTimeout = 30 * time.Second

// releaseHook releases the SMC socket hook that reconcile held in dir for
// the entry's SMC-R pods (with none listed, the program detaches and the
// pins go), under the node lock of the entry's dataDir ("" when the entry
// could not be read): the plugin lists and unlists pods' netns under that
// lock, and a DEL unlisting the last pod while the hold goes would find
// the map empty too and detach the program a second time.
func (o UninstallOptions) releaseHook(dir, dataDir string, out io.Writer) error {
	release := o.ReleaseHook
	if release == nil {
		release = func(dir string) (bool, error) { return releaseHeldHook(dir, o.BinDir) }
	}
	released := false
	unlock, err := lockIfThere(dataDir)
	if err != nil {
		err = fmt.Errorf("node lock of %s, taken before the release: %w", dataDir, err)
	} else {
		released, err = release(dir)
		unlock()
	}
	if err != nil && o.Force {
		// --force strands what it cannot give back, and says so.
		say.Printf(out, "%s: --force: SMC socket hook: %v: it stays held (rdma-chain-smc-hook release %s removes it)\n", dir, err, dir)
		return nil
	}
	if err != nil {
		return fmt.Errorf("SMC socket hook in %s: %w", dir, err)
	}
	if released {
		say.Printf(out, "%s: SMC socket hook released\n", dir)
	}
	return nil
}

// lockIfThere takes the node lock of dataDir when the directory exists:
// without it no plugin call has a record, or a lock, there, and taking the
// lock would leave the directory behind the uninstall.
func lockIfThere(dataDir string) (func(), error) {
	if dataDir == "" {
		return func() {}, nil
	}
	if _, err := os.Lstat(dataDir); errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	return state.New(dataDir).Lock(hookLockTimeout)
}

// releaseHeldHook runs binDir's hook binary (the node's, also under
// --host-root), or else the one beside this binary, to release a held
// hook. Without a bpffs at dir nothing can be pinned there, so nothing is
// held.
func releaseHeldHook(dir, binDir string) (bool, error) {
	held, err := hookcmd.Client{}.Held(dir)
	switch {
	case errors.Is(err, hookmap.ErrNoBPFFS), err == nil && !held:
		return false, nil
	case err != nil:
		return false, err
	}
	runner := hookcmd.Beside()
	if binDir != "" {
		runner = hookcmd.Runner{Path: filepath.Join(binDir, hookcmd.Binary)}
	}
	return true, runner.Release(dir)
}
