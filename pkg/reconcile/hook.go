package reconcile

import (
	"errors"
	"fmt"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// hookLockTimeout bounds the wait for the node lock before a hold: a pod's
// ADD may be loading the program at the same time.
const hookLockTimeout = 30 * time.Second

// errHookUnused means the node's kernel gives the entry's smcr.transparent
// another mechanism than the socket hook (tcp2smc, or none).
var errHookUnused = errors.New("not the mechanism of this node")

// hookWanted is a bpffs directory in which a network's SMC-R pods would be
// listed, with the mode that lists them and the network whose node lock
// the plugin takes when it loads the program there.
type hookWanted struct {
	mode    string
	lockDir string
}

// wantedHooks are the socket hooks the networks' entries may list pods
// in: not draining, SMC-R not turned off (smcr.enabled), smcr.transparent
// bpf or auto.
// An entry that does not parse has no wish (the loader refused it
// already; DEL reads the same bytes).
func wantedHooks(nets []conflist.Network) map[string]hookWanted {
	out := map[string]hookWanted{}
	for _, n := range nets {
		c, _, err := config.ParseWithoutPrevResult(n.Stdin)
		if err != nil {
			continue
		}
		mode := c.SMCR.Transparent
		// A draining entry passes new pods through: none will list itself,
		// and uninstall releases the hold before taking the entry out.
		off := c.Drain || c.SMCR.Enabled != nil && !*c.SMCR.Enabled
		if off || (mode != config.TransparentBPF && mode != config.TransparentAuto) {
			continue
		}
		if _, ok := out[c.SMCR.BPFFSDir]; !ok || mode == config.TransparentBPF {
			out[c.SMCR.BPFFSDir] = hookWanted{mode: mode, lockDir: n.DataDir}
		}
	}
	return out
}

// holdHooks keeps the socket hook's program attached in every directory
// the entries would list SMC-R pods in, so that no pod's ADD pays the hook
// binary's load of it (seconds on a busy node): each pod then lists its
// netns with one bpf(2) call. A directory where the kernel gives the mode
// another mechanism is said once and not looked at again (a kernel does
// not change under a running daemon); a hold that fails is said and
// tried again before the next pass.
func (r *reconciler) holdHooks() {
	unheld := 0
	defer func() { r.metrics.HookUnheld.Set(float64(unheld)) }()
	for dir, w := range wantedHooks(r.networks()) {
		if r.hookUnused[dir] {
			continue
		}
		took, err := r.holdHook(dir, w)
		switch {
		case errors.Is(err, errHookUnused):
			if r.hookUnused == nil {
				r.hookUnused = map[string]bool{}
			}
			r.hookUnused[dir] = true
			r.log.Info("SMC socket hook not held", "bpffsDir", dir, "why", err)
		case err != nil:
			unheld++
			r.log.Error("cannot hold the SMC socket hook", "bpffsDir", dir, "error", err)
		case took:
			r.log.Info("holding the SMC socket hook loaded: SMC-R pods' ADD only list their netns", "bpffsDir", dir)
		}
	}
}

// holdHook takes the hold unless it is there, under the node lock of the
// network that would load the program.
func (r *reconciler) holdHook(dir string, w hookWanted) (took bool, err error) {
	if held, err := r.node.HookHeld(dir); err != nil || held {
		return false, err
	}
	unlock, err := state.New(w.lockDir).Lock(hookLockTimeout)
	if err != nil {
		return false, err
	}
	defer unlock()
	return r.node.HoldHook(dir, w.mode)
}

// HookHeld reads the hold with the raw map client (no exec).
func (kernelNode) HookHeld(dir string) (bool, error) { return hookcmd.Client{}.Held(dir) }

// HoldHook holds the program where the kernel gives mode the socket hook,
// and returns errHookUnused (saying which mechanism instead) elsewhere.
func (kernelNode) HoldHook(dir, mode string) (bool, error) {
	runner := hookcmd.Beside()
	offer := smc.Detect(func() error { return runner.Supported(dir) })
	if m := offer.Uses(mode); m != smc.MechanismSocketHook {
		why := fmt.Sprintf("smcr.transparent %s uses %s (kernel offers %s)", mode, m, offer)
		if offer.SocketHookError != "" {
			why += "; " + offer.SocketHookError
		}
		return false, fmt.Errorf("%w: %s", errHookUnused, why)
	}
	if err := runner.Hold(dir); err != nil {
		return false, err
	}
	return true, nil
}
