package state

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// probeMaxAge is how old a Writable probe must be before Sweep removes it:
// Writable runs without the node lock, so a younger probe may be in use.
const probeMaxAge = time.Minute

// createExclusive creates a new file dir/<prefix><random> (mode 0600) that
// did not exist before; O_EXCL|O_NOFOLLOW never writes through a link.
func createExclusive(dir, prefix string) (*os.File, error) {
	for range 10 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		name := filepath.Join(dir, prefix+hex.EncodeToString(b[:]))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, fileMode)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("create a unique file in %s: too many collisions", dir)
}

// writeTemp writes data to a new file dir/<prefix>*, synced to disk when
// sync is set, and returns its name. On failure nothing is left behind.
func writeTemp(dir, prefix string, data []byte, sync bool) (string, error) {
	f, err := createExclusive(dir, prefix)
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// writeAtomic replaces name with data via a temp file and rename, so a
// reader (or a killed writer) never leaves a partial file at name. With
// sync, the file and then the directory are synced: the new content also
// survives a power loss. A symbolic link at name is replaced, not followed.
func writeAtomic(name string, data []byte, sync bool) error {
	tmp, err := writeTemp(filepath.Dir(name), tmpPrefix, data, sync)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if !sync {
		return nil
	}
	return syncDir(filepath.Dir(name))
}

func syncDir(dir string) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Writable reports whether records can be written: the state directory can
// be created and a probe file written, synced and removed. It is meant for
// CNI STATUS and needs no lock: its probe is named apart from the writers'
// temporary files.
func (s *Store) Writable() error {
	dir, err := s.ensureSubdir(attachDirName)
	if err == nil {
		var probe string
		if probe, err = writeTemp(dir, probePrefix, []byte("{}\n"), true); err == nil {
			err = os.Remove(probe)
		}
	}
	if err != nil {
		return fmt.Errorf("state directory %s not writable: %w", s.dir, err)
	}
	return nil
}

// Sweep removes the temporary files that writers killed mid-write left in
// attachments/, Writable probes older than a minute, and the key lock
// files no call holds (sweepKeyLocks). The caller must hold the node lock:
// every writer writes only under it, so no temporary file is in use then.
func (s *Store) Sweep() (removed int, err error) {
	removed, err = s.sweepRecords()
	return removed, errors.Join(err, s.sweepKeyLocks())
}

// sweepRecords removes the temporary files and old probes in
// attachments/ (Sweep).
func (s *Store) sweepRecords() (removed int, err error) {
	exists, err := s.checkAttachDir()
	if err != nil || !exists {
		return 0, err
	}
	entries, err := os.ReadDir(s.attachDir())
	if err != nil {
		return 0, fmt.Errorf("sweep attachment records: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !stale(e) {
			continue
		}
		err := os.Remove(filepath.Join(s.attachDir(), e.Name()))
		switch {
		case err == nil:
			removed++
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("sweep attachment records: %w", err))
		}
	}
	if removed > 0 {
		errs = append(errs, syncDir(s.attachDir()))
	}
	return removed, errors.Join(errs...)
}

// stale reports whether e is a writer's temporary file or an old probe.
func stale(e fs.DirEntry) bool {
	n := e.Name()
	if strings.HasPrefix(n, tmpPrefix) {
		return true
	}
	if !strings.HasPrefix(n, probePrefix) {
		return false
	}
	fi, err := e.Info()
	return err == nil && time.Since(fi.ModTime()) > probeMaxAge
}
