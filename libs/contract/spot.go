package contract

// Spot interruption: the names the node agent (cmd/nodesmith-node-agent)
// writes on a Node when its cloud announces a spot reclaim, and that
// lifecycle reads to drain and replace it. The prefix is nodesmith.io/, as
// for the group and instance labels lifecycle puts on Nodes.
const (
	// LabelCapacityType is the Node label saying how the VM is billed;
	// the node agent's DaemonSet selects Nodes with the value
	// CapacityTypeSpot.
	LabelCapacityType = "nodesmith.io/capacity-type"
	// CapacityTypeSpot and CapacityTypeOnDemand are LabelCapacityType's
	// values.
	CapacityTypeSpot     = "spot"
	CapacityTypeOnDemand = "on-demand"

	// TaintSpotInterruption is the taint the node agent puts on its Node
	// once a reclaim is announced, with effect TaintSpotInterruptionEffect
	// and the notice's source as its value: no new pod lands on a node
	// about to disappear. Lifecycle reacts to it (drain, replacement).
	TaintSpotInterruption       = "nodesmith.io/spot-interruption"
	TaintSpotInterruptionEffect = "NoSchedule"

	// AnnotationSpotTerminationTime is when the cloud will reclaim the VM,
	// in RFC 3339 (UTC, seconds): the deadline of the drain.
	AnnotationSpotTerminationTime = "nodesmith.io/spot-termination-time"
	// AnnotationSpotNoticeSource says which metadata service announced it:
	// a SpotSource value, or "url" for an operator-given --metadata-url.
	AnnotationSpotNoticeSource = "nodesmith.io/spot-notice-source"
	// AnnotationSpotNoticeObservedAt is when the agent first saw the
	// notice (RFC 3339, UTC): the start of "notice to replacement
	// Running".
	AnnotationSpotNoticeObservedAt = "nodesmith.io/spot-notice-observed-at"
)

// SpotSource names a cloud's instance metadata service announcing spot
// reclaims.
type SpotSource string

// Known sources.
const (
	SpotSourceTencent SpotSource = "tencent"
	SpotSourceAlibaba SpotSource = "alibaba"
	// SpotSourceURL: a metadata URL the operator gave (the emulator's
	// per-VM endpoint, a proxy).
	SpotSourceURL SpotSource = "url"
)

// Metadata URLs each cloud answers with 404 until a reclaim is scheduled
// and then with its time.
const (
	// SpotTerminationURLTencent: Tencent CVM, about 2 minutes ahead.
	SpotTerminationURLTencent = "http://metadata.tencentyun.com/latest/meta-data/spot/termination-time"
	// SpotTerminationURLAlibaba: Alibaba ECS, about 5 minutes ahead.
	SpotTerminationURLAlibaba = "http://100.100.100.200/latest/meta-data/instance/spot/termination-time"
)

// SpotSources are the known cloud sources, in a fixed order.
var SpotSources = []SpotSource{SpotSourceTencent, SpotSourceAlibaba}

// TerminationURL is the source's metadata URL; ok is false for
// SpotSourceURL and unknown sources.
func (s SpotSource) TerminationURL() (url string, ok bool) {
	switch s {
	case SpotSourceTencent:
		return SpotTerminationURLTencent, true
	case SpotSourceAlibaba:
		return SpotTerminationURLAlibaba, true
	default:
		return "", false
	}
}
