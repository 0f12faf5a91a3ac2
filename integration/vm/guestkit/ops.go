package guestkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// OpsBinary is the operator binary in the guest (scripts/vm/initramfs.sh
// puts it beside the test binaries).
const OpsBinary = "/usr/local/bin/rdma-chain-ops"

// OpsRun is one run of the operator binary: what it printed and how it
// exited. Its output is its interface, so a check reads it as a person
// would (Has), or decodes the JSON it printed.
type OpsRun struct {
	Label          string
	Args           []string
	Stdout, Stderr string
	Code           int   // exit status; -1 when it did not exit (Err)
	Err            error // it did not start, or was killed
	output         string
}

// RunOps runs the operator binary with args (env holds variables added
// to this process's) and logs the command, its exit status and each line
// of its output, prefixed with label, as lines of t's own log; go_checks
// prints the top test's log lines as the scenario's RC-INFO lines.
func RunOps(t *testing.T, label string, env []string, args ...string) OpsRun {
	t.Helper()
	return RunOpsVia(t, label, nil, env, args...)
}

// RunOpsVia is RunOps with the operator binary started by a wrapper: via
// is the wrapper's command line, which the binary and args end.
func RunOpsVia(t *testing.T, label string, via, env []string, args ...string) OpsRun {
	t.Helper()
	r := runOps(label, via, env, args)
	t.Logf("%s: $ %s(exit %d)", label, r.commandLine(env), r.Code)
	if out := strings.TrimRight(r.Output(), "\n"); out != "" {
		for _, l := range strings.Split(out, "\n") {
			t.Logf("%s: %s", label, l)
		}
	}
	return r
}

// RunOpsQuiet is RunOps logging the output on one line, JSON compacted:
// for the --json twin of a run whose text is logged.
func RunOpsQuiet(t *testing.T, label string, env []string, args ...string) OpsRun {
	t.Helper()
	return RunOpsQuietVia(t, label, nil, env, args...)
}

// RunOpsQuietVia is RunOpsQuiet through a wrapper, as RunOpsVia.
func RunOpsQuietVia(t *testing.T, label string, via, env []string, args ...string) OpsRun {
	t.Helper()
	r := runOps(label, via, env, args)
	var b bytes.Buffer
	out := r.Stdout
	if json.Compact(&b, []byte(out)) == nil {
		out = b.String()
	}
	t.Logf("%s: $ %s(exit %d): %s %s", label, r.commandLine(env), r.Code, out, strings.TrimSpace(r.Stderr))
	return r
}

func runOps(label string, via, env, args []string) OpsRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append(slices.Clone(via), OpsBinary), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	both := &LockedBuffer{}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&stdout, both), io.MultiWriter(&stderr, both)
	err := cmd.Run()
	r := OpsRun{Label: label, Args: args, Stdout: stdout.String(), Stderr: stderr.String(), output: both.String(), Code: -1}
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.Code = 0
	case errors.As(err, &ee) && ee.Exited():
		r.Code = ee.ExitCode()
	default:
		r.Err = fmt.Errorf("%s: %w", r.Command(), err)
	}
	return r
}

func (r OpsRun) commandLine(env []string) string {
	return strings.Join(append(slices.Clone(env), r.Command()), " ") + " "
}

// Command is the command line, for messages.
func (r OpsRun) Command() string {
	return strings.Join(append([]string{"rdma-chain-ops"}, r.Args...), " ")
}

// Output is what the run printed on stdout and stderr, in the order it
// wrote it (reconcile's log on stdout, the plugin's DELs' on stderr).
func (r OpsRun) Output() string { return r.output }

// LockedBuffer is a process's output, written by its copiers and read
// while it runs.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Exit checks that the run exited with code.
func (r OpsRun) Exit(code int) error {
	if r.Err != nil {
		return r.Err
	}
	if r.Code != code {
		return fmt.Errorf("%s exited %d, want %d: %s", r.Command(), r.Code, code, r.Output())
	}
	return nil
}

