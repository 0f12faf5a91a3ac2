package chain

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
)

// TestStatusKubeletNote checks that STATUS asks kubelet only when no
// lookup or probe it answered is noted in the state directory for the
// conf's socket within kubeletAnsweredMaxAge, and otherwise only checks
// that the socket is served; a note it cannot read strictly is absent.
func TestStatusKubeletNote(t *testing.T) {
	probe, serving := "Probe "+podres.DefaultSocket, "Serving "+podres.DefaultSocket
	note := func(content string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, kubeletAnsweredCache), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	status := func(conf string) func(t *testing.T, p *Plugin, dir string) {
		return func(t *testing.T, p *Plugin, dir string) {
			if err := p.Status(cmd(dir, conf, "")); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name   string
		before func(t *testing.T, p *Plugin, dir string) // the first call
		edit   func(t *testing.T, dir string)            // then the note is changed
		want   []string                                  // calls of the first call and a STATUS after it
	}{
		{name: "a probe serves the next STATUS", before: status(""), want: []string{probe, serving}},
		{name: "an ADD's lookup serves STATUS", before: func(t *testing.T, p *Plugin, dir string) {
			if err := p.Add(cmd(dir, "", prevResult100)); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"Lookup " + podres.DefaultSocket + " default/p1", serving}},
		{name: "another socket's note", before: status(`,"podResourcesSocket":"/run/other.sock"`),
			want: []string{"Probe /run/other.sock", probe}},
		{name: "an old note", before: status(""), edit: func(t *testing.T, dir string) {
			old := time.Now().Add(-kubeletAnsweredMaxAge - time.Second)
			if err := os.Chtimes(filepath.Join(dir, kubeletAnsweredCache), old, old); err != nil {
				t.Fatal(err)
			}
		}, want: []string{probe, probe}},
		{name: "a note from the future", before: status(""), edit: func(t *testing.T, dir string) {
			future := time.Now().Add(time.Hour)
			if err := os.Chtimes(filepath.Join(dir, kubeletAnsweredCache), future, future); err != nil {
				t.Fatal(err)
			}
		}, want: []string{probe, probe}},
		{name: "a note that is not JSON", edit: note("socket=" + podres.DefaultSocket), want: []string{probe}},
		{name: "an empty note", edit: note(""), want: []string{probe}},
		{name: "a note with an unknown field", edit: note(`{"socket":"` + podres.DefaultSocket + `","at":1}`), want: []string{probe}},
		{name: "a note followed by more", edit: note(`{"socket":"` + podres.DefaultSocket + `"}{}`), want: []string{probe}},
		{name: "a note of the wrong type", edit: note(`{"socket":7}`), want: []string{probe}},
		{name: "a well-formed note serves", edit: note(`{"socket":"` + podres.DefaultSocket + `"}` + "\n"), want: []string{serving}},
		{name: "a note that is a directory", edit: func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, kubeletAnsweredCache), 0o700); err != nil {
				t.Fatal(err)
			}
		}, want: []string{probe}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{}
			p, dir := w.plugin(), t.TempDir()
			if tt.before != nil {
				tt.before(t, p, dir)
			}
			if tt.edit != nil {
				tt.edit(t, dir)
			}
			status("")(t, p, dir)
			if got := kubeletCalls(w); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("kubelet calls %q, want %q", got, tt.want)
			}
		})
	}
}

