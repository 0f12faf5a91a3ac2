package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var badKey = Key{"n", "bad", "eth0"}

// corruptCases are the hostile contents (or non-files) of a record path,
// each planted at the path of badKey by its setup.
func corruptCases(t *testing.T) []struct {
	name  string
	setup func(t *testing.T, path string)
} {
	content := func(data string) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	other, err := json.Marshal(&Record{Version: 1, Network: "n", ContainerID: "other", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	valid := `{"version":1,"network":"n","containerID":"bad","ifName":"eth0"}`
	elsewhere := filepath.Join(t.TempDir(), "valid.json")
	if err := os.WriteFile(elsewhere, []byte(valid), 0o600); err != nil {
		t.Fatal(err)
	}
	return []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"truncated", content(valid[:30])},
		{"empty", content("")},
		{"blank", content(" \n\t")},
		{"binary", content("\x00\xff\xfe\x01record\x00")},
		{"JSON array", content(`[` + valid + `]`)},
		{"JSON null", content("null")},
		{"JSON string", content(`"x"`)},
		{"JSON number", content("1")},
		{"version missing", content(`{"network":"n","containerID":"bad","ifName":"eth0"}`)},
		{"version 0", content(`{"version":0,"network":"n","containerID":"bad","ifName":"eth0"}`)},
		{"version negative", content(`{"version":-1,"network":"n","containerID":"bad","ifName":"eth0"}`)},
		{"version newer", content(`{"version":99,"network":"n","containerID":"bad","ifName":"eth0"}`)},
		{"version a string", content(`{"version":"1","network":"n","containerID":"bad","ifName":"eth0"}`)},
		{"network missing", content(`{"version":1,"containerID":"bad","ifName":"eth0"}`)},
		{"containerID missing", content(`{"version":1,"network":"n","ifName":"eth0"}`)},
		{"ifName missing", content(`{"version":1,"network":"n","containerID":"bad"}`)},
		{"another key", content(string(other))},
		{"trailing data", content(valid + `{}`)},
		{"device-info path relative", content(devInfo(`"path":"devinfo/x.json"`))},
		{"device-info path with ..", content(devInfo(`"path":"/run/../etc/x.json"`))},
		{"device-info path /", content(devInfo(`"path":"/"`))},
		{"device-info path empty", content(devInfo(`"path":""`))},
		{"device-info path 100 KB", content(devInfo(`"path":"/` + strings.Repeat("a/", 50000) + `x"`))},
		{"device-info folder not the path's", content(devInfo(`"path":"/run/x/y.json","dirs":["/etc"]`))},
		{"bootId not a boot id", content(valid[:len(valid)-1] + `,"bootId":"1"}`)},
		{"bootId upper case", content(valid[:len(valid)-1] + `,"bootId":"0A1B2C3D-0000-0000-0000-000000000000"}`)},
		{"bootId with a newline", content(valid[:len(valid)-1] + `,"bootId":"0a1b2c3d-0000-0000-0000-000000000000\n"}`)},
		{"pod nsid without ifindex", content(link(`"kind":"ipvlan","podNetnsId":0`))},
		{"pod ifindex without nsid", content(link(`"kind":"ipvlan","podIndex":3`))},
		{"pod nsid negative", content(link(`"kind":"macvlan","podNetnsId":-1,"podIndex":3`))},
		{"pod ifindex negative", content(link(`"kind":"macvlan","podNetnsId":0,"podIndex":-3`))},
		{"pod nsid on a moved link", content(link(`"kind":"moved","podNetnsId":0,"podIndex":3`))},
		{"pod nsid out of range", content(link(`"kind":"ipvlan","podNetnsId":2147483648,"podIndex":3`))},
		{"pod ifindex out of range", content(link(`"kind":"ipvlan","mac":"02:00:00:00:00:01","podNetnsId":0,"podIndex":4294967296`))},
		{"pod nsid without a MAC", content(link(`"kind":"ipvlan","podNetnsId":0,"podIndex":3`))},
		{"wrong field type", content(`{"version":1,"network":"n","containerID":"bad","ifName":"eth0","links":"x"}`)},
		{"too large", content(valid[:len(valid)-1] + `,"x":"` + strings.Repeat("a", maxRecordSize) + `"}`)},
		{"empty directory", func(t *testing.T, path string) { mkdir(t, path) }},
		{"directory with files", func(t *testing.T, path string) { mkdir(t, filepath.Join(path, "x", "y")) }},
		{"symlink to a valid record", func(t *testing.T, path string) { symlink(t, elsewhere, path) }},
		{"dangling symlink", func(t *testing.T, path string) { symlink(t, filepath.Join(t.TempDir(), "none"), path) }},
		{"fifo", func(t *testing.T, path string) {
			if err := unix.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptRecords plants each hostile record, then checks that Get and
// List report it as a *CorruptError, Quarantine moves it aside, and the key
// is usable again.
func TestCorruptRecords(t *testing.T) {
	for _, tt := range corruptCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t.TempDir())
			good := fullRecord()
			if err := s.Put(good); err != nil {
				t.Fatal(err)
			}
			path := s.path(badKey)
			tt.setup(t, path)
			_, err := s.Get(badKey)
			assertCorrupt(t, "Get", err, path)
			recs, err := s.List()
			assertCorrupt(t, "List", err, path)
			if len(recs) != 1 || recs[0].Key() != good.Key() {
				t.Errorf("List returned %v, want only the good record", recs)
			}
			before, _ := os.Lstat(path)
			moved, err := s.Quarantine(path)
			if err != nil {
				t.Fatalf("Quarantine: %v", err)
			}
			after, err := os.Lstat(moved)
			if err != nil || !os.SameFile(before, after) {
				t.Errorf("quarantined %s is not the file that was at the record path: %v", moved, err)
			}
			if _, err := s.Get(badKey); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get after Quarantine = %v, want ErrNotFound", err)
			}
			if recs, err := s.List(); err != nil || len(recs) != 1 {
				t.Errorf("List after Quarantine = %d records, %v", len(recs), err)
			}
			if err := s.Put(&Record{Network: badKey.Network, ContainerID: badKey.ContainerID, IfName: badKey.IfName}); err != nil {
				t.Errorf("Put after Quarantine: %v", err)
			}
		})
	}
}

