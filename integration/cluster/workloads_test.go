//go:build cluster

package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The contract a manifest of `make test-cluster PODS=DIR` meets
// (docs/install.md): annotations on each pod (a workload's pod template).
const (
	annExpect = "test.rdma-chain/expect" // rdma0, none or pending
	annNodes  = "test.rdma-chain/nodes"  // the workload's pods span at least N nodes
	annReason = "test.rdma-chain/reason" // pending: the scheduler's message holds this
)

// workload is one object of a manifest that makes pods, as the tier
// expects them.
type workload struct {
	kind, namespace, name string
	pods                  int    // how many pods it makes
	expect                string // rdma0, none or pending
	nodes                 int    // its pods span at least this many nodes (0: any)
	reason                string // pending: the PodScheduled message holds this
}

func (w workload) String() string { return w.kind + " " + w.namespace + "/" + w.name }

// k8sObject is what the tier reads of an object from `kubectl create
// --dry-run=client -o json`: a List of them or one.
type k8sObject struct {
	Kind     string      `json:"kind"`
	Items    []k8sObject `json:"items"`
	Metadata objectMeta  `json:"metadata"`
	Spec     struct {
		Replicas    *int `json:"replicas"`
		Parallelism *int `json:"parallelism"`
		Completions *int `json:"completions"`
		Template    *struct {
			Metadata objectMeta `json:"metadata"`
		} `json:"template"`
		JobTemplate json.RawMessage `json:"jobTemplate"`
	} `json:"spec"`
}

type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Annotations map[string]string `json:"annotations"`
}

// parseWorkloads reads the objects kubectl printed for one manifest file
// and returns those that make pods, each with its expectation. Objects
// that make no pods (claim templates, Services, ConfigMaps) are not
// workloads; kinds whose pod count depends on the cluster (DaemonSet,
// CronJob) are refused, as is an annotation the contract does not define.
func parseWorkloads(out []byte, nodeCount int) ([]workload, error) {
	// kubectl prints one JSON object per object of the file, one after the
	// other, or a List.
	var objs []k8sObject
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("kubectl's objects: %w", err)
		}
		if o.Kind == "List" {
			objs = append(objs, o.Items...)
		} else {
			objs = append(objs, o)
		}
	}
	var ws []workload
	for _, o := range objs {
		w := workload{kind: o.Kind, namespace: o.Metadata.Namespace, name: o.Metadata.Name}
		if w.namespace == "" {
			w.namespace = "default"
		}
		var ann map[string]string
		switch o.Kind {
		case "Pod":
			w.pods, ann = 1, o.Metadata.Annotations
		case "Deployment", "ReplicaSet", "StatefulSet":
			w.pods, ann = orDefault(o.Spec.Replicas, 1), templateAnnotations(o)
		case "Job":
			w.pods, ann = orDefault(o.Spec.Parallelism, 1), templateAnnotations(o)
			if c := o.Spec.Completions; c != nil && *c < w.pods {
				w.pods = *c
			}
		case "DaemonSet", "CronJob", "ReplicationController":
			return nil, fmt.Errorf("%s: kind %s is not one the tier runs (Pod, Deployment, ReplicaSet, StatefulSet, Job)", w, o.Kind)
		default:
			continue
		}
		if err := w.readAnnotations(ann, nodeCount); err != nil {
			return nil, fmt.Errorf("%s: %w", w, err)
		}
		ws = append(ws, w)
	}
	return ws, nil
}

func templateAnnotations(o k8sObject) map[string]string {
	if o.Spec.Template == nil {
		return nil
	}
	return o.Spec.Template.Metadata.Annotations
}

func orDefault(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// readAnnotations fills the expectation from the pod's annotations, strictly.
func (w *workload) readAnnotations(ann map[string]string, nodeCount int) error {
	for k, v := range ann {
		if !strings.HasPrefix(k, "test.rdma-chain/") {
			continue
		}
		switch k {
		case annExpect:
			if v != "rdma0" && v != "none" && v != "pending" {
				return fmt.Errorf("%s=%q: want rdma0, none or pending (refused, waits, rping, restarts and sandbox-dies are the node tier's: make test-node)", k, v)
			}
			w.expect = v
		case annNodes:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > nodeCount {
				return fmt.Errorf("%s=%q: want a number of nodes from 1 to %d", k, v, nodeCount)
			}
			w.nodes = n
		case annReason:
			w.reason = v
		default:
			return fmt.Errorf("annotation %s is not the cluster tier's (%s, %s, %s)", k, annExpect, annNodes, annReason)
		}
	}
	switch {
	case w.expect == "":
		return fmt.Errorf("no annotation %s on its pods", annExpect)
	case w.reason != "" && w.expect != "pending":
		return fmt.Errorf("%s is for pods that expect pending", annReason)
	case w.nodes > w.pods:
		return fmt.Errorf("%s=%d but it makes %d pods", annNodes, w.nodes, w.pods)
	case w.nodes > 0 && w.expect == "pending":
		return fmt.Errorf("%s with expect pending: a pending pod is on no node", annNodes)
	}
	return nil
}

// owns says whether pod (its namespace, name and controller) is one of w's.
func (w workload) owns(p *podItem) bool {
	if p.Metadata.Namespace != w.namespace {
		return false
	}
	ctl := p.controller()
	switch w.kind {
	case "Pod":
		return ctl == nil && p.Metadata.Name == w.name
	case "Deployment":
		// The Deployment's ReplicaSet is named after it and a template hash.
		return ctl != nil && ctl.Kind == "ReplicaSet" && strings.HasPrefix(ctl.Name, w.name+"-") &&
			!strings.Contains(strings.TrimPrefix(ctl.Name, w.name+"-"), "-")
	default:
		return ctl != nil && ctl.Kind == w.kind && ctl.Name == w.name
	}
}
