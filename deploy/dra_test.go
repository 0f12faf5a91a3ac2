package deploy

import (
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

const draDriver = "rdma-chain.github.io"

// decodeStrict decodes a rendered object into the API's type: a field the
// API server would reject fails.
func decodeStrict(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
}

// TestDRA checks that the dra component adds the driver's DaemonSet on
// the overlay's nodes, its ServiceAccount and RBAC, and the DeviceClasses,
// and changes nothing of the node component.
func TestDRA(t *testing.T) {
	for _, o := range overlays {
		t.Run(o.dir, func(t *testing.T) {
			mem := treeFS(t)
			plain := render(t, mem, "/deploy/"+o.dir)
			r := userKustomization(t, mem, "resources: [../deploy/"+o.dir+"]\ncomponents: [../deploy/dra]\n")
			if !reflect.DeepEqual(r.ds, plain.ds) {
				t.Error("the component changed the rdma-chain DaemonSet")
			}
			kinds := map[string]int{}
			for k, objs := range r.objects {
				kinds[k] = len(objs)
			}
			want := map[string]int{"DaemonSet": 2, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "DeviceClass": 3,
				"ValidatingAdmissionPolicy": 2, "ValidatingAdmissionPolicyBinding": 2}
			if !maps.Equal(kinds, want) {
				t.Fatalf("objects %v, want %v", kinds, want)
			}
			ds := draDaemonSet(t, r)
			checkDRAPod(t, ds, plain.ds.Spec.Template.Spec)
			checkDRARBAC(t, r, ds)
			checkDRAPolicies(t, r, ds)
			checkDeviceClass(t, r)
		})
	}
}

// TestDRAImageByDigest checks that a user's images entry reaches the
// driver's container too.
func TestDRAImageByDigest(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	r := userKustomization(t, treeFS(t), "resources: [../deploy/overlays/generic]\ncomponents: [../deploy/dra]\n"+
		"images:\n- name: localhost/rdma-chain\n  newName: registry.example.com/rdma/rdma-chain\n  digest: "+digest+"\n")
	if c := draDaemonSet(t, r).Spec.Template.Spec.Containers[0]; c.Image != "registry.example.com/rdma/rdma-chain@"+digest {
		t.Errorf("dra: image %q", c.Image)
	}
}

func draDaemonSet(t *testing.T, r rendered) appsv1.DaemonSet {
	t.Helper()
	for _, obj := range r.objects["DaemonSet"] {
		var ds appsv1.DaemonSet
		decodeStrict(t, obj, &ds)
		if ds.Name == "rdma-chain-dra" {
			return ds
		}
	}
	t.Fatal("no DaemonSet rdma-chain-dra")
	return appsv1.DaemonSet{}
}

// checkDRAPod checks that the driver runs on the node component's
// nodes, from the same image, with its own service account, every path
// it is given mounted at the host's path, as root with no capability.
func checkDRAPod(t *testing.T, ds appsv1.DaemonSet, node corev1.PodSpec) {
	t.Helper()
	s := ds.Spec.Template.Spec
	if ds.Namespace != "kube-system" || !s.HostNetwork || s.ServiceAccountName != "rdma-chain-dra" ||
		(s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken) || s.PriorityClassName != "system-node-critical" {
		t.Errorf("pod: namespace %q hostNetwork %v service account %q token %v priority %q",
			ds.Namespace, s.HostNetwork, s.ServiceAccountName, s.AutomountServiceAccountToken, s.PriorityClassName)
	}
	if node.Affinity == nil || !reflect.DeepEqual(s.Affinity, node.Affinity) || !reflect.DeepEqual(s.Tolerations, node.Tolerations) {
		t.Errorf("affinity %v tolerations %v, want the node component's %v %v", s.Affinity, s.Tolerations, node.Affinity, node.Tolerations)
	}
	if u := ds.Spec.UpdateStrategy.RollingUpdate; u == nil || u.MaxSurge == nil || u.MaxSurge.IntValue() != 0 {
		t.Errorf("update strategy %+v: the kubelet plugin helper asks for maxSurge 0", ds.Spec.UpdateStrategy)
	}
	if len(s.Containers) != 1 || len(s.InitContainers) != 0 {
		t.Fatalf("containers: %d, init %d", len(s.Containers), len(s.InitContainers))
	}
	c := s.Containers[0]
	if !slices.Equal(c.Command, []string{"/rdma-chain-dra"}) || c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("command %q image %q pull %q", c.Command, c.Image, c.ImagePullPolicy)
	}
	got := flagArgs(t, c.Args)
	want := map[string]string{"--node-name": "$(NODE_NAME)", "--sys-root": "/sys", "--cdi-dir": "/var/run/cdi",
		"--kubelet-dir": "/var/lib/kubelet", "--cni-data-dir": "/var/lib/cni/rdma-chain", "--cni-conf-dir": "/etc/cni/net.d", "--interval": "30s", "--status-interval": "2s"}
	if !maps.Equal(got, want) {
		t.Errorf("flags\n%v, want\n%v", got, want)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil ||
		c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("env %+v", c.Env)
	}
	checkContainer(t, c, nil, map[string]string{
		"plugin": "/var/lib/kubelet/plugins/" + draDriver + " rw", "plugins-registry": "/var/lib/kubelet/plugins_registry rw",
		"cdi": "/var/run/cdi rw", "cni-state": "/var/lib/cni ro", "cni-conf": "/etc/cni/net.d ro",
	})
	// Of kubelet's plugins directory, the driver's own only: the other
	// drivers' and CSI plugins' sockets stay out of its reach.
	for _, m := range c.VolumeMounts {
		if p := strings.TrimSuffix(m.MountPath, "/"); p == "/var/lib/kubelet" || p == "/var/lib/kubelet/plugins" {
			t.Errorf("mount %s at %s: all of kubelet's plugins, want plugins/%s only", m.Name, m.MountPath, draDriver)
		}
	}
	hostPaths := map[string]string{}
	for _, v := range s.Volumes {
		if v.HostPath == nil {
			t.Errorf("volume %s is not a hostPath", v.Name)
			continue
		}
		hostPaths[v.Name] = v.HostPath.Path
	}
	for _, m := range c.VolumeMounts {
		if hostPaths[m.Name] != m.MountPath {
			t.Errorf("mount %s at %s of host path %q: the driver's paths are the host's", m.Name, m.MountPath, hostPaths[m.Name])
		}
	}
	for flag, v := range got {
		if !strings.HasPrefix(v, "/") || v == "/sys" { // /sys: the container's own, of the host netns
			continue
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return v == m.MountPath || strings.HasPrefix(v, m.MountPath+"/") || strings.HasPrefix(m.MountPath, v+"/")
		}) {
			t.Errorf("%s %s: not mounted", flag, v)
		}
	}
}

