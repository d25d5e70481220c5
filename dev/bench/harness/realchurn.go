package harness

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	cloudadapter "github.com/nodesmith/nodesmith/services/cloud-adapter/service"
	lifecycle "github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// RealChurn drives create/delete cycles through the services, as Cluster
// Autoscaler does: per round and per group, IncreaseSize(Batch) and one
// DeleteNodes of Batch of the group's Running instances picked at random
// (the live set turns over gradually, the live records end up spread
// through the history), then waits until every group is back to its live
// count, all Running, nothing being created or deleted.
type RealChurn struct {
	// Client is the gateway's externalgrpc client.
	Client pb.CloudProviderClient
	// Lifecycle is lifecycle's metrics registry (instances per state).
	Lifecycle prometheus.Gatherer
	// Groups are the node groups churned; Live is the live instances of
	// each (created first), Batch the cycles per group and round.
	Groups      []string
	Live, Batch int
	// Seed picks the instances deleted.
	Seed uint64
	// Timeout bounds each round (and the initial scale-up).
	Timeout time.Duration
	// Progress, when set, is told of each round.
	Progress func(format string, args ...any)

	rng *rand.Rand
}

// Start scales every group up to Live and waits until they are Running.
func (c *RealChurn) Start(ctx context.Context) error {
	c.rng = rand.New(rand.NewPCG(c.Seed, 0x6368))
	for _, g := range c.Groups {
		if err := c.increase(ctx, g, c.Live); err != nil {
			return err
		}
	}
	return c.wait(ctx)
}

// Round runs one round (Batch cycles per group) and returns the cycles
// it ran once every group is back to its live count.
func (c *RealChurn) Round(ctx context.Context) (int, error) {
	for _, g := range c.Groups {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := c.Client.NodeGroupNodes(cctx, &pb.NodeGroupNodesRequest{Id: g})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("NodeGroupNodes(%s): %w", g, err)
		}
		ins := res.GetInstances()
		if len(ins) != c.Live {
			return 0, fmt.Errorf("NodeGroupNodes(%s): %d instances, want %d", g, len(ins), c.Live)
		}
		c.rng.Shuffle(len(ins), func(i, j int) { ins[i], ins[j] = ins[j], ins[i] })
		nodes := make([]*pb.ExternalGrpcNode, 0, c.Batch)
		for _, in := range ins[:min(c.Batch, len(ins))] {
			id := in.GetId()
			nodes = append(nodes, &pb.ExternalGrpcNode{ProviderID: id, Name: id[strings.LastIndex(id, "/")+1:]})
		}
		if err := c.increase(ctx, g, len(nodes)); err != nil {
			return 0, err
		}
		cctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		_, err = c.Client.NodeGroupDeleteNodes(cctx, &pb.NodeGroupDeleteNodesRequest{Id: g, Nodes: nodes})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("DeleteNodes(%s, %d nodes): %w", g, len(nodes), err)
		}
	}
	if err := c.wait(ctx); err != nil {
		return 0, err
	}
	return len(c.Groups) * min(c.Batch, c.Live), nil
}

// Drain deletes every group's instances (CA removing them all) and waits
// until none is left but Deleted records.
func (c *RealChurn) Drain(ctx context.Context) error {
	for _, g := range c.Groups {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := c.Client.NodeGroupNodes(cctx, &pb.NodeGroupNodesRequest{Id: g})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeGroupNodes(%s): %w", g, err)
		}
		var nodes []*pb.ExternalGrpcNode
		for _, in := range res.GetInstances() {
			id := in.GetId()
			nodes = append(nodes, &pb.ExternalGrpcNode{ProviderID: id, Name: id[strings.LastIndex(id, "/")+1:]})
		}
		if len(nodes) == 0 {
			continue
		}
		cctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		_, err = c.Client.NodeGroupDeleteNodes(cctx, &pb.NodeGroupDeleteNodesRequest{Id: g, Nodes: nodes})
		cancel()
		if err != nil {
			return fmt.Errorf("DeleteNodes(%s, %d nodes): %w", g, len(nodes), err)
		}
	}
	c.Live = 0
	return c.wait(ctx)
}

