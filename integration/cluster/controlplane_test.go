//go:build cluster

package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// guestAPIAddr is where the node VMs reach the API server: qemu's user
// network forwards it (guestfwd) to the host's loopback, so the API server
// advertises it and its certificate names it.
const guestAPIAddr = "10.0.2.100"

// serviceCIDR holds the kubernetes Service's address (the first one).
const serviceCIDR = "10.96.0.0/16"

// readParts reads scripts/cluster/parts.sh's KEY=VALUE output.
func readParts(t *testing.T) map[string]string {
	t.Helper()
	path := filepath.Join(testenv.RepoRoot(), ".cache/cluster/parts.env")
	f, err := os.Open(path)
	if err != nil {
		testenv.Unavailable(t, "%s missing (make test-cluster runs scripts/cluster/parts.sh): %v", path, err)
	}
	defer f.Close()
	parts := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			parts[k] = v
		}
	}
	for _, k := range []string{"ETCD", "KUBE_APISERVER", "KUBE_CONTROLLER_MANAGER", "KUBE_SCHEDULER", "KUBECTL"} {
		if st, err := os.Stat(parts[k]); err != nil || st.Mode()&0o111 == 0 {
			testenv.Unavailable(t, "%s: %q is not an executable (scripts/cluster/parts.sh)", k, parts[k])
		}
	}
	return parts
}

// freePort asks the kernel for an unused loopback port.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// controlPlane is etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler on the host's loopback.
type controlPlane struct {
	dir     string
	pki     *pki
	port    int    // the API server's secure port on 127.0.0.1
	admin   string // the cluster-admin kubeconfig (loopback)
	kubectl string
	procs   []*proc
	egress  *egressProxy
	started time.Duration // from etcd's start to the API server's /readyz

	shellsMu sync.Mutex
	shells   map[string]string // node: its shell pod (pods/node-shell.yaml)

	stoppedPlugins sync.Map // node: its device plugin is stopped (stopDevicePlugin)

	registryPort int    // the image registry's on the loopback (startRegistry)
	install      string // the admin's kustomization folder (testDeploy)
	repo, digest string // the image's repository as the nodes name it, this tree's image's digest

	runs kubectlRuns
}

// kubectlRuns tallies the tier's kubectl processes: a kubectl exec costs
// the node's guest about a second of its one host core (runc and the
// shim under TCG), against none for a read of the API.
type kubectlRuns struct {
	all, execs atomic.Int64
	execTime   atomic.Int64 // nanoseconds of wall in kubectl exec
}

// count records one kubectl run of args that took d.
func (r *kubectlRuns) count(args []string, d time.Duration) {
	r.all.Add(1)
	if slices.Contains(args, "exec") {
		r.execs.Add(1)
		r.execTime.Add(int64(d))
	}
}

func (r *kubectlRuns) String() string {
	return fmt.Sprintf("kubectl ran %d times, %d of them exec (%.0f s of wall)",
		r.all.Load(), r.execs.Load(), time.Duration(r.execTime.Load()).Seconds())
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

// nodeNames are the node VMs' names; each gets a static token in
// system:nodes.
var nodeNames = []string{"node-a", "node-b"}

// startControlPlane starts etcd, kube-apiserver (with apiserverFlags
// after the tier's own), kube-controller-manager and kube-scheduler, and
// returns once the API server is ready.
func startControlPlane(t *testing.T, parts map[string]string, apiserverFlags ...string) *controlPlane {
	t.Helper()
	dir, err := os.MkdirTemp("", "rc-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	users := map[string][]string{
		"admin":                          {"system:masters"},
		"system:kube-controller-manager": nil,
		"system:kube-scheduler":          nil,
	}
	for _, n := range nodeNames {
		users["system:node:"+n] = []string{"system:nodes"}
	}
	p, err := newPKI(dir, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(guestAPIAddr), net.ParseIP("10.96.0.1")},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, users)
	if err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{dir: dir, pki: p, port: freePort(t), kubectl: parts["KUBECTL"], admin: filepath.Join(dir, "admin.kubeconfig"),
		egress: startEgressProxy(t, dir)}
	t.Cleanup(cp.stop)
	egressConfig, err := cp.egress.writeConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", cp.port)
	for _, k := range []struct{ file, user string }{
		{cp.admin, "admin"},
		{filepath.Join(dir, "controller-manager.kubeconfig"), "system:kube-controller-manager"},
		{filepath.Join(dir, "scheduler.kubeconfig"), "system:kube-scheduler"},
	} {
		if err := p.kubeconfig(k.file, server, k.user); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	etcdClient, etcdPeer := freePort(t), freePort(t)
	cp.run(t, "etcd", parts["ETCD"],
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"), "--unsafe-no-fsync",
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", etcdPeer),
		"--listen-metrics-urls=")
	cp.run(t, "kube-apiserver", parts["KUBE_APISERVER"], append([]string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClient),
		"--bind-address=127.0.0.1", "--advertise-address=" + guestAPIAddr, fmt.Sprintf("--secure-port=%d", cp.port),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + p.serverCert, "--tls-private-key-file=" + p.serverKey,
		"--client-ca-file=" + p.caCert, "--token-auth-file=" + p.tokens,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub, "--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=" + serviceCIDR, "--endpoint-reconciler-type=lease",
		// The kubelets' API (logs, exec) through the test's egress proxy,
		// which knows the nodes by address.
		"--egress-selector-config-file=" + egressConfig, "--kubelet-preferred-address-types=InternalIP"}, apiserverFlags...)...)
	if err := cp.waitReady(5 * time.Minute); err != nil {
		t.Fatalf("kube-apiserver: %v\n%s", err, cp.tails())
	}
	cp.started = time.Since(start)
	cp.run(t, "kube-controller-manager", parts["KUBE_CONTROLLER_MANAGER"],
		"--kubeconfig="+filepath.Join(dir, "controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", freePort(t)),
		"--leader-elect=false", "--controllers=*", "--use-service-account-credentials=true",
		"--root-ca-file="+p.caCert, "--service-account-private-key-file="+p.saKey,
		"--cluster-signing-cert-file="+p.caCert, "--cluster-signing-key-file="+p.caKey,
		"--service-cluster-ip-range="+serviceCIDR,
		// Nodes under TCG on a shared host answer slowly.
		"--node-monitor-grace-period=2m")
	cp.run(t, "kube-scheduler", parts["KUBE_SCHEDULER"],
		"--kubeconfig="+filepath.Join(dir, "scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", freePort(t)), "--leader-elect=false")
	return cp
}

