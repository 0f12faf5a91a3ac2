package outcome

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestRecordAndRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // created by Record
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	in := []Entry{
		{Time: t0, Verb: "ADD", Pod: "default/a", ContainerID: "c1", IfName: "eth0", Code: 103, Msg: "no device"},
		{Time: t0.Add(time.Second), Verb: "DEL", Pod: "default/a", ContainerID: "c1", IfName: "eth0"},
		{Time: t0.Add(2 * time.Second), Verb: "ADD", ContainerID: "c2", IfName: "eth0"},
	}
	for _, e := range in {
		if err := Record(dir, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Code != 103 || got[0].Msg != "no device" || !got[0].Time.Equal(t0) || got[2].ContainerID != "c2" {
		t.Fatalf("read %+v", got)
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v %v", st, err)
	}
}

func TestKeep(t *testing.T) {
	e := func(pod, verb string, code uint) Entry { return Entry{Verb: verb, Pod: pod, Code: code} }
	tests := []struct {
		name string
		in   []Entry
		want string
	}{
		{"last and last failure per pod", []Entry{e("a", "ADD", 7), e("a", "ADD", 103), e("a", "DEL", 0), e("b", "ADD", 0), e("b", "DEL", 0)},
			"a/ADD/103 a/DEL/0 b/DEL/0"},
		{"failure is the last", []Entry{e("a", "ADD", 0), e("a", "CHECK", 106)}, "a/CHECK/106"},
		{"failure without a code", []Entry{{Verb: "ADD", Pod: "a", Msg: "boom"}, e("a", "DEL", 0)}, "a/ADD/0 a/DEL/0"},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []string
			for _, k := range Keep(tt.in) {
				parts = append(parts, fmt.Sprintf("%s/%s/%d", k.Pod, k.Verb, k.Code))
			}
			if got := strings.Join(parts, " "); got != tt.want {
				t.Errorf("Keep = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBounded writes far more than the bound: the file is compacted and
// never holds more than the bound plus what was appended since. A line
// that is no entry does not stop compaction: it goes with the first one.
func TestBounded(t *testing.T) {
	for _, tc := range []struct {
		name, start string
		records     int
	}{
		{"empty", "", 2000},
		{"a bad line first", "garbage\n", 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(tc.start), 0o600); err != nil {
				t.Fatal(err)
			}
			msg := strings.Repeat("x", 300)
			for i := range tc.records {
				if err := Record(dir, Entry{Verb: "ADD", Pod: fmt.Sprintf("ns/p%d", i), Code: 103, Msg: msg}); err != nil {
					t.Fatal(err)
				}
			}
			st, err := os.Stat(filepath.Join(dir, FileName))
			if err != nil {
				t.Fatal(err)
			}
			if st.Size() > compactAt+maxLine {
				t.Errorf("file is %d bytes, bound %d", st.Size(), compactAt+maxLine)
			}
			got, err := Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			if last := fmt.Sprintf("ns/p%d", tc.records-1); len(got) != MaxEntries || got[len(got)-1].Pod != last {
				t.Errorf("read %d entries, last %q, want %d, last %q", len(got), got[len(got)-1].Pod, MaxEntries, last)
			}
			left, _ := filepath.Glob(filepath.Join(dir, ".outcomes-*"))
			if len(left) != 0 {
				t.Errorf("temp files left: %v", left)
			}
		})
	}
}

func TestLongMessageTruncated(t *testing.T) {
	dir := t.TempDir()
	if err := Record(dir, Entry{Verb: "ADD", Code: 7, Msg: strings.Repeat("m", 10*maxMsg)}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil || len(got) != 1 || len(got[0].Msg) != maxMsg+3 {
		t.Fatalf("got %d entries, err %v", len(got), err)
	}
}

func TestRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	if err := Record(dir, Entry{Verb: "ADD"}); err == nil {
		t.Fatal("Record followed a symlink")
	}
	if _, err := Read(dir); err == nil {
		t.Fatal("Read followed a symlink")
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Fatalf("symlink target written: %q", b)
	}
}

func TestRefusesSymlinkedDir(t *testing.T) {
	target := t.TempDir()
	link := filepath.Join(t.TempDir(), "state")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Record(link, Entry{Verb: "ADD"}); err == nil {
		t.Fatal("Record followed a symlinked state directory")
	}
	if _, err := os.Stat(filepath.Join(target, FileName)); !os.IsNotExist(err) {
		t.Fatalf("written through the symlink: %v", err)
	}
	if _, err := Read(link); err == nil {
		t.Fatal("Read followed a symlinked state directory")
	}
}

func TestRefusesWorldWritableDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := Record(dir, Entry{Verb: "ADD"}); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Fatalf("err %v", err)
	}
}

func TestRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, FileName), 0o600); err != nil {
		t.Fatal(err)
	}
	// Without a reader the open fails (ENXIO) instead of blocking; with
	// one it would be refused as not a regular file.
	if err := Record(dir, Entry{Verb: "ADD"}); err == nil {
		t.Fatal("Record wrote into a FIFO")
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatal("Read opened a FIFO")
	}
}

