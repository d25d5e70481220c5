// Package messaging declares nodesmith's NATS JetStream topology once: the KV
// buckets that hold state, the work-queue command stream with one durable pull
// consumer per worker kind, the event stream lifecycle consumes, and the
// request/reply subject for lifecycle operations. Only lifecycle, the
// bootstrap identity, calls Ensure (at start; it is idempotent, so a later
// start or version converges it); the other services are not allowed to
// create anything and wait for the topology (WaitTopology, through Connect).
package messaging

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/backoff"
)

// Names of streams, buckets, consumers and subjects. They are the contract
// between services: change them only with a migration.
const (
	// BucketGroups holds one statev1.NodeGroup per key (the group id).
	BucketGroups = "nodesmith_groups"
	// BucketInstances holds one statev1.Instance per key "<group>.<instance id>".
	BucketInstances = "nodesmith_instances"
	// BucketCatalog holds one statev1.CatalogEntry per key
	// "<kind>.<name>": CatalogKeyTemplate, CatalogKeyAccount, CatalogKeyHook.
	BucketCatalog = "nodesmith_catalog"

	// CommandStream carries commands to workers; work-queue retention deletes
	// a command once a worker acks it.
	CommandStream = "NODESMITH_COMMANDS"
	// EventStream carries results from workers to lifecycle.
	EventStream = "NODESMITH_EVENTS"

	// SubjectCloudCommands prefixes cloudv1.Command subjects (".create", ".watch", ...).
	SubjectCloudCommands = "nodesmith.cmd.cloud"
	// SubjectHookCommands prefixes hookv1.RunHook subjects (".run").
	SubjectHookCommands = "nodesmith.cmd.hook"
	// SubjectCloudEvents prefixes cloudv1.Event subjects.
	SubjectCloudEvents = "nodesmith.evt.cloud"
	// SubjectHookEvents prefixes hookv1.HookResult subjects.
	SubjectHookEvents = "nodesmith.evt.hook"

	// SubjectLifecycleOps is where the lifecycle leader answers
	// lifecyclev1.Request with lifecyclev1.Reply.
	SubjectLifecycleOps = "nodesmith.lifecycle.ops"

	// SubjectCloudShapes is where any cloud adapter replica (queue group
	// QueueCloudShapes) answers cloudv1.ShapesRequest with
	// cloudv1.ShapesReply: the instance shapes templates are checked
	// against.
	SubjectCloudShapes = "nodesmith.cloud.shapes"
	// QueueCloudShapes is the cloud adapters' queue group on
	// SubjectCloudShapes (one replica answers a request).
	QueueCloudShapes = "cloud-adapter"

	// ConsumerCloudAdapter is the durable pull consumer shared by cloud-adapter replicas.
	ConsumerCloudAdapter = "cloud-adapter"
	// ConsumerHookRunner is the durable pull consumer shared by hook-runner replicas.
	ConsumerHookRunner = "hook-runner"
	// ConsumerLifecycle is the durable consumer of the event stream.
	ConsumerLifecycle = "lifecycle"
)

// Subjects of individual commands and events.
const (
	SubjectCloudCreate    = SubjectCloudCommands + ".create"
	SubjectCloudWatch     = SubjectCloudCommands + ".watch"
	SubjectCloudTerminate = SubjectCloudCommands + ".terminate"
	SubjectCloudInventory = SubjectCloudCommands + ".inventory"
	SubjectCloudTag       = SubjectCloudCommands + ".tag"
	SubjectHookRun        = SubjectHookCommands + ".run"

	SubjectCloudCreated         = SubjectCloudEvents + ".created"
	SubjectCloudCreateFailed    = SubjectCloudEvents + ".create_failed"
	SubjectCloudObserved        = SubjectCloudEvents + ".observed"
	SubjectCloudTerminated      = SubjectCloudEvents + ".terminated"
	SubjectCloudTerminateFailed = SubjectCloudEvents + ".terminate_failed"
	SubjectCloudInventoryResult = SubjectCloudEvents + ".inventory"
	SubjectCloudTagged          = SubjectCloudEvents + ".tagged"
	SubjectHookResult           = SubjectHookEvents + ".result"
)

