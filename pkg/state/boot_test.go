package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadBootID checks that ReadBootID takes only the kernel's
// rendering of a boot id.
func TestReadBootID(t *testing.T) {
	const id = "9f5defee-91a3-4099-b60f-178d4c2a437b"
	tests := []struct {
		name, content, want string
	}{
		{"kernel rendering", id + "\n", id},
		{"no newline", id, ""},
		{"upper case", strings.ToUpper(id) + "\n", ""},
		{"two lines", id + "\n" + id + "\n", ""},
		{"spaces", " " + id + "\n", ""},
		{"empty", "", ""},
		{"not a uuid", "9f5defee91a34099b60f178d4c2a437b0000\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "boot_id")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadBootID(path)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("read %q as boot id %q", tt.content, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := ReadBootID(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file read as a boot id")
	}
}

// TestReadBootIDOfKernel checks that the running kernel's boot id
// reads.
func TestReadBootIDOfKernel(t *testing.T) {
	if _, err := os.Stat(BootIDFile); err != nil {
		t.Skipf("no %s: %v", BootIDFile, err)
	}
	if _, err := ReadBootID(BootIDFile); err != nil {
		t.Fatal(err)
	}
}

func TestBootOf(t *testing.T) {
	const a, b = "9f5defee-91a3-4099-b60f-178d4c2a437b", "0c4e2a57-51d7-4a8c-9d0e-4d1b7c1a9e11"
	tests := []struct {
		record, current string
		want            Boot
	}{
		{a, a, BootThis},
		{a, b, BootEarlier},
		{"", a, BootUnknown},
		{a, "", BootUnknown},
		{"", "", BootUnknown},
	}
	for _, tt := range tests {
		if got := (&Record{BootID: tt.record}).BootOf(tt.current); got != tt.want {
			t.Errorf("record %q, running %q: %v, want %v", tt.record, tt.current, got, tt.want)
		}
	}
}
