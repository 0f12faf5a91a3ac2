package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
)

// outcomeKey is one series of rdma_chain_cni_outcomes_total.
type outcomeKey struct{ network, verb, code string }

// OutcomeTail counts the plugin's outcomes by following each state
// directory's outcome log from where it was when this process first saw
// it: lines already there are never counted, so a restart does not count
// them again (the counters start from zero, which Prometheus reads as a
// reset). The log is compacted by the plugin (rewritten, newest kept, under
// a new inode): the lines of the new file that the old one had are
// recognised by their hash and skipped.
type OutcomeTail struct {
	mu     sync.Mutex
	files  map[string]*tailFile
	counts map[outcomeKey]float64
}

type tailFile struct {
	dev, ino uint64
	off      int64
	seen     map[uint64]bool // hashes of the lines of the file at (dev, ino)
}

// NewOutcomeTail follows no log yet.
func NewOutcomeTail() *OutcomeTail {
	return &OutcomeTail{files: map[string]*tailFile{}, counts: map[outcomeKey]float64{}}
}

// Poll reads what the logs of nets' state directories gained since the
// last poll and returns a copy of the counts and the number of logs it
// could not read.
func (t *OutcomeTail) Poll(nets []conflist.Network) (map[outcomeKey]float64, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	errs := 0
	for dir, names := range dataDirs(nets) {
		if err := t.follow(dir, names); err != nil {
			errs++
		}
	}
	out := make(map[outcomeKey]float64, len(t.counts))
	for k, v := range t.counts {
		out[k] = v
	}
	return out, errs
}

func (t *OutcomeTail) follow(dir string, names map[string]bool) error {
	f, err := outcome.OpenLog(dir)
	if errors.Is(err, os.ErrNotExist) {
		if _, known := t.files[dir]; !known {
			t.files[dir] = &tailFile{seen: map[uint64]bool{}} // every line to come is new
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, ok := statOf(f)
	if !ok {
		return errors.New("stat outcome log")
	}
	tf, known := t.files[dir]
	switch {
	case !known: // first sight: what is there happened before this process
		tf = &tailFile{dev: st.Dev, ino: st.Ino, seen: map[uint64]bool{}}
		t.files[dir] = tf
		tf.off, err = readLines(f, 0, func(line []byte) { tf.seen[lineHash(line)] = true })
		return err
	case tf.ino != st.Ino || tf.dev != st.Dev || st.Size < tf.off:
		// Compacted: a prefix of lines already seen, then new ones.
		old := tf.seen
		tf.dev, tf.ino, tf.seen = st.Dev, st.Ino, map[uint64]bool{}
		fresh := false
		tf.off, err = readLines(f, 0, func(line []byte) {
			h := lineHash(line)
			tf.seen[h] = true
			if fresh = fresh || !old[h]; fresh {
				t.count(line, names)
			}
		})
		return err
	}
	tf.off, err = readLines(f, tf.off, func(line []byte) {
		tf.seen[lineHash(line)] = true
		t.count(line, names)
	})
	return err
}

func statOf(f *os.File) (*syscall.Stat_t, bool) {
	fi, err := f.Stat()
	if err != nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// readLines calls fn for every complete line from off on and returns the
// offset after the last one (a line still being written is read next time).
func readLines(f *os.File, off int64, fn func([]byte)) (int64, error) {
	data, err := io.ReadAll(io.NewSectionReader(f, off, 1<<62))
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return off, err
		}
		if i > 0 {
			fn(data[:i])
		}
		data, off = data[i+1:], off+int64(i)+1
	}
}

func lineHash(line []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(line)
	return h.Sum64()
}

// count adds one outcome line. The log is the plugin's own, but its values
// are still bounded here: an unknown verb or code, or a network this
// directory is not configured for, counts as "other".
func (t *OutcomeTail) count(line []byte, names map[string]bool) {
	var e outcome.Entry
	// NUL bytes a power cut left before a line (outcome.decode's rule).
	if json.Unmarshal(bytes.TrimLeft(line, "\x00"), &e) != nil || e.Verb == "" {
		return
	}
	k := outcomeKey{network: "other", verb: "other", code: "other"}
	if names[e.Network] {
		k.network = e.Network
	}
	switch e.Verb {
	case "ADD", "DEL", "CHECK", "GC", "STATUS":
		k.verb = e.Verb
	}
	switch {
	case e.Failed() && e.Code == 0:
		k.code = "none" // an error that carried no CNI code
	case e.Code <= 11 || e.Code == 50 || (e.Code >= 100 && e.Code <= 199):
		k.code = strconv.FormatUint(uint64(e.Code), 10)
	}
	t.counts[k]++
}
