package main

import (
	"bytes"
	"strings"
	"testing"
)

// run runs the binary's operator entry point with args.
func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, "test", IO{Stdout: &o, Stderr: &e})
	return code, o.String(), e.String()
}

func TestMainDispatch(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{nil, ExitUsage, "", "inspect"},
		{[]string{"--help"}, ExitOK, "reconcile", ""},
		{[]string{"help"}, ExitOK, "validate", ""},
		{[]string{"--version"}, ExitOK, "rdma-chain-ops test", ""},
		{[]string{"frobnicate"}, ExitUsage, "", `unknown command "frobnicate"`},
		{[]string{"inspect", "--help"}, ExitOK, "--netns", ""},
		{[]string{"validate", "--help"}, ExitOK, "cni-bin-dir", ""},
		{[]string{"install", "--help"}, ExitOK, "dry-run", ""},
		{[]string{"reconcile", "--help"}, ExitOK, "cri-socket", ""},
		{[]string{"validate"}, ExitUsage, "", "no FILE given"},
		{[]string{"validate", "--bogus", "x"}, ExitUsage, "", "flag provided but not defined"},
		{[]string{"install"}, ExitUsage, "", "--conflist or --binaries-from is required"},
		{[]string{"install", "--conflist", "a", "extra"}, ExitUsage, "", `unexpected argument "extra"`},
		{[]string{"reconcile", "--cni-conf-dir", "/nonexistent"}, ExitProblems, "", "no conflist in /nonexistent has an rdma-chain entry"},
		{[]string{"reconcile", "--net-name", "n", "--metrics-bind-address", "127.0.0.1:0"}, ExitUsage, "", "--metrics-bind-address needs --interval"},
		{[]string{"reconcile", "--net-name", "n", "--once", "--interval", "1s"}, ExitUsage, "", "exclude each other"},
		{[]string{"inspect", "x"}, ExitUsage, "", `unexpected argument "x"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := run(tt.args...)
			if code != tt.code || !strings.Contains(out, tt.inStdout) || !strings.Contains(errOut, tt.inStderr) {
				t.Errorf("code %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q)", code, tt.code, out, tt.inStdout, errOut, tt.inStderr)
			}
		})
	}
}

func TestEveryCommandListedAndHelped(t *testing.T) {
	_, out, _ := run("--help")
	for _, c := range commands() {
		if !strings.Contains(out, "  "+c.name+" ") {
			t.Errorf("--help does not list %s", c.name)
		}
		code, help, _ := run(c.name, "--help")
		if code != ExitOK || !strings.HasPrefix(help, "usage: rdma-chain-ops "+c.name) {
			t.Errorf("%s --help: code %d, %q", c.name, code, help)
		}
	}
}

func TestParseFlagsInterspersed(t *testing.T) {
	fs := newFlags(IO{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}, "validate")
	dir := fs.String("cni-bin-dir", "", "")
	pos, _, ok := parseFlags(IO{}, fs, []string{"a.conflist", "--cni-bin-dir", "/opt/cni/bin", "b.conflist", "--", "--c"})
	if !ok || *dir != "/opt/cni/bin" || strings.Join(pos, " ") != "a.conflist b.conflist --c" {
		t.Fatalf("pos %q dir %q ok %v", pos, *dir, ok)
	}
}

func TestWithNodeAddresses(t *testing.T) {
	for _, tc := range []struct {
		name, set, list, want, err string
	}{
		{"no list leaves --set", `{"mode":"auto"}`, "", `{"mode":"auto"}`, ""},
		{"one address", `{"mode":"auto"}`, "192.168.50.12", `{"mode":"auto","nodeAddresses":["192.168.50.12"]}`, ""},
		{"dual stack, canonical", "", "10.0.0.1,FD00::0001", `{"nodeAddresses":["10.0.0.1","fd00::1"]}`, ""},
		{"replaces the key of --set", `{"nodeAddresses":["10.9.9.9"]}`, "10.0.0.1", `{"nodeAddresses":["10.0.0.1"]}`, ""},
		{"unexpanded variable", `{}`, "$(HOST_IPS)", "", `"$(HOST_IPS)" is not an IP address`},
		{"a prefix", `{}`, "10.0.0.1/24", "", "is not an IP address"},
		{"a zone", `{}`, "fe80::1%eth0", "", "is not an IP address"},
		{"an empty item", `{}`, "10.0.0.1,", "", `"" is not an IP address`},
		{"--set not an object", `["mode"]`, "10.0.0.1", "", "--set: not a JSON object"},
		{"--set null", `null`, "10.0.0.1", "", "--set: not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withNodeAddresses(tc.set, tc.list)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %s, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}
