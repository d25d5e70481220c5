// Package ports declares what the cloud adapter's application needs from
// the outside: a Cloud per provider, a way to publish events, and
// credentials. Each interface states its error contract.
package ports

import (
	"context"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// MaxBatch is the most VMs one CreateBatch creates and the most ids one
// Describe or Terminate takes. Callers split bigger sets.
const MaxBatch = 100

// Target says which account and region a call is for.
type Target struct {
	Account string
	Region  string
}

// CreateRequest creates Count VMs from one template in one cloud call.
type CreateRequest struct {
	Target Target
	// ClientToken makes the call idempotent: repeating it with the same
	// token returns the VMs of the first call instead of creating more.
	ClientToken string
	// Template names the template (for logs and errors).
	Template string
	// Parameters are the provider-specific create parameters (for Tencent,
	// the RunInstances request as JSON). Count, ClientToken and Tags
	// override whatever Parameters say about them.
	Parameters string
	Count      int
	// Tags go on every VM created.
	Tags []domain.Tag
}

// Cloud is one cloud provider's API as the adapter needs it. Implementations
// are safe for concurrent use, pace their calls below the cloud's rate
// limits, and retry throttled and transient failures with backoff up to a
// bound before returning them. Every error about the cloud's answer is a
// *CloudError (see errors.go); context errors are returned as they are.
type Cloud interface {
	// CreateBatch creates req.Count VMs (at most MaxBatch) and returns
	// their cloud ids in order. It is idempotent on req.ClientToken.
	// Errors: capacity (quota, stock), invalid parameters, auth, and
	// throttled or transient once retries are exhausted.
	CreateBatch(ctx context.Context, req CreateRequest) ([]string, error)

	// Describe returns the status of the VMs among ids (at most MaxBatch)
	// that exist; a VM missing from the answer does not exist (or no
	// longer). Errors: auth, invalid parameters, throttled or transient.
	Describe(ctx context.Context, t Target, ids []string) ([]domain.Status, error)

	// Terminate deletes the VMs ids (at most MaxBatch). A VM that is
	// already gone or terminating counts as done, so nil means every VM is
	// terminating or gone. Errors: auth, invalid parameters, throttled or
	// transient.
	Terminate(ctx context.Context, t Target, ids []string) error

	// ListByTag returns every VM tagged with domain.TagCluster = clusterID,
	// paging through the cloud's listing. Errors as for Describe.
	ListByTag(ctx context.Context, t Target, clusterID string) ([]domain.Status, error)

	// Tag sets tags on the existing VMs ids (at most MaxBatch): each key
	// is added, or its value replaced; the VMs' other tags are left alone.
	// Setting the same tags again is a no-op, so the call is idempotent.
	// It is how nodesmith takes over VMs it did not create (an explicit
	// adoption): the caller Describes the VMs first and tags only those
	// that exist, so a VM missing from the cloud is an error of kind
	// not-found (whether the others were tagged is then unknown: call
	// again). Errors otherwise as for Describe.
	Tag(ctx context.Context, t Target, ids []string, tags []domain.Tag) error
}