func TestBadLinesReported(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("garbage\n{\"verb\":\"DEL\",\"code\":0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err == nil || !strings.Contains(err.Error(), "1 lines") || len(got) != 1 {
		t.Fatalf("got %v, %v", got, err)
	}
}

// TestTornAppend checks the logs a power cut leaves, each followed by the
// next boot's Record: the torn append is skipped without an error, and
// neither the entries before it nor the one appended after it are lost.
func TestTornAppend(t *testing.T) {
	ok := `{"verb":"DEL","pod":"ns/a","code":0}` + "\n"
	pod := func(name string) string { return `{"verb":"DEL","pod":"ns/` + name + `","code":0}` + "\n" }
	for _, tc := range []struct {
		name string
		log  string
		want int // entries read after the next Record
		bad  bool
	}{
		{"NUL bytes where the last append was", ok + strings.Repeat("\x00", 97), 2, false},
		{"only NUL bytes", strings.Repeat("\x00", 40), 1, false},
		{"an append cut short", ok + `{"verb":"ST`, 2, false},
		{"NUL bytes before a line (an older writer's)", ok + strings.Repeat("\x00", 9) + `{"verb":"DEL","pod":"ns/b","code":0}` + "\n", 3, false},
		{"an empty line", ok + "\n", 2, false},
		{"many lost appends' NUL bytes", ok + strings.Repeat("\x00", 3*maxLine), 2, false},
		{"a line longer than an entry: bad, the entries around it read", ok + strings.Repeat("x", 3*longLine) + "\n" + ok, 2, true},
		// Each skip after the reader's end of file was seen: bufio.Scanner
		// ends at a skip that yields no token then.
		{"two torn marks, entries between and after", ok + "\x00\n" + pod("b") + "\x00\n" + pod("c"), 4, false},
		{"a torn mark, a long line, a torn mark", ok + "\x00\n" + strings.Repeat("x", 2*longLine) + "\n" + pod("b") + "\x00\n" + pod("c"), 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := Record(dir, Entry{Verb: "ADD", Pod: "ns/new"}); err != nil {
				t.Fatal(err)
			}
			got, err := Read(dir)
			if (err != nil) != tc.bad || (tc.bad && !strings.Contains(err.Error(), "1 lines")) {
				t.Errorf("error %v, want one bad line: %v", err, tc.bad)
			}
			if len(got) != tc.want || got[len(got)-1].Pod != "ns/new" {
				t.Fatalf("read %+v; want %d entries, the last ns/new's", got, tc.want)
			}
		})
	}
}

// TestReadTornLastLine checks logs whose last line has no newline, as
// Read finds them before the next Record marks them: what is before it
// reads, and a long one counts as a bad line.
func TestReadTornLastLine(t *testing.T) {
	ok := `{"verb":"DEL","pod":"ns/a","code":0}` + "\n"
	for _, tc := range []struct {
		name string
		log  string
		bad  bool
	}{
		{"short", ok + `{"verb":"ST`, false},
		{"longer than an entry", ok + strings.Repeat("x", 2*longLine), true},
		{"NUL bytes", ok + strings.Repeat("\x00", 3*longLine), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Read(dir)
			if (err != nil) != tc.bad || len(got) != 1 || got[0].Pod != "ns/a" {
				t.Fatalf("read %+v, %v; want ns/a's entry, a bad line: %v", got, err, tc.bad)
			}
		})
	}
}

func TestMissingIsEmpty(t *testing.T) {
	got, err := Read(filepath.Join(t.TempDir(), "none"))
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v, %v", got, err)
	}
}

// TestConcurrent checks that appends from many goroutines (each its own
// open file description, as separate plugin processes have) across many
// compactions lose no entry: each worker's last entry is its pod's last.
func TestConcurrent(t *testing.T) {
	dir := t.TempDir()
	msg := strings.Repeat("y", 900)
	var wg sync.WaitGroup
	const workers, each = 8, 400
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e := Entry{Verb: "ADD", Pod: fmt.Sprintf("ns/w%d", w), ContainerID: fmt.Sprint(i), Code: 1, Msg: msg}
				if err := Record(dir, e); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]string{}
	for _, e := range got {
		last[e.Pod] = e.ContainerID
	}
	for w := range workers {
		if c := last[fmt.Sprintf("ns/w%d", w)]; c != fmt.Sprint(each-1) {
			t.Errorf("worker %d: last entry kept is %q, want %d", w, c, each-1)
		}
	}
}

func BenchmarkRecord(b *testing.B) {
	dir := b.TempDir()
	e := Entry{Verb: "ADD", Pod: "default/pod", ContainerID: strings.Repeat("c", 64), IfName: "eth0", Code: 103, Msg: "no offered RDMA device matches the pod's request"}
	for b.Loop() {
		if err := Record(dir, e); err != nil {
			b.Fatal(err)
		}
	}
}
