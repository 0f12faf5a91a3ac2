package state

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWritableAndLockNeedDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "regular")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dir     string
		wantErr bool
	}{
		{"fresh dir", filepath.Join(t.TempDir(), "a", "b"), false},
		{"under a regular file", filepath.Join(file, "state"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.dir)
			if err := s.Writable(); (err != nil) != tt.wantErr {
				t.Errorf("Writable() = %v, wantErr %v", err, tt.wantErr)
			}
			unlock, err := s.Lock()
			if (err != nil) != tt.wantErr {
				t.Errorf("Lock() = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil {
				unlock()
			}
		})
	}
}

func TestLockExcludes(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "state"))
	unlock, err := s.Lock()
	if err != nil {
		t.Fatal(err)
	}
	acquired := make(chan func(), 1)
	go func() {
		u, err := New(s.Dir()).Lock()
		if err != nil {
			t.Error(err)
			u = func() {}
		}
		acquired <- u
	}()
	select {
	case <-acquired:
		t.Fatal("second Lock acquired while the first was held")
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	unlock() // idempotent
	select {
	case u := <-acquired:
		u()
		u()
	case <-time.After(10 * time.Second):
		t.Fatal("second Lock not acquired after unlock")
	}
}