// TestStatusKubeletNoteOnlyAnswers checks that a refused or failed
// probe notes nothing: the next STATUS asks again.
func TestStatusKubeletNoteOnlyAnswers(t *testing.T) {
	w := &world{failOn: map[string]error{"Probe": fmt.Errorf("probe: %w", podres.ErrRateLimited)}}
	p, dir := w.plugin(), t.TempDir()
	for range 2 {
		if err := p.Status(cmd(dir, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := kubeletCalls(w), []string{"Probe " + podres.DefaultSocket, "Probe " + podres.DefaultSocket}; !reflect.DeepEqual(got, want) {
		t.Errorf("kubelet calls %q, want %q", got, want)
	}
}

// kubeletCalls are the calls to the pod-resources seam, in order.
func kubeletCalls(w *world) []string {
	var out []string
	for _, c := range w.calls {
		if name, _, _ := strings.Cut(c, " "); name == "Probe" || name == "Lookup" || name == "Serving" {
			out = append(out, c)
		}
	}
	return out
}

// TestStatusKubeletNoteGone checks that, with a fresh note, a socket
// nothing serves any more is still what STATUS reports (a kubelet that is
// gone), and a busy one is not.
func TestStatusKubeletNoteGone(t *testing.T) {
	fresh := `{"socket":"` + podres.DefaultSocket + `"}`
	tests := []struct {
		name, conf string
		serving    error
		wantCode   uint // 0: ready
	}{
		{"gone", "", fmt.Errorf("connect: %w", podres.ErrUnavailable), CodeNotAvailable},
		{"gone with passThrough", `,"kubeletUnreachable":"passThrough"`, fmt.Errorf("connect: %w", podres.ErrUnavailable), 0},
		{"busy", "", fmt.Errorf("connect: %w", podres.ErrBusy), 0},
		{"served", "", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, kubeletAnsweredCache), []byte(fresh), 0o600); err != nil {
				t.Fatal(err)
			}
			w := &world{failOn: map[string]error{"Serving": tt.serving}}
			err := w.plugin().Status(cmd(dir, tt.conf, ""))
			if tt.wantCode != 0 {
				wantCode(t, err, tt.wantCode, "is not reachable")
			} else if err != nil {
				t.Fatal(err)
			}
			if got, want := kubeletCalls(w), []string{"Serving " + podres.DefaultSocket}; !reflect.DeepEqual(got, want) {
				t.Errorf("kubelet calls %q, want %q", got, want)
			}
		})
	}
}

// TestAddBurstUnderKubeletRateLimit plays a node starting many pods at
// once: 200 ADDs of pods without RDMA together, and STATUS calls among
// them, with the plugin's own kubelet client against grpc-go serving
// kubelet's service behind kubelet's own rate limit (100 calls a
// second, burst 10, the rest refused with ResourceExhausted). It checks
// that no ADD and no STATUS fails.
func TestAddBurstUnderKubeletRateLimit(t *testing.T) {
	const adds, statuses = 200, 20
	var pods []fakekubelet.Pod
	for i := range adds {
		pods = append(pods, fakekubelet.Pod{Namespace: "default", Name: fmt.Sprintf("p%d", i)})
	}
	sock := filepath.Join(testenv.SocketDir(t), "kubelet.sock")
	lim := fakekubelet.NewLimiter()
	srv, err := fakekubelet.StartWith(sock, pods, fakekubelet.Options{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	w := &world{}
	p := New(Env{RDMA: w, Links: w, IPAM: w, Addrs: w, SMC: (*fakeSMC)(w), PodResources: KernelEnv().PodResources,
		Netns: (*fakeNetns)(w), Stdout: &w.stdout, Stderr: &w.stderr})
	dir, conf := t.TempDir(), `,"podResourcesSocket":"`+sock+`"`

	latency := make([]time.Duration, adds)
	errs := make([]error, adds+statuses)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range adds + statuses {
		wg.Go(func() {
			<-start
			if i >= adds {
				errs[i] = p.Status(cmd(dir, conf, ""))
				return
			}
			args := cmd(dir, conf, prevResult100)
			args.ContainerID = fmt.Sprintf("c%d", i)
			args.Args = fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p%d;K8S_POD_UID=u%d", i, i)
			t0 := time.Now()
			errs[i] = p.Add(args)
			latency[i] = time.Since(t0)
		})
	}
	close(start)
	wg.Wait()

	failed := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		failed++
		if failed <= 5 {
			verb := "ADD"
			if i >= adds {
				verb = "STATUS"
			}
			t.Errorf("%s %d: %v", verb, i, err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d ADDs and STATUS calls failed", failed, adds+statuses)
	}
	slices.Sort(latency)
	t.Logf("%d ADDs: latency p50 %v, p90 %v, max %v; kubelet served %d calls and refused %d",
		adds, latency[adds/2].Round(time.Millisecond), latency[adds*9/10].Round(time.Millisecond),
		latency[adds-1].Round(time.Millisecond), lim.Served.Load(), lim.Refused.Load())
}