// run starts one part with its output in DIR/NAME.log.
func (cp *controlPlane) run(t *testing.T, name, bin string, args ...string) {
	t.Helper()
	log := filepath.Join(cp.dir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cp.procs = append(cp.procs, &proc{name: name, cmd: cmd, log: log})
}

// stop ends the parts in reverse order, each by the process it started.
func (cp *controlPlane) stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		c := cp.procs[i].cmd
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

// waitReady polls the API server's /readyz with the admin token.
func (cp *controlPlane) waitReady(timeout time.Duration) error {
	ca, err := os.ReadFile(cp.pki.caCert)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		for _, p := range cp.procs {
			if p.cmd.ProcessState != nil || p.exited() {
				return fmt.Errorf("%s exited", p.name)
			}
		}
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d/readyz", cp.port), nil)
		req.Header.Set("Authorization", "Bearer "+cp.pki.ids["admin"].token)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("/readyz not ok within %v: %s", timeout, last)
}

// exited reports whether the process is gone (a zombie counts: it has not
// been waited for yet).
func (p *proc) exited() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

// rssMB is the part's resident memory in MB (VmRSS).
func (p *proc) rssMB() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb / 1024
		}
	}
	return -1
}

// tails is, for failure messages, each part's first error lines (klog's E
// and F lines, a panic's message: a stack trace buries them) and its last
// lines.
func (cp *controlPlane) tails() string {
	var b strings.Builder
	for _, p := range cp.procs {
		errs, _ := exec.Command("sh", "-c", `grep -m 5 -A 12 -E '^[EF][0-9]{4} |^panic:|^Error:|"level":"(error|fatal)"' "$0" | head -n 40`, p.log).Output()
		out, _ := exec.Command("tail", "-n", "15", p.log).Output()
		fmt.Fprintf(&b, "--- %s (%s)\n%s...\n%s", p.name, p.log, errs, out)
	}
	return b.String()
}

// kubectlOut runs kubectl as the cluster admin.
func (cp *controlPlane) kubectlOut(args ...string) (string, error) {
	return cp.kubectlCtx(context.Background(), args...)
}

// logsSince is the log of kube-system's pod from start on, and up to ten
// seconds before: callers look for lines that only what they did after
// start can log. The window goes as a length (kubectl logs --since),
// which kubelet counts back on the node's clock: the tier never sets the
// nodes' clocks, and an instant of this host's (--since-time) left out
// the lines of a node whose clock was seconds behind.
func (cp *controlPlane) logsSince(pod string, start time.Time) (string, error) {
	window := time.Since(start).Truncate(time.Second) + 10*time.Second
	return cp.kubectlOut("-n", "kube-system", "logs", pod, "--since="+window.String())
}

// kubectlCtx is kubectlOut, killed when ctx ends.
func (cp *controlPlane) kubectlCtx(ctx context.Context, args ...string) (string, error) {
	start := time.Now()
	out, err := exec.CommandContext(ctx, cp.kubectl, append([]string{"--kubeconfig", cp.admin}, args...)...).CombinedOutput()
	cp.runs.count(args, time.Since(start))
	return strings.TrimSpace(string(out)), err
}

// poll runs kubectl until ok accepts its output or timeout passes.
func (cp *controlPlane) poll(t *testing.T, timeout time.Duration, ok func(string) bool, args ...string) string {
	t.Helper()
	var out string
	testenv.Eventually(t, timeout, func() (bool, string) {
		var err error
		out, err = cp.kubectlOut(args...)
		if err == nil && ok(out) {
			return true, ""
		}
		time.Sleep(time.Second) // kubectl costs a process start per poll
		return false, fmt.Sprintf("kubectl %s: %v: %s\n%s", strings.Join(args, " "), err, out, cp.tails())
	})
	return out
}
