package undo

import (
	"errors"
	"reflect"
	"testing"
)

func TestStack(t *testing.T) {
	errA, errB := errors.New("a failed"), errors.New("b failed")
	tests := []struct {
		name     string
		fails    map[string]error
		wantRun  []string
		wantErrs []error
	}{
		{"all succeed", nil, []string{"c", "b", "a"}, nil},
		{"one fails, the rest still run", map[string]error{"b": errB}, []string{"c", "b", "a"}, []error{errB}},
		{"two fail, both returned", map[string]error{"a": errA, "b": errB}, []string{"c", "b", "a"}, []error{errA, errB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Stack
			var ran []string
			for _, name := range []string{"a", "b", "c"} {
				s.Push(func() error { ran = append(ran, name); return tt.fails[name] })
			}
			if s.Len() != 3 {
				t.Fatalf("Len = %d, want 3", s.Len())
			}
			err := s.Run()
			if !reflect.DeepEqual(ran, tt.wantRun) {
				t.Errorf("order = %v, want %v", ran, tt.wantRun)
			}
			if (err == nil) != (len(tt.wantErrs) == 0) {
				t.Errorf("Run() = %v, want errors %v", err, tt.wantErrs)
			}
			for _, w := range tt.wantErrs {
				if !errors.Is(err, w) {
					t.Errorf("Run() = %v, does not wrap %v", err, w)
				}
			}
			if s.Len() != 0 {
				t.Errorf("stack not emptied: Len = %d", s.Len())
			}
			if err := s.Run(); err != nil || len(ran) != 3 {
				t.Errorf("second Run ran again: %v, %v", ran, err)
			}
		})
	}
}

func TestRollback(t *testing.T) {
	cause, undoErr := errors.New("step failed"), errors.New("undo failed")
	var s Stack
	if err := s.Rollback(cause); !errors.Is(err, cause) || err.Error() != cause.Error() {
		t.Errorf("empty Rollback = %v, want the cause alone", err)
	}
	s.Push(func() error { return nil })
	if err := s.Rollback(cause); !errors.Is(err, cause) || err.Error() != cause.Error() {
		t.Errorf("clean Rollback = %v, want the cause alone", err)
	}
	s.Push(func() error { return undoErr })
	err := s.Rollback(cause)
	if !errors.Is(err, cause) || !errors.Is(err, undoErr) {
		t.Errorf("Rollback = %v, want both the cause and the undo failure", err)
	}
}
