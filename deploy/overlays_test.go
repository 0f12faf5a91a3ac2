package deploy

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const (
	image       = "localhost/rdma-chain:dev" // the Makefile's IMAGE:IMAGE_TAG
	metricsPort = 9742
)

// runtime is the container runtime whose CRI socket reconcile asks.
type runtime struct {
	socket string // CRI_SOCKET, which --cri-socket names
	dir    string // the socket's directory, mounted at its host path
}

var (
	containerd = runtime{"/run/containerd/containerd.sock", "/run/containerd"}
	crio       = runtime{"/run/crio/crio.sock", "/run/crio"}
)

// overlay is what one platform's overlay must give every node.
type overlay struct {
	dir       string
	set       string // the entry's keys, --set of both containers
	after     string // --after of both containers ("": none)
	nodeLabel string // the platform's label RDMA nodes carry
	primary   string // the primary's conflist as its agent writes it
}

const (
	ptpPrimary    = `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	terwayPrimary = `{"cniVersion":"0.4.0","name":"terway-chainer","plugins":[{"type":"terway"},{"type":"cilium-cni"}]}`
)

var overlays = []overlay{
	{"overlays/generic", `{"mode":"auto"}`, "", "feature.node.kubernetes.io/rdma.capable", ptpPrimary},
	{"overlays/ack-terway", `{"mode":"auto","sharedLink":{"type":"none"}}`, "terway", "aliyun.accelerator/rdma", terwayPrimary},
	{"overlays/lingjun", `{"mode":"shared","resourceNames":["rdma/hca"],"podIPv6Block":"::f:0:c00/124","ipam":{"type":"host-local","dataDir":"/var/lib/cni/networks-rdma"}}`,
		"terway", "aliyun.accelerator/rdma", terwayPrimary},
}

// TestOverlays renders every overlay as `kubectl apply -k` would and checks
// the DaemonSet it yields: arguments, mounts, probe, privileges, nodes and
// image.
func TestOverlays(t *testing.T) {
	mem := treeFS(t)
	for _, o := range overlays {
		t.Run(o.dir, func(t *testing.T) {
			r := render(t, mem, "/deploy/"+o.dir)
			checkPod(t, r.ds.Spec.Template.Spec, o)
			checkNodes(t, r.ds.Spec.Template.Spec.Affinity, o.nodeLabel)
			if len(r.objects) != 1 {
				t.Errorf("objects of kinds %v, want the DaemonSet only", slices.Collect(maps.Keys(r.objects)))
			}
		})
	}
}

// TestBase checks that the base is the generic primary's install on
// every node (the node tier runs it as a static pod, where no node
// affinity applies).
func TestBase(t *testing.T) {
	r := render(t, treeFS(t), "/deploy/base")
	checkPod(t, r.ds.Spec.Template.Spec, overlays[0])
	if r.ds.Spec.Template.Spec.Affinity != nil || r.ds.Namespace != "kube-system" {
		t.Errorf("base: affinity %v, namespace %q", r.ds.Spec.Template.Spec.Affinity, r.ds.Namespace)
	}
}

// checkPod checks the pod template against o, with containerd as the
// runtime.
func checkPod(t *testing.T, s corev1.PodSpec, o overlay) {
	t.Helper()
	checkPodOn(t, s, o, containerd)
}

// checkPodOn checks the pod template against o, with rt as the runtime.
func checkPodOn(t *testing.T, s corev1.PodSpec, o overlay, rt runtime) {
	t.Helper()
	if !s.HostNetwork || !s.HostPID || s.HostIPC || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.ServiceAccountName != "" ||
		s.PriorityClassName != "system-node-critical" {
		t.Errorf("pod: hostNetwork %v, hostPID %v, token %v, service account %q, priority %q",
			s.HostNetwork, s.HostPID, s.AutomountServiceAccountToken, s.ServiceAccountName, s.PriorityClassName)
	}
	if len(s.InitContainers) != 1 || len(s.Containers) != 1 || s.InitContainers[0].Name != "install" || s.Containers[0].Name != "reconcile" {
		t.Fatalf("containers: init %d, main %d", len(s.InitContainers), len(s.Containers))
	}
	install, reconcile := s.InitContainers[0], s.Containers[0]
	wantInstall := map[string]string{
		"--binaries-from": "/", "--cni-bin-dir": "/host/opt/cni/bin",
		"--cni-conf-dir": "/host/etc/cni/net.d", "--conflist": "auto", "--wait": "5m", "--set": o.set,
		"--node-addresses": "$(HOST_IPS)",
	}
	wantReconcile := map[string]string{
		"--cni-conf-dir": "/etc/cni/net.d", "--conflist": "auto", "--ensure-entry": "true", "--set": o.set,
		"--cri-socket": "$(CRI_SOCKET)", "--cni-bin-dir": "/opt/cni/bin", "--ipam-dirs-under": "/var/lib/cni", "--interval": "5m",
		"--metrics-bind-address": "$(METRICS_BIND_ADDRESS)", "--node-addresses": "$(HOST_IPS)",
	}
	if o.after != "" {
		wantInstall["--after"], wantReconcile["--after"] = o.after, o.after
	}
	checkArgs(t, install, "install", wantInstall)
	checkArgs(t, reconcile, "reconcile", wantReconcile)
	checkHostIPs(t, install)
	checkHostIPs(t, reconcile)
	if got := envValue(reconcile, "CRI_SOCKET"); got != rt.socket {
		t.Errorf("reconcile: CRI_SOCKET %q, want %q", got, rt.socket)
	}
	checkContainer(t, install, nil, map[string]string{"cni-bin": "/host/opt/cni/bin rw", "cni-conf": "/host/etc/cni/net.d rw"})
	checkContainer(t, reconcile, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}, map[string]string{
		"cni-bin": "/opt/cni/bin ro", "cni-conf": "/etc/cni/net.d rw", "cni-state": "/var/lib/cni rw",
		"netns": "/var/run/netns ro HostToContainer", "cri-socket-dir": rt.dir + " ro",
		"bpffs": "/sys/fs/bpf rw HostToContainer", "device-info": "/run/k8s.cni.cncf.io rw",
	})
	checkVolumes(t, s.Volumes, rt)
	checkProbe(t, reconcile, "127.0.0.1")
}

// checkArgs checks that the container runs the image's rdma-chain-ops
// with exactly the flags of want, and every path it is given, directly
// or through a $(VAR) of its env, lies under one of its mounts, at the
// path the host uses.
func checkArgs(t *testing.T, c corev1.Container, sub string, want map[string]string) {
	t.Helper()
	if !slices.Equal(c.Command, []string{"/rdma-chain-ops", sub}) || c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("%s: command %q image %q pull %q", c.Name, c.Command, c.Image, c.ImagePullPolicy)
	}
	got := flagArgs(t, c.Args, "--ensure-entry")
	if !maps.Equal(got, want) {
		t.Errorf("%s: flags\n%v, want\n%v", c.Name, got, want)
	}
	for flag, v := range got {
		if name, ok := strings.CutPrefix(v, "$("); ok && strings.HasSuffix(name, ")") {
			v = envValue(c, strings.TrimSuffix(name, ")"))
		}
		if !strings.HasPrefix(v, "/") || flag == "--binaries-from" { // the image's root
			continue
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return v == m.MountPath || strings.HasPrefix(v, m.MountPath+"/")
		}) {
			t.Errorf("%s: %s %s is not under a mount", c.Name, flag, v)
		}
	}
}

// envValue is the literal value of c's env variable name ("" when it has
// none, or only a valueFrom).
func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// checkHostIPs checks that $(HOST_IPS), which --node-addresses names, is
// the downward API's status.hostIPs in c's own env (kubelet expands only a
// container's own variables; one it does not know stays "$(HOST_IPS)",
// which the flag refuses).
func checkHostIPs(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == "HOST_IPS" {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.hostIPs" || e.Value != "" {
				t.Errorf("%s: HOST_IPS %+v, want the downward API's status.hostIPs", c.Name, e)
			}
			return
		}
	}
	t.Errorf("%s: no HOST_IPS in env %+v", c.Name, c.Env)
}

// checkContainer checks the container's capabilities (all dropped, add
// only these), no escalation, a read-only root, and exactly these
// mounts ("path mode [propagation]").
func checkContainer(t *testing.T, c corev1.Container, add []corev1.Capability, mounts map[string]string) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatalf("%s: no securityContext.capabilities", c.Name)
	}
	if (sc.Privileged != nil && *sc.Privileged) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, add) ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: securityContext %+v, want capabilities drop [ALL] add %v, no escalation, read-only root", c.Name, sc, add)
	}
	got := map[string]string{}
	for _, m := range c.VolumeMounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		v := m.MountPath + " " + mode
		if m.MountPropagation != nil {
			v += " " + string(*m.MountPropagation)
		}
		got[m.Name] = v
	}
	if !maps.Equal(got, mounts) {
		t.Errorf("%s: mounts\n%v, want\n%v", c.Name, got, mounts)
	}
}

// checkVolumes checks that every volume is a host path, mounted at that
// same path. The CRI socket is mounted by its directory (rt's): a
// restarted runtime's new socket is seen, and a socket not there yet is
// not made a directory by the kubelet. No kubelet pod-resources socket:
// nothing in the pod asks kubelet.
func checkVolumes(t *testing.T, vols []corev1.Volume, rt runtime) {
	t.Helper()
	want := map[string]string{
		"cni-bin": "/opt/cni/bin DirectoryOrCreate", "cni-conf": "/etc/cni/net.d DirectoryOrCreate",
		"cni-state": "/var/lib/cni DirectoryOrCreate", "netns": "/var/run/netns DirectoryOrCreate",
		"cri-socket-dir": rt.dir + " Directory", "bpffs": "/sys/fs/bpf Directory",
		"device-info": "/run/k8s.cni.cncf.io DirectoryOrCreate",
	}
	got := map[string]string{}
	for _, v := range vols {
		if v.HostPath == nil || v.HostPath.Type == nil {
			t.Errorf("volume %s: not a typed hostPath", v.Name)
			continue
		}
		got[v.Name] = v.HostPath.Path + " " + string(*v.HostPath.Type)
	}
	if !maps.Equal(got, want) {
		t.Errorf("volumes\n%v, want\n%v", got, want)
	}
}

// checkProbe checks that the livenessProbe asks /healthz where reconcile
// serves it: host (empty: the pod's address, the node's) and port of its
// --metrics-bind-address, through the env value it refers to.
func checkProbe(t *testing.T, c corev1.Container, host string) {
	t.Helper()
	p := c.LivenessProbe
	if p == nil || p.HTTPGet == nil {
		t.Fatalf("%s: no httpGet livenessProbe", c.Name)
	}
	g := p.HTTPGet
	if g.Path != "/healthz" || g.Port.IntValue() != metricsPort || g.Host != host || g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
		t.Errorf("%s: probe %+v, want http://%s:%d/healthz", c.Name, g, host, metricsPort)
	}
	if p.PeriodSeconds*p.FailureThreshold < 60 || p.TimeoutSeconds < 1 {
		t.Errorf("%s: probe period %ds x %d failures: a busy node's slow answer would restart it", c.Name, p.PeriodSeconds, p.FailureThreshold)
	}
	bind := ""
	for _, e := range c.Env {
		if e.Name == "METRICS_BIND_ADDRESS" {
			bind = e.Value
		}
	}
	wantBind := host + ":9742"
	if host == "" {
		wantBind = "$(NODE_IP):9742"
	}
	if bind != wantBind {
		t.Errorf("%s: METRICS_BIND_ADDRESS %q, want %q (where the probe asks)", c.Name, bind, wantBind)
	}
}

// checkNodes checks that the pod runs on nodes carrying the platform's
// RDMA label, or the admin's rdma-chain.github.io/enabled=true, or its old
// name, rdma-chain/enabled=true, kept for one release (terms are ORed).
func checkNodes(t *testing.T, a *corev1.Affinity, label string) {
	t.Helper()
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatal("no required node affinity")
	}
	var got []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchExpressions) != 1 || len(term.MatchFields) != 0 {
			t.Fatalf("term %+v: want one expression", term)
		}
		e := term.MatchExpressions[0]
		if e.Operator != corev1.NodeSelectorOpIn || !slices.Equal(e.Values, []string{"true"}) {
			t.Errorf("expression %+v: want In [true]", e)
		}
		got = append(got, e.Key)
	}
	if want := []string{label, "rdma-chain.github.io/enabled", "rdma-chain/enabled"}; !slices.Equal(got, want) {
		t.Errorf("node labels %v, want %v", got, want)
	}
}
