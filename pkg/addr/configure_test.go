package addr

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// TestWriteSysctlRefusesEscapes checks that names that would write
// another interface's, the netns-wide or a path outside net.ipv6.conf are
// refused before anything is opened; a plain name reaches /proc/sys (and,
// for an interface that does not exist, fails there with the kernel's
// ENOENT).
func TestWriteSysctlRefusesEscapes(t *testing.T) {
	for _, name := range []string{"", ".", "..", "all", "default", "../../ipv4/ip_forward", "a/b"} {
		err := writeSysctl(name, "disable_ipv6", "0")
		if err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("writeSysctl(%q) = %v, want a refusal", name, err)
		}
	}
	err := writeSysctl("nosuchif0.100", "disable_ipv6", "0")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "net.ipv6.conf.nosuchif0.100.disable_ipv6") {
		t.Errorf("writeSysctl(nosuchif0.100) = %v, want ENOENT naming the sysctl", err)
	}
}