// Options tune the topology. The zero value is not valid; start from DefaultOptions.
type Options struct {
	// Replicas of every stream and bucket: 1 embedded, 3 in production.
	Replicas int
	// Storage is file storage except in throwaway tests.
	Storage jetstream.StorageType
	// DuplicateWindow is how long a Nats-Msg-Id is remembered for dedup.
	DuplicateWindow time.Duration
	// EventRetention bounds how long unconsumed events are kept.
	EventRetention time.Duration
	// CloudAckWait and HookAckWait are how long a delivered command waits
	// for its ack (or an InProgress heartbeat) before JetStream gives it to
	// another replica. Live work heartbeats well within them, so they only
	// bound how long the command of a replica that died (kill -9, OOM, lost
	// node) waits: short is better, as long as the heartbeats still fit
	// (a third of it or less, so one lost beat is harmless).
	CloudAckWait time.Duration
	HookAckWait  time.Duration
	// MaxDeliver bounds deliveries of a command (a poison message is not
	// retried forever; lifecycle's deadlines take over).
	MaxDeliver int
	// CloudMaxAckPending and HookMaxAckPending cap total in-flight work across
	// all replicas of a worker kind.
	CloudMaxAckPending int
	HookMaxAckPending  int
	// CommandMaxMsgs and CommandMaxBytes bound the command stream. It
	// discards new messages at the limit: a runaway publisher gets an
	// error (lifecycle's outbox retries later) instead of filling the disk,
	// and the commands already queued are kept.
	CommandMaxMsgs  int64
	CommandMaxBytes int64
	// KVMarkerTTL is how long the instances bucket keeps the purge marker
	// of a removed record (the bucket's LimitMarkerTTL, nats-server 2.11+):
	// long enough for every watcher to see the removal, short enough that
	// the bucket does not grow with all-time churn. Zero keeps markers
	// forever (for servers older than 2.11); JetStream refuses to turn
	// marker TTLs off on a bucket that has them, so Ensure then fails.
	KVMarkerTTL time.Duration
}

// DefaultAckWait is the default ack wait of the command consumers: the
// delay before a dead replica's command is redelivered. The workers
// heartbeat every 3s (cloud-adapter's --heartbeat; the hook runner uses a
// third of the ack wait), so a running command survives a lost beat.
const DefaultAckWait = 10 * time.Second

// DefaultOptions are suitable for the embedded stack and tests.
func DefaultOptions() Options {
	return Options{
		Replicas:           1,
		Storage:            jetstream.FileStorage,
		DuplicateWindow:    10 * time.Minute,
		EventRetention:     72 * time.Hour,
		CloudAckWait:       DefaultAckWait,
		HookAckWait:        DefaultAckWait,
		MaxDeliver:         20,
		CloudMaxAckPending: 1000,
		HookMaxAckPending:  1000,
		CommandMaxMsgs:     DefaultCommandMaxMsgs,
		CommandMaxBytes:    DefaultCommandMaxBytes,
		KVMarkerTTL:        DefaultKVMarkerTTL,
	}
}

// Defaults of the command stream's limits and the instances bucket's
// marker TTL.
const (
	DefaultCommandMaxMsgs  = 1_000_000
	DefaultCommandMaxBytes = 512 << 20
	DefaultKVMarkerTTL     = 30 * time.Minute
)

// Validate reports the first invalid option.
func (o Options) Validate() error {
	switch {
	case o.Replicas < 1 || o.Replicas > 5:
		return fmt.Errorf("replicas must be 1..5, got %d", o.Replicas)
	case o.DuplicateWindow <= 0:
		return errors.New("duplicate window must be positive")
	case o.CloudAckWait < time.Second || o.HookAckWait < time.Second:
		return errors.New("ack waits must be at least 1s")
	case o.MaxDeliver < 2:
		return fmt.Errorf("max deliver must be at least 2, got %d", o.MaxDeliver)
	case o.CloudMaxAckPending < 1 || o.HookMaxAckPending < 1:
		return errors.New("max ack pending must be positive")
	case o.CommandMaxMsgs < 1 || o.CommandMaxBytes < 1<<10:
		return fmt.Errorf("command stream limits must be at least 1 message and 1 KiB, got %d messages, %d bytes", o.CommandMaxMsgs, o.CommandMaxBytes)
	case o.KVMarkerTTL != 0 && o.KVMarkerTTL < time.Second:
		// JetStream's per-message TTLs have a resolution of one second.
		return fmt.Errorf("kv marker ttl must be 0 (keep markers) or at least 1s, got %s", o.KVMarkerTTL)
	}
	return nil
}