// checkDRARBAC checks that the RBAC is exactly the rules docs/dra.md
// lists, bound to the DaemonSet's service account.
func checkDRARBAC(t *testing.T, r rendered, ds appsv1.DaemonSet) {
	t.Helper()
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	var sa corev1.ServiceAccount
	decodeStrict(t, r.objects["ClusterRole"][0], &role)
	decodeStrict(t, r.objects["ClusterRoleBinding"][0], &binding)
	decodeStrict(t, r.objects["ServiceAccount"][0], &sa)
	res := "resource.k8s.io"
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{res}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{res}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{res}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{res}, Resources: []string{"resourceclaims/driver"}, ResourceNames: []string{draDriver}, Verbs: []string{"associated-node:patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("rules\n%+v, want\n%+v", role.Rules, want)
	}
	subject := rbacv1.Subject{Kind: "ServiceAccount", Name: ds.Spec.Template.Spec.ServiceAccountName, Namespace: ds.Namespace}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}) ||
		!slices.Equal(binding.Subjects, []rbacv1.Subject{subject}) || sa.Name != subject.Name || sa.Namespace != subject.Namespace {
		t.Errorf("binding %+v of role %s, service account %s/%s", binding, role.Name, sa.Namespace, sa.Name)
	}
}

// checkDRAPolicies checks that the admission policies
// (deploy/dra/policy_test.go checks what they decide) match the
// DaemonSet's service account as rendered, and each has a binding that
// denies.
func checkDRAPolicies(t *testing.T, r rendered, ds appsv1.DaemonSet) {
	t.Helper()
	user := "system:serviceaccount:" + ds.Namespace + ":" + ds.Spec.Template.Spec.ServiceAccountName
	denied := map[string]bool{}
	for _, obj := range r.objects["ValidatingAdmissionPolicyBinding"] {
		var b admissionv1.ValidatingAdmissionPolicyBinding
		decodeStrict(t, obj, &b)
		denied[b.Spec.PolicyName] = slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny})
	}
	for _, obj := range r.objects["ValidatingAdmissionPolicy"] {
		var p admissionv1.ValidatingAdmissionPolicy
		decodeStrict(t, obj, &p)
		if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != "request.userInfo.username == '"+user+"'" {
			t.Errorf("policy %s matches %+v, want the requests of %s", p.Name, p.Spec.MatchConditions, user)
		}
		if !denied[p.Name] {
			t.Errorf("policy %s has no binding that denies", p.Name)
		}
	}
}

