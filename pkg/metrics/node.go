package metrics

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdma-chain/rdma-chain/pkg/chain"
	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/conflist"
	"github.com/rdma-chain/rdma-chain/pkg/netnsid"
	"github.com/rdma-chain/rdma-chain/pkg/rdma"
	"github.com/rdma-chain/rdma-chain/pkg/smc"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookcmd"
	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
	"github.com/rdma-chain/rdma-chain/pkg/state"
)

// StatsReader is what the node collector reads at scrape time: the
// kernel's in production, a fake in unit tests. An empty nsPath is the
// calling (host) netns.
type StatsReader interface {
	NetnsMode() (rdma.Mode, error)
	PortStats(nsPath string) ([]rdma.PortStats, error)
	Pnet(nsPath string) ([]smc.PnetEntry, error)
	Fallbacks(nsPath string) (smc.FallbackReport, error)
	SocketHook() (hookmap.Status, error)
	// SMCOffer is smc.Detect with the hook's pins under config.DefaultBPFFSDir.
	SMCOffer() smc.Offer
	// NetnsGone is state.Record.NetnsGone on the kernel.
	NetnsGone(rec *state.Record) (bool, error)
}

// collectSources are the values of the collect_errors source label.
var collectSources = []string{"rdma", "records", "outcomes", "smc", "socket_hook", "pods"}

// NodeCollector reads the node at scrape time: RDMA ports and counters (in
// the host netns, and in exclusive mode in each pod netns that holds a
// device), the attachment records, the outcome logs, SMC-R tables and
// fallbacks, and the socket hook. Label values are device, port, counter
// and network names and fixed words: their number is bounded by the
// node's devices and configured networks. Pods are named only with
// --metrics-pod-labels.
type NodeCollector struct {
	k         StatsReader
	networks  func() []conflist.Network
	outcomes  *OutcomeTail
	podLabels bool

	mode, attachments, outcomeCount, portInfo, portCounters, hwCounters      *prometheus.Desc
	pnetEntries, fallbacks, hookAttached, hookHeld, hookNetns, collectErrors *prometheus.Desc
	transparent, portRate, gidsUsed, gidsSize, devicePresent                 *prometheus.Desc

	// devices are the RDMA devices scrapes have seen or records name:
	// a device among them that a scrape does not see is gone.
	devMu   sync.Mutex
	devices map[string]bool

	offerMu sync.Mutex
	offer   smc.Offer
	offerAt time.Time
}

// offerMaxAge is how long a scrape reuses the kernel's SMC offer: probing
// runs the hook binary, which parses the kernel's BTF.
const offerMaxAge = time.Minute

func (c *NodeCollector) smcOffer() smc.Offer {
	c.offerMu.Lock()
	defer c.offerMu.Unlock()
	if c.offerAt.IsZero() || time.Since(c.offerAt) >= offerMaxAge {
		c.offer, c.offerAt = c.k.SMCOffer(), time.Now()
	}
	return c.offer
}

