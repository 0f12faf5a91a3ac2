// Package nldump makes every netlink dump of the tree: link, address and
// route dumps through its typed functions, generic netlink (SMC) and RDMA
// netlink through Retry. A dump the kernel interrupted (NLM_F_DUMP_INTR:
// the objects changed while they were being dumped) is run again.
//
// Unlike containernetworking's netlinksafe, which after its last attempt
// returns the possibly incomplete list without an error, Retry returns the
// interruption: a caller that records a dump, or reads "not in the list" as
// "gone", must never take part of a list for all of it.
package nldump

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
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

// The dumps below are the ones the tree makes, each retried as Retry does.
// h is the handle to dump through; nil means the calling thread's netns.
// The linter (conf/golangci.yml, forbidigo) refuses these dumps anywhere
// else.

// LinkList dumps the links.
func LinkList(h *netlink.Handle) ([]netlink.Link, error) {
	return Retry(handle(h).LinkList)
}

// AddrList dumps the addresses of family on link (nil: every link).
func AddrList(h *netlink.Handle, link netlink.Link, family int) ([]netlink.Addr, error) {
	return Retry(func() ([]netlink.Addr, error) { return handle(h).AddrList(link, family) })
}

// RouteListFiltered dumps the routes of family that match filter's fields
// in mask.
func RouteListFiltered(h *netlink.Handle, family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	return Retry(func() ([]netlink.Route, error) { return handle(h).RouteListFiltered(family, filter, mask) })
}

// RdmaLinkList dumps the RDMA devices.
func RdmaLinkList(h *netlink.Handle) ([]*netlink.RdmaLink, error) {
	return Retry(handle(h).RdmaLinkList)
}

// handle is h, or a handle on the calling thread's netns for nil (what
// the netlink package's own functions use).
func handle(h *netlink.Handle) *netlink.Handle {
	if h == nil {
		return &netlink.Handle{}
	}
	return h
}

// RouteList dumps the routes of family through link (nil: every link) in
// the main table, as netlink.RouteList does.
func RouteList(h *netlink.Handle, link netlink.Link, family int) ([]netlink.Route, error) {
	return Retry(func() ([]netlink.Route, error) { return handle(h).RouteList(link, family) })
}
