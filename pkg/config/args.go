package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Pod is the pod identity the runtime passes in CNI_ARGS.
type Pod struct {
	Namespace string
	Name      string
	UID       string
}

// String renders the pod as namespace/name, or "-" when unknown.
func (p Pod) String() string {
	if p.Name == "" {
		return "-"
	}
	return p.Namespace + "/" + p.Name
}

var (
	// dnsRE: Kubernetes namespace and pod names (DNS-1123 subdomain).
	dnsRE = pattern(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`, 1, 253)
	uidRE = pattern(`^[A-Za-z0-9-]+$`, 1, 64)
	// argKeyRE: CNI_ARGS keys are identifiers.
	argKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ParseArgs reads the pod identity from CNI_ARGS ("K=V;K=V"). Keys other than
// the K8S_POD_* ones are ignored; malformed pairs and invalid values are
// errors with code 7, since a pod author may influence them.
func ParseArgs(args string) (Pod, error) {
	var pod Pod
	if args == "" {
		return pod, nil
	}
	for _, pair := range strings.Split(args, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || !argKeyRE.MatchString(k) {
			return Pod{}, badArgs("malformed pair %q", pair)
		}
		if err := pod.set(k, v); err != nil {
			return Pod{}, err
		}
	}
	if (pod.Namespace == "") != (pod.Name == "") {
		return Pod{}, badArgs("K8S_POD_NAMESPACE and K8S_POD_NAME must be given together")
	}
	return pod, nil
}

func (p *Pod) set(k, v string) error {
	switch k {
	case "K8S_POD_NAMESPACE":
		return assign(&p.Namespace, k, v, dnsRE)
	case "K8S_POD_NAME":
		return assign(&p.Name, k, v, dnsRE)
	case "K8S_POD_UID":
		return assign(&p.UID, k, v, uidRE)
	}
	return nil
}

func assign(dst *string, k, v string, re bounded) error {
	if !re.MatchString(v) {
		return badArgs("%s=%q is not valid", k, v)
	}
	*dst = v
	return nil
}

func badArgs(format string, args ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, "invalid CNI_ARGS", fmt.Sprintf(format, args...))
}