// NewNodeCollector reads the node through k, the records of networks()
// and, when outcomes is not nil, the outcome logs.
func NewNodeCollector(k StatsReader, networks func() []conflist.Network, outcomes *OutcomeTail, podLabels bool) *NodeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, labels, nil)
	}
	pod := []string{}
	if podLabels {
		pod = []string{"namespace", "pod"}
	}
	return &NodeCollector{
		k: k, networks: networks, outcomes: outcomes, podLabels: podLabels, devices: map[string]bool{},
		mode: d("rdma_netns_mode", "Always 1; the mode label is the RDMA subsystem's netns mode (shared or exclusive).", "mode"),
		attachments: d("attachments", "Recorded attachments, by network, mode (shared, exclusive, pass-through) and RDMA device (none: no link; pod-rxe: the pods' own soft-RoCE devices of podSoftRoCE).",
			"network", "mode", "device"),
		outcomeCount: d("cni_outcomes_total", "CNI calls the plugin answered, from its outcome log, by network, verb and CNI error code (0: success), counted from the start of this process.",
			"network", "verb", "code"),
		portInfo: d("rdma_port_info", "Always 1 per RDMA port; labels: its state and physical state as sysfs names them, and the netns holding the device (host or pod).",
			append([]string{"device", "port", "netns", "state", "phys_state"}, pod...)...),
		portCounters: d("rdma_port_counters_total", "The port's counters (sysfs ports/N/counters), by counter file name, wherever the device is.",
			"device", "port", "counter"),
		hwCounters: d("rdma_port_hw_counters_total", "The port's driver counters (sysfs ports/N/hw_counters, without lifespan), by counter file name, wherever the device is.",
			"device", "port", "counter"),
		portRate: d("rdma_port_rate_bytes_per_second", "The port's rate (sysfs ports/N/rate) in bytes per second, wherever the device is.",
			"device", "port"),
		gidsUsed: d("rdma_port_gids_used", "Rows of the port's GID table (sysfs ports/N/gids) holding a GID, wherever the device is.",
			"device", "port"),
		gidsSize: d("rdma_port_gids_size", "Rows of the port's GID table (sysfs ports/N/gids), wherever the device is.",
			"device", "port"),
		devicePresent: d("rdma_device_present", "1 when the RDMA device is seen (in the host netns, or in exclusive mode in the pod netns holding it), 0 when a device seen before or named by an attachment is not.",
			"device"),
		pnetEntries: d("smc_pnet_entries", "Entries of the host netns's SMC-R pnet table."),
		fallbacks: d("smc_pod_fallbacks", "SMC connections that fell back to TCP in the netns of live SMC-R pods, summed over those pods, by side (client, server) and SMC decline reason code.",
			append([]string{"side", "reason"}, pod...)...),
		hookAttached: d("smc_socket_hook_attached", "1 when the transparent-SMC socket hook's program is attached."),
		hookHeld:     d("smc_socket_hook_held", "1 when the reconcile daemon holds the socket hook's program attached between SMC-R pods."),
		hookNetns:    d("smc_socket_hook_netns", "Pod netns the transparent-SMC socket hook lists."),
		transparent: d("smc_transparent_info", "Always 1; mechanism is how SMC-R pods' TCP sockets become SMC sockets under smcr.transparent auto on this node (tcp2smc, socket_hook, none, no_smc), offer what the kernel offers (docs/kernels.md).",
			"mechanism", "offer"),
		collectErrors: d("collect_errors", "Things this scrape could not read, by source (rdma, records, outcomes, smc, socket_hook, pods); the reconcile log does not repeat them.", "source"),
	}
}

func (c *NodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.mode, c.attachments, c.outcomeCount, c.portInfo, c.portCounters, c.hwCounters,
		c.pnetEntries, c.fallbacks, c.hookAttached, c.hookHeld, c.hookNetns, c.transparent, c.collectErrors,
		c.portRate, c.gidsUsed, c.gidsSize, c.devicePresent} {
		ch <- d
	}
}

// scrape is one Collect's state.
type scrape struct {
	c      *NodeCollector
	ch     chan<- prometheus.Metric
	errors map[string]int
}

func (s *scrape) gauge(d *prometheus.Desc, v float64, labels ...string) {
	s.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (s *scrape) counter(d *prometheus.Desc, v float64, labels ...string) {
	s.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func (c *NodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := &scrape{c: c, ch: ch, errors: map[string]int{}}
	nets := c.networks()
	recs := s.records(nets)
	s.rdma(recs)
	s.outcomes(nets)
	s.smc(recs)
	for _, src := range collectSources {
		s.gauge(c.collectErrors, float64(s.errors[src]), src)
	}
}

// records lists the records of the configured networks (once per data
// directory) and exports their count.
func (s *scrape) records(nets []conflist.Network) []*state.Record {
	type key struct{ network, mode, device string }
	counts := map[key]int{}
	var out []*state.Record
	for dir, names := range dataDirs(nets) {
		recs, err := state.New(dir).List()
		if err != nil {
			s.errors["records"]++
		}
		for _, r := range recs {
			network := r.Network
			if !names[network] {
				continue
			}
			out = append(out, r)
			mode := r.ModeName()
			devs := map[string]bool{}
			for _, l := range r.Links {
				devs[deviceLabel(l)] = true
			}
			if len(devs) == 0 {
				devs["none"] = true
			}
			for dev := range devs {
				counts[key{network, mode, dev}]++
			}
		}
	}
	for k, n := range counts {
		s.gauge(s.c.attachments, float64(n), k.network, k.mode, k.device)
	}
	return out
}

// SoftRoCELabel is the attachments gauge's device for a pod's own rxe
// device (podSoftRoCE): one series per network, not one per pod.
const SoftRoCELabel = "pod-rxe"

// deviceLabel is the attachments gauge's device for link l.
func deviceLabel(l state.Link) string {
	if l.SoftRoCE {
		return SoftRoCELabel
	}
	return l.Device
}

// dataDirs maps each state directory to the networks recorded in it.
func dataDirs(nets []conflist.Network) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, n := range nets {
		if out[n.DataDir] == nil {
			out[n.DataDir] = map[string]bool{}
		}
		out[n.DataDir][n.Name] = true
	}
	return out
}

func (s *scrape) podLabels(r *state.Record) []string {
	if !s.c.podLabels {
		return nil
	}
	return []string{r.Pod.Namespace, r.Pod.Name}
}

// rdma exports the mode and the ports: the host's, then in exclusive mode
// those of each pod netns that holds a device.
// It then says which devices are present (devices).
func (s *scrape) rdma(recs []*state.Record) {
	mode, err := s.c.k.NetnsMode()
	if err != nil {
		s.errors["rdma"]++
	} else {
		s.gauge(s.c.mode, 1, string(mode))
	}
	seen, unsure := map[string]bool{}, map[string]bool{}
	host, err := s.c.k.PortStats("")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.errors["rdma"]++
		unsure["*"] = true
	}
	s.ports(host, "host", nil, seen)
	if mode == rdma.ModeExclusive {
		for _, r := range recs {
			if chain.HoldsDevice(r) && !s.podPorts(r, seen) {
				for _, l := range r.Links {
					unsure[l.Device] = true
				}
			}
		}
	}
	s.devices(recs, seen, unsure)
}

