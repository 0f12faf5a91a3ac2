package state

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func fullRecord() *Record {
	return &Record{
		Network:     "rdma-net",
		ContainerID: "abc123",
		IfName:      "net1",
		NetNS:       "/var/run/netns/cni-1",
		NetNSIno:    4026532281,
		Pod:         Pod{Namespace: "ns", Name: "pod", UID: "uid-1"},
		Mode:        "exclusive",
		CNIVersion:  "1.1.0",
		Links: []Link{{
			Device: "mlx5_1", Kind: "moved", HostLink: HostLink{HostName: "eth1", PodName: "net1",
				MAC: "02:00:00:00:00:01", HostIndex: 7, MTU: 9000, WasUp: true,
				HostAddrs:  []string{"10.0.0.2/24", "fd00::2/64"},
				HostRoutes: []Route{{Family: 2, Dst: "198.51.100.0/24", Gw: "10.0.0.1", Table: 100, Priority: 10, Protocol: 4}}},
			RDMAMoved: true, Step: "done", IPAM: true, IPs: []string{"fd00:77::5/64"},
		}},
		SMC:       &SMC{PnetID: "P1", Device: "erdma_0", IBPort: 1, PodIfName: "eth0", HostEntry: true, PodEntry: true},
		CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		rec  *Record
	}{
		{"every field", fullRecord()},
		{"minimal", &Record{Network: "n", ContainerID: "c", IfName: "i", CreatedAt: time.Unix(1, 0).UTC()}},
		{"zero CreatedAt is set", &Record{Network: "n", ContainerID: "c", IfName: "i"}},
	}
	for _, tt := range tests {
		for _, put := range []string{"Put", "PutUnsynced"} {
			t.Run(tt.name+"/"+put, func(t *testing.T) {
				s := New(t.TempDir())
				rec := *tt.rec
				roundTrip(t, s, &rec, put)
			})
		}
	}
}

func roundTrip(t *testing.T, s *Store, rec *Record, put string) {
	t.Helper()
	write := s.Put
	if put == "PutUnsynced" {
		write = s.PutUnsynced
	}
	if err := write(rec); err != nil {
		t.Fatalf("%s: %v", put, err)
	}
	if rec.Version != Version || rec.CreatedAt.IsZero() {
		t.Errorf("%s left Version %d, CreatedAt %v", put, rec.Version, rec.CreatedAt)
	}
	got, err := s.Get(rec.Key())
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("round trip mismatch:\n got %+v\nwant %+v", got, rec)
	}
	if tmp, _ := filepath.Glob(filepath.Join(s.attachDir(), tmpPrefix+"*")); len(tmp) != 0 {
		t.Errorf("%s left temporary files %v", put, tmp)
	}
}

