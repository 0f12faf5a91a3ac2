// Package outcome keeps a small bounded log of the plugin's own outcomes
// (verb, pod, CNI code, message) under the state directory, so that an
// operator can ask "what happened to this pod" after the runtime has
// forgotten the error. It is on every CNI call's path: one append of one
// line, and a rewrite only when the file has grown past its bound.
package outcome

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// FileName is the log's name under the state directory.
const FileName = "outcomes.jsonl"

const (
	// MaxEntries bounds what a compaction keeps: the newest entries, after
	// keeping only the last outcome and the last failure of each pod.
	MaxEntries = 256
	// compactAt is the file size at which an append compacts the file; a
	// compaction leaves at most half of it.
	compactAt = 256 << 10
	// maxMsg bounds one entry's message so that one line stays small.
	maxMsg  = 1024
	maxLine = 4 * maxMsg
	dirMode = 0o700
)

// Entry is one outcome of one CNI call. Code is the CNI error code, 0 for
// success.
type Entry struct {
	Time        time.Time `json:"time"`
	Verb        string    `json:"verb"`
	Network     string    `json:"network,omitempty"`
	ContainerID string    `json:"containerID,omitempty"`
	Pod         string    `json:"pod,omitempty"`
	IfName      string    `json:"ifName,omitempty"`
	Code        uint      `json:"code"`
	Msg         string    `json:"msg,omitempty"`
}

// Failed reports whether the entry is a failure.
func (e Entry) Failed() bool { return e.Code != 0 }

// key groups entries of one pod: its namespace/name, else its container.
func (e Entry) key() string {
	if e.Pod != "" {
		return "pod:" + e.Pod
	}
	return "ctr:" + e.ContainerID
}

// Record appends e to <dataDir>/outcomes.jsonl, creating the directory
// (0700) and the file (0600) if needed, and compacts the file once it has
// grown past its bound. It never follows a symlink. Callers log its error
// and carry on: the log must never fail a CNI call.
func Record(dataDir string, e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if len(e.Msg) > maxMsg {
		e.Msg = e.Msg[:maxMsg] + "..."
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode outcome: %w", err)
	}
	if err := os.MkdirAll(dataDir, dirMode); err != nil {
		return fmt.Errorf("record outcome: %w", err)
	}
	name := filepath.Join(dataDir, FileName)
	f, err := openLocked(name, unix.LOCK_SH)
	if err != nil {
		return fmt.Errorf("record outcome in %s: %w", name, err)
	}
	_, err = f.Write(append(line, '\n'))
	var size int64
	if st, serr := f.Stat(); serr == nil {
		size = st.Size()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("record outcome in %s: %w", name, err)
	}
	if size >= compactAt {
		return compact(name)
	}
	return nil
}

// openLocked opens name for appending with flock how held, re-opening when
// a compaction replaced the file between the open and the lock.
func openLocked(name string, how int) (*os.File, error) {
	for range 10 {
		fd, err := unix.Open(name, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		f := os.NewFile(uintptr(fd), name)
		if err := flock(fd, how); err != nil {
			f.Close()
			return nil, err
		}
		if same, err := samePath(f, name); err != nil || same {
			if err != nil {
				f.Close()
			}
			return f, err
		}
		f.Close()
	}
	return nil, errors.New("the file kept being replaced")
}

func flock(fd, how int) error {
	err := unix.Flock(fd, how)
	for errors.Is(err, unix.EINTR) {
		err = unix.Flock(fd, how)
	}
	return err
}

// samePath reports whether f is still the file at name.
func samePath(f *os.File, name string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Lstat(name)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

// compact rewrites the file with what Read returns. It runs only when no
// other process holds the file (an append in flight): the next one retries.
func compact(name string) error {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("compact %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil // busy: someone appends right now
	}
	if same, err := samePath(f, name); err != nil || !same {
		return err
	}
	if st, err := f.Stat(); err != nil || st.Size() < compactAt {
		return err // another append compacted it first
	}
	entries, err := decode(f)
	if err != nil {
		return fmt.Errorf("compact %s: %w", name, err)
	}
	if err := writeAtomic(name, encodeBounded(Keep(entries), compactAt/2)); err != nil {
		return fmt.Errorf("compact %s: %w", name, err)
	}
	return nil
}

// encodeBounded encodes the newest entries that fit in limit bytes, so that
// a compacted file is always well below the size that compacts it.
func encodeBounded(entries []Entry, limit int) []byte {
	lines := make([][]byte, len(entries))
	total := 0
	for i, e := range entries {
		b, _ := json.Marshal(e)
		lines[i] = append(b, '\n')
		total += len(lines[i])
	}
	for len(lines) > 0 && total > limit {
		total -= len(lines[0])
		lines = lines[1:]
	}
	return bytes.Join(lines, nil)
}

func writeAtomic(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), ".outcomes-*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// Read returns the kept entries of <dataDir>/outcomes.jsonl, oldest first:
// the last outcome and the last failure of each pod, at most MaxEntries.
// A missing file is no entries. Lines that do not decode are skipped and
// reported in the error next to the entries.
func Read(dataDir string) ([]Entry, error) {
	name := filepath.Join(dataDir, FileName)
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read outcomes %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	entries, err := decode(f)
	if err != nil {
		err = fmt.Errorf("read outcomes %s: %w", name, err)
	}
	return Keep(entries), err
}

// decode reads one entry per line; bad lines are counted, not fatal.
func decode(f *os.File) ([]Entry, error) {
	var out []Entry
	bad := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Verb == "" {
			bad++
			continue
		}
		out = append(out, e)
	}
	err := sc.Err()
	if bad > 0 {
		err = errors.Join(err, fmt.Errorf("%d lines are not outcome entries", bad))
	}
	return out, err
}

// Keep selects, from entries oldest first, the last entry and the last
// failure of each pod, then the newest MaxEntries of those, oldest first.
func Keep(entries []Entry) []Entry {
	lastAny := map[string]int{}
	lastFail := map[string]int{}
	for i, e := range entries {
		lastAny[e.key()] = i
		if e.Failed() {
			lastFail[e.key()] = i
		}
	}
	var out []Entry
	for i, e := range entries {
		if lastAny[e.key()] == i || (e.Failed() && lastFail[e.key()] == i) {
			out = append(out, e)
		}
	}
	if len(out) > MaxEntries {
		out = out[len(out)-MaxEntries:]
	}
	return out
}
