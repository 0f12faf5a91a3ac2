package smcr

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
)

// hookScenario is the part of a kernel with IPPROTO_SMC: two annotated
// pods and a plain one under smcr.transparent bpf (onUnsupported fail).
type hookScenario struct {
	*guestkit.Calls
	pod1, pod2, pod3 guestkit.Pod
	loadADD          string // the ADD that loaded the program, a figure
}

func newHookScenario(t *testing.T, e *guestkit.Calls) *hookScenario {
	hookConf(t, e, "bpf", "fail")
	return &hookScenario{Calls: e, pod1: hookPod("pod1", true), pod2: hookPod("pod2", true),
		pod3: hookPod("pod3", false), loadADD: "not measured"}
}

// adds checks that the first annotated pod's ADD runs the hook binary to
// load and attach the program; from then to the last DEL the binary is
// away (with the program pinned, an SMC-R pod's ADD, CHECK and DEL but
// the last run none), and the second annotated pod's ADD lists its netns
// in the pinned map.
func (s *hookScenario) adds(t *testing.T) {
	guestkit.ExpectOK(t, "add-pod1-annotated", s.Add(t, s.pod1))
	log1 := string(s.C.Stderr)
	if d, err := addDuration(s.C.Stderr); err != nil {
		s.loadADD = "not measured (" + err.Error() + ")"
	} else {
		s.loadADD = fmt.Sprintf("%.0f ms", ms(d))
	}
	guestkit.Check(t, "hook-binary-away", moveHookAway(t))
	guestkit.ExpectOK(t, "add-pod2-annotated", s.Add(t, s.pod2))
	log2 := string(s.C.Stderr)
	guestkit.ExpectOK(t, "add-pod3-plain", s.Add(t, s.pod3))
	es, err := os.ReadDir(pinDir)
	t.Logf("pins in %s: %s %v", pinDir, entryNames(es), err)
	guestkit.Check(t, "pins-exist", func() error {
		if err := pinned(); err != nil {
			return err
		}
		// the same reading that must find none after the last DEL
		n, err := hookPrograms()
		if err == nil && n == 0 {
			err = fmt.Errorf("the kernel holds no program named %s", hookProgName)
		}
		return err
	})
	s.inspect(t)
	guestkit.Check(t, "first-pod-loaded-program", func() error {
		if !strings.Contains(log1, "programLoaded=true") {
			return fmt.Errorf("pod1's ADD did not log programLoaded=true: %s", log1)
		}
		return nil
	})
	guestkit.Check(t, "second-pod-listed-in-pinned-map", func() error {
		if !strings.Contains(log2, "programLoaded=false") {
			return fmt.Errorf("pod2's ADD did not log programLoaded=false: %s", log2)
		}
		for _, p := range []guestkit.Pod{s.pod1, s.pod2} {
			on, err := listed(p)
			if err != nil {
				return err
			}
			if !on {
				return fmt.Errorf("%s's netns is not in the pinned map", p.Name)
			}
		}
		return nil
	})
}

