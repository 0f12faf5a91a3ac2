package chain

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// DefaultLockTimeout bounds the wait for the node lock (Env.LockTimeout).
// Nothing holds the lock across a delegated IPAM call or a kubelet lookup,
// so a wait this long means a stuck process: the runtime is told to try
// again.
const DefaultLockTimeout = 10 * time.Second

// lock takes the node lock and, the first time in this call, sweeps the
// temporary files a killed writer left (every writer writes only under the
// lock; one left while this call was between two locks is the next call's).
func (c *call) lock() (func(), error) {
	unlock, err := c.store.Lock(c.lockTimeout)
	if err != nil {
		return nil, c.lockError(err)
	}
	c.sweep()
	return unlock, nil
}

func (c *call) lockError(err error) error {
	if errors.Is(err, state.ErrLockTimeout) {
		return cniError(types.ErrTryAgainLater, "the node's rdma-chain state is locked by another plugin call", err)
	}
	return cniError(CodeState, "cannot lock attachment state in "+c.conf.DataDir, err)
}

// lockKey takes the key lock of the call's attachment (state.LockKey),
// which the runtime's calls and the reconcile daemon's DEL about it take
// in turn. Nothing is recorded yet when the state directory cannot exist:
// then there is no lock to take either.
func (c *call) lockKey() (func(), error) {
	unlock, err := c.store.LockKey(c.key(), c.lockTimeout)
	if noStateDir(c, err) {
		return func() {}, nil // lockedRecord says so
	}
	if errors.Is(err, state.ErrLockTimeout) {
		return nil, cniError(types.ErrTryAgainLater, "attachment "+c.args.ContainerID+"/"+c.args.IfName+
			" is in the hands of another plugin call (a DEL, an ADD or the reconcile daemon's release)", err)
	}
	if err != nil {
		return nil, c.lockError(err)
	}
	return unlock, nil
}

// heldRecord is another attachment's record, read under the node lock
// while this call holds that attachment's key lock: no other call changes
// it until unlock lets the key lock go.
type heldRecord struct {
	*state.Record
	unlock func()
}

// holdKey takes, without waiting, the key lock of rec, another attachment
// than the call's, whose record the call has just read under the node
// lock (GC's and reclaim's releases). It reports false when that
// attachment's own call holds the lock (the record is left to that call,
// said at Info), and the error when the lock cannot be taken.
func (c *call) holdKey(rec *state.Record) (heldRecord, bool, error) {
	unlock, ok, err := c.store.TryLockKey(rec.Key())
	if err != nil {
		return heldRecord{}, false, fmt.Errorf("lock attachment %s/%s: %w", rec.ContainerID, rec.IfName, err)
	}
	if !ok {
		c.log.Info("an attachment to release is in another plugin call's hands: left to it", "holder", rec.ContainerID, "ifname", rec.IfName)
		return heldRecord{}, false, nil
	}
	return heldRecord{Record: rec, unlock: unlock}, true, nil
}

// sweepTemporary removes the temporary files and key lock files killed
// calls left in store (state.Store.Sweep); the caller holds the node lock.
func sweepTemporary(store *state.Store, log *slog.Logger) {
	if n, err := store.Sweep(); err != nil {
		log.Warn("cannot remove stale temporary state files", "error", err)
	} else if n > 0 {
		log.Info("removed temporary state files a killed plugin call left", "count", n)
	}
}

// readRecord reads the call's record under a brief node lock (see
// lockedRecord).
func (p *Plugin) readRecord(c *call, quarantine bool) (*state.Record, error) {
	rec, unlock, err := p.lockedRecord(c, quarantine)
	unlock()
	return rec, err
}

