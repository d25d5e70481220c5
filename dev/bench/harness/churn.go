package harness

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// ChurnMarkerTTL is the TTL of the purge markers WriteChurn leaves: the
// shortest JetStream takes, standing in for the bucket's marker TTL
// having passed long ago (a store with months of history).
const ChurnMarkerTTL = time.Second

// WriteChurn writes the seed (its groups and live instances) and, spread
// evenly among the live records, `history` instances that lived and were
// removed: each written as lifecycle writes a record (a value under its
// key, created with a compare-and-set header), then removed as lifecycle's store removes one (a purge marker with
// a TTL, which the server drops once it expires). The live records are
// spread through the whole history, the worst case for the store's file
// blocks (no block holds history only). It returns the bytes written.
func (s *Seeded) WriteChurn(ctx context.Context, js jetstream.JetStream, history int) (int, error) {
	pub := func(m *nats.Msg, opts ...jetstream.PublishOpt) error {
		// On a loaded machine the server may take longer than the default
		// 200ms to ack a full window of publishes.
		_, err := js.PublishMsgAsync(m, append(opts, jetstream.WithStallWait(time.Minute))...)
		return err
	}
	bytes := 0
	put := func(bucket, key string, m proto.Message) error {
		b, err := proto.Marshal(m)
		if err != nil {
			return err
		}
		bytes += len(b)
		// As lifecycle writes a record: a compare-and-set create (the
		// stream keeps the header, ~50 bytes a record; its later updates
		// carry the previous revision instead of 0, a few digits more).
		msg := nats.NewMsg("$KV." + bucket + "." + key)
		msg.Data = b
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		return pub(msg)
	}
	for _, g := range s.Groups {
		if err := put(messaging.BucketGroups, g.GetId(), g); err != nil {
			return bytes, fmt.Errorf("seeding group %s: %w", g.GetId(), err)
		}
	}
	live := 0
	for h := range history {
		// The live records that fall before this point of the history.
		for ; len(s.Instances) > 0 && live < len(s.Instances) && live*history <= h*len(s.Instances); live++ {
			in := s.Instances[live]
			if err := put(messaging.BucketInstances, messaging.InstanceKey(in.GetGroup(), in.GetId()), in); err != nil {
				return bytes, fmt.Errorf("seeding instance %s: %w", in.GetId(), err)
			}
		}
		old := s.gone(h)
		key := messaging.InstanceKey(old.GetGroup(), old.GetId())
		if err := put(messaging.BucketInstances, key, old); err != nil {
			return bytes, fmt.Errorf("seeding removed instance %s: %w", key, err)
		}
		m := nats.NewMsg("$KV." + messaging.BucketInstances + "." + key)
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		if err := pub(m, jetstream.WithMsgTTL(ChurnMarkerTTL)); err != nil {
			return bytes, fmt.Errorf("removing instance %s: %w", key, err)
		}
		if h%50_000 == 0 {
			// Keep the publish window from holding the whole history.
			if err := waitPublished(ctx, js); err != nil {
				return bytes, err
			}
		}
	}
	for ; live < len(s.Instances); live++ {
		in := s.Instances[live]
		if err := put(messaging.BucketInstances, messaging.InstanceKey(in.GetGroup(), in.GetId()), in); err != nil {
			return bytes, fmt.Errorf("seeding instance %s: %w", in.GetId(), err)
		}
	}
	s.Bytes += bytes
	return bytes, waitPublished(ctx, js)
}

func waitPublished(ctx context.Context, js jetstream.JetStream) error {
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("seeding: %w", ctx.Err())
	}
}

// gone is the h-th removed instance of the history: a live record's shape
// (so its size is realistic) under a key of its own, in state Deleted.
func (s *Seeded) gone(h int) *statev1.Instance {
	in := &statev1.Instance{State: statev1.InstanceState_INSTANCE_STATE_DELETED}
	if len(s.Instances) > 0 {
		in = proto.CloneOf(s.Instances[h%len(s.Instances)])
		in.State = statev1.InstanceState_INSTANCE_STATE_DELETED
		in.StateSince = timestamppb.New(in.GetStateSince().AsTime().Add(time.Hour))
	}
	g := s.Groups[h%len(s.Groups)].GetId()
	in.Group = g
	in.Id = fmt.Sprintf("%s-h%08d", g, h)
	in.NodeName = in.Id
	return in
}

// WaitMessages waits until the stream of bucket holds exactly want
// messages (the removed records' markers expired), up to timeout.
func WaitMessages(ctx context.Context, js jetstream.JetStream, bucket string, want uint64, timeout time.Duration) error {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream KV_%s holds %d messages after %s, want %d", bucket, info.State.Msgs, timeout, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Storage is what the bus stores.
type Storage struct {
	// StreamBytes is the sum of every stream's State.Bytes (the messages
	// held), and InstancesBytes the instances bucket's share.
	StreamBytes, InstancesBytes uint64
	// InstancesMsgs and InstancesFirstSeq, InstancesLastSeq describe the
	// instances bucket's stream.
	InstancesMsgs, InstancesFirstSeq, InstancesLastSeq uint64
	// DiskBytes is what the store directory takes on disk (file sizes).
	DiskBytes int64
}

// ReadStorage reads the states of nodesmith's streams (every stream
// messaging declares) and the store directory's size.
func ReadStorage(ctx context.Context, js jetstream.JetStream, storeDir string) (Storage, error) {
	var s Storage
	var names []string
	for _, c := range messaging.StreamConfigs(messaging.DefaultOptions()) {
		names = append(names, c.Name)
	}
	for _, c := range messaging.KeyValueConfigs(messaging.DefaultOptions()) {
		names = append(names, "KV_"+c.Bucket)
	}
	for _, n := range names {
		st, err := js.Stream(ctx, n)
		if err != nil {
			return s, fmt.Errorf("stream %s: %w", n, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return s, fmt.Errorf("stream %s: %w", n, err)
		}
		s.StreamBytes += info.State.Bytes
		if n == "KV_"+messaging.BucketInstances {
			s.InstancesBytes = info.State.Bytes
			s.InstancesMsgs, s.InstancesFirstSeq, s.InstancesLastSeq = info.State.Msgs, info.State.FirstSeq, info.State.LastSeq
		}
	}
	err := filepath.WalkDir(storeDir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		s.DiskBytes += fi.Size()
		return nil
	})
	return s, err
}

// SettleStorage reads the storage every interval until the store's size
// on disk stops shrinking (JetStream compacts the blocks removals left
// mostly empty when it syncs), up to timeout, and returns the last reading.
func SettleStorage(ctx context.Context, js jetstream.JetStream, storeDir string, interval, timeout time.Duration) (Storage, error) {
	deadline := time.Now().Add(timeout)
	last, err := ReadStorage(ctx, js, storeDir)
	if err != nil {
		return last, err
	}
	for same := 0; same < 2 && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(interval):
		}
		s, err := ReadStorage(ctx, js, storeDir)
		if err != nil {
			return last, err
		}
		if s.DiskBytes >= last.DiskBytes {
			same++
		} else {
			same = 0
		}
		last = s
	}
	return last, nil
}