// StreamConfigs returns the stream definitions.
func StreamConfigs(o Options) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{
			Name:        CommandStream,
			Description: "nodesmith commands for cloud-adapter and hook-runner",
			Subjects:    []string{SubjectCloudCommands + ".>", SubjectHookCommands + ".>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     o.Storage,
			Replicas:    o.Replicas,
			Duplicates:  o.DuplicateWindow,
			MaxMsgs:     o.CommandMaxMsgs,
			MaxBytes:    o.CommandMaxBytes,
			Discard:     jetstream.DiscardNew,
		},
		{
			Name:        EventStream,
			Description: "nodesmith results for lifecycle",
			Subjects:    []string{SubjectCloudEvents + ".>", SubjectHookEvents + ".>"},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      o.EventRetention,
			Storage:     o.Storage,
			Replicas:    o.Replicas,
			Duplicates:  o.DuplicateWindow,
		},
	}
}

// ConsumerConfigs returns the durable consumers keyed by stream name.
//
// The consumers deliberately set no BackOff: with BackOff, JetStream uses
// BackOff[n] instead of AckWait as the ack deadline of delivery n, so a short
// first step would redeliver long-running work to a second replica while the
// first still runs it. AckWait is the crash-redelivery timeout (live work
// heartbeats well within it) and failed work is spaced out by the worker's
// NakWithDelay.
func ConsumerConfigs(o Options) map[string][]jetstream.ConsumerConfig {
	return map[string][]jetstream.ConsumerConfig{
		CommandStream: {
			{
				Durable:       ConsumerCloudAdapter,
				Description:   "cloud commands, shared by all cloud-adapter replicas",
				FilterSubject: SubjectCloudCommands + ".>",
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       o.CloudAckWait,
				MaxDeliver:    o.MaxDeliver,
				MaxAckPending: o.CloudMaxAckPending,
				DeliverPolicy: jetstream.DeliverAllPolicy,
			},
			{
				Durable:       ConsumerHookRunner,
				Description:   "hook commands, shared by all hook-runner replicas",
				FilterSubject: SubjectHookCommands + ".>",
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       o.HookAckWait,
				MaxDeliver:    o.MaxDeliver,
				MaxAckPending: o.HookMaxAckPending,
				DeliverPolicy: jetstream.DeliverAllPolicy,
			},
		},
		EventStream: {
			{
				Durable:     ConsumerLifecycle,
				Description: "results for the lifecycle leader",
				// Events are never dropped: a failing handler keeps retrying
				// with backoff until the leader can apply or discard it.
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       30 * time.Second,
				MaxDeliver:    -1,
				MaxAckPending: 10000,
				DeliverPolicy: jetstream.DeliverAllPolicy,
			},
		},
	}
}

// KeyValueConfigs returns the KV bucket definitions.
func KeyValueConfigs(o Options) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: BucketGroups, Description: "nodesmith node groups", History: 1, Storage: o.Storage, Replicas: o.Replicas},
		{Bucket: BucketInstances, Description: "nodesmith instances", History: 1, Storage: o.Storage, Replicas: o.Replicas,
			LimitMarkerTTL: o.KVMarkerTTL},
		{Bucket: BucketCatalog, Description: "nodesmith instance templates, cloud accounts and hooks", History: 1, Storage: o.Storage, Replicas: o.Replicas},
		{Bucket: BucketOfferings, Description: "nodesmith offerings out of capacity, until when", History: 1, Storage: o.Storage, Replicas: o.Replicas,
			TTL: OfferingsMaxAge},
	}
}

