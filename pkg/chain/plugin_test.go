package chain

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestOwnNetnsRefused checks that CNI_NETNS naming the plugin's own netns
// is refused before anything runs, with one error.
func TestOwnNetnsRefused(t *testing.T) {
	for _, verb := range []string{"ADD", "DEL", "CHECK"} {
		w := &world{}
		args := cmd(t.TempDir(), "", prevResult100)
		args.Netns = "/proc/1/ns/net"
		var err error
		switch verb {
		case "ADD":
			err = w.plugin().Add(args)
		case "DEL":
			err = w.plugin().Del(args)
		default:
			err = w.plugin().Check(args)
		}
		wantCode(t, err, types.ErrInvalidNetNS, "own netns")
		if w.stdout.Len() != 0 || len(w.calls) != 0 {
			t.Errorf("%s: printed %q, calls %v", verb, w.stdout.String(), w.calls)
		}
	}
}
