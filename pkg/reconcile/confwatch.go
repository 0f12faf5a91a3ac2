package reconcile

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
)

// confSettle is how long the conf dir must be quiet after a change before
// the entry is checked: an agent writing its conflist in place (truncate,
// then write) is read once it is done, not half-written.
const confSettle = 300 * time.Millisecond

// confSettleMax is the longest a burst of changes delays the check: an
// agent that writes the dir more often than confSettle would otherwise
// hold the check off for as long as it writes.
const confSettleMax = 2 * time.Second

// watchConfDirs reports, on changed, each change to the files of dirs once
// they have been quiet for confSettle, or confSettleMax after the first
// change of a burst that goes on. A primary's agent rewrites its conflist
// on restart (Calico's, Flannel's, Terway's), and a pod created before the
// next pass would get no RDMA: the entry goes back within a second
// instead. Without a watch (inotify unavailable, the dir missing) it logs
// why and changed never fires from it: the interval's passes still put
// the entry back.
func watchConfDirs(ctx context.Context, dirs []string, changed chan<- struct{}, log *slog.Logger) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("not watching the conflist directories: a rewritten conflist gets its entry back at the next pass", "dirs", strings.Join(dirs, ","), "error", err)
		return
	}
	for _, dir := range dirs {
		if err := w.Add(dir); err != nil {
			log.Warn("not watching a conflist directory: a rewritten conflist there gets its entry back at the next pass", "dir", dir, "error", err)
		}
	}
	go func() {
		defer func() { _ = w.Close() }()
		settleBursts(ctx, w, confSettle, confSettleMax, changed, func(err error) {
			log.Warn("watching the conflist directories", "dirs", strings.Join(dirs, ","), "error", err)
		})
	}()
}

// settleBursts sends on changed once w's events have paused for settle,
// or settleMax after the first event of a burst that does not pause,
// until ctx ends or w closes. An error counts as an event: an overflow
// may have hidden a change.
func settleBursts(ctx context.Context, w *fsnotify.Watcher, settle, settleMax time.Duration, changed chan<- struct{}, warn func(error)) {
	timer := time.NewTimer(settle)
	timer.Stop()
	var burst time.Time // the first event not yet reported; zero: none
	event := func() {
		now := time.Now()
		if burst.IsZero() {
			burst = now
		}
		timer.Reset(max(0, min(settle, burst.Add(settleMax).Sub(now))))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			event()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			warn(err)
			event()
		case <-timer.C:
			burst = time.Time{}
			select {
			case changed <- struct{}{}:
			default: // one check pending covers this change too
			}
		}
	}
}

// conflistDirs are the directories of conflists (conflist.Auto: confDir),
// each once.
func conflistDirs(conflists []string, confDir string) []string {
	var dirs []string
	seen := map[string]bool{}
	for _, p := range conflists {
		d := confDir
		if p != conflist.Auto {
			d = filepath.Dir(p)
		}
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}
