// Package cloudshapes checks a template's offerings against the cloud's
// instance shapes (issue 16: the types of one template must have the same
// vCPUs, memory, GPUs and architecture, and be offered in their zones).
// The cloud adapters answer shape questions (cloudv1.ShapesRequest on
// messaging.SubjectCloudShapes); this package holds no NATS or protobuf
// code: the gateway and lifecycle each give it an Ask (natsask.New over
// their own connection), and it turns the answer into field errors, or
// into the reason the offerings could not be checked (no adapter
// answered, a cloud that cannot tell) for a warning.
package cloudshapes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
)

// Timeout is how long the gateway and lifecycle wait for the cloud
// adapters' answer about one template's offerings; past it the offerings
// are accepted unchecked (Warning).
const Timeout = 3 * time.Second

// CodeNotSupported is the cloudv1.CloudError code of a shapes reply from
// an adapter that cannot tell its cloud's shapes.
const CodeNotSupported = "NotSupported"

// ErrNotSupported is returned (wrapped) by an Ask when the target's cloud
// adapter cannot tell its cloud's shapes.
var ErrNotSupported = errors.New("this cloud's adapter cannot tell instance shapes")

// Target is the cloud account and region a template's VMs are created in.
type Target struct {
	Provider, Account, Region string
}

// Ask asks the cloud adapters for the shape of each type of types in each
// zone of zones of t (the pairs the cloud does not offer are missing from
// the answer). It returns ErrNotSupported (wrapped) when the target's
// adapter cannot tell, and another error when no adapter answered in time
// or the cloud could not be asked.
type Ask func(ctx context.Context, t Target, zones, types []string) ([]cloudspec.Shape, error)

// Check asks for the shapes of offerings' zones and types and checks them
// (cloudspec.CheckShapes: errors at "offerings[i].instanceType"). When the
// question could not be answered, errs is nil and unchecked says why (see
// Warning): the offerings are then accepted unchecked. A template without
// offerings asks nothing.
func Check(ctx context.Context, ask Ask, t Target, offerings []cloudspec.Offering) (errs []cloudspec.FieldError, unchecked error) {
	zones, types := cloudspec.ShapeQuery(offerings)
	if len(zones) == 0 || len(types) == 0 {
		return nil, nil
	}
	if ask == nil {
		return nil, errors.New("no cloud adapter is connected")
	}
	shapes, err := ask(ctx, t, zones, types)
	if err != nil {
		return nil, err
	}
	return cloudspec.CheckShapes(offerings, shapes), nil
}

// Warning is the warning of a template whose offerings were accepted
// unchecked (Check's unchecked).
func Warning(unchecked error) string {
	return fmt.Sprintf("offerings not checked against the cloud's instance shapes: %v", unchecked)
}
