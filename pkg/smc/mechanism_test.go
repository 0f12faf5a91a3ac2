package smc

import (
	"errors"
	"testing"
)

func TestOfferUses(t *testing.T) {
	hookErr := "no update_socket_protocol hook (Linux >= 6.6)"
	cases := []struct {
		name  string
		offer Offer
		want  map[string]Mechanism // mode -> mechanism
		str   string
	}{
		{"no SMC (Debian 7.3)", Offer{},
			map[string]Mechanism{"auto": MechanismNoSMC, "tcp2smc": MechanismNoSMC, "bpf": MechanismNoSMC, "off": MechanismNoSMC}, "no_smc"},
		{"SMC only (Debian 6.1)", Offer{SMC: true, SocketHookError: hookErr},
			map[string]Mechanism{"auto": MechanismNone, "tcp2smc": MechanismNone, "bpf": MechanismNone, "off": MechanismNone}, "smc"},
		{"socket hook (Debian 6.12)", Offer{SMC: true, IPPROTOSMC: true, SocketHook: true},
			map[string]Mechanism{"auto": MechanismSocketHook, "tcp2smc": MechanismNone, "bpf": MechanismSocketHook, "off": MechanismNone},
			"smc,ipproto_smc,socket_hook"},
		{"tcp2smc (Alibaba Cloud Linux 3)", Offer{SMC: true, TCP2SMC: true, SocketHookError: hookErr},
			map[string]Mechanism{"auto": MechanismTCP2SMC, "tcp2smc": MechanismTCP2SMC, "bpf": MechanismNone, "off": MechanismNone},
			"smc,tcp2smc"},
		{"everything, hs_ctrl unused", Offer{SMC: true, TCP2SMC: true, IPPROTOSMC: true, SocketHook: true, HSCtrl: true},
			map[string]Mechanism{"auto": MechanismTCP2SMC, "tcp2smc": MechanismTCP2SMC, "bpf": MechanismSocketHook, "off": MechanismNone},
			"smc,tcp2smc,ipproto_smc,socket_hook,hs_ctrl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for mode, want := range c.want {
				if got := c.offer.Uses(mode); got != want {
					t.Errorf("Uses(%s) = %s, want %s", mode, got, want)
				}
			}
			if got := c.offer.String(); got != c.str {
				t.Errorf("String() = %q, want %q", got, c.str)
			}
		})
	}
}

// TestPick checks that Pick asks each probe at most once, only when its
// answer matters, and says why a mode's mechanism is missing.
func TestPick(t *testing.T) {
	errHook := errors.New("no BTF")
	errProbe := errors.New("netns gone")
	cases := []struct {
		mode       string
		tcp2smc    bool
		tcpErr     error
		hook       error
		want       Mechanism
		wantWhy    error
		wantProbes string
	}{
		{"off", true, nil, nil, MechanismNone, nil, ""},
		{"auto", true, nil, nil, MechanismTCP2SMC, nil, "t"},
		{"auto", false, nil, nil, MechanismSocketHook, nil, "th"},
		{"auto", false, errProbe, errHook, MechanismNone, errHook, "th"},
		{"tcp2smc", false, nil, nil, MechanismNone, ErrNoTCP2SMC, "t"},
		{"bpf", true, nil, nil, MechanismSocketHook, nil, "h"},
		{"bpf", true, nil, errHook, MechanismNone, errHook, "h"},
	}
	for _, c := range cases {
		probes := ""
		m, why, perr := Pick(c.mode,
			func() (bool, error) { probes += "t"; return c.tcp2smc, c.tcpErr },
			func() error { probes += "h"; return c.hook })
		if m != c.want || !errors.Is(why, c.wantWhy) || (c.wantWhy == nil) != (why == nil) || probes != c.wantProbes || !errors.Is(perr, c.tcpErr) {
			t.Errorf("Pick(%s, tcp2smc %v/%v, hook %v) = %s, %v, %v after probes %q; want %s, %v, probes %q",
				c.mode, c.tcp2smc, c.tcpErr, c.hook, m, why, perr, probes, c.want, c.wantWhy, c.wantProbes)
		}
	}
}
