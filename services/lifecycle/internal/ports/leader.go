package ports

import (
	"context"
	"time"
)

// Leader elects the one lifecycle replica that writes state and drives work.
type Leader interface {
	// Run calls lead each time this replica becomes leader, with a context
	// that is cancelled when leadership is lost or ctx ends, and returns when
	// ctx ends. An error from lead is logged by the implementation, which
	// then gives up leadership and campaigns again. Run returns an error only
	// if it cannot campaign at all.
	Run(ctx context.Context, lead func(ctx context.Context) error) error
}

// Clock tells the time; tests inject a fake to drive deadlines.
type Clock interface {
	Now() time.Time
}
