package memory_test

import (
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/commandstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
)

func TestCommandsContract(t *testing.T) {
	commandstest.Run(t, func(*testing.T) commandstest.Harness {
		c := &memory.Commands{}
		return commandstest.Harness{
			Commands: c,
			Queued: func(*testing.T) []commandstest.Stored {
				var out []commandstest.Stored
				for _, q := range c.Queued() {
					out = append(out, commandstest.Reduce(q.Command))
				}
				return out
			},
			Limit: func(_ *testing.T, n int) { c.SetLimit(n) },
			Drain: func(*testing.T) { c.Drain() },
		}
	})
}
