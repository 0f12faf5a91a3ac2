package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// metricsNamespace prefixes every metric name.
const metricsNamespace = "rdma_chain"

// Values of the trigger label: what started a pass or a repair.
const (
	TriggerInterval = "interval" // the --interval timer (and the first pass)
	TriggerEvent    = "event"    // an rtnetlink link event or an RDMA monitor event
)

// Values of the reason label of releases.
const (
	ReasonSandboxGone     = "sandbox_gone"      // CRI no longer lists the sandbox
	ReasonNetnsGone       = "netns_gone"        // the recorded netns path names no netns, or another one
	ReasonEarlierBoot     = "earlier_boot"      // made in an earlier boot: the pod died in the reboot
	ReasonSandboxNotReady = "sandbox_not_ready" // CRI lists the sandbox not ready, and its netns path names no netns
)

// Values of the reason label of attachments kept unverified.
const (
	UnverifiedNetnsUnseen     = "netns_unseen"     // the netns path names no netns in reconcile's mount view
	UnverifiedNetnsUnreadable = "netns_unreadable" // the netns path, or its identity, cannot be read
)

// Reconcile are what reconcile itself counts. They exist (and are
// counted) whether or not metrics are served.
type Reconcile struct {
	Passes          *prometheus.CounterVec
	Releases        *prometheus.CounterVec
	ReleaseFailures *prometheus.CounterVec
	Repairs         *prometheus.CounterVec
	RepairFailures  *prometheus.CounterVec
	RepairSeconds   prometheus.Histogram
	Events          *prometheus.CounterVec
	Watching        *prometheus.GaugeVec
	// ConflistRestores counts the entries --ensure-entry put back.
	ConflistRestores prometheus.Counter
	// ConflistRestoreBackoffs counts the restores that start a longer wait
	// before the next one (an agent keeps rewriting the conflist).
	ConflistRestoreBackoffs prometheus.Counter
	// CRIFailures counts the passes that could not list the sandboxes.
	CRIFailures prometheus.Counter
	// Stranded is, per network, the exclusive-mode attachments an ADD
	// found with their pod netns gone while the kernel kept their RDMA
	// device (record's strandedAt), as the last pass read them.
	Stranded *prometheus.GaugeVec
	// Unverified counts the attachments kept because CRI lists them and
	// their netns cannot be read, once per attachment and reason.
	Unverified *prometheus.CounterVec
	// Problems are the problems the last pass found (releases that
	// failed, things it could not read): what its log line says.
	Problems prometheus.Gauge
	// HookUnheld are the bpffs directories where reconcile should hold
	// the SMC socket hook's program and the last try failed.
	HookUnheld prometheus.Gauge
}

