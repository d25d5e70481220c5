// Package simcluster is an in-memory stand-in for the parts of a Kubernetes
// cluster that nodesmith observes: Node objects that register, become Ready
// after a delay, get labelled/tainted, go NotReady and get deleted.
//
// It is a test and development tool. It models the Node lifecycle only; there
// is no scheduler, no pods and no API server. All methods are safe for
// concurrent use.
package simcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// ErrNotFound is returned (wrapped) by operations on a node that does not exist.
var ErrNotFound = errors.New("node not found")

// ErrClosed is returned by operations on a closed Cluster.
var ErrClosed = errors.New("cluster closed")

// Taint mirrors a Kubernetes node taint.
type Taint struct {
	Key    string
	Value  string
	Effect string // NoSchedule, PreferNoSchedule or NoExecute
}

// Node is a snapshot of a simulated Kubernetes Node. Values returned by the
// Cluster are deep copies; mutating them does not affect the cluster.
type Node struct {
	Name        string
	ProviderID  string
	Ready       bool
	Labels      map[string]string
	Annotations map[string]string
	Taints      []Taint
	CreatedAt   time.Time
}

func (n Node) clone() Node {
	n.Labels = maps.Clone(n.Labels)
	n.Annotations = maps.Clone(n.Annotations)
	n.Taints = slices.Clone(n.Taints)
	return n
}

// EventType says what happened to a node.
type EventType string

// Event types, named like the Kubernetes watch event types.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
)

// Event is one change to a node. For Deleted events Node holds the last state
// of the node before deletion.
type Event struct {
	Type EventType
	Node Node
}

// Options configures a Cluster. Start from DefaultOptions: the zero value
// is valid too, but means "nodes become Ready immediately".
type Options struct {
	// ReadyDelay is how long a newly registered node stays NotReady before
	// it turns Ready on its own (kubelet start-up, CNI, ...). 0 makes nodes
	// Ready as soon as they register; a negative value means never.
	ReadyDelay time.Duration
	// Logger receives debug logs of node transitions. Nil discards them.
	Logger *slog.Logger
}

// DefaultOptions returns the default configuration: a 1s ready delay.
func DefaultOptions() Options {
	return Options{ReadyDelay: time.Second}
}

// Cluster is a simulated set of Kubernetes nodes.
type Cluster struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	closed   bool
	done     chan struct{} // closed by Close
	nodes    map[string]*nodeState
	watchers map[*watcher]struct{}
	// wg tracks watcher pump goroutines so Close can wait for them.
	wg sync.WaitGroup
}

type nodeState struct {
	node Node
	// gen invalidates pending ready timers: every transition bumps it and a
	// timer only fires if the generation it captured is still current.
	gen   uint64
	timer *time.Timer
}

// New returns an empty cluster.
func New(opts Options) *Cluster {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cluster{
		opts:     opts,
		log:      log,
		done:     make(chan struct{}),
		nodes:    make(map[string]*nodeState),
		watchers: make(map[*watcher]struct{}),
	}
}

// Register adds a NotReady node, as kubelet does when it first starts, and
// schedules it to become Ready after Options.ReadyDelay. Registering a name
// that already exists re-registers it (as a re-joined machine would): the
// provider ID is updated and the node goes through NotReady -> Ready again,
// keeping its labels, annotations, taints and creation time.
func (c *Cluster) Register(name, providerID string) error {
	if name == "" {
		return errors.New("register node: empty name")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	st, exists := c.nodes[name]
	if !exists {
		st = &nodeState{node: Node{
			Name:        name,
			ProviderID:  providerID,
			Labels:      map[string]string{},
			Annotations: map[string]string{},
			CreatedAt:   time.Now(),
		}}
		c.nodes[name] = st
	} else {
		st.node.ProviderID = providerID
		st.node.Ready = false
	}
	c.stopTimerLocked(st)
	ev := Modified
	if !exists {
		ev = Added
	}
	c.log.Debug("node registered", "node", name, "providerID", providerID, "reregistered", exists)
	c.broadcastLocked(Event{Type: ev, Node: st.node.clone()})
	c.scheduleReadyLocked(st)
	return nil
}

// scheduleReadyLocked makes the node Ready after the configured delay.
func (c *Cluster) scheduleReadyLocked(st *nodeState) {
	switch d := c.opts.ReadyDelay; {
	case d < 0:
		return
	case d == 0:
		c.setReadyLocked(st, true)
	default:
		gen := st.gen
		name := st.node.Name
		st.timer = time.AfterFunc(d, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			cur, ok := c.nodes[name]
			if c.closed || !ok || cur != st || cur.gen != gen {
				return // superseded by a later transition
			}
			c.setReadyLocked(cur, true)
		})
	}
}

func (c *Cluster) stopTimerLocked(st *nodeState) {
	st.gen++
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
}

func (c *Cluster) setReadyLocked(st *nodeState, ready bool) {
	if st.node.Ready == ready {
		return
	}
	st.node.Ready = ready
	c.log.Debug("node readiness changed", "node", st.node.Name, "ready", ready)
	c.broadcastLocked(Event{Type: Modified, Node: st.node.clone()})
}

