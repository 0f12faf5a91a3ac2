package addr

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// execCall is one plugin execution seen by fakeExec.
type execCall struct {
	path  string
	stdin []byte
	env   []string
}

// fakeExec stands in for the IPAM binary: it answers per CNI_COMMAND.
type fakeExec struct {
	version.PluginDecoder
	replies map[string]string
	errs    map[string]error
	calls   []execCall
}

func (f *fakeExec) ExecPlugin(_ context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	f.calls = append(f.calls, execCall{path: path, stdin: stdin, env: env})
	cmd := envValue(env, "CNI_COMMAND")
	return []byte(f.replies[cmd]), f.errs[cmd]
}

func (f *fakeExec) FindInPath(plugin string, paths []string) (string, error) {
	if len(paths) == 0 {
		return "", errors.New("empty CNI_PATH")
	}
	return paths[0] + "/" + plugin, nil
}

// commands lists the CNI_COMMAND of every call.
func (f *fakeExec) commands() []string {
	var out []string
	for _, c := range f.calls {
		out = append(out, envValue(c.env, "CNI_COMMAND"))
	}
	return out
}

// envValue returns the last value of key in env.
func envValue(env []string, key string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == key {
			v = val
		}
	}
	return v
}

const testConf = `{"cniVersion":"1.1.0","name":"rdma-net","type":"rdma-chain",` +
	`"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:77::/64"}]]},` +
	`"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0"}]}}`

func testRequest() Request {
	return Request{
		PluginType: "host-local", NetConf: []byte(testConf), ContainerID: "ctr-1",
		NetNS: "/var/run/netns/pod", IfName: "rdma0", Args: "K8S_POD_NAME=p;IgnoreUnknown=1",
		Path: "/opt/cni/bin:/usr/lib/cni",
	}
}

