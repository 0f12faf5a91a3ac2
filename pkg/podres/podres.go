package podres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/grpcunix"
)

// DefaultSocket is kubelet's pod-resources socket.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultTimeout bounds one attempt of a call when New is given a zero
// timeout.
const DefaultTimeout = 2 * time.Second

// LookupBudget bounds a Lookup's attempts together when its context has no
// deadline; the plugin's ADD gives its lookup this long. kubelet serves
// the pod-resources API 100 calls a second with a burst of 10 and refuses
// the rest at once, and answers slowly on a node that starts tens of pods
// together: the budget covers such a burst, and a kubelet still refusing
// or silent after it is reported (ErrBusy), never waited for without end.
const LookupBudget = 30 * time.Second

// maxRecvMsgSize matches kubelet's own pod-resources client (16 MiB): a List
// reply on a busy node can exceed gRPC's 4 MiB default.
const maxRecvMsgSize = 16 << 20

// The errors a call wraps, besides kubelet's own answers.
var (
	// ErrUnavailable means nothing serves at the kubelet socket (a missing
	// file, connection refused, or the connection closed before the reply):
	// no kubelet, or one restarting. The plugin's STATUS reports it.
	ErrUnavailable = errors.New("kubelet pod-resources API unavailable")
	// ErrBusy means a kubelet is there but gave no answer in time. It did not
	// reply before the deadline, its listen backlog was full, or it refused
	// the call with its rate limit (ErrRateLimited).
	ErrBusy = errors.New("kubelet pod-resources API busy")
	// ErrRateLimited means kubelet refused the last attempt with
	// ResourceExhausted, what its pod-resources rate limit answers.
	ErrRateLimited = fmt.Errorf("%w: refused by its rate limit", ErrBusy)
)

// Allocation is the set of devices kubelet allocated to a pod for one
// resource name.
type Allocation struct {
	ResourceName string
	DeviceIDs    []string // de-duplicated, in kubelet's order
}

// ClaimDevice is one device kubelet prepared for the pod from a DRA
// ResourceClaim, as pod-resources reports it. Values are kubelet's, which
// copies them from the claim's allocation: callers match them, never use
// them as names or paths.
type ClaimDevice struct {
	ClaimNamespace, ClaimName string
	Driver, Pool, Device      string
	ShareID                   string   // set for a share of a device with consumable capacity
	CDIDevices                []string // fully qualified CDI device names
}

// Query says which allocations the caller serves.
type Query struct {
	ResourceNames []string // device-plugin extended resource names
	Drivers       []string // DRA driver names
}

// Pod is what kubelet allocated to a pod, split by who serves it.
type Pod struct {
	Known   bool          // kubelet answered for the pod; false: it does not know it
	Devices []Allocation  // device plugins, for Query.ResourceNames
	Claims  []ClaimDevice // DRA devices of Query.Drivers, de-duplicated
	Foreign []ClaimDevice // DRA devices of every other driver: never the caller's
}

// Client talks to kubelet's pod-resources API. It holds no connection: each
// call dials and closes its own.
type Client struct {
	socket  string
	timeout time.Duration
}

// New returns a client for the unix socket at socket; every attempt of a
// call is first bounded by timeout (0 means DefaultTimeout).
func New(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{socket: socket, timeout: timeout}
}

// Allocated returns the allocations of the pod (all containers kubelet
// reports, including restartable init containers) whose resource name is in
// resourceNames, in the order of resourceNames; resources without devices are
// left out. A pod unknown to kubelet, or with none of the resources, gives an
// empty slice and a nil error.
func (c *Client) Allocated(ctx context.Context, namespace, name string, resourceNames []string) ([]Allocation, error) {
	pod, err := c.Lookup(ctx, namespace, name, Query{ResourceNames: resourceNames})
	if err != nil {
		return nil, err
	}
	return pod.Devices, nil
}

