package state

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
)

// TestRecordNetnsGone checks that the one answer to "is this pod's netns
// gone" reads the path, then the inode and cookie ADD recorded; a path
// that now names another netns is gone, and an error keeps the
// attachment.
func TestRecordNetnsGone(t *testing.T) {
	const path = "/run/netns/pod"
	errPerm := errors.New("permission denied")
	tests := []struct {
		name        string
		ino, cookie uint64 // recorded at ADD
		id          netnsid.ID
		err         error
		want        bool
		wantErr     bool
	}{
		{name: "same netns", ino: 10, cookie: 7, id: netnsid.ID{Inode: 10, Cookie: 7}},
		{name: "path names no netns", ino: 10, cookie: 7, err: fmt.Errorf("open: %w", netnsid.ErrGone), want: true},
		{name: "another netns, inode reused, new cookie", ino: 10, cookie: 7, id: netnsid.ID{Inode: 10, Cookie: 8}, want: true},
		{name: "another netns, another inode", ino: 10, cookie: 7, id: netnsid.ID{Inode: 11, Cookie: 9}, want: true},
		{name: "another inode, cookie unreadable", ino: 10, cookie: 7, id: netnsid.ID{Inode: 11}, err: errPerm, want: true},
		{name: "same inode, cookie unreadable", ino: 10, cookie: 7, id: netnsid.ID{Inode: 10}, err: errPerm, wantErr: true},
		{name: "nothing readable", ino: 10, cookie: 7, err: errPerm, wantErr: true},
		{name: "old record without identity", id: netnsid.ID{Inode: 11, Cookie: 9}},
		{name: "old record with inode only", ino: 10, id: netnsid.ID{Inode: 10, Cookie: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Record{NetNS: path, NetNSIno: tt.ino, NetNSCookie: tt.cookie}
			gone, err := r.NetnsGone(func(p string) (netnsid.ID, error) {
				if p != path {
					t.Errorf("asked about %s", p)
				}
				return tt.id, tt.err
			})
			if gone != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("NetnsGone = %v, %v; want %v (error %v)", gone, err, tt.want, tt.wantErr)
			}
		})
	}
	none := &Record{}
	if gone, err := none.NetnsGone(func(string) (netnsid.ID, error) { t.Error("looked up an empty path"); return netnsid.ID{}, nil }); gone || err != nil {
		t.Errorf("no netns recorded: %v, %v", gone, err)
	}
}

// TestRecordNetnsReplaced checks that only a path that opens on another
// netns than ADD recorded proves the pod's netns replaced; a path that
// names no netns here (a mount this process lacks, an empty file a mount
// without propagation shows) is an error, never proof.
func TestRecordNetnsReplaced(t *testing.T) {
	const path = "/run/netns/pod"
	errPerm := errors.New("permission denied")
	tests := []struct {
		name        string
		ino, cookie uint64 // recorded at ADD
		id          netnsid.ID
		err         error
		want        bool
		wantErr     error // nil: no error
	}{
		{name: "same netns", ino: 10, cookie: 7, id: netnsid.ID{Inode: 10, Cookie: 7}},
		{name: "path names no netns here", ino: 10, cookie: 7, err: fmt.Errorf("open: %w", netnsid.ErrGone), wantErr: netnsid.ErrGone},
		{name: "same inode, new cookie", ino: 10, cookie: 7, id: netnsid.ID{Inode: 10, Cookie: 8}, want: true},
		{name: "another inode", ino: 10, cookie: 7, id: netnsid.ID{Inode: 11, Cookie: 9}, want: true},
		{name: "another inode, cookie unreadable", ino: 10, cookie: 7, id: netnsid.ID{Inode: 11}, err: errPerm, want: true},
		{name: "same inode, cookie unreadable", ino: 10, cookie: 7, id: netnsid.ID{Inode: 10}, err: errPerm, wantErr: errPerm},
		{name: "nothing readable", ino: 10, cookie: 7, err: errPerm, wantErr: errPerm},
		{name: "record without identity", id: netnsid.ID{Inode: 11, Cookie: 9}},
		{name: "record without identity, path names no netns here", err: fmt.Errorf("open: %w", netnsid.ErrGone), wantErr: netnsid.ErrGone},
		{name: "record with inode only", ino: 10, id: netnsid.ID{Inode: 10, Cookie: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Record{NetNS: path, NetNSIno: tt.ino, NetNSCookie: tt.cookie}
			replaced, err := r.NetnsReplaced(func(string) (netnsid.ID, error) { return tt.id, tt.err })
			if replaced != tt.want || (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("NetnsReplaced = %v, %v; want %v (error %v)", replaced, err, tt.want, tt.wantErr)
			}
		})
	}
	none := &Record{}
	if replaced, err := none.NetnsReplaced(func(string) (netnsid.ID, error) { t.Error("looked up an empty path"); return netnsid.ID{}, nil }); replaced || err != nil {
		t.Errorf("no netns recorded: %v, %v", replaced, err)
	}
}
