//go:build cluster

package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// podItem is what the tier reads of a pod from `kubectl get pods -o json`.
type podItem struct {
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		Annotations       map[string]string `json:"annotations"`
		CreationTimestamp time.Time         `json:"creationTimestamp"`
		DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
		OwnerReferences   []ownerRef        `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		NodeName    string         `json:"nodeName"`
		HostNetwork bool           `json:"hostNetwork"`
		Containers  []podContainer `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type               string    `json:"type"`
			Status             string    `json:"status"`
			Reason             string    `json:"reason"`
			Message            string    `json:"message"`
			LastTransitionTime time.Time `json:"lastTransitionTime"`
		} `json:"conditions"`
		ResourceClaimStatuses []struct {
			ResourceClaimName string `json:"resourceClaimName"`
		} `json:"resourceClaimStatuses"`
		ExtendedResourceClaimStatus *struct {
			ResourceClaimName string `json:"resourceClaimName"`
			RequestMappings   []struct {
				ContainerName string `json:"containerName"`
				ResourceName  string `json:"resourceName"`
			} `json:"requestMappings"`
		} `json:"extendedResourceClaimStatus"`
	} `json:"status"`
}

// extendedClaim is the claim the scheduler made for c's device plugin
// resources where a DeviceClass serves them (KEP-5004), or "" when the
// device plugin serves them.
func (p *podItem) extendedClaim(c podContainer) string {
	e := p.Status.ExtendedResourceClaimStatus
	if e == nil {
		return ""
	}
	for _, m := range e.RequestMappings {
		if m.ContainerName == c.Name {
			return e.ResourceClaimName
		}
	}
	return ""
}

type ownerRef struct {
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Controller *bool  `json:"controller"`
}

type podContainer struct {
	Name            string `json:"name"`
	SecurityContext *struct {
		Privileged *bool `json:"privileged"`
	} `json:"securityContext"`
	Resources struct {
		Limits map[string]string `json:"limits"`
		Claims []struct {
			Name string `json:"name"`
		} `json:"claims"`
	} `json:"resources"`
}

// dpResources are the device plugin resources of this cluster's nodes.
var dpResources = []string{"rdma/hca", "aliyun/erdma"}

func (c podContainer) deviceResource() bool {
	return slices.ContainsFunc(dpResources, func(r string) bool { _, ok := c.Resources.Limits[r]; return ok })
}

func (c podContainer) privileged() bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

func (p *podItem) controller() *ownerRef {
	for i, o := range p.Metadata.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return &p.Metadata.OwnerReferences[i]
		}
	}
	return nil
}

func (p *podItem) id() string { return p.Metadata.Namespace + "/" + p.Metadata.Name }

// condition is the pod's condition of type typ (zero if it has none).
func (p *podItem) condition(typ string) (status, reason, message string, at time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status, c.Reason, c.Message, c.LastTransitionTime
		}
	}
	return "", "", "", time.Time{}
}

// settled reports whether the pod is where expect says it ends up.
func (p *podItem) settled(expect string) bool {
	if expect == "pending" {
		status, reason, _, _ := p.condition("PodScheduled")
		return p.Spec.NodeName == "" && status == "False" && reason == "Unschedulable"
	}
	status, _, _, _ := p.condition("Ready")
	return status == "True"
}

func (p *podItem) state() string {
	var c []string
	for _, typ := range []string{"PodScheduled", "Ready"} {
		status, reason, message, _ := p.condition(typ)
		c = append(c, fmt.Sprintf("%s=%s %s %s", typ, status, reason, message))
	}
	return p.Status.Phase + " on " + p.Spec.NodeName + ": " + strings.Join(c, "; ")
}

// rdmaContainer is the container that asks for an RDMA device (by a
// device plugin resource or a claim); a sidecar may come before it. With
// none, the first.
func (p *podItem) rdmaContainer() podContainer {
	for _, c := range p.Spec.Containers {
		if c.deviceResource() || len(c.Resources.Claims) > 0 {
			return c
		}
	}
	return p.Spec.Containers[0]
}

// checkWorkload checks each of a workload's settled pods against its
// expectation, and how many nodes they span.
func checkWorkload(t *testing.T, cp *controlPlane, w workload, pods []podItem) {
	nodes := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		nodes[p.Spec.NodeName] = true
		switch w.expect {
		case "pending":
			_, _, msg, at := p.condition("PodScheduled")
			t.Logf("CLUSTER-TIME pod %s: created to Unschedulable %.0f s: %s", p.id(), at.Sub(p.Metadata.CreationTimestamp).Seconds(), msg)
			if !strings.Contains(msg, w.reason) {
				t.Errorf("pod %s: the scheduler says %q, want it to hold %q (%s)", p.id(), msg, w.reason, annReason)
			}
		case "rdma0":
			logReady(t, p)
			checkRDMAPod(t, cp, p)
		case "none":
			logReady(t, p)
			checkPlainPod(t, cp, p)
		}
	}
	if len(nodes) < w.nodes {
		t.Errorf("%s: its pods are on %d nodes, want %d (%s)", w, len(nodes), w.nodes, annNodes)
	}
}