// Lookup returns, in one call to kubelet, the pod's device-plugin
// allocations for q.ResourceNames (as Allocated) and its DRA claim devices,
// those of q.Drivers apart from every other driver's. A pod unknown to
// kubelet gives an empty Pod and a nil error. A call kubelet refuses or
// does not answer in time is tried again until ctx ends (LookupBudget when
// ctx has no deadline); see retry.
func (c *Client) Lookup(ctx context.Context, namespace, name string, q Query) (*Pod, error) {
	if namespace == "" || name == "" {
		return nil, fmt.Errorf("ask kubelet for pod resources: pod namespace and name are required (got %q/%q)", namespace, name)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, LookupBudget)
		defer cancel()
	}
	start := time.Now()
	pod, attempts, err := c.retry(ctx, func(ctx context.Context) (*podResources, error) {
		return c.getPod(ctx, namespace, name)
	})
	if err != nil {
		what := fmt.Sprintf("ask kubelet for the resources of pod %s/%s", namespace, name)
		if attempts > 1 {
			what += fmt.Sprintf(" (%d attempts in %s)", attempts, time.Since(start).Round(time.Millisecond))
		}
		return nil, c.wrap(what, err)
	}
	out := &Pod{Known: pod != nil, Devices: collect(pod, q.ResourceNames)}
	out.Claims, out.Foreign = collectClaims(pod, q.Drivers)
	return out, nil
}

// Probe checks that the socket is reachable and that kubelet answers what
// Allocated asks, in one attempt bounded by the timeout: a refusal or a
// late answer is ErrBusy, not retried. It asks Get for a pod that cannot
// exist (a name with a character no pod name has): kubelet answers "not
// found" without listing the node's pods, so STATUS, called every few seconds,
// costs the same on a node with 1,000 pods as on an empty one. Only a kubelet
// that does not serve Get is asked List, which Allocated then relies on.
func (c *Client) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_, err := c.getPod(ctx, probeNamespace, probeName)
	return c.wrap("probe kubelet pod-resources API", err)
}

// Serving checks, without a call, that a server accepts connections at the
// socket, so that it costs none of kubelet's rate limit: it connects, waits
// within ctx for the server's first bytes (an HTTP/2 server sends its
// SETTINGS first) and closes; grpc-go's server takes that close for a
// health check's and logs nothing. Nothing listening, or a connection
// closed before any byte, is ErrUnavailable; a full listen backlog or no
// byte in time is ErrBusy.
func (c *Client) Serving(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: c.socket, Net: "unix"})
	if err != nil {
		return c.wrap("connect to kubelet pod-resources API", &grpcunix.Status{Code: grpcunix.Unavailable, Message: err.Error(), Err: err})
	}
	defer func() { _ = conn.Close() }() // nothing was sent: a close error changes nothing
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl) // a unix socket's deadline cannot fail to set
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		st := &grpcunix.Status{Code: grpcunix.Unavailable, Message: "connection closed before the server's first bytes: " + err.Error(), Err: err}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			st = &grpcunix.Status{Code: grpcunix.DeadlineExceeded, Message: "no byte from the server in time", Err: err}
		}
		return c.wrap("connect to kubelet pod-resources API", st)
	}
	return nil
}

// probeNamespace/probeName name no pod: Kubernetes names are DNS labels or
// subdomains, which have no '_'.
const (
	probeNamespace = "rdma-chain_probe"
	probeName      = "rdma-chain_probe"
)

// Method names of kubelet's v1 PodResourcesLister service.
const (
	getMethod  = "/v1.PodResourcesLister/Get"
	listMethod = "/v1.PodResourcesLister/List"
)