// Has checks that the run's output contains every text.
func (r OpsRun) Has(texts ...string) error {
	if r.Err != nil {
		return r.Err
	}
	for _, s := range texts {
		if !strings.Contains(r.Output(), s) {
			return fmt.Errorf("output of %s lacks %q", r.Command(), s)
		}
	}
	return nil
}

// Lacks checks that the run's output contains none of texts.
func (r OpsRun) Lacks(texts ...string) error {
	if r.Err != nil {
		return r.Err
	}
	for _, s := range texts {
		if strings.Contains(r.Output(), s) {
			return fmt.Errorf("output of %s has %q", r.Command(), s)
		}
	}
	return nil
}

// OpsDaemon is the operator binary running in the background
// (reconcile --interval), as the DaemonSet's container runs it, its
// stdout and stderr in a file.
type OpsDaemon struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed once it exited; err is then its exit
	err    error
}

// StartOps starts the operator binary with args (env added to this
// process's) in the background, writing to logPath; when t ends it is
// killed if it still runs.
func StartOps(t *testing.T, logPath string, env []string, args ...string) (*OpsDaemon, error) {
	return StartCommand(t, logPath, env, OpsBinary, args...)
}

// StartCommand is StartOps for a command that runs the operator binary in
// the end (exec'd by a wrapper such as unshare and a shell).
func StartCommand(t *testing.T, logPath string, env []string, name string, args ...string) (*OpsDaemon, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rdma-chain-ops %s: %w", strings.Join(args, " "), err)
	}
	d := &OpsDaemon{cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = cmd.Process.Kill()
			<-d.exited
		}
	})
	return d, nil
}

// Pid is its process id (the operator binary's, once a wrapper has exec'd
// it).
func (d *OpsDaemon) Pid() int { return d.cmd.Process.Pid }

// Log is what it has printed so far.
func (d *OpsDaemon) Log() string {
	b, err := os.ReadFile(d.log)
	if err != nil {
		return fmt.Sprintf("(its log %s: %v)", d.log, err)
	}
	return string(b)
}

// Stop sends SIGTERM and waits up to timeout for it to exit: nil when it
// exited with status 0.
func (d *OpsDaemon) Stop(timeout time.Duration) error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM to rdma-chain-ops (pid %d): %w", d.cmd.Process.Pid, err)
	}
	select {
	case <-d.exited:
		if d.err != nil {
			return fmt.Errorf("rdma-chain-ops after SIGTERM: %w", d.err)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("rdma-chain-ops (pid %d) still runs %s after SIGTERM", d.cmd.Process.Pid, timeout)
	}
}

// LogRecord is one line of slog's text format (the plugin's, reconcile's
// and the DRA driver's logs): each key=value, values unquoted.
type LogRecord map[string]string

// LogRecords parses every line of out that is a log record with a msg;
// other lines are left out.
func LogRecords(out string) []LogRecord {
	var recs []LogRecord
	for _, line := range strings.Split(out, "\n") {
		if rec, ok := parseRecord(line); ok {
			recs = append(recs, rec)
		}
	}
	return recs
}

