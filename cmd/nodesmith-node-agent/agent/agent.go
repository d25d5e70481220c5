// Package agent is the nodesmith node agent: it polls the instance
// metadata service of the VM it runs on for a spot reclaim notice and, on
// one, taints and annotates its Node (libs/contract names) so lifecycle
// drains and replaces it before the VM disappears.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/metrics"
	"github.com/nodesmith/nodesmith/libs/run"
)

// markPolicy retries a failed Node patch within one poll: about 6 s in
// all, then the next poll that sees the notice tries again.
var markPolicy = backoff.Policy{Initial: 200 * time.Millisecond, Max: 3 * time.Second, Attempts: 6}

// apiTimeout bounds one Kubernetes API request.
const apiTimeout = 10 * time.Second

// Deps are what Run gets from its host; nil fields get defaults.
type Deps struct {
	command.Host
	// RESTConfig overrides --kubeconfig and the in-cluster configuration
	// (tests).
	RESTConfig *rest.Config
	// Ready, when set, is called once the health server listens, with its
	// address (tests).
	Ready func(addr string)
}

// Run runs the agent until ctx ends: the poll loop and the health server.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	deps.Host = deps.WithDefaults()
	restCfg := deps.RESTConfig
	if restCfg == nil {
		var err error
		if restCfg, err = loadRESTConfig(cfg.Kubeconfig); err != nil {
			return err
		}
	}
	restCfg = rest.CopyConfig(restCfg)
	restCfg.Timeout = apiTimeout
	restCfg.UserAgent = FieldManager
	client, err := corev1client.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	a, err := New(cfg, NewNodes(client.Nodes()), deps.Logger, deps.Registry)
	if err != nil {
		return err
	}
	defer a.Close()
	deps.Health.Add("metadata", a.Ready)

	l, err := run.Listen(cfg.HealthAddr)
	if err != nil {
		return fmt.Errorf("--health-addr: %w", err)
	}
	g, _ := run.NewGroup(ctx)
	srv := &http.Server{Handler: health.Handler(deps.Health, deps.Registry), ReadHeaderTimeout: 5 * time.Second}
	g.Go("health server", run.HTTP(srv, l, cfg.ShutdownGrace))
	g.Go("poll loop", a.Run)
	if deps.Ready != nil {
		deps.Ready(l.Addr().String())
	}
	deps.Logger.Info("node agent started", "node", cfg.NodeName, "source", a.source, "url", a.url, "interval", cfg.Interval, "health_addr", l.Addr().String())
	err = g.Wait()
	deps.Logger.Info("node agent stopped")
	return err
}

func loadRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster Kubernetes configuration (outside a pod, give --kubeconfig): %w", err)
	}
	return c, nil
}

// Agent polls the metadata URL and marks the Node on a notice.
type Agent struct {
	cfg    Config
	url    string
	source contract.SpotSource
	md     *Metadata
	nodes  *Nodes
	log    *slog.Logger
	now    func() time.Time

	polls       *prometheus.CounterVec
	marks       *prometheus.CounterVec
	termination prometheus.Gauge

	// Loop state (only Run's goroutine).
	markedFor  time.Time // the termination time the Node carries
	observedAt time.Time // when the current notice was first seen
	failures   int       // consecutive polls without a definite answer
	lastErr    string    // the last failure logged

	mu         sync.Mutex
	lastAnswer time.Time // last definite answer (404 or a notice)
}

// New returns an agent for cfg (validated) marking through nodes.
func New(cfg Config, nodes *Nodes, log *slog.Logger, reg prometheus.Registerer) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	url, source, _ := cfg.Source()
	if log == nil {
		log = slog.Default()
	}
	return &Agent{
		cfg: cfg, url: url, source: source,
		md: NewMetadata(url, cfg.RequestTimeout), nodes: nodes,
		log: log.With("node", cfg.NodeName), now: time.Now,
		polls: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_node_agent_polls_total",
			Help: "Polls of the spot termination-time URL by result: none (404), notice, invalid (an answer that is neither) or unreachable.",
		}, []string{"result"})),
		marks: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_node_agent_node_marks_total",
			Help: "Attempts to taint and annotate the Node on a notice by result: patched, unchanged (already marked) or failed (after retries).",
		}, []string{"result"})),
		termination: metrics.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodesmith_node_agent_termination_time_seconds",
			Help: "The announced spot termination time (Unix seconds); 0 while none is announced.",
		})),
	}, nil
}

