package soak

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/rdma-chain/rdma-chain/integration/vm/guestkit"
	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
)

const (
	kubeletSock      = "/run/kubelet/soak.sock"
	opsBinary        = "/usr/local/bin/rdma-chain-ops"
	recLog           = "/tmp/soak-reconcile.log"
	codeNotAvailable = 50 // the spec's STATUS code: the plugin cannot serve ADD
)

// kubeletUp serves the pod-resources API on kubeletSock: every cycle's
// pod and the traced one asked for one rdma/hca.
func (s *soak) kubeletUp() error {
	if s.pods == nil {
		for i := 1; i <= s.cycles; i++ {
			s.pods = append(s.pods, kubeletPod(fmt.Sprintf("s%d", i)))
		}
		s.pods = append(s.pods, kubeletPod("trace"))
	}
	if err := os.MkdirAll("/run/kubelet", 0o755); err != nil {
		return err
	}
	k, err := fakekubelet.Start(kubeletSock, s.pods)
	if err != nil {
		return err
	}
	s.kubelet = k
	_, err = os.Stat(kubeletSock)
	return err
}

func kubeletPod(name string) fakekubelet.Pod {
	return fakekubelet.Pod{Namespace: "default", Name: name, Resources: map[string][]string{"rdma/hca": {"1"}}}
}

// kubeletDown stops the API and takes its socket away, as a kubelet
// restart does.
func (s *soak) kubeletDown() error {
	s.kubelet.Stop()
	s.kubelet = nil
	if err := os.Remove(kubeletSock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// flap takes the pod-resources socket away (up false) or brings it back at
// cycle n; the first STATUS begun after that must say so (it runs every
// 5 s).
func (s *soak) flap(t *testing.T, n int, up bool) {
	mark := time.Now()
	if !up {
		err := s.kubeletDown()
		guestkit.Check(t, fmt.Sprintf("cycle-%d/status-fails-without-kubelet", n), func() error {
			return errors.Join(err, s.status.follows(mark, false))
		})
		return
	}
	err := s.kubeletUp()
	guestkit.Check(t, fmt.Sprintf("cycle-%d/status-recovers", n), func() error {
		return errors.Join(err, s.status.follows(mark, true))
	})
}

// statusRun is one STATUS: when it began and what it answered.
type statusRun struct {
	begun time.Time
	err   error
}

// statusLoop sends STATUS every 5 s, as a runtime does, through a chain
// of its own, and keeps every answer.
type statusLoop struct {
	mu   sync.Mutex
	runs []statusRun
	stop chan struct{}
	done chan struct{}
}

func startStatus(t *testing.T, list *libcni.NetworkConfigList) *statusLoop {
	l := &statusLoop{stop: make(chan struct{}), done: make(chan struct{})}
	c := guestkit.NewChain(binDir)
	go func() {
		defer close(l.done)
		for {
			begun := time.Now()
			err := c.Status(list)
			l.mu.Lock()
			l.runs = append(l.runs, statusRun{begun, err})
			l.mu.Unlock()
			select {
			case <-l.stop:
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	t.Cleanup(l.halt)
	return l
}

// halt stops the loop and waits for its last STATUS.
func (l *statusLoop) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// follows waits (20 s) for the first STATUS begun after mark to answer,
// and wants it to pass (up) or to fail with 50 naming the socket.
func (l *statusLoop) follows(mark time.Time, up bool) error {
	var r statusRun
	err := guestkit.Poll(20*time.Second, 100*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		i := slices.IndexFunc(l.runs, func(r statusRun) bool { return !r.begun.Before(mark) })
		if i < 0 {
			return fmt.Errorf("no STATUS begun since the socket changed %.1f s ago has answered", time.Since(mark).Seconds())
		}
		r = l.runs[i]
		return nil
	})
	switch {
	case err != nil:
		return err
	case up && r.err != nil:
		return fmt.Errorf("STATUS begun %.1f s after the socket came back failed: %w", r.begun.Sub(mark).Seconds(), r.err)
	case up:
		return nil
	case r.err == nil:
		return fmt.Errorf("STATUS begun %.1f s after the socket went passed", r.begun.Sub(mark).Seconds())
	}
	if ce, ok := guestkit.CNIError(r.err); !ok || ce.Code != codeNotAvailable || !bytes.Contains([]byte(ce.Msg), []byte(kubeletSock)) {
		return fmt.Errorf("STATUS without the socket: want CNI error %d naming %s: %w", codeNotAvailable, kubeletSock, r.err)
	}
	return nil
}

// counts is how many STATUS passed and failed, and the last one.
func (l *statusLoop) counts() (ok, failed int, last statusRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.runs {
		if r.err == nil {
			ok++
		} else {
			failed++
		}
	}
	if len(l.runs) > 0 {
		last = l.runs[len(l.runs)-1]
	}
	return ok, failed, last
}

// reconciler is `rdma-chain-ops reconcile --interval 3s` running beside
// the cycles, as the DaemonSet runs it: the only repair for a netns that
// dies without DEL.
type reconciler struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // its exit, once exited is closed
}

func startReconcile(t *testing.T, conflist string) *reconciler {
	r := &reconciler{exited: make(chan struct{})}
	log, err := os.OpenFile(recLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(opsBinary, "reconcile", "--conflist", conflist, "--cni-bin-dir", binDir, "--interval", "3s")
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", r.cmd, err)
	}
	go func() {
		r.err = r.cmd.Wait()
		log.Close()
		close(r.exited)
	}()
	t.Cleanup(r.halt)
	return r
}

func (r *reconciler) pid() int { return r.cmd.Process.Pid }

// alive checks that reconcile has not exited.
func (r *reconciler) alive() error {
	select {
	case <-r.exited:
		err := r.err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Errorf("reconcile exited: %w: %s", err, logTail())
	default:
		return nil
	}
}

// running checks that reconcile is alive and has finished a pass (its
// log says so): it reads the conflist and the records, not merely
// started.
func (r *reconciler) running() error {
	return guestkit.Poll(30*time.Second, 100*time.Millisecond, func() error {
		if err := r.alive(); err != nil {
			return err
		}
		b, err := os.ReadFile(recLog)
		if err != nil {
			return fmt.Errorf("reconcile's log: %w", err)
		}
		if !bytes.Contains(b, []byte("pass done")) {
			return fmt.Errorf("reconcile has finished no pass: %s", logTail())
		}
		return nil
	})
}

// halt stops reconcile as the kubelet stops a pod (SIGTERM) and waits for
// it, killing it after 10 s.
func (r *reconciler) halt() {
	if r.alive() != nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
}

// logTail is the last lines of reconcile's log, for an error.
func logTail() string {
	b, _ := os.ReadFile(recLog)
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-3):], []byte(" | ")))
}
