package smcr

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
)

// pnet reads the pnet table of the netns at nsPath ("": init_net) and logs
// it under label.
func pnet(t *testing.T, label, nsPath string) ([]smc.PnetEntry, error) {
	t.Helper()
	var rows []smc.PnetEntry
	err := smc.Do(nsPath, func(c *smc.Client) (err error) {
		rows, err = c.PnetDump()
		return err
	})
	if err != nil {
		err = fmt.Errorf("pnet table of %s: %w", label, err)
	}
	t.Logf("pnet %s: [%s] %v", label, rowList(rows), err)
	return rows, err
}

func rowList(rows []smc.PnetEntry) string {
	s := make([]string, 0, len(rows))
	for _, r := range rows {
		s = append(s, r.String())
	}
	return strings.Join(s, "; ")
}

// has checks that the table read holds want.
func has(rows []smc.PnetEntry, err error, want smc.PnetEntry) error {
	if err == nil && !slices.Contains(rows, want) {
		err = fmt.Errorf("no row %q in [%s]", want, rowList(rows))
	}
	return err
}

// only checks that the table read is exactly want.
func only(rows []smc.PnetEntry, err error, want smc.PnetEntry) error {
	if err == nil && (len(rows) != 1 || rows[0] != want) {
		err = fmt.Errorf("want exactly %q, got [%s]", want, rowList(rows))
	}
	return err
}

// empty checks that the table read has no row.
func empty(rows []smc.PnetEntry, err error) error {
	if err == nil && len(rows) > 0 {
		err = fmt.Errorf("want no row, got [%s]", rowList(rows))
	}
	return err
}

// entries adds the four pods and checks both tables and the UEID table:
// the annotated pods' rows, one init_net row for both, none for the pods
// without the annotation or with "maybe".
func (s *scenario) entries(t *testing.T) {
	_, _ = pnet(t, "init_net before any pod", "")
	for _, p := range s.pods {
		guestkit.ExpectOK(t, "add-"+p.Name, s.Add(t, p))
	}
	rows, err := pnet(t, "init_net", "")
	guestkit.Check(t, "host-entry", func() error { return has(rows, err, s.host) })
	guestkit.Check(t, "host-entry-single", func() error {
		n := 0
		for _, r := range rows {
			if r.IBName == rxe {
				n++
			}
		}
		if err == nil && n != 1 {
			err = fmt.Errorf("want exactly one %s row, got %d: [%s]", rxe, n, rowList(rows))
		}
		return err
	})
	pod1, pod2, pod3, pod4 := s.pods[0], s.pods[1], s.pods[2], s.pods[3]
	for _, p := range []guestkit.Pod{pod1, pod4} {
		rows, err := pnet(t, p.Name+" (annotated true)", p.NetNS)
		guestkit.Check(t, "pod-entry-"+p.Name, func() error { return only(rows, err, s.pod) })
	}
	rows, err = pnet(t, pod2.Name+" (no annotation)", pod2.NetNS)
	guestkit.Check(t, "no-entry-"+pod2.Name, func() error { return empty(rows, err) })
	rows, err = pnet(t, pod3.Name+` (annotation "maybe")`, pod3.NetNS)
	guestkit.Check(t, "no-entry-"+pod3.Name, func() error { return empty(rows, err) })
	var ueids []string
	err = smc.Do("", func(c *smc.Client) (err error) {
		ueids, err = c.UEIDs()
		return err
	})
	t.Logf("UEID table: %q %v", ueids, err)
	guestkit.Check(t, "ueid", func() error {
		if err == nil && !slices.Contains(ueids, ueid) {
			err = fmt.Errorf("UEID %s not in the table %q", ueid, ueids)
		}
		return err
	})
}

// dels checks that DEL removes a pod's row; the init_net row stays while
// an annotated pod (pod4) uses rxe0 and goes with the last one; a second
// DEL succeeds and no record is left.
func (s *scenario) dels(t *testing.T) {
	pod1, pod2, pod3, pod4 := s.pods[0], s.pods[1], s.pods[2], s.pods[3]
	guestkit.ExpectOK(t, "del-"+pod1.Name, s.Del(t, pod1))
	rows, err := pnet(t, pod1.Name+" after its DEL", pod1.NetNS)
	guestkit.Check(t, "pod-entry-gone-"+pod1.Name, func() error { return empty(rows, err) })
	rows, err = pnet(t, "init_net after DEL "+pod1.Name+" ("+pod4.Name+" still annotated)", "")
	guestkit.Check(t, "host-entry-stays", func() error { return has(rows, err, s.host) })
	for _, p := range []guestkit.Pod{pod2, pod3} {
		guestkit.ExpectOK(t, "del-"+p.Name, s.Del(t, p))
	}
	rows, err = pnet(t, "init_net after DEL "+pod2.Name+", "+pod3.Name, "")
	guestkit.Check(t, "host-entry-stays-2", func() error { return has(rows, err, s.host) })
	guestkit.ExpectOK(t, "del-"+pod4.Name, s.Del(t, pod4))
	rows, err = pnet(t, pod4.Name+" after its DEL", pod4.NetNS)
	guestkit.Check(t, "pod-entry-gone-"+pod4.Name, func() error { return empty(rows, err) })
	rows, err = pnet(t, "init_net after DEL of the last annotated pod", "")
	guestkit.Check(t, "host-entry-gone", func() error {
		if err != nil {
			return err
		}
		// any row of rxe0 or of the PNETID: the plugin's, left behind
		if i := slices.IndexFunc(rows, func(r smc.PnetEntry) bool { return r.IBName == rxe || r.PnetID == s.pnetID }); i >= 0 {
			return fmt.Errorf("init_net row left: %q in [%s]", rows[i], rowList(rows))
		}
		return nil
	})
	guestkit.ExpectOK(t, "del-again-"+pod4.Name, s.Del(t, pod4))
	guestkit.Check(t, "no-records-left", func() error { return s.RecordCount(0) })
	var errs []error
	for _, p := range s.pods {
		errs = append(errs, guestkit.DeleteNetNS(p.NetNS))
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("remove the pods' netns: %v", err)
	}
}