// SetReady forces the Ready condition of a node, cancelling any pending
// automatic transition to Ready.
func (c *Cluster) SetReady(name string, ready bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.lookupLocked(name)
	if err != nil {
		return fmt.Errorf("set ready: %w", err)
	}
	c.stopTimerLocked(st)
	c.setReadyLocked(st, ready)
	return nil
}

// MarkNotReadyIfProvider sets the node NotReady only if it still carries the
// given provider ID. It is what a cloud-side event (the VM behind the node
// died) does: it must not affect a node name that has meanwhile been reused
// by another machine. It reports whether the node was found and matched.
func (c *Cluster) MarkNotReadyIfProvider(name, providerID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.nodes[name]
	if c.closed || !ok || st.node.ProviderID != providerID {
		return false
	}
	c.stopTimerLocked(st)
	c.setReadyLocked(st, false)
	return true
}

// Patch merges labels and annotations into the node and applies taints: a
// taint replaces an existing one with the same key and effect, or is added.
// Nil arguments leave that part untouched. An empty value is a valid label
// or annotation value (as in Kubernetes); use RemoveLabels to delete keys.
func (c *Cluster) Patch(name string, labels, annotations map[string]string, taints []Taint) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.lookupLocked(name)
	if err != nil {
		return fmt.Errorf("patch: %w", err)
	}
	before := st.node.clone()
	maps.Copy(st.node.Labels, labels)
	maps.Copy(st.node.Annotations, annotations)
	for _, t := range taints {
		i := slices.IndexFunc(st.node.Taints, func(x Taint) bool { return x.Key == t.Key && x.Effect == t.Effect })
		if i >= 0 {
			st.node.Taints[i] = t
		} else {
			st.node.Taints = append(st.node.Taints, t)
		}
	}
	c.broadcastIfChangedLocked(before, st)
	return nil
}

// RemoveLabels deletes label keys from the node; missing keys are ignored.
func (c *Cluster) RemoveLabels(name string, keys ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.lookupLocked(name)
	if err != nil {
		return fmt.Errorf("remove labels: %w", err)
	}
	before := st.node.clone()
	for _, k := range keys {
		delete(st.node.Labels, k)
	}
	c.broadcastIfChangedLocked(before, st)
	return nil
}

// RemoveTaint deletes the taint with the given key and effect, if present.
func (c *Cluster) RemoveTaint(name, key, effect string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.lookupLocked(name)
	if err != nil {
		return fmt.Errorf("remove taint: %w", err)
	}
	before := st.node.clone()
	st.node.Taints = slices.DeleteFunc(st.node.Taints, func(t Taint) bool { return t.Key == key && t.Effect == effect })
	c.broadcastIfChangedLocked(before, st)
	return nil
}

func (c *Cluster) broadcastIfChangedLocked(before Node, st *nodeState) {
	after := st.node
	if maps.Equal(before.Labels, after.Labels) && maps.Equal(before.Annotations, after.Annotations) &&
		slices.Equal(before.Taints, after.Taints) {
		return
	}
	c.broadcastLocked(Event{Type: Modified, Node: after.clone()})
}

// Delete removes the node object.
func (c *Cluster) Delete(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.lookupLocked(name)
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	c.stopTimerLocked(st)
	delete(c.nodes, name)
	c.log.Debug("node deleted", "node", name)
	c.broadcastLocked(Event{Type: Deleted, Node: st.node.clone()})
	return nil
}

func (c *Cluster) lookupLocked(name string) (*nodeState, error) {
	if c.closed {
		return nil, ErrClosed
	}
	st, ok := c.nodes[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return st, nil
}

// Get returns a copy of the named node.
func (c *Cluster) Get(name string) (Node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.nodes[name]
	if !ok {
		return Node{}, false
	}
	return st.node.clone(), true
}

// List returns copies of all nodes, sorted by name.
func (c *Cluster) List() []Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listLocked()
}

func (c *Cluster) listLocked() []Node {
	out := make([]Node, 0, len(c.nodes))
	for _, st := range c.nodes {
		out = append(out, st.node.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// WaitFor blocks until the named node exists and satisfies cond (nil cond:
// just exists), or ctx ends. It is a convenience for tests built on Watch.
func (c *Cluster) WaitFor(ctx context.Context, name string, cond func(Node) bool) (Node, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var last *Node
	for ev := range c.Watch(ctx) {
		if ev.Node.Name != name {
			continue
		}
		if ev.Type == Deleted {
			last = nil
			continue
		}
		n := ev.Node
		last = &n
		if cond == nil || cond(n) {
			return n, nil
		}
	}
	if err := ctx.Err(); err != nil {
		if last != nil {
			return *last, fmt.Errorf("wait for node %q (last seen ready=%v): %w", name, last.Ready, err)
		}
		return Node{}, fmt.Errorf("wait for node %q (never seen): %w", name, err)
	}
	return Node{}, fmt.Errorf("wait for node %q: %w", name, ErrClosed)
}

// Close stops pending timers and ends all watches. Later mutations fail with
// ErrClosed; reads keep working.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.done)
	for _, st := range c.nodes {
		c.stopTimerLocked(st)
	}
	for w := range c.watchers {
		w.stop()
	}
	c.mu.Unlock()
	c.wg.Wait()
}