func (c *RealChurn) increase(ctx context.Context, g string, n int) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.Client.NodeGroupIncreaseSize(cctx, &pb.NodeGroupIncreaseSizeRequest{Id: g, Delta: int32(n)}); err != nil {
		return fmt.Errorf("IncreaseSize(%s, %d): %w", g, n, err)
	}
	return nil
}

// wait waits until every group has exactly Live instances that are not
// Deleted, all Running (lifecycle's gauge of instances per state).
func (c *RealChurn) wait(ctx context.Context) error {
	deadline := time.Now().Add(c.Timeout)
	for {
		settled, detail, err := c.settled()
		if err != nil {
			return err
		}
		if settled {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("groups not back to %d Running after %s: %s", c.Live, c.Timeout, detail)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *RealChurn) settled() (bool, string, error) {
	for _, g := range c.Groups {
		all, err := MetricSum(c.Lifecycle, "nodesmith_lifecycle_instances", map[string]string{"group": g})
		if err != nil {
			return false, "", err
		}
		deleted, err := MetricSum(c.Lifecycle, "nodesmith_lifecycle_instances", map[string]string{"group": g, "state": "Deleted"})
		if err != nil {
			return false, "", err
		}
		running, err := MetricSum(c.Lifecycle, "nodesmith_lifecycle_instances", map[string]string{"group": g, "state": "Running"})
		if err != nil {
			return false, "", err
		}
		if int(running) != c.Live || int(all-deleted) != c.Live {
			return false, fmt.Sprintf("group %s: %d Running, %d not Deleted", g, int(running), int(all-deleted)), nil
		}
	}
	return true, "", nil
}

// DeletedKept is how many Deleted records lifecycle keeps (waiting for
// the retention), and Purged how many it purged since it started.
func DeletedKept(lifecycle prometheus.Gatherer) (kept, purged int, err error) {
	k, err := MetricSum(lifecycle, "nodesmith_lifecycle_instances", map[string]string{"state": "Deleted"})
	if err != nil {
		return 0, 0, err
	}
	p, err := MetricSum(lifecycle, "nodesmith_lifecycle_purged_records_total", nil)
	return int(k), int(p), err
}

// RecordShape is the shape of the instance records a bucket holds.
type RecordShape struct {
	// Records are the records held (markers not counted); Deleted those
	// in state Deleted.
	Records, Deleted int
	// ValueBytes are the records' values (encoded protobuf), in all.
	ValueBytes int
	// HistoryMean and HistoryMax are the transitions per record.
	HistoryMean float64
	HistoryMax  int
}

// ReadRecordShape reads every instance record in the bucket.
func ReadRecordShape(ctx context.Context, js jetstream.JetStream) (RecordShape, error) {
	var s RecordShape
	ins, err := ReadInstances(ctx, js)
	if err != nil {
		return s, err
	}
	total := 0
	for _, in := range ins {
		s.Records++
		if in.GetState() == statev1.InstanceState_INSTANCE_STATE_DELETED {
			s.Deleted++
		}
		s.ValueBytes += proto.Size(in)
		h := len(in.GetHistory())
		total += h
		s.HistoryMax = max(s.HistoryMax, h)
	}
	if s.Records > 0 {
		s.HistoryMean = float64(total) / float64(s.Records)
	}
	return s, nil
}

// StreamBytes are the bytes each nodesmith stream holds, by stream name
// (buckets as KV_<bucket>).
func StreamBytes(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	var names []string
	for _, c := range messaging.StreamConfigs(messaging.DefaultOptions()) {
		names = append(names, c.Name)
	}
	for _, c := range messaging.KeyValueConfigs(messaging.DefaultOptions()) {
		names = append(names, "KV_"+c.Bucket)
	}
	out := map[string]uint64{}
	for _, n := range names {
		st, err := js.Stream(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", n, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", n, err)
		}
		out[n] = info.State.Bytes
	}
	return out, nil
}

// ChurnStackConfig shapes a ChurnStack.
type ChurnStackConfig struct {
	// Dir holds the world (NATS storage under Dir/nats).
	Dir string
	// Groups are the node groups, each up to MaxSize instances.
	Groups  []string
	MaxSize int
	// Retention is lifecycle's --deleted-retention, also its purge
	// interval; MarkerTTL the instances bucket's --js-kv-marker-ttl (both
	// stand for their production values, long past).
	Retention, MarkerTTL time.Duration
	// RequestTTL is lifecycle's --request-id-ttl: how long a group record
	// keeps the requests applied to it (0: the default, 10 minutes).
	RequestTTL time.Duration
	// NATSSync is JetStream's sync (and compaction) interval.
	NATSSync time.Duration
	// Logger receives the services' logs; nil discards them.
	Logger *slog.Logger
}

// ChurnStack is the four services in process on a zero-latency cloud (no
// hooks, no cluster: an instance is Running once its VM runs), for
// RealChurn, with a client of the gateway and a JetStream reader.
type ChurnStack struct {
	World  *World
	Stack  *Stack
	Client pb.CloudProviderClient
	JS     jetstream.JetStream
	conn   *grpc.ClientConn
	nc     *nats.Conn
}

// StartChurnStack starts the world and the services and waits until the
// gateway lists every group.
func StartChurnStack(ctx context.Context, cfg ChurnStackConfig) (_ *ChurnStack, err error) {
	c := &ChurnStack{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.World, err = StartWorld(WorldConfig{Dir: cfg.Dir, NoSSH: true, NoCluster: true, NATSSync: cfg.NATSSync, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	var specs []GroupSpec
	for _, g := range cfg.Groups {
		specs = append(specs, GroupSpec{ID: g, Max: cfg.MaxSize, CreateParallelism: cfg.MaxSize, DeleteParallelism: cfg.MaxSize})
	}
	if c.Stack, err = StartStack(ctx, c.World, StackConfig{
		Groups: ConfigYAML(specs),
		Logger: cfg.Logger,
		TuneLifecycle: func(l *lifecycle.Config) {
			n := cfg.MaxSize * len(cfg.Groups)
			l.AccountCreateParallelism = max(l.AccountCreateParallelism, n)
			l.AccountDeleteParallelism = max(l.AccountDeleteParallelism, n)
			l.CreateLinger = 0
			l.ReconcileInterval = 0
			l.DeletedRetention, l.PurgeInterval = cfg.Retention, cfg.Retention
			l.Topology.KVMarkerTTL = cfg.MarkerTTL
			if cfg.RequestTTL > 0 {
				l.RequestIDTTL = cfg.RequestTTL
			}
		},
		TuneCloudAdapter: func(ca *cloudadapter.Config) {
			ca.TencentRateLimits = UnlimitedCloud
			ca.WatchPollInterval = 200 * time.Millisecond
			ca.WatchFastPollInterval = 200 * time.Millisecond
		},
	}); err != nil {
		return nil, err
	}
	if c.conn, err = Dial(c.Stack.GRPCAddr); err != nil {
		return nil, err
	}
	c.Client = pb.NewCloudProviderClient(c.conn)
	if c.nc, err = c.World.ConnectNATS(natsauth.Lifecycle); err != nil {
		return nil, err
	}
	if c.JS, err = jetstream.New(c.nc); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := c.Client.NodeGroups(cctx, &pb.NodeGroupsRequest{})
		cancel()
		if err == nil && len(res.GetNodeGroups()) == len(cfg.Groups) {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the gateway lists %d of %d groups after 1m (last error: %w)", len(res.GetNodeGroups()), len(cfg.Groups), err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Churn is a RealChurn of live instances per group over the stack.
func (c *ChurnStack) Churn(groups []string, live, batch int, timeout time.Duration) *RealChurn {
	return &RealChurn{Client: c.Client, Lifecycle: c.Stack.Registries["lifecycle"], Groups: groups, Live: live, Batch: batch, Timeout: timeout, Seed: 1}
}

// Close stops the services and the world (once: it may be called again).
func (c *ChurnStack) Close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
	if c.Stack != nil {
		_ = c.Stack.Stop()
		c.Stack = nil
	}
	if c.World != nil {
		c.World.Close()
		c.World = nil
	}
}

// DiskBytesOf is what the files of one stream (a directory named stream
// anywhere under storeDir) take.
func DiskBytesOf(storeDir, stream string) (int64, error) {
	var n int64
	err := filepath.WalkDir(storeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !slices.Contains(strings.Split(filepath.ToSlash(path), "/"), stream) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	return n, err
}
