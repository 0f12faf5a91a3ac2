package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/rdmares"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// UsageCollector exports, at scrape time, the RDMA objects (QPs, CQs,
// MRs, PDs) and registered MR bytes of each attached pod's processes per
// device, from the RDMA core's resource tracking: an object is a pod's
// when its owner is in the cgroup kubelet named after the UID of the
// pod's record. Series exist only for attachments whose record is there
// and whose netns lives, so they go with DEL; without
// --metrics-pod-labels they are summed per device.
type UsageCollector struct {
	k         rdmares.Reader
	networks  func() []conflist.Network
	podLabels bool

	objects, mrBytes, unattributed, errors *prometheus.Desc
}

// NewUsageCollector reads the node through k and the records of
// networks().
func NewUsageCollector(k rdmares.Reader, networks func() []conflist.Network, podLabels bool) *UsageCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, labels, nil)
	}
	pod := []string{}
	if podLabels {
		pod = []string{"namespace", "pod"}
	}
	return &UsageCollector{
		k: k, networks: networks, podLabels: podLabels,
		objects: d("pod_rdma_objects", "RDMA objects (type qp, cq, mr, pd) the processes of attached pods hold, by device, from the RDMA core's resource tracking.",
			append([]string{"device", "type"}, pod...)...),
		mrBytes: d("pod_rdma_mr_bytes", "Bytes the processes of attached pods have registered as RDMA memory regions, by device.",
			append([]string{"device"}, pod...)...),
		unattributed: d("rdma_objects_unattributed", "Tracked RDMA objects of no attached pod, by device, type and reason (kernel, no_pid, unreadable, no_pod, other_pod).",
			"device", "type", "reason"),
		errors: d("usage_collect_errors", "Reads of this scrape's RDMA usage that failed: the netns mode, records, resource dumps, pods' netns."),
	}
}

func (c *UsageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.objects, c.mrBytes, c.unattributed, c.errors} {
		ch <- d
	}
}

// usageKey is one series set: a device, and the pod when pods are labels.
type usageKey struct{ device, namespace, pod string }

func (c *UsageCollector) Collect(ch chan<- prometheus.Metric) {
	recs, errs := c.records()
	rep := rdmares.ReadPods(c.k, recs, chain.HoldsDevice)
	sums := map[usageKey]*rdmares.Usage{}
	for _, p := range rep.Pods {
		k := usageKey{}
		if c.podLabels {
			k.namespace, k.pod = p.Record.Pod.Namespace, p.Record.Pod.Name
		}
		for dev, u := range p.Usage {
			k.device = dev
			addUsage(sums, k, u)
		}
	}
	for k, u := range sums {
		pod := []string{}
		if c.podLabels {
			pod = []string{k.namespace, k.pod}
		}
		for _, kind := range rdmares.Kinds {
			ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(u.Count(kind)), append([]string{k.device, string(kind)}, pod...)...)
		}
		ch <- prometheus.MustNewConstMetric(c.mrBytes, prometheus.GaugeValue, float64(u.MRBytes), append([]string{k.device}, pod...)...)
	}
	for k, n := range rep.Unattributed {
		ch <- prometheus.MustNewConstMetric(c.unattributed, prometheus.GaugeValue, float64(n), k.Device, string(k.Kind), k.Reason)
	}
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.GaugeValue, float64(errs+len(rep.Errors)))
}

func addUsage(sums map[usageKey]*rdmares.Usage, k usageKey, u rdmares.Usage) {
	s := sums[k]
	if s == nil {
		s = &rdmares.Usage{}
		sums[k] = s
	}
	s.QP, s.CQ, s.MR, s.PD = s.QP+u.QP, s.CQ+u.CQ, s.MR+u.MR, s.PD+u.PD
	s.MRBytes += u.MRBytes
}

// records lists the records of the configured networks, and how many
// state directories could not be listed.
func (c *UsageCollector) records() ([]*state.Record, int) {
	var out []*state.Record
	errs := 0
	for dir, names := range dataDirs(c.networks()) {
		recs, err := state.New(dir).List()
		if err != nil {
			errs++
		}
		for _, r := range recs {
			if names[r.Network] {
				out = append(out, r)
			}
		}
	}
	return out, errs
}