func TestBuildArgsMapsRequest(t *testing.T) {
	t.Setenv("CNI_IFNAME", "eth0") // the calling plugin's own interface
	t.Setenv("CNI_COMMAND", "CHECK")
	r := testRequest()
	a := buildArgs("DEL", r)
	if a.Command != "DEL" || a.ContainerID != r.ContainerID || a.NetNS != r.NetNS ||
		a.IfName != "rdma0" || a.PluginArgsStr != r.Args || a.Path != r.Path {
		t.Fatalf("args = %+v, want request mapped", a)
	}
	env := a.AsEnv()
	want := map[string]string{
		"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "ctr-1", "CNI_NETNS": "/var/run/netns/pod",
		"CNI_IFNAME": "rdma0", "CNI_ARGS": r.Args, "CNI_PATH": r.Path,
	}
	for k, v := range want {
		if got := envValue(env, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestDelegateConfDropsPrevResult(t *testing.T) {
	out, err := delegateConf([]byte(testConf), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["prevResult"]; ok {
		t.Errorf("prevResult kept: %s", out)
	}
	if _, ok := m[gcKey]; ok {
		t.Errorf("valid attachments outside GC: %s", out)
	}
	if string(m["name"]) != `"rdma-net"` || len(m["ipam"]) == 0 {
		t.Errorf("conf altered: %s", out)
	}
}

func TestDelegateConfGCValid(t *testing.T) {
	for _, tc := range []struct {
		valid []types.GCAttachment
		want  string
	}{
		{nil, `[]`},
		{[]types.GCAttachment{{ContainerID: "c", IfName: "rdma0"}}, `[{"containerID":"c","ifname":"rdma0"}]`},
	} {
		out, err := delegateConf([]byte(testConf), tc.valid, true)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		if got := string(m[gcKey]); got != tc.want {
			t.Errorf("valid attachments = %s, want %s", got, tc.want)
		}
	}
}

func TestDelegateConfRejectsNonObject(t *testing.T) {
	for _, in := range []string{"", "null", "[1]", "{"} {
		if _, err := delegateConf([]byte(in), nil, false); err == nil {
			t.Errorf("delegateConf(%q) succeeded", in)
		}
	}
}

func TestAddDelegates(t *testing.T) {
	f := &fakeExec{replies: map[string]string{"ADD": `{"cniVersion":"1.1.0",` +
		`"ips":[{"address":"fd00:77::10/64","gateway":"fd00:77::1"}],"routes":[{"dst":"fd00:78::/64"}]}`}}
	res, err := (&execIPAM{exec: f}).Add(context.Background(), testRequest())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != "fd00:77::10/64" || len(res.Routes) != 1 {
		t.Fatalf("result = %+v", res)
	}
	c := f.calls[0]
	if c.path != "/opt/cni/bin/host-local" || envValue(c.env, "CNI_IFNAME") != "rdma0" {
		t.Errorf("call = %s ifname %s", c.path, envValue(c.env, "CNI_IFNAME"))
	}
	if strings.Contains(string(c.stdin), "prevResult") {
		t.Errorf("stdin has prevResult: %s", c.stdin)
	}
}

func TestAddBadResultReleases(t *testing.T) {
	f := &fakeExec{replies: map[string]string{"ADD": `{"cniVersion":"1.1.0","ips":[{"address":"bogus"}]}`}}
	if _, err := (&execIPAM{exec: f}).Add(context.Background(), testRequest()); err == nil {
		t.Fatal("Add with a bad result succeeded")
	}
	if got := f.commands(); !slices.Equal(got, []string{"ADD", "DEL"}) {
		t.Errorf("commands = %v, want ADD then DEL", got)
	}
}

func TestDelWrapsPluginError(t *testing.T) {
	boom := errors.New("boom")
	f := &fakeExec{errs: map[string]error{"DEL": boom}}
	err := (&execIPAM{exec: f}).Del(context.Background(), testRequest())
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "rdma0") {
		t.Errorf("Del error = %v", err)
	}
}

func TestGCApplies(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		supported  []string
		want       bool
	}{
		{"1.1.0 listed", "1.1.0", []string{"0.4.0", "1.0.0", "1.1.0"}, true},
		{"newer listed", "1.1.0", []string{"1.2.0"}, true},
		{"only 1.0.0", "1.1.0", []string{"0.4.0", "1.0.0"}, false},
		{"old conf", "1.0.0", []string{"1.0.0", "1.1.0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := []byte(`{"cniVersion":"` + tc.conf + `"}`)
			if got := gcApplies(version.PluginSupports(tc.supported...), conf); got != tc.want {
				t.Errorf("gcApplies = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGCFromVersionAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		want         []string
	}{
		{"supports 1.1.0", `{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}`, []string{"VERSION", "GC"}},
		{"1.0.0 only", `{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}`, []string{"VERSION"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExec{replies: map[string]string{"VERSION": tc.answer}}
			valid := []types.GCAttachment{{ContainerID: "ctr-2", IfName: "rdma0"}}
			if err := (&execIPAM{exec: f}).GC(context.Background(), testRequest(), valid); err != nil {
				t.Fatal(err)
			}
			if got := f.commands(); !slices.Equal(got, tc.want) {
				t.Fatalf("commands = %v, want %v", got, tc.want)
			}
			if len(f.calls) == 2 && !strings.Contains(string(f.calls[1].stdin), `"ctr-2"`) {
				t.Errorf("GC stdin lacks valid attachments: %s", f.calls[1].stdin)
			}
		})
	}
}

func TestFindErrorNamesPlugin(t *testing.T) {
	r := testRequest()
	r.Path = t.TempDir()
	_, err := Exec().Add(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "host-local") {
		t.Errorf("Add without binary: %v", err)
	}
}

func TestAddPluginErrorNoRelease(t *testing.T) {
	f := &fakeExec{errs: map[string]error{"ADD": types.NewError(types.ErrTryAgainLater, "busy", "")}}
	if _, err := (&execIPAM{exec: f}).Add(context.Background(), testRequest()); err == nil {
		t.Fatal("Add succeeded")
	}
	if got := f.commands(); !slices.Equal(got, []string{"ADD"}) {
		t.Errorf("commands = %v, want only ADD", got)
	}
}

// TestDelegateOutlivesRuntime checks that, when the runtime died mid-call
// and left the plugin's stderr (fd 2) a broken pipe, a delegate that
// writes to its stderr still ends as it would have (its DEL succeeds),
// instead of dying of SIGPIPE: pkg/invoke gives it a buffer, never the
// plugin's fd 2, and writes the buffer out afterwards, where the plugin
// (SIGPIPE notified, as chain.Main does) gets EPIPE. This guards that
// rule of pkg/invoke.
func TestDelegateOutlivesRuntime(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"releasing $CNI_CONTAINERID\" >&2\necho done >&2\nexit 0\n"
	if err := os.WriteFile(filepath.Join(dir, "noisy"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := testRequest()
	r.PluginType, r.Path = "noisy", dir
	r.NetConf = []byte(strings.Replace(testConf, `"type":"host-local"`, `"type":"noisy"`, 1))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGPIPE) // as chain.Main does
	defer signal.Stop(sigs)
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rd.Close()
	saved, err := unix.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup2(int(wr.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	err = Exec().Del(context.Background(), r)
	_ = unix.Dup2(saved, 2)
	_ = unix.Close(saved)
	wr.Close()
	if err != nil {
		t.Errorf("DEL of a delegate that logs, with the runtime's stderr broken: %v, want nil", err)
	}
}