func assertCorrupt(t *testing.T, op string, err error, path string) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Path != path || !errors.Is(err, ErrCorrupt) {
		t.Errorf("%s error %v, want a *CorruptError for %s", op, err, path)
		return
	}
	if errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), path) {
		t.Errorf("%s error %q: ErrNotFound, or the path is not named", op, err)
	}
}

func TestCorruptPaths(t *testing.T) {
	s := New(t.TempDir())
	if err := s.Put(fullRecord()); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range []string{"a", "b", "c"} {
		p := s.path(Key{"n", id, "eth0"})
		writeFile(t, p, "garbage")
		want = append(want, p)
	}
	_, err := s.List()
	if got := CorruptPaths(err); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("CorruptPaths(List) = %v, want %v", got, want)
	}
	_, err = s.Get(Key{"n", "b", "eth0"})
	wrapped := fmt.Errorf("context: %w", err)
	if got := CorruptPaths(wrapped); len(got) != 1 || got[0] != want[1] {
		t.Errorf("CorruptPaths(wrapped Get) = %v, want [%s]", got, want[1])
	}
	for _, err := range []error{nil, ErrNotFound, errors.New("x"), errors.Join(ErrNotFound, nil)} {
		if got := CorruptPaths(err); len(got) != 0 {
			t.Errorf("CorruptPaths(%v) = %v, want none", err, got)
		}
	}
}

// devInfo is a record of badKey with a deviceInfo object of fields.
func devInfo(fields string) string {
	return `{"version":1,"network":"n","containerID":"bad","ifName":"eth0","deviceInfo":{` + fields + `,"device":"mlx5_0","pci":"0000:3b:00.0"}}`
}

// link is a record with one link of fields.
func link(fields string) string {
	return `{"version":1,"network":"n","containerID":"bad","ifName":"eth0","links":[{"device":"rxe0",` + fields + `,"hostName":"eth1","podName":"rdma0","step":"done"}]}`
}
