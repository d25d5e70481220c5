package messaging

import (
	"flag"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// RegisterFlags binds the topology options to --js-* flags.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Replicas, "js-replicas", o.Replicas, "replicas of every JetStream stream and KV bucket (1 embedded, 3 in production)")
	fs.Func("js-storage", "JetStream storage: file or memory (default file)", func(s string) error {
		switch strings.ToLower(s) {
		case "file":
			o.Storage = jetstream.FileStorage
		case "memory":
			o.Storage = jetstream.MemoryStorage
		default:
			return fmt.Errorf("want file or memory, got %q", s)
		}
		return nil
	})
	fs.DurationVar(&o.DuplicateWindow, "js-duplicate-window", o.DuplicateWindow, "how long message ids are remembered for deduplication")
	fs.DurationVar(&o.CloudAckWait, "js-cloud-ack-wait", o.CloudAckWait, "redelivery timeout of cloud commands")
	fs.DurationVar(&o.HookAckWait, "js-hook-ack-wait", o.HookAckWait, "redelivery timeout of hook commands")
	fs.IntVar(&o.MaxDeliver, "js-max-deliver", o.MaxDeliver, "deliveries of a command before it is dropped")
	fs.IntVar(&o.CloudMaxAckPending, "js-cloud-max-ack-pending", o.CloudMaxAckPending, "in-flight cloud commands across all cloud-adapter replicas")
	fs.IntVar(&o.HookMaxAckPending, "js-hook-max-ack-pending", o.HookMaxAckPending, "in-flight hooks across all hook-runner replicas")
	fs.Int64Var(&o.CommandMaxMsgs, "js-command-max-msgs", o.CommandMaxMsgs, "messages the command stream holds at most; a publish beyond it is refused and retried later")
	fs.Int64Var(&o.CommandMaxBytes, "js-command-max-bytes", o.CommandMaxBytes, "bytes the command stream holds at most; a publish beyond it is refused and retried later")
	fs.DurationVar(&o.KVMarkerTTL, "js-kv-marker-ttl", o.KVMarkerTTL, "how long the instances bucket keeps the marker of a removed record; 0 keeps markers forever, only for a bucket without marker TTLs (nats-server < 2.11): once set it can be changed, not turned off")
}
