package soak

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
)

// codeTryAgain is the plugin's answer to an ADD while the pod-resources
// API cannot say whether the pod asked for RDMA (the spec's "try again
// later").
const codeTryAgain = types.ErrTryAgainLater

// pod is pod name as containerd passes it, annotated for SMC-R.
func pod(name string) guestkit.Pod {
	p := guestkit.NewPod("soak-", name)
	p.Caps = smcCaps
	return p
}

// cycle runs pod cycle n: its kind drawn from a generator seeded with n,
// so a run repeats exactly. A call that goes wrong is a failed check
// named after the cycle (the shell's names) and counts in no-failed-calls.
func (s *soak) cycle(t *testing.T, n int) {
	r := rand.New(rand.NewPCG(uint64(n), 0)).IntN(32768)
	p := pod(fmt.Sprintf("s%d", n))
	if err := guestkit.NewNetNS(p.NetNS); err != nil {
		s.fail(t, n, "netns", err)
		return
	}
	defer s.gone(t, n, p)
	switch r % 8 {
	case 0:
		s.killCycle(t, n, p, s.addFP[r/8%len(s.addFP)])
	case 1:
		s.attachCycle(t, n, p, true)
	default:
		s.attachCycle(t, n, p, false)
	}
}

// fail is a call of cycle n that went wrong: a failed check of its own.
func (s *soak) fail(t *testing.T, n int, step string, err error) {
	t.Helper()
	s.failed++
	guestkit.Check(t, fmt.Sprintf("cycle-%d/%s", n, step), func() error { return err })
}

// gone unpins the pod's netns (a death cycle did already).
func (s *soak) gone(t *testing.T, n int, p guestkit.Pod) {
	if err := guestkit.DeleteNetNS(p.NetNS); err != nil {
		s.fail(t, n, "netns-del", err)
	}
}

// killCycle kills ADD with SIGKILL at failpoint fp and checks that the
// runtime's DEL then cleans up. While the socket is down ADD must be
// refused before any host change, so it never reaches fp.
func (s *soak) killCycle(t *testing.T, n int, p guestkit.Pod, fp string) {
	s.c.Failpoint = fp
	err := s.c.Add(s.list, p)
	s.c.Failpoint = ""
	switch {
	case s.kubelet == nil:
		if cerr := s.refusal(err); cerr != nil {
			s.fail(t, n, "add", cerr)
		} else {
			s.refused++
		}
	case err == nil:
		s.fail(t, n, "killed-at-failpoint", fmt.Errorf("ADD with failpoint %s succeeded: not killed there", fp))
	case !s.c.Killed || !strings.Contains(err.Error(), "failpoint "+fp+": SIGKILL"):
		s.fail(t, n, "killed-at-failpoint", fmt.Errorf("ADD with failpoint %s not killed there (SIGKILL %v): %w", fp, s.c.Killed, err))
	default:
		s.kills++
	}
	if err := s.c.Del(s.list, p); err != nil {
		s.fail(t, n, "del-after-kill", fmt.Errorf("DEL after a kill at %s: %w", fp, err))
	}
}

// attachCycle runs ADD, then DEL (normal) or the netns deleted and the
// primary's own DEL (death: the rest is reconcile's). While the socket is
// down ADD must be refused with 11, and the runtime's DEL follows.
func (s *soak) attachCycle(t *testing.T, n int, p guestkit.Pod, death bool) {
	t0 := time.Now()
	err := s.c.Add(s.list, p)
	addT := time.Since(t0)
	if s.kubelet == nil {
		if cerr := s.refusal(err); cerr != nil {
			s.fail(t, n, "add", cerr)
		} else {
			s.refused++
		}
		if err := s.c.Del(s.list, p); err != nil {
			s.fail(t, n, "del-after-refusal", err)
		}
		return
	}
	if err != nil {
		s.fail(t, n, "add", err)
		if err := s.c.Del(s.list, p); err != nil {
			s.fail(t, n, "del-after-failed-add", err)
		}
		return
	}
	s.addT = append(s.addT, addT)
	if death {
		s.deaths++
		s.gone(t, n, p)
		if err := s.c.Del(s.ptp, p); err != nil {
			s.fail(t, n, "primary-del", err)
		}
		return
	}
	s.normal++
	t0 = time.Now()
	err = s.c.Del(s.list, p)
	if err != nil {
		s.fail(t, n, "del", err)
		return
	}
	s.delT = append(s.delT, time.Since(t0))
}

// refusal checks that an ADD while the pod-resources socket is down
// failed with 11 naming the socket.
func (s *soak) refusal(err error) error {
	if err == nil {
		return errors.New("ADD succeeded while the pod-resources socket was down: want CNI error 11")
	}
	ce, ok := guestkit.CNIError(err)
	if !ok || ce.Code != codeTryAgain {
		return fmt.Errorf("ADD while the pod-resources socket was down: want CNI error %d: %w", codeTryAgain, err)
	}
	if !strings.Contains(ce.Msg+" "+ce.Details, kubeletSock) {
		return fmt.Errorf("the refusal does not name the socket %s: %w", kubeletSock, err)
	}
	return nil
}