// lockedRecord reads the call's record under the node lock and returns it
// with the lock still held; unlock gives the lock up (it is a no-op when
// the lock was not taken). It returns a nil record when there is none, when
// the state directory cannot even exist (DEL then has nothing to undo), or,
// with quarantine (DEL), when the record is unreadable: that one is
// quarantined and logged, so no DEL is refused forever for it, and the
// error is errQuarantined; without (CHECK) an unreadable record is an error
// and nothing moves. A record naming the plugin's own netns is quarantined
// too (no error: it cannot be true, so nothing is inferred from it).
func (p *Plugin) lockedRecord(c *call, quarantine bool) (rec *state.Record, unlock func(), err error) {
	unlock, err = c.store.Lock(c.lockTimeout)
	if noStateDir(c, err) {
		c.log.Info("state directory cannot exist: nothing recorded", "dataDir", c.conf.DataDir, "error", err)
		return nil, func() {}, nil
	}
	if err != nil {
		return nil, func() {}, c.lockError(err)
	}
	c.sweep()
	rec, err = c.store.Get(c.key())
	switch {
	case err == nil && quarantine && p.impossible(c, rec):
		// impossible quarantined it: nothing to undo.
	case err == nil:
		return rec, unlock, nil
	case errors.Is(err, state.ErrNotFound):
		err = nil
	case errors.Is(err, state.ErrCorrupt) && quarantine:
		if p.quarantine(c, err) {
			err = errQuarantined
		} else {
			err = nil
		}
	default:
		err = cniError(CodeState, "cannot read attachment state", err)
	}
	unlock()
	return nil, func() {}, err
}

// noStateDir reports whether err says the state directory cannot exist
// (missing and not creatable, or a regular file at its path).
func noStateDir(c *call, err error) bool {
	return errors.Is(err, state.ErrNoStateDir) || (errors.Is(err, state.ErrUnsafePath) && isRegularFile(c.conf.DataDir))
}

// isRegularFile reports whether path is a regular file (not a link).
func isRegularFile(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode().IsRegular()
}

// impossible reports whether rec names the plugin's own netns as its pod's:
// such a record cannot be true, and acting on it would touch the host.
// It is quarantined (under the lock) and logged.
func (p *Plugin) impossible(c *call, rec *state.Record) bool {
	if rec.NetNS == "" {
		return false
	}
	own, err := p.env.Netns.Own(rec.NetNS)
	if err != nil || !own {
		return false
	}
	moved, qerr := c.store.QuarantineKey(rec.Key())
	c.log.Error("attachment record names the plugin's own netns as the pod's: quarantined, nothing undone",
		"holder", rec.ContainerID, "netns", rec.NetNS, "quarantined", moved, "error", qerr)
	return true
}

// errQuarantined means the call's record was unreadable and is quarantined.
var errQuarantined = errors.New("attachment record unreadable: quarantined")

// quarantine moves every unreadable record named in err out of the way and
// reports whether err named any.
func (p *Plugin) quarantine(c *call, err error) bool {
	ces := corruptErrors(err)
	for _, ce := range ces {
		moved, qerr := c.store.Quarantine(ce.Path)
		if qerr != nil {
			c.log.Error("cannot quarantine unreadable attachment record", "path", ce.Path, "error", qerr)
			continue
		}
		c.log.Warn("unreadable attachment record quarantined; the pod's netns and leases may need manual clean-up",
			"path", ce.Path, "quarantined", moved, "reason", ce.Err)
	}
	return len(ces) > 0
}

// corruptErrors lists the *state.CorruptError values in err (which may be
// a join of several).
func corruptErrors(err error) []*state.CorruptError {
	var out []*state.CorruptError
	var ce *state.CorruptError
	if errors.As(err, &ce) {
		out = append(out, ce)
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		out = out[:0]
		for _, e := range j.Unwrap() {
			out = append(out, corruptErrors(e)...)
		}
	}
	return out
}

// listRecords lists the records under the lock, quarantining unreadable ones.
func (p *Plugin) listRecords(c *call) ([]*state.Record, error) {
	recs, err := c.store.List()
	if err == nil {
		return recs, nil
	}
	p.quarantine(c, err)
	var rest []error
	for _, e := range flatten(err) {
		if !errors.Is(e, state.ErrCorrupt) {
			rest = append(rest, e)
		}
	}
	if len(rest) > 0 && len(recs) == 0 {
		return nil, cniError(CodeState, "cannot list attachment state", errors.Join(rest...))
	}
	return recs, nil
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