func NewReconcile() *Reconcile {
	ns := metricsNamespace
	return &Reconcile{
		Passes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reconcile_passes_total",
			Help: "Reconcile passes run, by what triggered them (interval: the timer; event: a link or RDMA event)."}, []string{"trigger"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reconcile_releases_total",
			Help: "Attachments released through the plugin's DEL because their pod is gone, by network and reason (sandbox_gone, netns_gone, sandbox_not_ready, earlier_boot)."},
			[]string{"network", "reason"}),
		ReleaseFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reconcile_release_failures_total",
			Help: "Releases whose DEL failed (the attachment is kept and retried next pass), by network."}, []string{"network"}),
		Repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "repairs_total",
			Help: "Exclusive-mode attachments repaired: the pod netns died without DEL, the kernel refunded the device, and the plugin's DEL restored it, by network and trigger."},
			[]string{"network", "trigger"}),
		RepairFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "repair_failures_total",
			Help: "Repairs whose DEL failed (retried on the next event or pass), by network."}, []string{"network"}),
		RepairSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "repair_duration_seconds",
			Help:    "Time from the event that triggered a repair to the end of the plugin's DEL that restored the device.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30}}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "events_total",
			Help: "Kernel events received, by source (rtnetlink: link events of the host netns; rdma: the RDMA netlink monitor)."}, []string{"source"}),
		Watching: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "event_source_up",
			Help: "1 while reconcile listens to the event source (rtnetlink, rdma), 0 when it cannot (the kernel has no RDMA monitor before Linux 6.11)."},
			[]string{"source"}),
		ConflistRestores: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "conflist_restores_total",
			Help: "Times reconcile --ensure-entry put the rdma-chain entry back into a conflist that had lost it (an agent rewrote the file)."}),
		ConflistRestoreBackoffs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "conflist_restore_backoffs_total",
			Help: "Times reconcile --ensure-entry put the rdma-chain entry back soon after the previous restore of the conflist and waits longer before the next (an agent keeps rewriting the file without it)."}),
		CRIFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "cri_failures_total",
			Help: "Reconcile passes that could not list the pod sandboxes through CRI (nothing was released in them)."}),
		Stranded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "stranded_attachments",
			Help: "Exclusive-mode attachments whose pod netns path is gone while the kernel keeps their RDMA device (a process holds the netns): the device stays held; as the last pass read the records, by network."},
			[]string{"network"}),
		Unverified: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reconcile_unverified_total",
			Help: "Attachments kept although reconcile could not read their netns while CRI lists their sandbox, counted once per attachment, by network and reason (netns_unseen, netns_unreadable)."},
			[]string{"network", "reason"}),
		Problems: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "reconcile_problems",
			Help: "Problems the last reconcile pass found: releases or repairs whose DEL failed, sandboxes or records it could not list, attachments it could not verify."}),
		HookUnheld: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "smc_socket_hook_unheld",
			Help: "bpffs directories where reconcile should hold the SMC socket hook's program attached (an entry's smcr.transparent uses the hook on this kernel) and its last try failed."}),
	}
}

// Collectors are the counters, to register.
func (m *Reconcile) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Passes, m.Releases, m.ReleaseFailures, m.Repairs, m.RepairFailures, m.RepairSeconds, m.Events, m.Watching, m.ConflistRestores, m.ConflistRestoreBackoffs, m.CRIFailures, m.Stranded, m.Unverified, m.Problems, m.HookUnheld}
}

// Options are reconcile's metrics flags.
type Options struct {
	Addr      string // --metrics-bind-address; "" serves nothing
	PodLabels bool   // --metrics-pod-labels
}

// NewRegistry registers reconcile's counters, the build info and the node
// collector.
func NewRegistry(version string, m *Reconcile, node *NodeCollector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "ops_build_info",
		Help: "Always 1; the version label is the rdma-chain-ops build.", ConstLabels: prometheus.Labels{"version": version}})
	build.Set(1)
	cs := append(m.Collectors(), build, node)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Serve listens on addr (so that a taken port fails the command at
// once) and serves /metrics from g until ctx ends: one collection at a
// time (a scrape enters every pod's netns and runs the hook binary),
// its result reused for CacheFor, with read, write and idle timeouts.
// With healthy, it also serves /healthz: 200, or 503 and healthy's error.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, healthy func() error, log *slog.Logger) error {
	ln, err := net.Listen(listenNetwork(addr), addr)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(&cachedGatherer{g: g, ttl: CacheFor},
		promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 20 * time.Second}))
	if healthy != nil {
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if err := healthy(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return nil
}

// CacheFor is how long one collection answers the scrapes that follow it.
const CacheFor = 2 * time.Second

// cachedGatherer runs one Gather at a time and hands its result to every
// scrape within ttl of it: concurrent scrapes wait for the one collection
// in progress instead of starting their own.
type cachedGatherer struct {
	g   prometheus.Gatherer
	ttl time.Duration

	mu   sync.Mutex
	at   time.Time
	fams []*dto.MetricFamily
	err  error
}

func (c *cachedGatherer) Gather() ([]*dto.MetricFamily, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= c.ttl {
		c.fams, c.err = c.g.Gather()
		c.at = time.Now()
	}
	return c.fams, c.err
}

// listenNetwork is the network that listens on exactly addr: tcp4 for an
// IPv4 address (0.0.0.0 with "tcp" would also listen on IPv6 [::], which
// an IPv4 firewall rule leaves open), tcp6 for an IPv6 one, tcp for a name.
func listenNetwork(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	switch {
	case err != nil || ip == nil:
		return "tcp"
	case ip.To4() != nil:
		return "tcp4"
	}
	return "tcp6"
}
