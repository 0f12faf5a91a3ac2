package smcr

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
)

// hookRefused is the part of a kernel with SMC but without IPPROTO_SMC
// (6.1): smcr.transparent auto (onUnsupported warn) attaches an annotated
// pod, logs why it has no socket hook and pins nothing; bpf with
// onUnsupported fail refuses it with 108 naming the missing kernel hook,
// pins nothing and leaves no record; DEL succeeds after both.
func hookRefused(t *testing.T, e *guestkit.Calls) {
	p := hookPod("pod1", true)
	hookConf(t, e, "auto", "warn")
	err := e.Add(t, p)
	log := string(e.C.Stderr)
	guestkit.ExpectOK(t, "auto-without-hook-adds", err)
	guestkit.Check(t, "auto-logs-why", func() error {
		if !strings.Contains(log, "no SMC socket hook") {
			return fmt.Errorf("no log line about the missing hook: %s", log)
		}
		return nil
	})
	guestkit.Check(t, "auto-no-pins", noPins)
	guestkit.ExpectOK(t, "auto-del", e.Del(t, p))

	hookConf(t, e, "bpf", "fail")
	guestkit.ExpectCode(t, "bpf-fail-108", e.AddTo(t, p), 108, "update_socket_protocol")
	guestkit.Check(t, "bpf-fail-no-pins", noPins)
	guestkit.Check(t, "bpf-fail-no-record", func() error { return e.RecordCount(0) })
	guestkit.ExpectOK(t, "bpf-fail-del", e.Del(t, p))
	guestkit.DelNetNS(t, p)
}
