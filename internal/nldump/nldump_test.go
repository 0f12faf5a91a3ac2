package nldump

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

func TestRetry(t *testing.T) {
	other := errors.New("permission denied")
	intr := fmt.Errorf("dump: %w", netlink.ErrDumpInterrupted)
	tests := []struct {
		name      string
		errs      []error // answers of successive calls; past the end: success
		wantCalls int
		wantErr   error
		wantData  bool
	}{
		{"first attempt succeeds", nil, 1, nil, true},
		{"interrupted twice then complete", []error{intr, intr}, 3, nil, true},
		{"interrupted until the last attempt", []error{intr, intr, intr, intr}, Attempts, nil, true},
		{"interrupted every time", []error{intr, intr, intr, intr, intr, intr}, Attempts, nl.ErrDumpInterrupted, false},
		{"another error is not retried", []error{other, nil}, 1, other, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			got, err := Retry(func() ([]string, error) {
				calls++
				if calls <= len(tt.errs) && tt.errs[calls-1] != nil {
					return []string{"partial"}, tt.errs[calls-1]
				}
				return []string{"eth0", "eth1"}, nil
			})
			if calls != tt.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tt.wantCalls)
			}
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantData && err == nil && len(got) != 2 {
				t.Errorf("data = %v, want the complete dump", got)
			}
			if !tt.wantData && got != nil {
				t.Errorf("data = %v after persistent interruption, want none (never a partial dump)", got)
			}
		})
	}
}
