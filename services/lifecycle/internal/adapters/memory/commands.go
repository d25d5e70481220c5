package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Commands = (*Commands)(nil)

// Commands records published commands; FailNext makes publications fail.
//
// It also models the command stream as ports.Commands describes it (and
// adapters/commandstest checks against JetStream): Queued holds what the
// stream stores, each command once per identity (batch or instance set,
// and attempt; request id) however often it is published, bounded by
// SetLimit (ErrCommandQueueFull beyond it, nothing stored), until Drain
// plays the workers. The recorded lists (Creates, ...) stay the log of
// accepted publications, duplicates included, as the app's tests read it.
type Commands struct {
	mu         sync.Mutex
	Creates    []ports.CreateCommand
	Watches    []ports.WatchCommand
	Terminates []ports.TerminateCommand
	Hooks      []ports.HookCommand
	Inventory  []ports.InventoryRequest
	Tags       []ports.TagCommand
	// OnTag, when set, plays the cloud adapter for a recorded Tag command
	// (called without the lock held, after recording it).
	OnTag    func(ports.TagCommand)
	failNext []error
	// queue is what the stream holds, seen every identity it stored (the
	// deduplication window: the fake has no clock, so forever), limit
	// its capacity (0: unlimited).
	queue []QueuedCommand
	seen  map[string]bool
	limit int
}

// QueuedCommand is one command the modelled stream holds.
type QueuedCommand struct {
	// ID is the command's identity (as the stream's message id).
	ID string
	// Command is the ports command (CreateCommand, WatchCommand, ...).
	Command any
}

// SetLimit bounds the modelled stream to n commands (0: unlimited).
func (c *Commands) SetLimit(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = n
}

// Queued returns the commands the modelled stream holds, oldest first.
func (c *Commands) Queued() []QueuedCommand {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.queue)
}

// Drain plays the workers: it takes every queued command (their
// identities stay in the deduplication window) and returns how many.
func (c *Commands) Drain() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.queue)
	c.queue = nil
	return n
}

// publish is the common path of every command, called with c.mu held:
// a done context or an injected failure refuses it, a known identity is
// accepted without storing it again, a full queue refuses a new one.
func (c *Commands) publish(ctx context.Context, id string, cmd any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("publishing %s: %w", id, err)
	}
	if err := c.fail(); err != nil {
		return err
	}
	if c.seen[id] {
		return nil
	}
	if c.limit > 0 && len(c.queue) >= c.limit {
		return fmt.Errorf("publishing %s: %w", id, ports.ErrCommandQueueFull)
	}
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	c.seen[id] = true
	c.queue = append(c.queue, QueuedCommand{ID: id, Command: cmd})
	return nil
}

// setID names a set of (instance, attempt, cloud id) regardless of its
// order, as the JetStream adapter's message ids do.
func setID(rs []ports.InstanceRef) string {
	keys := make([]string, len(rs))
	for i, r := range rs {
		keys[i] = fmt.Sprintf("%s/%d/%s", r.InstanceID, r.Attempt, r.CloudID)
	}
	slices.Sort(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, ",")))
	return hex.EncodeToString(sum[:12])
}

func (c *Commands) fail() error {
	if len(c.failNext) == 0 {
		return nil
	}
	err := c.failNext[0]
	c.failNext = c.failNext[1:]
	return err
}

// FailNext makes the next publications fail with errs, in order.
func (c *Commands) FailNext(errs ...error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failNext = append(c.failNext, errs...)
}

// Reset forgets the recorded commands.
func (c *Commands) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Creates, c.Watches, c.Terminates, c.Hooks, c.Inventory, c.Tags = nil, nil, nil, nil, nil, nil
}

// Snapshot returns copies of the recorded commands.
func (c *Commands) Snapshot() Commands {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Commands{
		Creates:    append([]ports.CreateCommand(nil), c.Creates...),
		Watches:    append([]ports.WatchCommand(nil), c.Watches...),
		Terminates: append([]ports.TerminateCommand(nil), c.Terminates...),
		Hooks:      append([]ports.HookCommand(nil), c.Hooks...),
		Inventory:  append([]ports.InventoryRequest(nil), c.Inventory...),
		Tags:       append([]ports.TagCommand(nil), c.Tags...),
	}
}

// Create implements ports.Commands.
func (c *Commands) Create(ctx context.Context, cmd ports.CreateCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.publish(ctx, fmt.Sprintf("create.%s.%d", cmd.BatchID, cmd.Attempt), cmd); err != nil {
		return err
	}
	c.Creates = append(c.Creates, cmd)
	return nil
}

// Watch implements ports.Commands.
func (c *Commands) Watch(ctx context.Context, cmd ports.WatchCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.publish(ctx, "watch."+setID(cmd.Instances), cmd); err != nil {
		return err
	}
	c.Watches = append(c.Watches, cmd)
	return nil
}

// Terminate implements ports.Commands.
func (c *Commands) Terminate(ctx context.Context, cmd ports.TerminateCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.publish(ctx, "terminate."+setID(cmd.Instances), cmd); err != nil {
		return err
	}
	c.Terminates = append(c.Terminates, cmd)
	return nil
}

// RunHook implements ports.Commands.
func (c *Commands) RunHook(ctx context.Context, cmd ports.HookCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.publish(ctx, fmt.Sprintf("hook.%s.%d", cmd.InstanceID, cmd.Attempt), cmd); err != nil {
		return err
	}
	c.Hooks = append(c.Hooks, cmd)
	return nil
}

// ListInventory implements ports.Commands.
func (c *Commands) ListInventory(ctx context.Context, r ports.InventoryRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.publish(ctx, "inventory."+r.RequestID, r); err != nil {
		return err
	}
	c.Inventory = append(c.Inventory, r)
	return nil
}

// Tag implements ports.Commands.
func (c *Commands) Tag(ctx context.Context, cmd ports.TagCommand) error {
	c.mu.Lock()
	if err := c.publish(ctx, "tag."+cmd.RequestID, cmd); err != nil {
		c.mu.Unlock()
		return err
	}
	c.Tags = append(c.Tags, cmd)
	on := c.OnTag
	c.mu.Unlock()
	if on != nil {
		on(cmd)
	}
	return nil
}

var _ ports.Clock = (*Clock)(nil)

// Clock is a settable ports.Clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now implements ports.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
