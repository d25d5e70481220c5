package grpcapi

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Cluster Autoscaler asks the same questions about the same group over
// and over: NodeGroupGetOptions 2 to 5 times per node per loop (its client
// does not cache it), NodeGroupForNode once per node, TemplateNodeInfo
// once per group (issue 21: 20k to 50k GetOptions per loop at 10k nodes).
// So each answer is built once per revision of the group, as the message
// gRPC encodes, and a call costs the lookups and gRPC's encoding, not a
// rebuild. A built message is never modified: gRPC only reads (encodes)
// a response, so one message can answer concurrent calls.

// unmanagedAnswer is NodeGroupForNode's answer for a node that no group
// manages (an empty id).
var unmanagedAnswer = &pb.NodeGroupForNodeResponse{NodeGroup: &pb.NodeGroup{}}

// groupAnswers are the answers about one revision of a group.
type groupAnswers struct {
	// record is the revision they answer for: the read model replaces a
	// group's record, never modifies it, so a new record is a new revision.
	record  *domain.NodeGroup
	forNode *pb.NodeGroupForNodeResponse
	// options is GetOptions' answer to the defaults last asked with; one
	// CA sends the same defaults every time.
	options atomic.Pointer[optionsAnswer]
	// template is TemplateNodeInfo's answer, built on first use.
	template func() (*pb.NodeGroupTemplateNodeInfoResponse, error)
}

// optionsAnswer is GetOptions' answer (or error) to one set of defaults.
type optionsAnswer struct {
	defaults defaultsKey
	resp     *pb.NodeGroupAutoscalingOptionsResponse
	err      error
}

func newGroupAnswers(g app.GroupView) *groupAnswers {
	return &groupAnswers{
		record:  g.Record,
		forNode: &pb.NodeGroupForNodeResponse{NodeGroup: nodeGroup(g)},
		template: sync.OnceValues(func() (*pb.NodeGroupTemplateNodeInfoResponse, error) {
			node, err := TemplateNode(g.Record)
			if err != nil {
				return nil, toStatus(err)
			}
			b, err := node.Marshal()
			if err != nil {
				return nil, status.Errorf(codes.Internal, "encoding template node: %v", err)
			}
			// The same v1.Node bytes go in nodeBytes (CA >= 1.35) and in
			// the legacy nodeInfo (CA <= 1.34 panics at its first
			// scale-from-zero without them).
			return &pb.NodeGroupTemplateNodeInfoResponse{NodeInfo: b, NodeBytes: b}, nil
		}),
	}
}

// getOptions answers GetOptions for this revision of the group and CA's
// defaults d, from the ready answer when d are the defaults last asked
// with.
func (a *groupAnswers) getOptions(g app.GroupView, d *pb.NodeGroupAutoscalingOptions) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
	key := keyOfDefaults(d)
	if o := a.options.Load(); o != nil && o.defaults == key {
		return o.resp, o.err
	}
	o := &optionsAnswer{defaults: key}
	opts, err := app.GroupOptions(g, DecodeDefaults(d))
	if err != nil {
		o.err = toStatus(err)
	} else {
		o.resp = &pb.NodeGroupAutoscalingOptionsResponse{NodeGroupAutoscalingOptions: EncodeOptions(opts)}
	}
	a.options.Store(o)
	return o.resp, o.err
}

// answers holds the answers of every group, by id.
type answers struct {
	mu      sync.RWMutex
	byGroup map[string]*groupAnswers
	// exists reports whether a group still exists (to forget deleted ones).
	exists func(id string) bool
}

// of returns the answers for g's revision, building them when g's record
// is not the one they were built from.
func (s *answers) of(g app.GroupView) *groupAnswers {
	id := g.Record.ID
	s.mu.RLock()
	a := s.byGroup[id]
	s.mu.RUnlock()
	if a != nil && a.record == g.Record {
		return a
	}
	a = newGroupAnswers(g)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byGroup == nil {
		s.byGroup = map[string]*groupAnswers{}
	}
	s.byGroup[id] = a
	// Groups change rarely: this is the moment to forget deleted ones.
	for other := range s.byGroup {
		if other != id && !s.exists(other) {
			delete(s.byGroup, other)
		}
	}
	return a
}

// durationKey is one duration field of CA's defaults as sent.
type durationKey struct {
	set     bool
	seconds int64
	nanos   int32
}

// defaultsKey is CA's defaults (a NodeGroupAutoscalingOptions) as a
// request carries them, every field of both wire generations, in a
// comparable form: GetOptions' answer depends on nothing else but the
// group. TestDefaultsKeyCoversEveryField fails when the message gains a
// field this key lacks.
type defaultsKey struct {
	util, gpuUtil                         float64
	zeroOrMax, ignoreDS                   bool
	unneeded, unready, provision          durationKey
	legUnneeded, legUnready, legProvision durationKey
}

func keyOfDefaults(d *pb.NodeGroupAutoscalingOptions) defaultsKey {
	cur := func(x *durationpb.Duration) durationKey {
		if x == nil {
			return durationKey{}
		}
		return durationKey{set: true, seconds: x.GetSeconds(), nanos: x.GetNanos()}
	}
	leg := func(x *pb.LegacyDuration) durationKey {
		if x == nil {
			return durationKey{}
		}
		return durationKey{set: true, seconds: x.GetDuration()}
	}
	return defaultsKey{
		util: d.GetScaleDownUtilizationThreshold(), gpuUtil: d.GetScaleDownGpuUtilizationThreshold(),
		zeroOrMax: d.GetZeroOrMaxNodeScaling(), ignoreDS: d.GetIgnoreDaemonSetsUtilization(),
		unneeded: cur(d.GetScaleDownUnneededDuration()), unready: cur(d.GetScaleDownUnreadyDuration()), provision: cur(d.GetMaxNodeProvisionDuration()),
		legUnneeded: leg(d.GetScaleDownUnneededTime()), legUnready: leg(d.GetScaleDownUnreadyTime()), legProvision: leg(d.GetMaxNodeProvisionTime()),
	}
}
