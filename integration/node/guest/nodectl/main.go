// Command nodectl reads the node tier's kubelet inside the guest: kubelet's
// own /pods (the pods and their status as kubelet reports them, through its
// authenticated port with anonymous access allowed in the test's
// KubeletConfiguration). It prints lines the guest's scenarios and the
// host-side test parse.
//
//	nodectl wait NS/NAME running|pending SECONDS  wait for that state; prints
//	                                               NODE-TIME and NODE-CID lines
//	                                               (NS/NAME CONTAINER ID rdma|-)
//	nodectl gone NS/NAME SECONDS                   wait until kubelet lists it no more
//	nodectl show NS/NAME                           the pod's status as JSON
//	nodectl podres list|get [NS/NAME]              kubelet's pod-resources answer as JSON
//	nodectl gid ADDR <PATH:GID lines               the GID slots holding ADDR (NODE-GID)
//	nodectl netready SECONDS                       wait until CRI NetworkReady was false
//	                                               and is true again (NODE-NETREADY)
//	nodectl netready-is true|false                 CRI NetworkReady is that now
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

const podsURL = "https://127.0.0.1:10250/pods"

// client talks to kubelet's self-signed serving certificate on loopback.
var client = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback kubelet in the test guest
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nodectl:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: nodectl wait|gone|show NS/NAME [ARGS]")
	}
	switch args[0] {
	case "wait":
		if len(args) != 4 {
			return errors.New("usage: nodectl wait NS/NAME running|pending SECONDS")
		}
		return wait(args[1], args[2], seconds(args[3]))
	case "gone":
		if len(args) != 3 {
			return errors.New("usage: nodectl gone NS/NAME SECONDS")
		}
		return poll(seconds(args[2]), func() (bool, error) {
			p, err := find(args[1])
			return p == nil, err
		})
	case "podres":
		return podres(args[1:])
	case "gid":
		return gid(args[1])
	case "netready":
		return watchNetReady(seconds(args[1]))
	case "netready-is":
		ready, msg, err := netReady()
		if err != nil {
			return err
		}
		if strconv.FormatBool(ready) != args[1] {
			return fmt.Errorf("NetworkReady is %v (%s)", ready, msg)
		}
		return nil
	case "show":
		p, err := find(args[1])
		if err != nil {
			return fmt.Errorf("pod %s: %w", args[1], err)
		}
		if p == nil {
			return fmt.Errorf("pod %s: not listed by kubelet", args[1])
		}
		b, _ := json.MarshalIndent(p.Status, "", "  ")
		fmt.Println(string(b))
		return nil
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// podres prints what kubelet's pod-resources API (v1) answers, as the
// plugin asks it: List, or Get for one pod (NAME as kubelet names it).
func podres(args []string) error {
	conn, err := grpc.NewClient("unix:///var/lib/kubelet/pod-resources/kubelet.sock", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := podresv1.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp any
	switch {
	case args[0] == "list":
		resp, err = c.List(ctx, &podresv1.ListPodResourcesRequest{})
	case args[0] == "get" && len(args) == 2:
		ns, name, _ := strings.Cut(args[1], "/")
		resp, err = c.Get(ctx, &podresv1.GetPodResourcesRequest{PodNamespace: ns, PodName: name})
	default:
		return errors.New("usage: nodectl podres list|get NS/NAME")
	}
	if err != nil {
		fmt.Printf("NODE-PODRES %s error: %v\n", strings.Join(args, " "), err)
		return nil
	}
	b, _ := json.Marshal(resp)
	fmt.Printf("NODE-PODRES %s %s\n", strings.Join(args, " "), b)
	return nil
}

// gid prints the GID slots holding ADDR (any IPv6 spelling; the kernel
// writes GIDs in full hex form) and fails if none does. It reads "PATH:GID"
// lines from stdin, as `grep -H . /sys/class/infiniband/*/ports/*/gids/*`
// prints them inside a pod (its own netns's view of the RDMA devices).
func gid(addr string) error {
	want := net.ParseIP(addr)
	if want == nil {
		return fmt.Errorf("%q is not an IP address", addr)
	}
	var found []string
	n := 0
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		path, g, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n++
		if net.ParseIP(strings.TrimSpace(g)).Equal(want) {
			found = append(found, strings.TrimPrefix(path, "/sys/class/infiniband/"))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(found) == 0 {
		return fmt.Errorf("%s is no RDMA port's GID (%d GIDs read)", addr, n)
	}
	fmt.Printf("NODE-GID %s %s\n", addr, strings.Join(found, " "))
	return nil
}

// netReady is CRI's NetworkReady condition as containerd reports it (its
// Status runs the CNI STATUS of the conflist's plugins).
func netReady() (bool, string, error) {
	conn, err := grpc.NewClient("unix:///run/containerd/containerd.sock", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false, "", err
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			return c.Status, c.Reason + ": " + c.Message, nil
		}
	}
	return false, "", errors.New("no NetworkReady condition")
}

// watchNetReady polls NetworkReady until it was false and is true again,
// and prints how long it was false.
func watchNetReady(d time.Duration) error {
	var falseAt time.Time
	var msg string
	return poll(d, func() (bool, error) {
		ready, m, err := netReady()
		switch {
		case err != nil:
			return false, err
		case !ready && falseAt.IsZero():
			falseAt, msg = time.Now(), m
		case ready && !falseAt.IsZero():
			fmt.Printf("NODE-NETREADY false for %.1fs (%s)\n", time.Since(falseAt).Seconds(), msg)
			return true, nil
		}
		if falseAt.IsZero() {
			return false, errors.New("NetworkReady never seen false")
		}
		return false, errors.New("NetworkReady not true again")
	})
}

func seconds(s string) time.Duration {
	n, _ := strconv.Atoi(s)
	return time.Duration(n) * time.Second
}

// find returns the pod NS/NAME from kubelet's list (nil if not listed). A
// static pod's name carries "-NODENAME": NAME matches that too.
func find(nsName string) (*corev1.Pod, error) {
	ns, name, _ := strings.Cut(nsName, "/")
	resp, err := client.Get(podsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", podsURL, resp.Status)
	}
	var list corev1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Namespace == ns && (p.Name == name || strings.HasPrefix(p.Name, name+"-")) {
			return p, nil
		}
	}
	return nil, nil
}

func poll(d time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		ok, err := done()
		if ok {
			return nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	if last != nil {
		return fmt.Errorf("not after %v (last error: %w)", d, last)
	}
	return fmt.Errorf("not after %v", d)
}

// wait polls until the pod is running (every container running) or stays
// pending with its sandbox not ready; then prints its timing from kubelet's
// own status and its containers' IDs.
func wait(nsName, want string, d time.Duration) error {
	var pod *corev1.Pod
	err := poll(d, func() (bool, error) {
		p, err := find(nsName)
		if err != nil || p == nil {
			return false, err
		}
		pod = p
		switch want {
		case "running":
			return allRunning(p), nil
		case "pending":
			return p.Status.Phase == corev1.PodPending && p.Status.StartTime != nil && !condTrue(p, corev1.PodReadyToStartContainers), nil
		}
		return false, fmt.Errorf("unknown state %q", want)
	})
	if err != nil {
		if pod != nil {
			b, _ := json.Marshal(pod.Status)
			fmt.Printf("NODE-STATUS %s %s\n", nsName, b)
		}
		return fmt.Errorf("pod %s %s: %w", nsName, want, err)
	}
	printTiming(nsName, pod)
	return nil
}

func allRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

// rdmaResources are the node's device plugin resources
// (integration/node/guest/etc: the RDMA shared device plugin's config).
var rdmaResources = []corev1.ResourceName{"rdma/hca", "aliyun/erdma"}

// asksRDMA reports whether the pod's container name asks for an RDMA device (a device
// plugin resource or a DRA claim); the checks look at that container, which
// need not be the first (a sidecar often is).
func asksRDMA(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name != name {
			continue
		}
		if len(c.Resources.Claims) > 0 {
			return true
		}
		for _, r := range rdmaResources {
			if _, ok := c.Resources.Limits[r]; ok {
				return true
			}
			if _, ok := c.Resources.Requests[r]; ok {
				return true
			}
		}
	}
	return false
}

func condTrue(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func condTime(p *corev1.Pod, t corev1.PodConditionType) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// printTiming prints kubelet's startTime (it saw the pod), when the sandbox
// had its network ready (PodReadyToStartContainers) and when the last
// container started.
func printTiming(nsName string, p *corev1.Pod) {
	for _, c := range p.Status.ContainerStatuses {
		what := "-"
		if asksRDMA(p, c.Name) {
			what = "rdma"
		}
		fmt.Printf("NODE-CID %s %s %s %s\n", nsName, c.Name, strings.TrimPrefix(c.ContainerID, "containerd://"), what)
	}
	if p.Status.StartTime == nil {
		return
	}
	start := p.Status.StartTime.Time
	sandbox := condTime(p, corev1.PodReadyToStartContainers)
	var running time.Time
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running != nil && c.State.Running.StartedAt.After(running) {
			running = c.State.Running.StartedAt.Time
		}
	}
	since := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.0fs", t.Sub(start).Seconds())
	}
	fmt.Printf("NODE-TIME %s phase=%s sandbox-ready=%s running=%s (kubelet status, second resolution)\n", nsName, p.Status.Phase, since(sandbox), since(running))
}
