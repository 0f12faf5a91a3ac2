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
	// longLine is longer than any entry Record writes (maxMsg bytes
	// escaped at 6 each, and the other fields): decode steps over a line
	// this long as no entry.
	longLine = 64 << 10
	dirMode  = 0o700
)

// Entry is one outcome of one CNI call. A failure has its message in Msg
// and its CNI error code in Code (0 when the error carried none); a success
// has neither.
type Entry struct {
	Time        time.Time `json:"time"`
	Verb        string    `json:"verb"`
	Network     string    `json:"network,omitempty"`
	ContainerID string    `json:"containerID,omitempty"`
	Pod         string    `json:"pod,omitempty"`
	PodUID      string    `json:"podUID,omitempty"`
	IfName      string    `json:"ifName,omitempty"`
	Code        uint      `json:"code"`
	Msg         string    `json:"msg,omitempty"`
}

// Failed reports whether the entry is a failure.
func (e Entry) Failed() bool { return e.Code != 0 || e.Msg != "" }

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
	dir, err := openDir(dataDir)
	if err != nil {
		return fmt.Errorf("record outcome: %w", err)
	}
	defer dir.Close()
	f, err := openLocked(dir, unix.LOCK_SH)
	if err != nil {
		return fmt.Errorf("record outcome in %s: %w", name, err)
	}
	size, torn := tail(f)
	if torn {
		line = append([]byte{0, '\n'}, line...)
	}
	n, err := f.Write(append(line, '\n'))
	size += int64(n)
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("record outcome in %s: %w", name, err)
	}
	if size >= compactAt {
		return compact(dir)
	}
	return nil
}

// tail returns the log's size before an append (0 when it cannot be
// read: no compaction then) and whether it does not end with a newline:
// an append a power cut left short or as NUL bytes (ext4 had sized the
// file, not yet written it). Record then ends the torn line with a NUL
// byte and a newline, which marks it torn for decode and keeps it from
// swallowing the next line. Another appender's write seen half done
// (appends share the lock) makes the same mark: one more line decode
// skips.
func tail(f *os.File) (size int64, torn bool) {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, false
	}
	last := make([]byte, 1)
	n, err := f.ReadAt(last, st.Size()-1)
	return st.Size(), err == nil && n == 1 && last[0] != '\n'
}

// openDir opens the state directory without following a symlink and
// refuses one that another user owns or every user can write: the log's
// files are then only opened relative to it.
func openDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open state directory %s: %w", path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
	case st.Mode&0o002 != 0:
		err = fmt.Errorf("state directory %s is writable by every user", path)
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("state directory %s is owned by uid %d, not %d", path, st.Uid, os.Geteuid())
	}
	if err != nil {
		dir.Close()
		return nil, err
	}
	return dir, nil
}

