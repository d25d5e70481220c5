package service

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
)

func TestHeartbeat(t *testing.T) {
	tests := []struct {
		name string
		cfg  jetstream.ConsumerConfig
		want time.Duration
	}{
		{"ack wait only", jetstream.ConsumerConfig{AckWait: 60 * time.Second}, 10 * time.Second},
		{"default ack wait", jetstream.ConsumerConfig{AckWait: messaging.DefaultAckWait}, messaging.DefaultAckWait / 3},
		{"short ack wait", jetstream.ConsumerConfig{AckWait: 3 * time.Second}, time.Second},
		{"backoff shorter than ack wait", jetstream.ConsumerConfig{AckWait: 60 * time.Second, BackOff: []time.Duration{time.Second, 5 * time.Second}}, time.Second / 3},
		{"tiny backoff is floored", jetstream.ConsumerConfig{AckWait: time.Minute, BackOff: []time.Duration{10 * time.Millisecond}}, 100 * time.Millisecond},
		{"unset", jetstream.ConsumerConfig{}, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := heartbeat(tt.cfg); got != tt.want {
				t.Fatalf("heartbeat = %v, want %v", got, tt.want)
			}
		})
	}
	// The real topology: whatever it holds, a beat must come well within
	// the first delivery's ack deadline.
	for _, cc := range messaging.ConsumerConfigs(messaging.DefaultOptions())[messaging.CommandStream] {
		if cc.Durable != messaging.ConsumerHookRunner {
			continue
		}
		first := cc.AckWait
		if len(cc.BackOff) > 0 {
			first = cc.BackOff[0]
		}
		if hb := heartbeat(cc); hb*3 > first {
			t.Fatalf("heartbeat %v too slow for a first ack deadline of %v", hb, first)
		}
	}
}