// podPorts exports the ports of the devices r's pod netns holds, and
// reports whether it could read them.
func (s *scrape) podPorts(r *state.Record, seen map[string]bool) bool {
	if gone, err := s.c.k.NetnsGone(r); err != nil || gone {
		return false // reconcile releases it
	}
	ports, err := s.c.k.PortStats(r.NetNS)
	if err != nil {
		s.errors["pods"]++
	}
	s.ports(ports, "pod", s.podLabels(r), seen)
	return err == nil
}

func (s *scrape) ports(ports []rdma.PortStats, where string, pod []string, seen map[string]bool) {
	source := "rdma"
	if where == "pod" {
		source = "pods"
	}
	for _, p := range ports {
		seen[p.Device] = true
		port := strconv.Itoa(p.Port)
		s.errors[source] += len(p.Errs)
		if p.Rate > 0 {
			s.gauge(s.c.portRate, p.Rate, p.Device, port)
		}
		if p.GIDs != nil {
			s.gauge(s.c.gidsUsed, float64(p.GIDs.Used), p.Device, port)
			s.gauge(s.c.gidsSize, float64(p.GIDs.Size), p.Device, port)
		}
		labels := append([]string{p.Device, port, where, p.State, p.PhysState}, pod...)
		if s.c.podLabels && pod == nil {
			labels = append(labels, "", "")
		}
		s.gauge(s.c.portInfo, 1, labels...)
		for name, v := range p.Counters {
			s.counter(s.c.portCounters, v, p.Device, port, name)
		}
		for name, v := range p.HWCounters {
			s.counter(s.c.hwCounters, v, p.Device, port, name)
		}
	}
}

// devices exports rdma_device_present for every device seen now, seen
// by an earlier scrape, or named by a record's link; unsure are devices
// whose netns could not be read ("*": the host's), said nothing of. A
// pod's own soft-RoCE device goes with its pod: it is never remembered.
func (s *scrape) devices(recs []*state.Record, seen, unsure map[string]bool) {
	s.c.devMu.Lock()
	defer s.c.devMu.Unlock()
	for d := range seen {
		s.c.devices[d] = true
	}
	var podOwn []string
	for _, r := range recs {
		for _, l := range r.Links {
			switch {
			case l.SoftRoCE:
				podOwn = append(podOwn, l.Device)
			case l.Device != "":
				s.c.devices[l.Device] = true
			}
		}
	}
	for _, d := range podOwn {
		delete(s.c.devices, d)
	}
	for d := range s.c.devices {
		switch {
		case seen[d]:
			s.gauge(s.c.devicePresent, 1, d)
		case !unsure[d] && !unsure["*"]:
			s.gauge(s.c.devicePresent, 0, d)
		}
	}
}

