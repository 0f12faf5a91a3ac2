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

// watchConfDirs reports, on the channel it returns, each change to the
// files of dirs once they have been quiet for confSettle. A primary's
// agent rewrites its conflist on restart (Calico's, Flannel's, Terway's),
// and a pod created before the next pass would get no RDMA: the entry goes
// back within a second instead. Without a watch (inotify unavailable, the
// dir missing) it logs why and the channel never fires: the interval's
// passes still put the entry back.
func watchConfDirs(ctx context.Context, dirs []string, log *slog.Logger) <-chan struct{} {
	changed := make(chan struct{}, 1)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("not watching the conflist directories: a rewritten conflist gets its entry back at the next pass", "dirs", strings.Join(dirs, ","), "error", err)
		return changed
	}
	for _, dir := range dirs {
		if err := w.Add(dir); err != nil {
			log.Warn("not watching a conflist directory: a rewritten conflist there gets its entry back at the next pass", "dir", dir, "error", err)
		}
	}
	go func() {
		defer func() { _ = w.Close() }()
		settle := time.NewTimer(confSettle)
		settle.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				settle.Reset(confSettle)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("watching the conflist directories", "dirs", strings.Join(dirs, ","), "error", err)
				settle.Reset(confSettle) // an overflow may have hidden a change
			case <-settle.C:
				select {
				case changed <- struct{}{}:
				default: // one check pending covers this change too
				}
			}
		}
	}()
	return changed
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
