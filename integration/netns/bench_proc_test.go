package netns

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
	"github.com/rdma-chain/rdma-chain/internal/testonly/netnstest"
	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// benchPod is a pod netns with an eth0, a kubelet that knows the pod, and the
// confs of a pass-through rdma-chain and of upstream tuning after it.
type benchPod struct {
	dir, socket string
	pod         ns.NetNS
	prev        json.RawMessage
}

func newBenchPod(b *testing.B) *benchPod {
	b.Helper()
	p := &benchPod{dir: b.TempDir()}
	p.socket = filepath.Join(p.dir, "kubelet.sock")
	s, err := fakekubelet.Start(p.socket, []fakekubelet.Pod{{Namespace: "default", Name: "web",
		Resources: map[string][]string{"example.com/gpu": {"0"}}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	p.pod = netnstest.NewNS(b)
	netnstest.AddVeth(b, p.pod, netnstest.NewNS(b), "eth0", 1500, "10.77.0.2/24")
	p.prev, _ = json.Marshal(map[string]any{"cniVersion": "1.1.0",
		"interfaces": []any{map[string]string{"name": "eth0", "sandbox": p.pod.Path()}},
		"ips":        []any{map[string]any{"address": "10.77.0.2/24", "interface": 0}}})
	return p
}

// conf is the stdin of plugin typ; prev adds the prevResult.
func (p *benchPod) conf(typ string, prev bool) []byte {
	c := map[string]any{"cniVersion": "1.1.0", "name": "bench", "type": typ, "dataDir": filepath.Join(p.dir, typ)}
	if typ == "rdma-chain" {
		c["podResourcesSocket"] = p.socket
	}
	if prev {
		c["prevResult"] = p.prev
	}
	b, _ := json.Marshal(c)
	return b
}

func (p *benchPod) env(id string) []string {
	return []string{"CNI_CONTAINERID=" + id, "CNI_NETNS=" + p.pod.Path(), "CNI_IFNAME=eth0",
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=uid-web"}
}

// BenchmarkProcess measures what every pod pays for rdma-chain's process,
// against upstream tuning: start-up (VERSION), STATUS, a pass-through ADD
// and its peak RSS, and the binary's size.
func BenchmarkProcess(b *testing.B) {
	testenv.Privileged(b)
	rc, tuning := pluginBin(b), upstream(b, "tuning")
	p := newBenchPod(b)
	n := benchSamples(60)
	for range b.N {
		version := func(bin string) func() (sample, error) {
			return func() (sample, error) { return runProc(cniCmd(bin, "VERSION", nil)) }
		}
		rcV, tuV := paired(b, n, version(rc), version(tuning))
		report(b, row{measure: "start-up CPU (VERSION), rdma-chain", unit: "ms", v: ms(rcV, cpuMS),
			baseName: "tuning", base: ms(tuV, cpuMS), maxRatio: 1.0, target: "<= 1.0x"})
		report(b, row{measure: "start-up wall (VERSION), rdma-chain", unit: "ms", v: ms(rcV, wallMS),
			baseName: "tuning", base: ms(tuV, wallMS)})
		inits := func(bin string) func() (sample, error) { return func() (sample, error) { return initSum(bin) } }
		rcI, tuI := paired(b, n/2, inits(rc), inits(tuning))
		report(b, row{measure: "package init (inittrace sum), rdma-chain", unit: "ms", v: ms(rcI, wallMS),
			baseName: "tuning", base: ms(tuI, wallMS), maxAbs: 2.0, target: "<= 2 ms", remark: "GODEBUG=inittrace=1, VERSION"})
		status := func() (sample, error) { return runProc(cniCmd(rc, "STATUS", p.conf("rdma-chain", false))) }
		rcS, tuV2 := paired(b, n, status, version(tuning))
		report(b, row{measure: "STATUS CPU (kubelet probe), rdma-chain", unit: "ms", v: ms(rcS, cpuMS),
			baseName: "tuning VERSION", base: ms(tuV2, cpuMS), maxRatio: 1.0, target: "<= 1.0x"})
		// What STATUS does beyond starting (the kubelet probe, the state
		// directory's write probe), against the plugin's own VERSION.
		rcS2, rcV2 := paired(b, n, status, version(rc))
		report(b, row{measure: "STATUS CPU, rdma-chain, against its own VERSION", unit: "ms", v: ms(rcS2, cpuMS),
			baseName: "rdma-chain VERSION", base: ms(rcV2, cpuMS), remark: "the work of STATUS itself"})
		add := func(bin, typ string) func() (sample, error) {
			return func() (sample, error) {
				s, err := runProc(cniCmd(bin, "ADD", p.conf(typ, true), p.env("bench")...))
				if err == nil {
					_, err = runProc(cniCmd(bin, "DEL", p.conf(typ, true), p.env("bench")...))
				}
				return s, err
			}
		}
		rcA, tuA := paired(b, n, add(rc, "rdma-chain"), add(tuning, "tuning"))
		report(b, row{measure: "pass-through ADD CPU, rdma-chain", unit: "ms", v: ms(rcA, cpuMS),
			baseName: "tuning ADD", base: ms(tuA, cpuMS)})
		peak := func(bin, typ string) func() (sample, error) {
			return func() (sample, error) {
				return peakRSS(b, cniCmd(bin, "ADD", p.conf(typ, true), p.env("bench")...))
			}
		}
		rcR, tuR := paired(b, 10, peak(rc, "rdma-chain"), peak(tuning, "tuning"))
		report(b, row{measure: "peak RSS of one ADD, rdma-chain", unit: "MiB", v: ms(rcR, rssMB),
			baseName: "tuning ADD", base: ms(tuR, rssMB)})
		report(b, row{measure: "binary size, rdma-chain", unit: "MiB", v: []float64{fileMB(b, rc)},
			baseName: "tuning", base: []float64{fileMB(b, tuning)}})
	}
}

// peakRSS runs cmd under GNU time, which forks it from its own small
// process: the rusage of a child Go starts carries the Go parent's RSS,
// inherited through vfork and exec.
func peakRSS(b *testing.B, cmd *exec.Cmd) (sample, error) {
	b.Helper()
	gnuTime := "/usr/bin/time"
	if _, err := os.Stat(gnuTime); err != nil {
		testenv.Unavailable(b, "GNU time (Debian package time) for the peak RSS: %v", err)
	}
	out := filepath.Join(b.TempDir(), "rss")
	cmd.Args = append([]string{gnuTime, "-f", "%M", "-o", out}, cmd.Args...)
	cmd.Path = gnuTime
	s, err := runProc(cmd)
	if err != nil {
		return s, err
	}
	raw, err := os.ReadFile(out)
	if err == nil {
		_, err = fmt.Sscan(string(raw), &s.maxRSSKB)
	}
	return s, err
}

// initSum runs bin's VERSION with GODEBUG=inittrace=1 and sums the clock
// time of every package's initialisation (as the wall of the sample).
func initSum(bin string) (sample, error) {
	cmd := cniCmd(bin, "VERSION", nil, "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if _, err := runProc(cmd); err != nil {
		return sample{}, err
	}
	var sum float64
	for _, line := range strings.Split(stderr.String(), "\n") {
		// init PKG @T ms, D ms clock, B bytes, A allocs
		f := strings.Fields(line)
		if len(f) >= 7 && f[0] == "init" && f[6] == "clock," {
			d, err := strconv.ParseFloat(f[4], 64)
			if err != nil {
				return sample{}, fmt.Errorf("inittrace line %q: %w", line, err)
			}
			sum += d
		}
	}
	if sum == 0 {
		return sample{}, fmt.Errorf("%s printed no inittrace: %s", bin, stderr.String())
	}
	return sample{wall: time.Duration(sum * 1e6)}, nil
}

func fileMB(b *testing.B, path string) float64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return float64(st.Size()) / (1 << 20)
}
