package memory

import (
	"context"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Commands = (*Commands)(nil)

// Commands records published commands; FailNext makes publications fail.
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
func (c *Commands) Create(_ context.Context, cmd ports.CreateCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail(); err != nil {
		return err
	}
	c.Creates = append(c.Creates, cmd)
	return nil
}

// Watch implements ports.Commands.
func (c *Commands) Watch(_ context.Context, cmd ports.WatchCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail(); err != nil {
		return err
	}
	c.Watches = append(c.Watches, cmd)
	return nil
}

// Terminate implements ports.Commands.
func (c *Commands) Terminate(_ context.Context, cmd ports.TerminateCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail(); err != nil {
		return err
	}
	c.Terminates = append(c.Terminates, cmd)
	return nil
}

// RunHook implements ports.Commands.
func (c *Commands) RunHook(_ context.Context, cmd ports.HookCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail(); err != nil {
		return err
	}
	c.Hooks = append(c.Hooks, cmd)
	return nil
}

// ListInventory implements ports.Commands.
func (c *Commands) ListInventory(_ context.Context, r ports.InventoryRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail(); err != nil {
		return err
	}
	c.Inventory = append(c.Inventory, r)
	return nil
}

// Tag implements ports.Commands.
func (c *Commands) Tag(_ context.Context, cmd ports.TagCommand) error {
	c.mu.Lock()
	if err := c.fail(); err != nil {
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
