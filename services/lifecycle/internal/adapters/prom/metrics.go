// Package prom exposes lifecycle's Prometheus metrics: an app.Observer for
// counters and histograms, and a collector that reads instance and group
// gauges from the App at scrape time.
package prom

import (
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/grpc/codes"

	libmetrics "github.com/nodesmith/nodesmith/libs/metrics"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

var _ app.Observer = (*Metrics)(nil)

// Metrics implements app.Observer.
type Metrics struct {
	transitions    *prometheus.CounterVec
	stateSeconds   *prometheus.HistogramVec
	creationFailed *prometheus.CounterVec
	ops            *prometheus.CounterVec
	published      *prometheus.CounterVec
	purged         prometheus.Counter
	orphans        prometheus.Counter
	orphansFound   prometheus.Counter
	vanished       prometheus.Counter
	configApplied  *prometheus.CounterVec
	replayed       prometheus.Counter
	spot           *spotMetrics
}

// New registers the metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_transitions_total",
			Help: "Instance state transitions, by from and to state and the reason (the event that caused it: cloud_created, hook_finished, tick for a deadline or retry, delete_requested, ...).",
		}, []string{"from", "to", "reason"}),
		stateSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodesmith_lifecycle_state_duration_seconds",
			Help:    "Time instances spent in a state before leaving it.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 4 * 3600, 24 * 3600},
		}, []string{"state"}),
		creationFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_creation_failures_total",
			Help: "Instances whose creation was given up, by group and CA error class (1 out of resources, 99 other).",
		}, []string{"group", "class"}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_operations_total",
			Help: "Lifecycle operations, by operation and outcome code.",
		}, []string{"op", "code"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_commands_published_total",
			Help: "Command publications, by kind and result (ok, error).",
		}, []string{"kind", "result"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_purged_records_total",
			Help: "Deleted instance records purged after the retention period.",
		}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_orphans_terminated_total",
			Help: "Tagged VMs without a live record that the reconciler terminated.",
		}),
		orphansFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_orphans_found_total",
			Help: "Tagged VMs without a live record found by the reconciler (older than the orphan grace).",
		}),
		vanished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_vanished_instances_total",
			Help: "Records closed by the reconciler because their VM was gone.",
		}),
		configApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_config_applied_total",
			Help: "Applications of the configuration file, by result (ok, error).",
		}, []string{"result"}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_replayed_requests_total",
			Help: "Repeated operation request ids answered with their first outcome instead of being applied again.",
		}),
	}
	// A host that runs the service again on the same registry (an
	// in-process restart) gets the already registered collectors back.
	m.transitions = libmetrics.Register(reg, m.transitions)
	m.stateSeconds = libmetrics.Register(reg, m.stateSeconds)
	m.creationFailed = libmetrics.Register(reg, m.creationFailed)
	m.ops = libmetrics.Register(reg, m.ops)
	m.published = libmetrics.Register(reg, m.published)
	m.purged = libmetrics.Register(reg, m.purged)
	m.orphans = libmetrics.Register(reg, m.orphans)
	m.orphansFound = libmetrics.Register(reg, m.orphansFound)
	m.vanished = libmetrics.Register(reg, m.vanished)
	m.configApplied = libmetrics.Register(reg, m.configApplied)
	m.replayed = libmetrics.Register(reg, m.replayed)
	m.spot = newSpotMetrics(reg)
	return m
}

// Transition implements app.Observer.
func (m *Metrics) Transition(_ string, mv domain.Move) {
	m.transitions.WithLabelValues(mv.From.String(), mv.To.String(), reasonLabel(mv.Cause)).Inc()
	if mv.From != domain.StateUnknown && mv.InState > 0 {
		m.stateSeconds.WithLabelValues(mv.From.String()).Observe(mv.InState.Seconds())
	}
}

// CreationFailed implements app.Observer.
func (m *Metrics) CreationFailed(group string, class int32) {
	m.creationFailed.WithLabelValues(group, strconv.Itoa(int(class))).Inc()
}

// Op implements app.Observer.
func (m *Metrics) Op(op string, code domain.Code) {
	// The gRPC spelling ("OK", "NotFound"), as the gateway's RPC metrics.
	m.ops.WithLabelValues(op, codes.Code(code).String()).Inc()
}

// Published implements app.Observer.
func (m *Metrics) Published(kind domain.CommandKind, err error) {
	r := "ok"
	if err != nil {
		r = "error"
	}
	m.published.WithLabelValues(kind.String(), r).Inc()
}

// Purged implements app.Observer.
func (m *Metrics) Purged(n int) { m.purged.Add(float64(n)) }

// Reconciled implements app.Observer.
func (m *Metrics) Reconciled(orphans, vanished int) {
	m.orphans.Add(float64(orphans))
	m.vanished.Add(float64(vanished))
}

// OrphansFound implements app.Observer.
func (m *Metrics) OrphansFound(n int) { m.orphansFound.Add(float64(n)) }

