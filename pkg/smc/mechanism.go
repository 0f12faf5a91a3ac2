package smc

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// Mechanism is how the TCP sockets of an SMC-R pod become SMC sockets on
// this node (docs/kernels.md).
type Mechanism string

const (
	// MechanismTCP2SMC is net.smc.tcp2smc (Alibaba Cloud Linux 3).
	MechanismTCP2SMC Mechanism = "tcp2smc"
	// MechanismSocketHook is IPPROTO_SMC through the plugin's BPF socket
	// hook (Linux >= 6.11).
	MechanismSocketHook Mechanism = "socket_hook"
	// MechanismNone means SMC exists, but nothing switches unmodified TCP
	// programs (or smcr.transparent is off); they need AF_SMC, IPPROTO_SMC
	// or a preload library.
	MechanismNone Mechanism = "none"
	// MechanismNoSMC means the kernel has no SMC at all.
	MechanismNoSMC Mechanism = "no_smc"
)

// hsCtrlPath is smc_hs_ctrl's per-netns switch (Linux >= 6.19 with SMC).
const hsCtrlPath = "/proc/sys/net/smc/hs_ctrl"

// ipprotoSMC is IPPROTO_SMC (Linux >= 6.11).
const ipprotoSMC = 256

// Offer is what the running kernel offers for transparent SMC.
type Offer struct {
	SMC        bool `json:"smc"`        // AF_SMC sockets can be made
	TCP2SMC    bool `json:"tcp2smc"`    // net.smc.tcp2smc exists
	IPPROTOSMC bool `json:"ipprotoSMC"` // socket(AF_INET, SOCK_STREAM, IPPROTO_SMC) works
	SocketHook bool `json:"socketHook"` // the plugin's socket hook can run
	HSCtrl     bool `json:"hsCtrl"`     // net.smc.hs_ctrl exists (not used by the plugin)
	// SocketHookError says why the socket hook cannot run, when it cannot.
	SocketHookError string `json:"socketHookError,omitempty"`
}

// Detect probes the calling netns's kernel. hookSupported is the socket
// hook's own check (hook.Supported, or hookcmd's Supported where cilium/ebpf
// is not linked); it runs only where SMC exists.
func Detect(hookSupported func() error) Offer {
	o := Offer{SMC: socketWorks(unix.AF_SMC, 0)}
	if !o.SMC {
		return o
	}
	o.TCP2SMC = exists(tcp2smcPath)
	o.IPPROTOSMC = socketWorks(unix.AF_INET, ipprotoSMC)
	o.HSCtrl = exists(hsCtrlPath)
	if err := hookSupported(); err != nil {
		o.SocketHookError = err.Error()
	} else {
		o.SocketHook = true
	}
	return o
}

// String lists what o offers by the names of docs/kernels.md's table
// ("smc,ipproto_smc,socket_hook"), or "no_smc".
func (o Offer) String() string {
	if !o.SMC {
		return string(MechanismNoSMC)
	}
	out := "smc"
	for _, c := range []struct {
		on   bool
		name string
	}{{o.TCP2SMC, "tcp2smc"}, {o.IPPROTOSMC, "ipproto_smc"}, {o.SocketHook, "socket_hook"}, {o.HSCtrl, "hs_ctrl"}} {
		if c.on {
			out += "," + c.name
		}
	}
	return out
}

// Uses is the mechanism smcr.transparent mode picks on a node offering o.
func (o Offer) Uses(mode string) Mechanism {
	if !o.SMC {
		return MechanismNoSMC
	}
	m, _, _ := Pick(mode, func() (bool, error) { return o.TCP2SMC, nil }, func() error {
		if o.SocketHook {
			return nil
		}
		return errors.New(o.SocketHookError)
	})
	return m
}

// Pick chooses the mechanism for smcr.transparent mode where SMC exists, in
// the order the plugin's ADD follows: tcp2smc where the sysctl exists
// (auto, tcp2smc), else the socket hook where it can run (auto, bpf). Each
// probe runs at most once and only when its answer matters (ADD's tcp2smc
// probe sets the sysctl in the pod). With MechanismNone, err says why the
// mode's mechanism is missing (nil for off); probeErr is a tcp2smc probe
// failure, which counts as an absent sysctl.
func Pick(mode string, tcp2smc func() (bool, error), hook func() error) (m Mechanism, err, probeErr error) {
	if mode == config.TransparentOff {
		return MechanismNone, nil, nil
	}
	if mode == config.TransparentAuto || mode == config.TransparentTCP2SMC {
		on, perr := tcp2smc()
		probeErr = perr
		if on {
			return MechanismTCP2SMC, nil, probeErr
		}
		if mode == config.TransparentTCP2SMC {
			return MechanismNone, ErrNoTCP2SMC, probeErr
		}
	}
	if err := hook(); err != nil {
		return MechanismNone, &HookError{err}, probeErr
	}
	return MechanismSocketHook, nil, probeErr
}

// ErrNoTCP2SMC is Pick's answer to smcr.transparent tcp2smc on a kernel
// without the sysctl.
var ErrNoTCP2SMC = errors.New("net.smc.tcp2smc is absent on this kernel")

// HookError is why the socket hook cannot run.
type HookError struct{ Err error }

func (e *HookError) Error() string { return "the SMC socket hook cannot run: " + e.Err.Error() }
func (e *HookError) Unwrap() error { return e.Err }

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func socketWorks(family, proto int) bool {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return false
	}
	_ = unix.Close(fd)
	return true
}
