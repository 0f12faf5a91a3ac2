package rdma

import (
	"errors"
	"syscall"
	"testing"
)

func TestNetnsMode(t *testing.T) {
	tests := []struct {
		name      string
		mode      string
		err       error
		want      Mode
		wantErr   bool
		wantNoRDM bool
	}{
		{"shared", "shared", nil, ModeShared, false, false},
		{"exclusive", "exclusive", nil, ModeExclusive, false, false},
		{"unknown string", "unknown", nil, "", true, false},
		{"empty string", "", nil, "", true, false},
		{"no ib_core (measured)", "", syscall.EPROTONOSUPPORT, "", true, true},
		{"op not supported", "", syscall.EOPNOTSUPP, "", true, true},
		{"ENOENT", "", syscall.ENOENT, "", true, true},
		{"message only", "", errors.New("protocol not supported"), "", true, true},
		{"permission", "", syscall.EPERM, "", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &System{SysRoot: t.TempDir(), NL: &fakeNL{mode: tt.mode, modeErr: tt.err}}
			got, err := s.NetnsMode()
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("NetnsMode() = %q, %v; want %q, err=%v", got, err, tt.want, tt.wantErr)
			}
			if errors.Is(err, ErrNoRDMA) != tt.wantNoRDM {
				t.Fatalf("errors.Is(%v, ErrNoRDMA) = %v, want %v", err, !tt.wantNoRDM, tt.wantNoRDM)
			}
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("error %v does not wrap the netlink error %v", err, tt.err)
			}
		})
	}
}
