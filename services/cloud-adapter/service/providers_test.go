package service

import (
	"io"
	"log/slog"
	"testing"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/alibaba"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/tencent"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

type noCreds struct{}

func (noCreds) Lookup(string) (ports.Credential, error) {
	return ports.Credential{}, ports.ErrNoCredentials
}

// Every provider cloudspec knows has an adapter, the one of that cloud:
// commands pick it by their target's provider (the account's).
func TestEveryCloudspecProviderHasItsAdapter(t *testing.T) {
	env := providerEnv{cfg: DefaultConfig(), creds: noCreds{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	want := map[string]func(ports.Cloud) bool{
		cloudspec.Tencent: func(c ports.Cloud) bool { _, ok := c.(*tencent.Cloud); return ok },
		cloudspec.Alibaba: func(c ports.Cloud) bool { _, ok := c.(*alibaba.Cloud); return ok },
	}
	for _, name := range cloudspec.Names() {
		build, ok := providers[name]
		if !ok {
			t.Fatalf("no adapter for provider %q", name)
		}
		c, err := build(env)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if is, ok := want[name]; !ok || !is(c) {
			t.Fatalf("%s: adapter %T", name, c)
		}
	}
	if len(providers) != len(cloudspec.Names()) {
		t.Fatalf("%d adapters for %d providers", len(providers), len(cloudspec.Names()))
	}
}