// Close releases the metadata client's connections.
func (a *Agent) Close() { a.md.Close() }

// Run polls every interval until ctx ends; it returns nil then.
func (a *Agent) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		a.poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// readyWindowMin is the shortest readiness window: a few slow polls on a
// busy node do not flap readiness.
const readyWindowMin = 30 * time.Second

// Ready is the readiness check: the metadata service answered (404 or a
// notice) within the last three intervals (at least readyWindowMin).
func (a *Agent) Ready(context.Context) error {
	a.mu.Lock()
	last := a.lastAnswer
	a.mu.Unlock()
	if last.IsZero() {
		return errors.New("no answer from the metadata service yet")
	}
	if age := a.now().Sub(last); age > max(3*a.cfg.Interval+a.cfg.RequestTimeout, readyWindowMin) {
		return fmt.Errorf("no answer from the metadata service for %s", age.Truncate(time.Second))
	}
	return nil
}

func (a *Agent) poll(ctx context.Context) {
	notice, err := a.md.Poll(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		a.failures++
		result, msg := "unreachable", "metadata service unreachable"
		if errors.Is(err, ErrInvalidAnswer) {
			result, msg = "invalid", "ignoring an invalid metadata answer"
		}
		a.polls.WithLabelValues(result).Inc()
		// Each new failure, then a repeated one once a minute at the
		// default interval: a node whose metadata is down for hours logs
		// little.
		if e := err.Error(); e != a.lastErr || a.failures%12 == 1 {
			a.lastErr = e
			a.log.Warn(msg, "url", a.url, "err", err, "consecutive", a.failures)
		}
		return
	}
	if a.failures > 0 {
		a.log.Info("metadata service answers again", "after_failures", a.failures)
		a.failures, a.lastErr = 0, ""
	}
	a.mu.Lock()
	a.lastAnswer = a.now()
	a.mu.Unlock()
	if notice == nil {
		a.polls.WithLabelValues("none").Inc()
		if !a.markedFor.IsZero() {
			// Clouds do not withdraw a reclaim; the Node keeps its mark.
			a.log.Warn("the spot notice disappeared; the Node keeps its taint", "termination_time", a.markedFor)
			a.markedFor = time.Time{}
		}
		a.termination.Set(0)
		return
	}
	a.polls.WithLabelValues("notice").Inc()
	a.termination.Set(float64(notice.TerminationTime.Unix()))
	if notice.TerminationTime.Equal(a.markedFor) {
		return
	}
	if a.observedAt.IsZero() {
		a.observedAt = a.now()
		a.log.Warn("spot reclaim announced", "termination_time", notice.TerminationTime, "remaining", notice.TerminationTime.Sub(a.observedAt).Truncate(time.Second), "source", a.source)
	}
	a.mark(ctx, *notice)
}

func (a *Agent) mark(ctx context.Context, notice Notice) {
	var (
		changed  bool
		attempts int
	)
	err := backoff.Retry(ctx, markPolicy, func(err error) bool {
		ok := retryable(err) && attempts < markPolicy.Attempts
		if ok {
			a.log.Warn("marking the Node failed; retrying", "err", err, "attempt", attempts)
		}
		return ok
	}, func(ctx context.Context) error {
		attempts++
		var err error
		changed, err = a.nodes.Mark(ctx, a.cfg.NodeName, notice, a.source, a.observedAt)
		return err
	})
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		a.marks.WithLabelValues("failed").Inc()
		a.log.Error("marking the Node failed; the next poll tries again", "err", err, "retryable", retryable(err))
	case changed:
		a.markedFor = notice.TerminationTime
		a.marks.WithLabelValues("patched").Inc()
		a.log.Info("Node tainted and annotated for the spot reclaim", "taint", contract.TaintSpotInterruption, "termination_time", notice.TerminationTime)
	default:
		a.markedFor = notice.TerminationTime
		a.marks.WithLabelValues("unchanged").Inc()
		a.log.Info("Node already marked for this spot reclaim", "termination_time", notice.TerminationTime)
	}
}