// openLocked opens the log in dir for appending (and reading its tail)
// with flock how held, re-opening when a compaction replaced the file
// between the open and the lock.
func openLocked(dir *os.File, how int) (*os.File, error) {
	for range 10 {
		fd, err := unix.Openat(int(dir.Fd()), FileName, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
		if err != nil {
			return nil, err
		}
		f := os.NewFile(uintptr(fd), FileName)
		if err := regular(f); err != nil {
			f.Close()
			return nil, err
		}
		if err := flock(fd, how); err != nil {
			f.Close()
			return nil, err
		}
		if same, err := samePath(f, dir); err != nil || same {
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

// regular refuses anything but a regular file (a FIFO would block).
func regular(f *os.File) error {
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", f.Name())
	}
	return err
}

// samePath reports whether f is still the log file in dir.
func samePath(f, dir *os.File) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		return false, err
	}
	err := unix.Fstatat(int(dir.Fd()), FileName, &b, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// compact rewrites the file with what Read returns. It runs only when no
// other process holds the file (an append in flight): the next one retries.
func compact(dir *os.File) error {
	fd, err := unix.Openat(int(dir.Fd()), FileName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("compact outcomes in %s: %w", dir.Name(), err)
	}
	f := os.NewFile(uintptr(fd), FileName)
	defer f.Close()
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil // busy: someone appends right now
	}
	if same, err := samePath(f, dir); err != nil || !same {
		return err
	}
	if st, err := f.Stat(); err != nil || st.Size() < compactAt {
		return err // another append compacted it first
	}
	// Lines that are no entry are dropped by the rewrite: kept, they
	// would stop every compaction and the file's bound with it.
	entries, err := decode(f)
	var bad badLines
	if err != nil && !errors.As(err, &bad) {
		return fmt.Errorf("compact outcomes in %s: %w", dir.Name(), err)
	}
	if err := replace(dir, encodeBounded(Keep(entries), compactAt/2)); err != nil {
		return fmt.Errorf("compact outcomes in %s: %w", dir.Name(), err)
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

// replace writes data to a new temp file in dir and renames it over the log.
func replace(dir *os.File, data []byte) error {
	dfd := int(dir.Fd())
	tmp := fmt.Sprintf(".outcomes-%d-%d.tmp", os.Getpid(), time.Now().UnixNano())
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = unix.Renameat(dfd, tmp, dfd, FileName)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
	}
	return err
}

// Read returns the kept entries of <dataDir>/outcomes.jsonl, oldest first:
// the last outcome and the last failure of each pod, at most MaxEntries.
// A missing file is no entries. What a power cut left of an append is
// skipped (decode); other lines that do not decode are skipped and
// reported in the error next to the entries.
func Read(dataDir string) ([]Entry, error) {
	f, err := OpenLog(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := decode(f)
	if err != nil {
		err = fmt.Errorf("read outcomes %s: %w", f.Name(), err)
	}
	return Keep(entries), err
}

// OpenLog opens <dataDir>/outcomes.jsonl for reading, as Read does
// (without following a symlink, only a regular file in a directory this
// user owns and others cannot write). A missing directory or file is an
// error wrapping os.ErrNotExist. The caller closes the file.
func OpenLog(dataDir string) (*os.File, error) {
	dir, err := openDir(dataDir)
	if err != nil {
		return nil, fmt.Errorf("read outcomes: %w", err)
	}
	defer dir.Close()
	name := filepath.Join(dataDir, FileName)
	fd, err := unix.Openat(int(dir.Fd()), FileName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read outcomes %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := regular(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("read outcomes: %w", err)
	}
	return f, nil
}

// decode reads one entry per line. What a power cut leaves of appends is
// skipped: runs of NUL bytes (ext4 had sized the file, not yet written
// it; an entry may follow them on the same line), a line holding a NUL
// byte (JSON never does: Record's mark of a torn line), and a last line
// without its newline. Other lines that are no entry, and lines longer
// than an entry can be, are counted in the error, not fatal.
func decode(f *os.File) (entries []Entry, err error) {
	lines := lineSplitter{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, longLine), longLine)
	sc.Split(lines.split)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || bytes.IndexByte(line, 0) >= 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil || e.Verb == "" {
			lines.bad++
			continue
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return entries, err
	}
	if lines.bad > 0 {
		return entries, badLines(lines.bad)
	}
	return entries, nil
}

// lineSplitter is decode's bufio.SplitFunc: it yields the log's
// newline-terminated lines and steps over NUL runs, a last line without
// its newline and every line of longLine bytes or more (each counted in
// bad). A step over yields an empty token, which decode skips, never
// none: once its reader has seen the end of the file, bufio.Scanner ends
// the scan at a step that yields no token, and the lines after it would
// be lost.
type lineSplitter struct {
	long bool // within a line too long to keep
	bad  int
}

func (l *lineSplitter) split(data []byte, atEOF bool) (int, []byte, error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	skip := data[:0:0]
	if n := len(data) - len(bytes.TrimLeft(data, "\x00")); n > 0 {
		return n, skip, nil
	}
	i := bytes.IndexByte(data, '\n')
	switch {
	case l.long && i >= 0:
		l.long = false
		return i + 1, skip, nil
	case l.long || (i < 0 && len(data) >= longLine):
		if !l.long {
			l.long = true
			l.bad++
		}
		return len(data), skip, nil
	case i >= 0:
		return i + 1, bytes.TrimSuffix(data[:i], []byte{'\r'}), nil
	case atEOF:
		return len(data), skip, nil // a torn last line
	}
	return 0, nil, nil
}

// badLines is how many lines of the log are no outcome entry: the entries
// around them were read.
type badLines int

func (n badLines) Error() string { return fmt.Sprintf("%d lines are not outcome entries", int(n)) }

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