// TestExists checks that Exists answers false only when nothing can be at
// the record's path, and true for anything there, a file that reads as
// corrupt included.
func TestExists(t *testing.T) {
	k := fullRecord().Key()
	tests := []struct {
		name  string
		setup func(t *testing.T, s *Store)
		want  bool
	}{
		{"no state directory", func(*testing.T, *Store) {}, false},
		{"no attachments directory", func(t *testing.T, s *Store) { mkdir(t, s.dir) }, false},
		{"other record only", func(t *testing.T, s *Store) {
			if err := s.Put(&Record{Network: "n", ContainerID: "c", IfName: "i"}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"record", func(t *testing.T, s *Store) {
			if err := s.PutUnsynced(fullRecord()); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"corrupt file", func(t *testing.T, s *Store) {
			mkdir(t, s.attachDir())
			writeFile(t, s.path(k), "{")
		}, true},
		{"directory at the path", func(t *testing.T, s *Store) { mkdir(t, s.path(k)) }, true},
		{"dangling link at the path", func(t *testing.T, s *Store) {
			mkdir(t, s.attachDir())
			symlink(t, filepath.Join(s.dir, "missing"), s.path(k))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(filepath.Join(t.TempDir(), "state"))
			tt.setup(t, s)
			got, err := s.Exists(k)
			if err != nil || got != tt.want {
				t.Errorf("Exists = %v, %v; want %v, nil", got, err, tt.want)
			}
		})
	}
}

func TestGetMissing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*Store)
	}{
		{"no directory", func(*Store) {}},
		{"other record present", func(s *Store) { _ = s.Put(fullRecord()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t.TempDir())
			tt.setup(s)
			_, err := s.Get(Key{"x", "y", "z"})
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestDeleteIdempotent(t *testing.T) {
	tests := []struct {
		name string
		put  bool
	}{{"existing", true}, {"never written", false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t.TempDir())
			r := fullRecord()
			if tt.put {
				if err := s.Put(r); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 2; i++ {
				if err := s.Delete(r.Key()); err != nil {
					t.Fatalf("Delete #%d: %v", i+1, err)
				}
			}
			if _, err := s.Get(r.Key()); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestHostileKeys(t *testing.T) {
	long := strings.Repeat("a", 5000)
	keys := []Key{
		{"net", "../../etc/passwd", "eth0"},
		{"net", "a/b", "eth0"},
		{"net", "a", "b/eth0"},
		{"net", long, "eth0"},
		{"net", long + "b", "eth0"},
		{"net", "a\x00b", "eth0"},
		{"net", "a", "b\x00eth0"},
		{"net\x00a", "b", "eth0"},
		{"..", "..", ".."},
		{"net", ".hidden", "eth0"},
		{"/", "/", "/"},
	}
	root := t.TempDir()
	s := New(filepath.Join(root, "state"))
	for _, k := range []Key{{"", "", ""}, {"", "c", "i"}, {"n", "", "i"}, {"n", "c", ""}, {"n", "c\xff", "i"}} {
		if err := s.Put(&Record{Network: k.Network, ContainerID: k.ContainerID, IfName: k.IfName}); err == nil {
			t.Errorf("Put %q succeeded: the record could not be read back", k)
		}
	}
	seen := map[string]Key{}
	for _, k := range keys {
		name := fileName(k)
		if prev, dup := seen[name]; dup {
			t.Errorf("keys %q and %q share file %s", prev, k, name)
		}
		seen[name] = k
		if filepath.Base(name) != name || strings.HasPrefix(name, ".") || len(name) > 255 {
			t.Errorf("unsafe file name %q for key %q", name, k)
		}
		r := &Record{Network: k.Network, ContainerID: k.ContainerID, IfName: k.IfName}
		if err := s.Put(r); err != nil {
			t.Fatalf("Put %q: %v", k, err)
		}
		got, err := s.Get(k)
		if err != nil || got.Key() != k {
			t.Errorf("Get %q = %v, %v", k, got, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, "state", "attachments"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(keys) {
		t.Errorf("%d files in attachments, want %d", len(entries), len(keys))
	}
	top, _ := os.ReadDir(root)
	if len(top) != 1 {
		t.Errorf("files escaped the state dir: %v", top)
	}
	recs, err := s.List()
	if err != nil || len(recs) != len(keys) {
		t.Errorf("List = %d records, %v; want %d", len(recs), err, len(keys))
	}
}

func TestModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := New(dir)
	r := fullRecord()
	if err := s.Put(r); err != nil {
		t.Fatal(err)
	}
	unlock, err := s.Lock(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	tests := []struct {
		path string
		want os.FileMode
	}{
		{dir, os.ModeDir | 0o700},
		{filepath.Join(dir, "attachments"), os.ModeDir | 0o700},
		{filepath.Join(dir, "attachments", fileName(r.Key())), 0o600},
		{filepath.Join(dir, "lock"), 0o600},
	}
	for _, tt := range tests {
		fi, err := os.Stat(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tt.want {
			t.Errorf("%s mode %v, want %v", tt.path, fi.Mode(), tt.want)
		}
	}
}

func TestListSkipsAndSorts(t *testing.T) {
	s := New(t.TempDir())
	if recs, err := s.List(); err != nil || len(recs) != 0 {
		t.Fatalf("List on empty store = %v, %v", recs, err)
	}
	for _, id := range []string{"ccc", "aaa", "bbb"} {
		if err := s.Put(&Record{Network: "n", ContainerID: id, IfName: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(s.dir, "attachments")
	for _, junk := range []string{".tmp-123", ".probe-1", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, junk), []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List()
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Path != filepath.Join(dir, "sub.json") {
		t.Errorf("List error %v, want one for the directory sub.json only", err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ContainerID)
	}
	if got := strings.Join(ids, ","); got != "aaa,bbb,ccc" {
		t.Errorf("List order %s, want aaa,bbb,ccc", got)
	}
}

func TestNoTempFilesLeft(t *testing.T) {
	s := New(t.TempDir())
	r := fullRecord()
	for i := 0; i < 3; i++ {
		r.Links[0].Step = Step(strings.Repeat("x", i))
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Writable(); err != nil {
		t.Fatal(err)
	}
	// A non-empty directory in place of a record makes the rename fail.
	blocked := &Record{Network: "n", ContainerID: "blocked", IfName: "i"}
	if err := os.MkdirAll(filepath.Join(s.dir, "attachments", fileName(blocked.Key()), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(blocked); err == nil {
		t.Error("Put over a directory succeeded")
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, "attachments"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}
	if len(entries) != 2 {
		t.Errorf("attachments dir holds %d entries, want 2", len(entries))
	}
	if err := s.Put(nil); err == nil {
		t.Error("Put(nil) succeeded")
	}
}