// parseRecord reads one line of slog.TextHandler's output: bare keys,
// values quoted (strconv.Quote) where they need it.
func parseRecord(line string) (LogRecord, bool) {
	rec := LogRecord{}
	for s := strings.TrimSpace(line); s != ""; s = strings.TrimLeft(s, " ") {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || k == "" || strings.ContainsAny(k, ` "`) {
			return nil, false
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, false
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		rec[k] = v
		s = rest
	}
	_, hasMsg := rec["msg"]
	return rec, hasMsg
}

// FindRecord is the first record of recs with msg whose fields include
// every key of want with its value.
func FindRecord(recs []LogRecord, msg string, want map[string]string) (LogRecord, error) {
	var same []string
	for _, r := range recs {
		if r["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && r[k] == v
		}
		if ok {
			return r, nil
		}
		same = append(same, fmt.Sprint(map[string]string(r)))
	}
	return nil, fmt.Errorf("no log record msg=%q with %v; records with that msg: %q", msg, want, same)
}

// Sample is one sample of a scrape, as the Prometheus text format names
// it (a histogram's are NAME_count, NAME_sum and NAME_bucket{le}).
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is one GET of a /metrics endpoint, parsed with the Prometheus
// text parser.
type Scrape struct {
	ContentType string
	Families    int
	Samples     []Sample
}

// ScrapeMetrics fetches url and parses it as the Prometheus text format.
func ScrapeMetrics(url string) (Scrape, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return Scrape{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Scrape{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return Scrape{}, fmt.Errorf("parse %s: %w", url, err)
	}
	s := Scrape{ContentType: resp.Header.Get("Content-Type"), Families: len(fams)}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			s.Samples = append(s.Samples, samples(name, f.GetType(), m)...)
		}
	}
	slices.SortFunc(s.Samples, func(a, b Sample) int { return strings.Compare(a.String(), b.String()) })
	return s, nil
}

func samples(name string, typ dto.MetricType, m *dto.Metric) []Sample {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	switch typ {
	case dto.MetricType_COUNTER:
		return []Sample{{name, labels, m.GetCounter().GetValue()}}
	case dto.MetricType_GAUGE:
		return []Sample{{name, labels, m.GetGauge().GetValue()}}
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out := []Sample{{name + "_count", labels, float64(h.GetSampleCount())}, {name + "_sum", labels, h.GetSampleSum()}}
		for _, b := range h.GetBucket() {
			le := maps(labels, "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
			out = append(out, Sample{name + "_bucket", le, float64(b.GetCumulativeCount())})
		}
		return out
	default:
		return []Sample{{name, labels, m.GetUntyped().GetValue()}}
	}
}

// maps is m with k set to v, m unchanged.
func maps(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for mk, mv := range m {
		out[mk] = mv
	}
	return out
}

// String is the sample as the text format has it, labels sorted.
func (s Sample) String() string { return fmt.Sprintf("%s %g", s.Series(), s.Value) }

// Series is the sample's name and labels, sorted.
func (s Sample) Series() string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	kv := make([]string, 0, len(keys))
	for _, k := range keys {
		kv = append(kv, fmt.Sprintf("%s=%q", k, s.Labels[k]))
	}
	if len(kv) == 0 {
		return s.Name
	}
	return s.Name + "{" + strings.Join(kv, ",") + "}"
}

// Find is the samples named name whose labels include every one of
// labels.
func (s Scrape) Find(name string, labels map[string]string) []Sample {
	var out []Sample
	for _, x := range s.Samples {
		ok := x.Name == name
		for k, v := range labels {
			ok = ok && x.Labels[k] == v
		}
		if ok {
			out = append(out, x)
		}
	}
	return out
}

// Want checks that exactly one sample named name has labels (and maybe more), and
// its value is v.
func (s Scrape) Want(name string, labels map[string]string, v float64) error {
	got := s.Find(name, labels)
	what := Sample{Name: name, Labels: labels}.Series()
	switch {
	case len(got) == 0:
		return fmt.Errorf("no sample %s in the scrape", what)
	case len(got) > 1:
		return fmt.Errorf("%d samples %s, want one: %v", len(got), what, got)
	case got[0].Value != v:
		return fmt.Errorf("%s is %g, want %g", got[0].Series(), got[0].Value, v)
	}
	return nil
}

// Lines is every sample, one line each, and a summary line.
func (s Scrape) Lines() []string {
	out := make([]string, 0, len(s.Samples)+1)
	for _, x := range s.Samples {
		out = append(out, x.String())
	}
	return append(out, fmt.Sprintf("%d families, %d samples, content type %s", s.Families, len(s.Samples), s.ContentType))
}