func logReady(t *testing.T, p *podItem) {
	_, _, _, at := p.condition("Ready")
	t.Logf("CLUSTER-TIME pod %s on %s: created to Ready %.0f s (API timestamps)", p.id(), p.Spec.NodeName, at.Sub(p.Metadata.CreationTimestamp).Seconds())
}

// checkRDMAPod checks that the RDMA container sees rdma0 with a global
// IPv6 address that is a RoCE GID of a port it sees, and an RDMA link;
// its /dev/infiniband holds exactly the char devices of what it was
// granted.
func checkRDMAPod(t *testing.T, cp *controlPlane, p *podItem) {
	t.Helper()
	c := p.rdmaContainer()
	// One exec (seconds each under TCG): the sections of podView.
	out, err := cp.execIn([]string{"-n", p.Metadata.Namespace, p.Metadata.Name, "-c", c.Name}, "/bin/busybox", "sh", "-c", podView)
	view := sections(out)
	if err != nil || len(view) != 5 {
		t.Fatalf("pod %s container %s: %v: %s", p.id(), c.Name, err, out)
	}
	links, addrs, gids, rdmaLinks := view[0], view[1], view[2], view[3]
	if !strings.Contains(links, " rdma0@") && !strings.Contains(links, " rdma0:") {
		t.Fatalf("pod %s container %s has no rdma0: %s", p.id(), c.Name, links)
	}
	var addr string
	f := strings.Fields(addrs)
	for j := range f {
		if f[j] == "inet6" && j+1 < len(f) {
			addr, _, _ = strings.Cut(f[j+1], "/")
			break
		}
	}
	if addr == "" || !strings.Contains(gids, expandIPv6(addr)) {
		t.Errorf("pod %s: rdma0's address %q is not a GID of a port it sees: %s", p.id(), addr, addrs)
	}
	if !strings.Contains(rdmaLinks, "link ") {
		t.Errorf("pod %s sees no RDMA link: %s", p.id(), rdmaLinks)
	}
	devs := strings.Fields(view[4])
	slices.Sort(devs)
	want, why := grantedCharDevices(t, cp, p, c)
	t.Logf("pod %s on %s, container %s: rdma0 %s (a GID); RDMA links: %s; /dev/infiniband %v (%s)",
		p.id(), p.Spec.NodeName, c.Name, addr, strings.Join(strings.Fields(rdmaLinks), " "), devs, why)
	checkExtendedClaim(t, cp, p, c, addr)
	switch {
	case want == nil && !slices.Contains(devs, "rdma_cm"):
		t.Errorf("pod %s: no rdma_cm in /dev/infiniband %v", p.id(), devs)
	case want != nil && !slices.Equal(devs, want):
		t.Errorf("pod %s: /dev/infiniband %v, want exactly %v", p.id(), devs, want)
	}
}

// sections splits podView's output at its "@@" lines.
func sections(out string) []string {
	view := []string{""}
	for _, l := range strings.Split(out, "\n") {
		if l == "@@" {
			view = append(view, "")
			continue
		}
		view[len(view)-1] += l + "\n"
	}
	return view
}

// podView prints, from inside a container, its links, rdma0's global IPv6
// addresses, the GIDs of the RDMA ports it sees (unused rows answer EINVAL:
// cat's status says nothing), its RDMA links and /dev/infiniband, in
// sections split by "@@" lines.
const podView = `/usr/sbin/ip -o link 2>&1
echo @@
/usr/sbin/ip -6 -o addr show dev rdma0 scope global 2>&1
echo @@
cat /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null
echo @@
/usr/sbin/rdma link 2>&1
echo @@
ls /dev/infiniband 2>&1
true
`

// dpCharDevices returns the char devices the device plugin mounts for
// this cluster's config (integration/node/guest/etc/rdma-dp/config.json:
// every virtio PCI function's RDMA device): those of each RDMA device
// under a PCI function, and rdma_cm.
const dpCharDevices = `cd /sys/class
for c in infiniband_verbs/uverbs* infiniband_mad/umad* infiniband_mad/issm*; do
	[ -e "$c/ibdev" ] || continue
	case "$(readlink -f "infiniband/$(cat "$c/ibdev")")" in */pci*/infiniband/*) echo "${c#*/}" ;; esac
done
echo rdma_cm
`