// reasonLabel turns a move's cause (an event name such as "NodeReady")
// into a label value ("node_ready"); causes are a closed set, so the label
// is bounded.
func reasonLabel(cause string) string {
	if cause == "" {
		return "unknown"
	}
	var b strings.Builder
	for i, r := range cause {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ConfigApplied implements app.Observer.
func (m *Metrics) ConfigApplied(err error) {
	r := "ok"
	if err != nil {
		r = "error"
	}
	m.configApplied.WithLabelValues(r).Inc()
}

// Collector reports per-group gauges from a snapshot taken at scrape time.
type Collector struct {
	stats     func() map[string]app.GroupStats
	instances *prometheus.Desc
	target    *prometheus.Desc
	minSize   *prometheus.Desc
	maxSize   *prometheus.Desc
	failed    *prometheus.Desc
	nodes     *prometheus.Desc
	overdue   *prometheus.Desc
}

// NewCollector returns a collector over stats (usually (*app.App).Stats).
func NewCollector(stats func() map[string]app.GroupStats) *Collector {
	return &Collector{
		stats:     stats,
		instances: prometheus.NewDesc("nodesmith_lifecycle_instances", "Instances per group and state.", []string{"group", "state"}, nil),
		target:    prometheus.NewDesc("nodesmith_lifecycle_group_target_size", "Target size per group.", []string{"group"}, nil),
		minSize:   prometheus.NewDesc("nodesmith_lifecycle_group_min_size", "Min size per group.", []string{"group"}, nil),
		maxSize:   prometheus.NewDesc("nodesmith_lifecycle_group_max_size", "Max size per group.", []string{"group"}, nil),
		failed:    prometheus.NewDesc("nodesmith_lifecycle_creation_failed_instances", "Live instances whose creation failed, per group.", []string{"group"}, nil),
		overdue: prometheus.NewDesc("nodesmith_lifecycle_instances_past_deadline",
			"Instances whose wait in a state timed out and was not yet acted on, per group and state; above zero for long means stuck.",
			[]string{"group", "state"}, nil),
		nodes: prometheus.NewDesc("nodesmith_lifecycle_group_nodes", "Live instances per group: the nodes Cluster Autoscaler sees in the group, whatever their state.", []string{"group"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.instances, c.target, c.minSize, c.maxSize, c.failed, c.nodes, c.overdue} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for group, s := range c.stats() {
		for _, st := range domain.States {
			ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(s.ByState[st]), group, st.String())
			ch <- prometheus.MustNewConstMetric(c.overdue, prometheus.GaugeValue, float64(s.PastDeadline[st]), group, st.String())
		}
		ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, float64(s.Target), group)
		ch <- prometheus.MustNewConstMetric(c.minSize, prometheus.GaugeValue, float64(s.Min), group)
		ch <- prometheus.MustNewConstMetric(c.maxSize, prometheus.GaugeValue, float64(s.Max), group)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, float64(s.CreationFailed), group)
		ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(s.Live), group)
	}
}

// OrphanCollector reports what the orphan reconciler holds back, read from
// the App at scrape time.
type OrphanCollector struct {
	held     func() (app.OrphanStatus, bool)
	heldBack *prometheus.Desc
}

// NewOrphanCollector returns a collector over held (usually
// (*app.App).HeldOrphans).
func NewOrphanCollector(held func() (app.OrphanStatus, bool)) *OrphanCollector {
	return &OrphanCollector{
		held: held,
		heldBack: prometheus.NewDesc("nodesmith_lifecycle_orphans_held_back",
			"Tagged VMs without a record that the reconciler's latest comparisons did not terminate, by reason: "+
				"empty_start (the start-up hold after a start with no instance records), implausible (more than half of "+
				"the tagged VMs: state loss or a cluster id shared with another cluster), cap (over --max-orphan-terminations; "+
				"later passes terminate them). 0 on a replica that does not lead.",
			[]string{"reason"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *OrphanCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.heldBack }

// Collect implements prometheus.Collector.
func (c *OrphanCollector) Collect(ch chan<- prometheus.Metric) {
	s, _ := c.held()
	for _, r := range app.HeldReasons {
		ch <- prometheus.MustNewConstMetric(c.heldBack, prometheus.GaugeValue, float64(s.Held[r]), r)
	}
}

// Replayed implements app.Observer.
func (m *Metrics) Replayed() { m.replayed.Inc() }

// ServiceMetrics are the service's metrics outside the App: leadership and
// Kubernetes Events.
type ServiceMetrics struct {
	leading       prometheus.Gauge
	eventsDropped prometheus.Counter
}

// NewServiceMetrics registers them on reg.
func NewServiceMetrics(reg prometheus.Registerer) *ServiceMetrics {
	return &ServiceMetrics{
		leading: libmetrics.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodesmith_lifecycle_leader",
			Help: "1 while this process leads (writes state and drives work), else 0.",
		})),
		eventsDropped: libmetrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_kube_events_dropped_total",
			Help: "Notices not recorded as Kubernetes Events because of the rate limit.",
		})),
	}
}

// SetLeading records whether this process leads.
func (m *ServiceMetrics) SetLeading(v bool) {
	if v {
		m.leading.Set(1)
	} else {
		m.leading.Set(0)
	}
}

// EventDropped counts a dropped notice.
func (m *ServiceMetrics) EventDropped() { m.eventsDropped.Inc() }
