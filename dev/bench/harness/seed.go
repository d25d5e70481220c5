package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/messaging"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// Seeded is the state written by Seed and what CA would see of it.
type Seeded struct {
	// Groups are the group records, by position.
	Groups []*statev1.NodeGroup
	// Instances are the instance records.
	Instances []*statev1.Instance
	// Nodes are the cluster's Nodes as CA sends them: one per instance
	// plus a few unmanaged control-plane nodes.
	Nodes []*pb.ExternalGrpcNode
	// Want is the group id NodeGroupForNode must answer per node ("" for
	// unmanaged nodes).
	Want []string
	// Bytes is the total size of the encoded records.
	Bytes int
}

// ControlPlaneNodes are the unmanaged nodes in every seeded cluster.
const ControlPlaneNodes = 3

const idAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

func randomID(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = idAlphabet[r.IntN(len(idAlphabet))]
	}
	return string(b)
}

// BuildSeed builds the records of `instances` RUNNING instances spread
// evenly over `groups` groups, shaped as lifecycle writes them after a
// normal scale-up (full template, five-step history, host key, hook
// output), deterministically from seed.
func BuildSeed(groups, instances int, seed uint64) *Seeded {
	r := rand.New(rand.NewPCG(seed, 0x6e6f6465736d6974))
	out := &Seeded{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // fixed: the same seed builds the same bytes
	for g := range groups {
		id := fmt.Sprintf("pool-%03d", g)
		size := instances / groups
		if g < instances%groups {
			size++
		}
		out.Groups = append(out.Groups, &statev1.NodeGroup{
			Id: id, MinSize: 0, MaxSize: int32(max(2*size, 10)), TargetSize: int32(size),
			InstanceTemplate: &statev1.InstanceTemplate{
				Name: "tpl-" + Region + "-3", Provider: cloudspec.Tencent, Account: Account, Region: Region,
				ParametersJson: `{"ImageId":"img-nodesmith","InstanceChargeType":"POSTPAID_BY_HOUR","InstanceName":"nodesmith-bench","InstanceType":"S5.MEDIUM4","Placement":{"Zone":"ap-guangzhou-3"}}`,
				HourlyPrice:    0.12, InstanceType: "S5.MEDIUM4", Zone: Region + "-3", Arch: "amd64", Os: "linux",
				HookEnv: map[string]string{"API_SERVER": APIServer},
			},
			NodeTemplate: &statev1.NodeTemplate{
				Labels:      map[string]string{"node-role.kubernetes.io/worker": "", "nodesmith.io/pool": id},
				Capacity:    map[string]string{"cpu": "2", "memory": "4Gi", "pods": "110"},
				Allocatable: map[string]string{"cpu": "1900m", "memory": "3584Mi", "pods": "110"},
			},
			AutoscalingOptions: &statev1.AutoscalingOptions{ScaleDownUnneeded: durationpb.New(10 * time.Minute)},
			Hooks: &statev1.Hooks{
				AfterCreated: &statev1.HookSpec{Name: "afterCreated", Script: JoinScript},
				BeforeDelete: &statev1.HookSpec{Name: "beforeDelete", Script: `kubectl drain "$NODE_NAME" --ignore-daemonsets`, OnFailure: statev1.OnFailure_ON_FAILURE_CONTINUE},
			},
			Parallelism: &statev1.Parallelism{},
			Source:      "api",
			UpdatedAt:   timestamppb.New(now),
		})
	}
	steps := []statev1.InstanceState{
		statev1.InstanceState_INSTANCE_STATE_PENDING, statev1.InstanceState_INSTANCE_STATE_CREATING,
		statev1.InstanceState_INSTANCE_STATE_CREATED, statev1.InstanceState_INSTANCE_STATE_JOINED,
		statev1.InstanceState_INSTANCE_STATE_RUNNING,
	}
	reasons := []string{"created", "create batch formed", "vm running", "after_created hook succeeded", "node ready"}
	for i := range instances {
		g := out.Groups[i%groups]
		id := g.GetId() + "-" + randomID(r, 10)
		cloudID := fmt.Sprintf("ins-%08x", r.Uint32())
		pid := fmt.Sprintf("externalgrpc://%s/%s/%s/%s", cloudspec.Tencent, Account, Region, cloudID)
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		batch := "b-" + randomID(r, 16)
		created := now.Add(time.Duration(i) * time.Millisecond)
		in := &statev1.Instance{
			Id: id, Group: g.GetId(), State: statev1.InstanceState_INSTANCE_STATE_RUNNING, Attempt: 2,
			CloudId: cloudID, ProviderId: pid, NodeName: id, PrivateIp: ip,
			ClientToken: "nodesmith-" + batch, BatchId: batch,
			CreatedAt: timestamppb.New(created), StateSince: timestamppb.New(created.Add(40 * time.Second)),
			SshHostKey:     "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + randomID(r, 43),
			HookOutputTail: "[preflight] Running pre-flight checks\n[kubelet-start] Starting the kubelet\nThis node has joined the cluster:\n",
		}
		for s := range steps {
			from := statev1.InstanceState_INSTANCE_STATE_UNSPECIFIED
			if s > 0 {
				from = steps[s-1]
			}
			in.History = append(in.History, &statev1.Transition{From: from, To: steps[s], Reason: reasons[s], At: timestamppb.New(created.Add(time.Duration(s) * 10 * time.Second))})
		}
		out.Instances = append(out.Instances, in)
		out.Nodes = append(out.Nodes, caNode(id, pid, g.GetId(), i))
		out.Want = append(out.Want, g.GetId())
	}
	for i := range ControlPlaneNodes {
		name := fmt.Sprintf("control-plane-%d", i)
		out.Nodes = append(out.Nodes, caNode(name, "kind://docker/kind/"+name, "", i))
		out.Want = append(out.Want, "")
	}
	// CA walks the nodes in the lister's order, unrelated to groups.
	r.Shuffle(len(out.Nodes), func(a, b int) {
		out.Nodes[a], out.Nodes[b] = out.Nodes[b], out.Nodes[a]
		out.Want[a], out.Want[b] = out.Want[b], out.Want[a]
	})
	return out
}

// caNode is a Node as CA's externalgrpc client sends it: providerID, name,
// and the node's labels and annotations (a typical kubeadm node's).
func caNode(name, providerID, group string, i int) *pb.ExternalGrpcNode {
	labels := map[string]string{
		"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
		"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
		"node.kubernetes.io/instance-type":       "S5.MEDIUM4",
		"topology.kubernetes.io/region":          Region,
		"topology.kubernetes.io/zone":            Region + "-3",
		"failure-domain.beta.kubernetes.io/zone": Region + "-3",
	}
	if group != "" {
		labels["nodesmith.io/node-group"] = group
		labels["nodesmith.io/instance-id"] = name
		labels["node-role.kubernetes.io/worker"] = ""
	} else {
		labels["node-role.kubernetes.io/control-plane"] = ""
	}
	return &pb.ExternalGrpcNode{
		ProviderID: providerID, Name: name, Labels: labels,
		Annotations: map[string]string{
			"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///var/run/containerd/containerd.sock",
			"node.alpha.kubernetes.io/ttl":                           "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			"projectcalico.org/IPv4Address":                          fmt.Sprintf("10.%d.%d.%d/16", i>>16&255, i>>8&255, i&255),
		},
	}
}

// Write stores the records in the KV buckets exactly as lifecycle's store
// does (protobuf values under messaging's bucket and key names), with
// asynchronous publishes so 50k records take seconds.
func (s *Seeded) Write(ctx context.Context, js jetstream.JetStream) error {
	put := func(bucket, key string, m proto.Message) error {
		b, err := proto.Marshal(m)
		if err != nil {
			return err
		}
		s.Bytes += len(b)
		// On a loaded machine the server may take longer than the default
		// 200ms to ack a full window of publishes.
		_, err = js.PublishAsync("$KV."+bucket+"."+key, b, jetstream.WithStallWait(time.Minute))
		return err
	}
	for _, g := range s.Groups {
		if err := put(messaging.BucketGroups, g.GetId(), g); err != nil {
			return fmt.Errorf("seeding group %s: %w", g.GetId(), err)
		}
	}
	for _, in := range s.Instances {
		if err := put(messaging.BucketInstances, messaging.InstanceKey(in.GetGroup(), in.GetId()), in); err != nil {
			return fmt.Errorf("seeding instance %s: %w", in.GetId(), err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("seeding: %w", ctx.Err())
	}
}

// Expect is what a correct provider answers CA's loop for this cluster.
func (s *Seeded) Expect() *Expect {
	e := &Expect{Groups: s.Want, Targets: map[string]int32{}, Instances: map[string][]string{}, Options: map[string]*pb.NodeGroupAutoscalingOptions{}}
	for _, g := range s.Groups {
		e.Targets[g.GetId()] = g.GetTargetSize()
		e.Options[g.GetId()] = ExpectedOptions(g)
		e.Instances[g.GetId()] = []string{}
	}
	for _, in := range s.Instances {
		e.Instances[in.GetGroup()] = append(e.Instances[in.GetGroup()], in.GetProviderId())
	}
	for _, ids := range e.Instances {
		slices.Sort(ids)
	}
	return e
}

// ExpectedOptions is the NodeGroupGetOptions answer to CADefaults for a
// seeded group: CA's defaults with the group's overrides, every field
// written in both wire generations (shared/design/EXTERNALGRPC.md). It
// covers what the seed sets, not every rule of the gateway's resolution.
func ExpectedOptions(g *statev1.NodeGroup) *pb.NodeGroupAutoscalingOptions {
	o := g.GetAutoscalingOptions()
	if o == nil {
		o = &statev1.AutoscalingOptions{}
	}
	util := CADefaults.GetScaleDownUtilizationThreshold()
	if o.ScaleDownUtilizationThreshold != nil {
		util = o.GetScaleDownUtilizationThreshold()
	}
	gpuUtil := CADefaults.GetScaleDownGpuUtilizationThreshold()
	if o.ScaleDownGpuUtilizationThreshold != nil {
		gpuUtil = o.GetScaleDownGpuUtilizationThreshold()
	}
	zeroOrMax := CADefaults.GetZeroOrMaxNodeScaling()
	if o.ZeroOrMaxNodeScaling != nil {
		zeroOrMax = o.GetZeroOrMaxNodeScaling()
	}
	ignoreDS := CADefaults.GetIgnoreDaemonSetsUtilization()
	if o.IgnoreDaemonsetsUtilization != nil {
		ignoreDS = o.GetIgnoreDaemonsetsUtilization()
	}
	dur := func(override, def *durationpb.Duration) time.Duration {
		if override != nil {
			return override.AsDuration()
		}
		return def.AsDuration()
	}
	unneeded := dur(o.GetScaleDownUnneeded(), CADefaults.GetScaleDownUnneededDuration())
	unready := dur(o.GetScaleDownUnready(), CADefaults.GetScaleDownUnreadyDuration())
	provision := dur(o.GetMaxNodeProvision(), CADefaults.GetMaxNodeProvisionDuration())
	return &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold:    util,
		ScaleDownGpuUtilizationThreshold: gpuUtil,
		ZeroOrMaxNodeScaling:             zeroOrMax,
		IgnoreDaemonSetsUtilization:      ignoreDS,
		ScaleDownUnneededDuration:        durationpb.New(unneeded),
		ScaleDownUnreadyDuration:         durationpb.New(unready),
		MaxNodeProvisionDuration:         durationpb.New(provision),
		ScaleDownUnneededTime:            &pb.LegacyDuration{Duration: int64(unneeded)},
		ScaleDownUnreadyTime:             &pb.LegacyDuration{Duration: int64(unready)},
		MaxNodeProvisionTime:             &pb.LegacyDuration{Duration: int64(provision)},
	}
}
