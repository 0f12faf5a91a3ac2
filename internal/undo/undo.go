// Package undo keeps the undo of every change a multi-step operation has
// made so far, so that a failure part-way puts things back newest first.
package undo

import (
	"errors"
	"fmt"
)

// Stack collects undo functions. The zero value is an empty stack ready to
// use. A Stack is not safe for concurrent use.
type Stack struct{ fns []func() error }

// Push registers the undo of a change that has just succeeded.
func (s *Stack) Push(f func() error) { s.fns = append(s.fns, f) }

// Len reports how many undos are registered.
func (s *Stack) Len() int { return len(s.fns) }

// Run undoes every registered change, newest first, and empties the stack.
// It keeps going after a failed undo and returns all failures joined (nil
// when every undo succeeded).
func (s *Stack) Run() error {
	var errs []error
	for i := len(s.fns) - 1; i >= 0; i-- {
		if err := s.fns[i](); err != nil {
			errs = append(errs, err)
		}
	}
	s.fns = nil
	return errors.Join(errs...)
}

// Rollback runs the stack after cause and returns cause, joined with the
// undo failures if any: the caller then must not assume the old state.
func (s *Stack) Rollback(cause error) error {
	if err := s.Run(); err != nil {
		return errors.Join(cause, fmt.Errorf("rollback incomplete: %w", err))
	}
	return cause
}
