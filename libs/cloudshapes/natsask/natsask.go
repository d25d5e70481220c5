// Package natsask is the one cloudshapes.Ask over NATS: it asks the cloud
// adapters for instance shapes (cloudv1.ShapesRequest on
// messaging.SubjectCloudShapes, core NATS request/reply; any replica of
// the queue group answers) for the gateway's template writes and
// lifecycle's configuration file checks. It is apart from cloudshapes so
// that only its importers link the protobuf messages.
package natsask

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/messaging"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
)

// New asks over nc. The caller's context bounds each question: when it
// ends first the error says no cloud adapter answered in time.
func New(nc *nats.Conn) cloudshapes.Ask {
	return func(ctx context.Context, t cloudshapes.Target, zones, types []string) ([]cloudspec.Shape, error) {
		data, err := proto.Marshal(&cloudv1.ShapesRequest{
			Target: &cloudv1.Target{Provider: t.Provider, Account: t.Account, Region: t.Region},
			Zones:  zones, InstanceTypes: types,
		})
		if err != nil {
			return nil, fmt.Errorf("encoding the question: %w", err)
		}
		m, err := nc.RequestWithContext(ctx, messaging.SubjectCloudShapes, data)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil, errors.New("no cloud adapter is answering")
		case err != nil && ctx.Err() != nil:
			return nil, errors.New("no cloud adapter answered in time")
		case err != nil:
			return nil, fmt.Errorf("asking the cloud adapters: %w", err)
		}
		var reply cloudv1.ShapesReply
		if err := proto.Unmarshal(m.Data, &reply); err != nil {
			return nil, fmt.Errorf("decoding the cloud adapter's answer: %w", err)
		}
		if e := reply.GetError(); e != nil {
			if e.GetCode() == cloudshapes.CodeNotSupported {
				return nil, fmt.Errorf("%w (%s)", cloudshapes.ErrNotSupported, e.GetMessage())
			}
			return nil, fmt.Errorf("the cloud could not be asked: %s", e.GetMessage())
		}
		out := make([]cloudspec.Shape, 0, len(reply.GetShapes()))
		for _, s := range reply.GetShapes() {
			out = append(out, cloudspec.Shape{Zone: s.GetZone(), InstanceType: s.GetInstanceType(), VCPU: int(s.GetCpu()),
				MemoryMiB: s.GetMemoryMib(), GPU: int(s.GetGpuCount()), GPUType: s.GetGpuType(), Arch: s.GetArch()})
		}
		return out, nil
	}
}
