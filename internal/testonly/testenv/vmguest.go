package testenv

import (
	"os"
	"testing"
)

// VMGuestEnv names the variable the VM tier's guest sets for the Go test
// binaries it runs on the guest's kernel (integration/vm/scenarios).
const VMGuestEnv = "RC_VM_GUEST"

// VMGuest gates a case that changes a whole kernel's state (the RDMA
// netns mode, the NIC, SMC's tables): it runs only in a VM tier guest,
// where RC_VM_GUEST=1, and skips, as a case of that tier, elsewhere. The
// scenario that runs it fails unless it passed there, so the skip is
// never the tier's result.
func VMGuest(t testing.TB) {
	t.Helper()
	if os.Getenv(VMGuestEnv) != "1" {
		t.Skipf("VM tier: runs in its guests with %s=1 (make test-vm)", VMGuestEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 but euid %d: the guest runs its tests as root", VMGuestEnv, os.Geteuid())
	}
}