// checkDeviceClass checks the classes' CEL, evaluated as the scheduler
// would on devices of this driver (eRDMA NICs with and without the
// kernelDriver attribute, others) and of other drivers: rdma-chain.github.io selects
// every device of the driver and names no extended resource; each device
// plugin resource of the workloads' specs (docs/workloads.md) is one other
// class's, which selects as its device plugin does (aliyun/erdma eRDMA
// NICs, rdma/hca the others).
func checkDeviceClass(t *testing.T, r rendered) {
	t.Helper()
	env, err := cel.NewEnv(cel.OptionalTypes(), cel.Variable("device", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	dev := func(driver, rdmaDevice, kernelDriver string) map[string]any {
		attrs := map[string]any{}
		for k, v := range map[string]string{"rdmaDevice": rdmaDevice, "kernelDriver": kernelDriver} {
			if v != "" {
				attrs[k] = v
			}
		}
		return map[string]any{"driver": driver, "attributes": map[string]any{draDriver: attrs}}
	}
	devices := map[string]map[string]any{
		"erdma": dev(draDriver, "erdma_0", "erdma"), "erdma without a parent": dev(draDriver, "erdma_1", ""),
		"mlx5": dev(draDriver, "mlx5_0", "mlx5_core"), "rxe": dev(draDriver, "rxe0", ""),
		"dranet's": dev("dra.net", "mlx5_0", "mlx5_core"), "a GPU": dev("gpu.example.com", "", ""),
	}
	want := map[string][]string{ // extended resource ("" none, smcrClass its name): the devices it selects
		"":             {"erdma", "erdma without a parent", "mlx5", "rxe"},
		"rdma/hca":     {"mlx5", "rxe"},
		"aliyun/erdma": {"erdma", "erdma without a parent"},
	}
	seen := map[string]string{}
	for _, obj := range r.objects["DeviceClass"] {
		var dc resourcev1.DeviceClass
		decodeStrict(t, obj, &dc)
		if len(dc.Spec.Selectors) != 1 || dc.Spec.Selectors[0].CEL == nil {
			t.Fatalf("device class %+v", dc)
		}
		res := ""
		if dc.Spec.ExtendedResourceName != nil {
			res = *dc.Spec.ExtendedResourceName
		}
		if len(dc.Spec.Config) > 0 {
			t.Errorf("class %s has configuration %+v", dc.Name, dc.Spec.Config)
		}
		if other, ok := seen[res]; ok {
			t.Errorf("classes %s and %s both serve %q", other, dc.Name, res)
		}
		seen[res] = dc.Name
		if (res == "") != (dc.Name == draDriver) {
			t.Errorf("class %s serves %q", dc.Name, res)
		}
		ast, iss := env.Compile(dc.Spec.Selectors[0].CEL.Expression)
		if iss.Err() != nil {
			t.Fatal(iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for name, d := range devices {
			out, _, err := prg.Eval(map[string]any{"device": d})
			if err != nil {
				t.Errorf("class %s on %s: %v", dc.Name, name, err)
			}
			if out != nil && out.Value() == true {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want[res]) {
			t.Errorf("class %s selects %v, want %v", dc.Name, got, want[res])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("classes by extended resource %v, want one for each of %v", seen, want)
	}
}

// smcrClass is the DeviceClass whose claims get SMC-R.
const smcrClass = "smcr.rdma-chain.github.io"

// TestSMCRClass checks deploy/dra/smcr.yaml, which the component leaves
// out: a DeviceClass of every NIC of the driver whose one configuration
// is the driver's opaque RDMAConfig turning SMC-R on, and nothing else
// (the driver parses it strictly: pkg/config's ParseClaimConfig, in the
// plugin's module).
func TestSMCRClass(t *testing.T) {
	data, err := os.ReadFile("dra/smcr.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	var dc resourcev1.DeviceClass
	decodeStrict(t, obj, &dc)
	if dc.Name != smcrClass || len(dc.Spec.Selectors) != 1 || dc.Spec.Selectors[0].CEL == nil ||
		dc.Spec.Selectors[0].CEL.Expression != `device.driver == "`+draDriver+`"` {
		t.Errorf("class %+v, want %s selecting the driver's devices", dc.ObjectMeta, smcrClass)
	}
	if len(dc.Spec.Config) != 1 || dc.Spec.Config[0].Opaque == nil || dc.Spec.Config[0].Opaque.Driver != draDriver {
		t.Fatalf("class %s: configuration %+v, want one opaque entry of %s", dc.Name, dc.Spec.Config, draDriver)
	}
	var params map[string]any
	if err := yaml.Unmarshal(dc.Spec.Config[0].Opaque.Parameters.Raw, &params); err != nil {
		t.Fatalf("class %s: parameters: %v", dc.Name, err)
	}
	want := map[string]any{"apiVersion": "rdma-chain.github.io/v1alpha1", "kind": "RDMAConfig", "smcr": true}
	if !maps.Equal(params, want) {
		t.Errorf("class %s: parameters %v, want %v", dc.Name, params, want)
	}
}