func (s *scrape) outcomes(nets []conflist.Network) {
	if s.c.outcomes == nil {
		return
	}
	counts, errs := s.c.outcomes.Poll(nets)
	s.errors["outcomes"] += errs
	for k, v := range counts {
		s.counter(s.c.outcomeCount, v, k.network, k.verb, k.code)
	}
}

// smc exports the host pnet table's size, the socket hook, and the
// fallbacks counted in SMC-R pods' netns.
func (s *scrape) smc(recs []*state.Record) {
	offer := s.c.smcOffer()
	s.gauge(s.c.transparent, 1, string(offer.Uses(config.TransparentAuto)), offer.String())
	pnet, err := s.c.k.Pnet("")
	if errors.Is(err, smc.ErrUnavailable) {
		return
	}
	if err != nil {
		s.errors["smc"]++
	} else {
		s.gauge(s.c.pnetEntries, float64(len(pnet)))
	}
	hook, err := s.c.k.SocketHook()
	switch {
	case errors.Is(err, hookcmd.ErrNotInstalled):
	case err != nil:
		s.errors["socket_hook"]++
	default:
		s.gauge(s.c.hookAttached, boolFloat(hook.Attached))
		s.gauge(s.c.hookHeld, boolFloat(hook.Held))
		s.gauge(s.c.hookNetns, float64(len(hook.Listed)))
	}
	type key struct{ side, reason, ns, pod string }
	sums := map[key]float64{}
	for _, r := range recs {
		if r.SMC == nil || r.NetNS == "" {
			continue
		}
		if gone, err := s.c.k.NetnsGone(r); err != nil || gone {
			continue
		}
		fb, err := s.c.k.Fallbacks(r.NetNS)
		if err != nil {
			s.errors["pods"]++
			continue
		}
		k := key{}
		if s.c.podLabels {
			k.ns, k.pod = r.Pod.Namespace, r.Pod.Name
		}
		for _, st := range fb.Reasons {
			k.side, k.reason = "client", fmt.Sprintf("0x%08x", st.Reason)
			if st.Server {
				k.side = "server"
			}
			sums[k] += float64(st.Count)
		}
	}
	for k, v := range sums {
		labels := []string{k.side, k.reason}
		if s.c.podLabels {
			labels = append(labels, k.ns, k.pod)
		}
		s.gauge(s.c.fallbacks, v, labels...)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// KernelStats is the StatsReader of the node the command runs on.
type KernelStats struct{ sys *rdma.System }

// NewKernelStats reads the kernel of the calling netns.
func NewKernelStats() KernelStats { return KernelStats{sys: rdma.New()} }

// NetnsMode is the RDMA subsystem's netns mode.
func (k KernelStats) NetnsMode() (rdma.Mode, error) { return k.sys.NetnsMode() }

// PortStats reads every port of every RDMA device sysfs shows in the netns
// at nsPath ("" the host's; a pod's through a sysfs mounted from inside it,
// as inspect --netns does).
func (k KernelStats) PortStats(nsPath string) ([]rdma.PortStats, error) {
	if nsPath == "" {
		return k.sys.PortStats()
	}
	return rdma.PortStatsIn(nsPath)
}

// Pnet dumps the SMC-R pnet table of the netns at nsPath.
func (KernelStats) Pnet(nsPath string) (list []smc.PnetEntry, err error) {
	err = smc.Do(nsPath, func(client *smc.Client) (err error) {
		list, err = client.PnetDump()
		return err
	})
	return list, err
}

// Fallbacks reads the SMC fallback statistics of the netns at nsPath.
func (KernelStats) Fallbacks(nsPath string) (r smc.FallbackReport, err error) {
	err = smc.Do(nsPath, func(client *smc.Client) (err error) {
		r, err = client.FallbackReport()
		return err
	})
	return r, err
}

// SocketHook reads the transparent-SMC hook's pins through the hook binary
// beside this one.
func (KernelStats) SocketHook() (hookmap.Status, error) {
	return hookcmd.Beside().State(config.DefaultBPFFSDir)
}

// SMCOffer is what the kernel offers for transparent SMC.
func (KernelStats) SMCOffer() smc.Offer {
	return smc.Detect(func() error { return hookcmd.Beside().Supported(config.DefaultBPFFSDir) })
}

// NetnsGone is rec.NetnsGone on the kernel.
func (KernelStats) NetnsGone(rec *state.Record) (bool, error) { return rec.NetnsGone(netnsid.Of) }
