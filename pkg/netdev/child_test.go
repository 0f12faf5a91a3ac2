package netdev

import (
	"errors"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestAddChildLinkRetriesTakenIndex checks that addChildLink draws the
// ifindex again when the kernel answers that the one drawn is taken, with
// EBUSY (up to Linux 6.14) or EEXIST (6.15 on), three draws at most; any
// other answer ends it at once.
func TestAddChildLinkRetriesTakenIndex(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []error // the kernel's answer to each attempt
		wantErr error
	}{
		{name: "EBUSY, then created", answers: []error{unix.EBUSY, nil}},
		{name: "EEXIST, then created", answers: []error{unix.EEXIST, nil}},
		{name: "taken at every draw", answers: []error{unix.EBUSY, unix.EEXIST, unix.EBUSY}, wantErr: unix.EBUSY},
		{name: "kind unsupported", answers: []error{unix.EOPNOTSUPP}, wantErr: ErrKindUnsupported},
		{name: "refused", answers: []error{unix.EPERM}, wantErr: unix.EPERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := childIndexMin
			setDraw(t, func() int { next++; return next })
			var tried []int
			add := func(l netlink.Link) error {
				tried = append(tried, l.Attrs().Index)
				if len(tried) > len(tc.answers) {
					t.Fatalf("attempt %d, the kernel answered %d", len(tried), len(tc.answers))
				}
				return tc.answers[len(tried)-1]
			}
			err := addChildLink(add, macvlanSpec(), 2, 3)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("addChildLink = %v, want %v", err, tc.wantErr)
			}
			want := []int{childIndexMin + 1, childIndexMin + 2, childIndexMin + 3}[:len(tc.answers)]
			if !slices.Equal(tried, want) {
				t.Errorf("indexes tried %v, want %v (a new draw per attempt)", tried, want)
			}
		})
	}
}

// setDraw makes draw childLink's ifindex draw until t ends.
func setDraw(t *testing.T, draw func() int) {
	t.Helper()
	saved := drawChildIndex
	drawChildIndex = draw
	t.Cleanup(func() { drawChildIndex = saved })
}
