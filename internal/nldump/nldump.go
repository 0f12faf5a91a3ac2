// Package nldump retries netlink dumps that the kernel interrupted
// (NLM_F_DUMP_INTR: the objects changed while they were being dumped), for
// the dumps containernetworking's netlinksafe does not cover: address dumps
// on a handle bound to another netns, link dumps whose result is searched or
// recorded, generic netlink (SMC) and RDMA netlink.
//
// Unlike netlinksafe, which after its last attempt returns the possibly
// incomplete list without an error, Retry returns the interruption: a caller
// that records a dump, or reads "not in the list" as "gone", must never take
// part of a list for all of it.
package nldump

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
)

// Attempts bounds how often Retry runs a dump that keeps being interrupted.
const Attempts = 5

// Retry runs dump until it is not interrupted, at most Attempts times, and
// returns its result. When every attempt was interrupted it returns the zero
// value and an error wrapping nl.ErrDumpInterrupted (which
// netlink.ErrDumpInterrupted is). Any other error is returned at once.
func Retry[T any](dump func() (T, error)) (T, error) {
	var err error
	for range Attempts {
		var v T
		v, err = dump()
		if !errors.Is(err, nl.ErrDumpInterrupted) {
			return v, err
		}
	}
	var zero T
	return zero, fmt.Errorf("changed during each of %d attempts: %w", Attempts, err)
}