// wrap names the socket in err and marks it with ErrRateLimited, ErrBusy or
// ErrUnavailable when no answer of kubelet's came back.
func (c *Client) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	var kind error
	switch {
	case refused(err) && grpcunix.StatusOf(err).Code == grpcunix.ResourceExhausted:
		kind = ErrRateLimited
	case refused(err) || grpcunix.StatusOf(err).Code == grpcunix.DeadlineExceeded:
		kind = ErrBusy
	case grpcunix.StatusOf(err).Code == grpcunix.Unavailable:
		kind = ErrUnavailable
	default:
		return fmt.Errorf("%s via %s: %w", what, c.socket, err)
	}
	return fmt.Errorf("%s: %w at %s: %w", what, kind, c.socket, err)
}

// getPod asks Get for the pod and falls back to List when kubelet does not
// serve Get. It returns nil, nil when kubelet does not know the pod. Both
// calls share ctx's deadline.
func (c *Client) getPod(ctx context.Context, namespace, name string) (*podResources, error) {
	reply, err := grpcunix.Call(ctx, c.socket, getMethod, encodeGetRequest(namespace, name), maxRecvMsgSize)
	switch {
	case err == nil:
		return decodeGetResponse(reply)
	case getDisabled(err):
		return c.listPod(ctx, namespace, name)
	case podNotFound(err):
		return nil, nil
	}
	return nil, err
}

// listPod asks List (an empty request) and decodes only the pod asked for.
func (c *Client) listPod(ctx context.Context, namespace, name string) (*podResources, error) {
	reply, err := grpcunix.Call(ctx, c.socket, listMethod, nil, maxRecvMsgSize)
	if err != nil {
		return nil, err
	}
	return findInList(reply, namespace, name)
}

// getDisabled reports whether kubelet does not serve Get: an older kubelet
// answers Unimplemented; one with the KubeletPodResourcesGet gate off answers
// a plain error (code Unknown) "PodResources API Get method disabled".
func getDisabled(err error) bool {
	s := grpcunix.StatusOf(err)
	return s.Code == grpcunix.Unimplemented ||
		(s.Code == grpcunix.Unknown && strings.Contains(s.Message, "Get method disabled"))
}

// podNotFound reports whether Get failed because kubelet does not know the
// pod: kubelet answers a plain error (code Unknown) "pod <name> in namespace
// <ns> not found"; NotFound is accepted too should kubelet adopt it.
func podNotFound(err error) bool {
	s := grpcunix.StatusOf(err)
	return s.Code == grpcunix.NotFound ||
		(s.Code == grpcunix.Unknown && strings.HasSuffix(s.Message, " not found"))
}

// collect merges the pod's container devices for resourceNames.
func collect(pod *podResources, resourceNames []string) []Allocation {
	out := []Allocation{}
	for i, rn := range resourceNames {
		if slices.Contains(resourceNames[:i], rn) {
			continue
		}
		var ids []string
		for _, d := range pod.devices() {
			if d.resourceName != rn {
				continue
			}
			for _, id := range d.deviceIDs {
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
		if len(ids) > 0 {
			out = append(out, Allocation{ResourceName: rn, DeviceIDs: ids})
		}
	}
	return out
}

// collectClaims splits the pod's claim devices into those of drivers and
// the others, each de-duplicated (kubelet reports a claim shared by several
// containers once per container).
func collectClaims(pod *podResources, drivers []string) (served, foreign []ClaimDevice) {
	if pod == nil {
		return nil, nil
	}
	for _, d := range pod.claimDevs {
		if slices.Contains(drivers, d.Driver) {
			served = appendClaim(served, d)
		} else {
			foreign = appendClaim(foreign, d)
		}
	}
	return served, foreign
}

func appendClaim(list []ClaimDevice, d ClaimDevice) []ClaimDevice {
	for _, x := range list {
		if x.ClaimNamespace == d.ClaimNamespace && x.ClaimName == d.ClaimName &&
			x.Driver == d.Driver && x.Pool == d.Pool && x.Device == d.Device && x.ShareID == d.ShareID {
			return list
		}
	}
	return append(list, d)
}