// grantedCharDevices is what the container's /dev/infiniband must hold
// exactly, and why; nil when only rdma_cm is certain (a privileged
// container gets every host device; one granted nothing gets none).
func grantedCharDevices(t *testing.T, cp *controlPlane, p *podItem, c podContainer) ([]string, string) {
	t.Helper()
	claim := p.extendedClaim(c)
	switch {
	case c.privileged():
		return nil, "privileged: the runtime's every device"
	case claim != "":
		var want []string
		devs := claimDevices(t, cp, p.Metadata.Namespace, claim)
		for _, dev := range devs {
			want = append(want, charDevices(t, cp, p.Spec.NodeName, dev)...)
		}
		slices.Sort(want)
		return slices.Compact(want), fmt.Sprintf("its device plugin resources' claim %s %v", claim, devs)
	case c.deviceResource():
		want := strings.Fields(cp.nodeShell(t, p.Spec.NodeName, dpCharDevices))
		slices.Sort(want)
		return want, "the device plugin's"
	case len(c.Resources.Claims) > 0:
		var want []string
		var names []string
		for _, rc := range p.Status.ResourceClaimStatuses {
			for _, dev := range claimDevices(t, cp, p.Metadata.Namespace, rc.ResourceClaimName) {
				names = append(names, dev)
				want = append(want, charDevices(t, cp, p.Spec.NodeName, dev)...)
			}
		}
		slices.Sort(want)
		return slices.Compact(want), fmt.Sprintf("its claims' %v", names)
	}
	return nil, "granted no device"
}

// checkExtendedClaim checks that a container asking for a device plugin
// resource on a node whose device plugin is stopped got it from a claim
// the scheduler made (KEP-5004), and that the driver wrote the pod's rdma0
// (address addr) into that claim's status as into any claim's.
func checkExtendedClaim(t *testing.T, cp *controlPlane, p *podItem, c podContainer, addr string) {
	t.Helper()
	claim := p.extendedClaim(c)
	if claim == "" {
		if _, stopped := cp.stoppedPlugins.Load(p.Spec.NodeName); stopped && c.deviceResource() {
			t.Errorf("pod %s on %s, whose device plugin is stopped, got %v without a claim", p.id(), p.Spec.NodeName, c.Resources.Limits)
		}
		return
	}
	status := cp.poll(t, 2*time.Minute, func(s string) bool { return strings.Contains(s, "rdma0") && strings.Contains(s, "True") },
		"-n", p.Metadata.Namespace, "get", "resourceclaim", claim, "-o", claimStatus)
	t.Logf("pod %s on %s: its %v from claim %s; status.devices: %s", p.id(), p.Spec.NodeName, c.Resources.Limits, claim, status)
	if !strings.Contains(status, addr) {
		t.Errorf("claim %s status %q lacks the pod's rdma0 address %s", claim, status, addr)
	}
}

// claimDevices are the devices of this driver allocated to a claim.
func claimDevices(t *testing.T, cp *controlPlane, namespace, claim string) []string {
	t.Helper()
	out, err := cp.kubectlOut("-n", namespace, "get", "resourceclaim", claim, "-o",
		`jsonpath={.status.allocation.devices.results[?(@.driver=="rdma-chain.github.io")].device}`)
	if err != nil {
		t.Fatalf("resourceclaim %s: %v: %s", claim, err, out)
	}
	return strings.Fields(out)
}

// checkPlainPod checks that a pod expected to pass through rdma-chain
// has no rdma0, and no attachment record on its node names it.
func checkPlainPod(t *testing.T, cp *controlPlane, p *podItem) {
	t.Helper()
	in := []string{"-n", p.Metadata.Namespace, p.Metadata.Name, "-c", p.Spec.Containers[0].Name}
	links, err := cp.execIn(in, "/usr/sbin/ip", "-o", "link")
	if err != nil || !strings.Contains(links, " lo: ") {
		t.Fatalf("pod %s: ip -o link: %v: %s", p.id(), err, links)
	}
	if strings.Contains(links, " rdma0@") || strings.Contains(links, " rdma0:") {
		t.Errorf("pod %s has rdma0: %s", p.id(), links)
	}
	named := cp.nodeShell(t, p.Spec.NodeName, `grep -l '"`+p.Metadata.Name+`"' /host/var/lib/cni/rdma-chain/attachments/*.json 2>/dev/null; true`)
	if named != "" {
		t.Errorf("pod %s: attachment records on %s name it: %s", p.id(), p.Spec.NodeName, named)
	}
}
