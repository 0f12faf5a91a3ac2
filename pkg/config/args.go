package config

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Pod is the pod identity the runtime passes in CNI_ARGS.
type Pod struct {
	Namespace        string
	Name             string
	UID              string
	InfraContainerID string
}

// String renders the pod as namespace/name, or "-" when unknown.
func (p Pod) String() string {
	if p.Name == "" {
		return "-"
	}
	return p.Namespace + "/" + p.Name
}

// k8sArgs are the CNI_ARGS keys Kubernetes runtimes pass. Pointers tell a
// key given empty (invalid) from a key not given.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          *types.UnmarshallableString
	K8S_POD_NAME               *types.UnmarshallableString
	K8S_POD_UID                *types.UnmarshallableString
	K8S_POD_INFRA_CONTAINER_ID *types.UnmarshallableString
}

var (
	// dnsRE matches Kubernetes namespace and pod names (DNS-1123 subdomain),
	// ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$
	dnsRE = shape{first: lowerAlnum(""), middle: lowerAlnum(".-"), last: lowerAlnum(""), min: 1, max: 253}
	// namespaceRE matches a Kubernetes namespace name (a DNS-1123 label).
	namespaceRE = shape{first: lowerAlnum(""), middle: lowerAlnum("-"), last: lowerAlnum(""), min: 1, max: 63}
	// uidRE matches a pod UID, ^[A-Za-z0-9-]+$.
	uidRE = same(alnum("-"), 1, 64)
)

// ValidPodUID reports whether uid has the shape ParseArgs accepts for
// K8S_POD_UID: for a pod UID read from anywhere else (a cgroup path).
func ValidPodUID(uid string) bool { return uidRE.MatchString(uid) }

// ParseArgs reads the pod identity from CNI_ARGS ("K=V;K=V") with the CNI
// library's rules: a malformed pair is an error, and so is an unknown key
// unless the runtime passed IgnoreUnknown=1 (as containerd, CRI-O and Multus
// do). Every value is then checked, since a pod author may influence them.
// Errors are CNI errors with code 7 naming the key.
func ParseArgs(args string) (Pod, error) {
	var a k8sArgs
	if err := types.LoadArgs(args, &a); err != nil {
		return Pod{}, types.NewError(types.ErrInvalidNetworkConfig, "invalid CNI_ARGS", truncateLong(strings.TrimPrefix(err.Error(), "ARGS: ")))
	}
	var pod Pod
	for _, v := range []struct {
		key string
		val *types.UnmarshallableString
		dst *string
		re  shape
	}{
		{"K8S_POD_NAMESPACE", a.K8S_POD_NAMESPACE, &pod.Namespace, dnsRE},
		{"K8S_POD_NAME", a.K8S_POD_NAME, &pod.Name, dnsRE},
		{"K8S_POD_UID", a.K8S_POD_UID, &pod.UID, uidRE},
		{"K8S_POD_INFRA_CONTAINER_ID", a.K8S_POD_INFRA_CONTAINER_ID, &pod.InfraContainerID, networkNameRE},
	} {
		if v.val == nil {
			continue
		}
		if !v.re.MatchString(string(*v.val)) {
			return Pod{}, badArg(v.key, "%q is not valid", truncate(string(*v.val)))
		}
		*v.dst = string(*v.val)
	}
	if (pod.Namespace == "") != (pod.Name == "") {
		return Pod{}, badArg("K8S_POD_NAME", "K8S_POD_NAMESPACE and K8S_POD_NAME must be given together")
	}
	return pod, nil
}

func badArg(key, format string, args ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("invalid CNI_ARGS: key %q", key), fmt.Sprintf(format, args...))
}
