package netdev

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdma-chain/rdma-chain/internal/undo"
)

// testHook, when set (tests only), runs before each named step of a netns
// crossing; an error it returns fails that step.
var testHook func(step string) error

// session holds the netlink handles of one netns crossing: the host (the
// caller's current netns), the pod, and optionally a private temporary netns
// in which the netdev is renamed so that no name can clash on the way.
type session struct {
	host   *netlink.Handle
	hostNS netns.NsHandle
	pod    *netlink.Handle
	podFd  int
	tmpNS  ns.NetNS
	tmp    *netlink.Handle
}

// newSession opens handles for the current (host) netns and podNS.
func newSession(podNS ns.NetNS) (*session, error) {
	host, hostNS, err := hostHandles()
	if err != nil {
		return nil, err
	}
	s := &session{host: host, hostNS: hostNS, podFd: int(podNS.Fd())}
	if s.pod, err = handleAt(podNS.Fd(), "pod"); err != nil {
		_ = s.close()
		return nil, err
	}
	return s, nil
}

// openTemp creates the private temporary netns.
func (s *session) openTemp() error {
	tmpNS, err := ns.TempNetNS()
	if err != nil {
		return fmt.Errorf("create temporary netns: %w", err)
	}
	s.tmpNS = tmpNS
	if s.tmp, err = handleAt(tmpNS.Fd(), "temporary"); err != nil {
		return err
	}
	return nil
}

// tmpFd returns the temporary netns's fd.
func (s *session) tmpFd() int { return int(s.tmpNS.Fd()) }

// close releases all handles. A netdev still stranded in the temporary netns
// (a failed rollback) is first moved to the host, so that closing the netns
// neither destroys it (virtual) nor sends it to init_net (physical).
func (s *session) close() error {
	var err error
	if s.tmp != nil {
		err = s.evacuate()
		s.tmp.Close()
	}
	if s.tmpNS != nil {
		s.tmpNS.Close()
	}
	if s.pod != nil {
		s.pod.Close()
	}
	s.host.Close()
	s.hostNS.Close()
	return err
}

// evacuate moves every non-loopback link of the temporary netns to the host,
// under a unique rescue name if its own name is taken there.
func (s *session) evacuate() error {
	links, err := listLinks(s.tmp)
	if err != nil {
		return fmt.Errorf("check temporary netns: %w", err)
	}
	var errs []error
	for _, l := range links {
		if l.Attrs().EncapType == "loopback" || l.Attrs().Name == "lo" {
			continue
		}
		if s.tmp.LinkSetNsFd(l, int(s.hostNS)) == nil {
			continue
		}
		rescue := uniqueName("rescue")
		if rerr := s.tmp.LinkSetName(l, rescue); rerr != nil {
			errs = append(errs, fmt.Errorf("rename stranded %q: %w", l.Attrs().Name, rerr))
			continue
		}
		if merr := s.tmp.LinkSetNsFd(l, int(s.hostNS)); merr != nil {
			errs = append(errs, fmt.Errorf("rescue stranded %q: %w", l.Attrs().Name, merr))
		} else {
			errs = append(errs, fmt.Errorf("stranded %q rescued to the host as %q", l.Attrs().Name, rescue))
		}
	}
	return errors.Join(errs...)
}

// uniqueName returns prefix plus random hex, at most 15 bytes.
func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	if len(name) > 15 {
		name = name[len(name)-15:]
	}
	return name
}

// step is one named change of a netns crossing.
type step struct {
	name string
	do   func(*undo.Stack) error
}

// runSteps runs steps in order, each registering its undo on u; it stops at
// the first failure (or test hook failure) and returns it. The caller rolls back.
func runSteps(steps []step, u *undo.Stack) error {
	for _, st := range steps {
		if err := hook(st.name); err != nil {
			return err
		}
		if err := st.do(u); err != nil {
			return err
		}
	}
	return nil
}

// hook runs testHook for step, if set.
func hook(step string) error {
	if testHook == nil {
		return nil
	}
	if err := testHook(step); err != nil {
		return fmt.Errorf("step %s: %w", step, err)
	}
	return nil
}