// moveHookAway moves the hook binary out of the plugin's reach, and back
// when t ends should the last DEL not come.
func moveHookAway(t *testing.T) func() error {
	err := os.Rename(hookBin, hookAway)
	if err == nil {
		t.Cleanup(func() {
			if _, err := os.Lstat(hookAway); err == nil {
				_ = os.Rename(hookAway, hookBin)
			}
		})
	}
	return func() error {
		if err != nil {
			return fmt.Errorf("move the hook binary away: %w", err)
		}
		_, err := os.Lstat(hookBin)
		if err == nil {
			return fmt.Errorf("%s is still there", hookBin)
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
}

// exchanges runs tcpproto in the pods' netns: first as Go runs it by
// default (Go >= 1.24 listens with MPTCP where the kernel has it,
// IPPROTO_MPTCP, which the hook leaves alone: logged), then with
// GODEBUG=multipathtcp=0, the knob such pods need. Between the annotated
// pods both sockets are SMC's and SMC counts them (the client falls back:
// no SMC-R device for the pods' subnet); to the plain pod the client's
// socket is TCP and that pod's SMC counters stay.
func (s *hookScenario) exchanges(t *testing.T) {
	r := tcpExchange(t, s.pod1, s.pod3, 7000, "")
	t.Logf("an unmodified Go server listens with protocol %d (262 = MPTCP, Go >= 1.24's default where the kernel has MPTCP; the hook switches only 0/TCP)", created("listener", r.srv))

	fb0, err0 := fallbackTotal(s.pod2)
	r = tcpExchange(t, s.pod1, s.pod2, 7001, "multipathtcp=0")
	guestkit.Check(t, "annotated-client-smc", func() error { return r.client(ipprotoSMC) })
	guestkit.Check(t, "annotated-listener-smc", func() error { return r.listener(ipprotoSMC) })
	logFallbacks(t, s.pod2, s.pod1)
	fb1, err1 := fallbackTotal(s.pod2)
	guestkit.Check(t, "smc-counters-moved", func() error {
		if err := errors.Join(err0, err1); err != nil {
			return err
		}
		if fb1 <= fb0 {
			return fmt.Errorf("SMC fallback total in %s %d -> %d: no SMC socket seen by SMC", s.pod2.Name, fb0, fb1)
		}
		return nil
	})

	fb3, err3 := fallbackTotal(s.pod3)
	r = tcpExchange(t, s.pod1, s.pod3, 7002, "multipathtcp=0")
	guestkit.Check(t, "plain-client-tcp", func() error { return r.client(ipprotoTCP) })
	fb4, err4 := fallbackTotal(s.pod3)
	guestkit.Check(t, "plain-counters-unmoved", func() error {
		if err := errors.Join(err3, err4); err != nil {
			return err
		}
		if fb4 != fb3 {
			return fmt.Errorf("SMC counters moved in the plain pod %s: %d -> %d", s.pod3.Name, fb3, fb4)
		}
		return nil
	})
	s.inspect(t)
}

// dels checks that the whole chain's CHECK passes with the hook binary
// away; DEL of one annotated pod unlists it (its new sockets are TCP
// again) and keeps the program for the other; the last DEL, the binary
// back, detaches the program and removes the pins.
func (s *hookScenario) dels(t *testing.T) {
	guestkit.ExpectOK(t, "check-pod2", s.Check(t, s.pod2))
	guestkit.ExpectOK(t, "del-pod1", s.Del(t, s.pod1))
	guestkit.Check(t, "pins-kept-for-pod2", pinned)
	guestkit.Check(t, "deleted-pod-tcp-again", func() error {
		on, err := listed(s.pod1)
		if err == nil && on {
			err = fmt.Errorf("%s's netns is still in the pinned map after its DEL", s.pod1.Name)
		}
		if err != nil {
			return err
		}
		return wantProbe(s.pod1, ipprotoTCP)
	})
	guestkit.Check(t, "listed-pod-still-smc", func() error { return wantProbe(s.pod2, ipprotoSMC) })
	if err := os.Rename(hookAway, hookBin); err != nil {
		t.Errorf("put the hook binary back for the last DEL: %v", err)
	}
	guestkit.ExpectOK(t, "del-pod2", s.Del(t, s.pod2))
	guestkit.Check(t, "last-del-detaches", noPins)
	// pod2 is unlisted with or without the program: what proves the
	// detach is that the kernel frees the program (asynchronously).
	guestkit.Check(t, "detached-tcp", func() error {
		if err := wantProbe(s.pod2, ipprotoTCP); err != nil {
			return err
		}
		return guestkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
			n, err := hookPrograms()
			if err == nil && n > 0 {
				err = fmt.Errorf("the kernel still holds %d programs named %s after the last DEL", n, hookProgName)
			}
			return err
		})
	})
	guestkit.ExpectOK(t, "del-pod3", s.Del(t, s.pod3))
	guestkit.Check(t, "no-records", func() error { return s.RecordCount(0) })
	for _, p := range []guestkit.Pod{s.pod1, s.pod2, s.pod3} {
		guestkit.DelNetNS(t, p)
	}
}

// inspect logs what the operator's inspect shows of the scenario's
// attachments and the hook (one Logf: its first line is an RC-INFO line).
func (s *hookScenario) inspect(t *testing.T) {
	out, err := exec.Command("/usr/local/bin/rdma-chain-ops", "inspect", "--data-dir", s.DataDir).CombinedOutput()
	t.Logf("rdma-chain-ops inspect --data-dir %s: exit %v\n%s", s.DataDir, err, out)
}