// Ensure creates or updates every stream, consumer and bucket. It is safe to
// call concurrently from several services. While JetStream cannot be reached
// (NATS restarting) it retries with backoff until ctx ends; a refused
// topology fails at once.
func Ensure(ctx context.Context, js jetstream.JetStream, o Options) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("invalid topology options: %w", err)
	}
	// A service may start while NATS is (re)starting: connected, but
	// JetStream not answering yet. That is retried until ctx ends, as the
	// connection itself is (a replica restarted at the moment of a NATS
	// restart used to exit with this error).
	b := backoff.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.JitterSpread, Spread: 0.5}.New()
	for {
		// Each attempt has its own timeout: a request lost with the
		// connection (NATS restarting) would otherwise hold the attempt
		// until ctx's own deadline, and the start fail on it.
		actx, cancel := context.WithTimeout(ctx, ensureAttemptTimeout)
		err := ensureOnce(actx, js, o)
		cancel()
		if err == nil || !unavailable(err) || ctx.Err() != nil {
			return err
		}
		d := b.Next()
		slog.Warn("JetStream not available yet, retrying", "err", err, "in", d)
		if werr := backoff.Wait(ctx, d); werr != nil {
			return fmt.Errorf("%w (gave up: %w)", err, werr)
		}
	}
}

// ensureAttemptTimeout bounds one attempt of Ensure (every request of it).
var ensureAttemptTimeout = 10 * time.Second

// unavailable reports whether err says JetStream could not be reached (as
// opposed to refusing the topology, which retrying cannot fix).
func unavailable(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// ensureOnce creates what is missing and updates only what differs. Each
// object is first created: JetStream answers a create whose config equals
// the existing one with the existing object and changes nothing; only a
// different config ("already in use") is updated. Services start together
// and each runs Ensure, so an unconditional update (CreateOrUpdate*) would
// rewrite every stream's config at every start while other services create
// consumers on it, which nats-server does not serialise (a data race
// between fileStore.UpdateConfig and ConsumerStore, seen under -race).
//
// An existing durable consumer is updated in place: its editable fields
// (AckWait, MaxDeliver, MaxAckPending, ...) take the new values, and
// commands already delivered keep their delivery but wait for their ack
// under the new AckWait, so a new default or --js-* value takes effect at
// the first start of any service.
func ensureOnce(ctx context.Context, js jetstream.JetStream, o Options) error {
	for _, sc := range StreamConfigs(o) {
		_, err := js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			_, err = js.UpdateStream(ctx, sc)
		}
		if err != nil {
			return fmt.Errorf("ensuring stream %s: %w", sc.Name, err)
		}
	}
	for stream, ccs := range ConsumerConfigs(o) {
		for _, cc := range ccs {
			_, err := js.CreateConsumer(ctx, stream, cc)
			if errors.Is(err, jetstream.ErrConsumerExists) {
				_, err = js.UpdateConsumer(ctx, stream, cc)
			}
			if err != nil {
				return fmt.Errorf("ensuring consumer %s on %s: %w", cc.Durable, stream, err)
			}
		}
	}
	for _, kc := range KeyValueConfigs(o) {
		_, err := js.CreateKeyValue(ctx, kc)
		if errors.Is(err, jetstream.ErrBucketExists) {
			_, err = js.UpdateKeyValue(ctx, kc)
		}
		if err != nil {
			return fmt.Errorf("ensuring bucket %s: %w", kc.Bucket, err)
		}
	}
	return nil
}

// InstanceKey is the instances-bucket key of an instance.
func InstanceKey(group, instanceID string) string { return group + "." + instanceID }

// Key prefixes of the catalog bucket: a key is "<prefix>.<name>".
const (
	CatalogKeyTemplate = "templates"
	CatalogKeyAccount  = "accounts"
	CatalogKeyHook     = "hooks"
)

// CatalogKey is the key of the catalog entry of kind (a CatalogKey*
// prefix) named name.
func CatalogKey(kind, name string) string { return kind + "." + name }
