package smcr

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

// noSMCOutcomes is, on a kernel without SMC, what an annotated pod gets
// under each smcr.onUnsupported (docs/configuration.md), with an IPv4
// primary and the state in e's directory.
// "warn" attaches it, logs why, writes no SMC part in its record, and DEL
// cleans up; "fail" refuses it with 108 naming SMC and leaves no record.
func noSMCOutcomes(t *testing.T, e *guestkit.Calls) {
	var u unix.Utsname
	_ = unix.Uname(&u)
	t.Logf("kernel %s has no SMC: an annotated pod gets what smcr.onUnsupported says", unix.ByteSliceToString(u.Release[:]))
	guestkit.Check(t, "no-smc-family", func() error {
		err := smc.Do("", func(c *smc.Client) error { _, err := c.PnetDump(); return err })
		if err == nil {
			return errors.New("the SMC pnet table answers on a kernel without SMC")
		}
		if !errors.Is(err, smc.ErrUnavailable) {
			return fmt.Errorf("want SMC unavailable, got: %w", err)
		}
		return nil
	})
	for _, on := range []string{"warn", "fail"} {
		e.Conf(t, sharedFields(e.DataDir)+`,"smcr":{"onUnsupported":"`+on+`"},"capabilities":{"`+annCap+`":true}`)
		p := annotated("pod1", "true")
		err := e.Add(t, p)
		if on == "warn" {
			noSMCWarn(t, e, err, string(e.C.Stderr))
		} else {
			guestkit.ExpectCode(t, "no-smc-fail-108", err, 108, "SMC is not available")
			guestkit.Check(t, "no-smc-fail-no-record", func() error { return e.RecordCount(0) })
		}
		guestkit.ExpectOK(t, "no-smc-"+on+"-del", e.Del(t, p))
		guestkit.Check(t, "no-smc-"+on+"-del-no-record", func() error { return e.RecordCount(0) })
		guestkit.DelNetNS(t, p)
	}
}

// noSMCWarn checks the ADD under "warn" (its error and the plugin's log):
// the pod attached, the log says SMC-R is unavailable and why, and its one
// record has no SMC part.
func noSMCWarn(t *testing.T, e *guestkit.Calls, err error, log string) {
	guestkit.ExpectOK(t, "no-smc-warn-attaches", err)
	guestkit.Check(t, "no-smc-warn-logs", func() error {
		const what, why = "SMC-R requested but unavailable", "SMC is not available"
		i := strings.Index(log, what)
		if i < 0 || !strings.Contains(log[i:], why) {
			return fmt.Errorf("no log line saying %q for %q: %s", what, why, log)
		}
		return nil
	})
	guestkit.Check(t, "no-smc-warn-record-without-smc", func() error {
		recs, err := e.Records()
		if err == nil && len(recs) != 1 {
			err = fmt.Errorf("%d records, want 1: %q", len(recs), recs)
		}
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(e.DataDir, "attachments", recs[0]))
		if err == nil && bytes.Contains(b, []byte(`"smc"`)) {
			err = fmt.Errorf("record %s has an SMC part: %s", recs[0], b)
		}
		return err
	})
}
