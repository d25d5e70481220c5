package natsauth_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/conf"

	"github.com/nodesmith/nodesmith/libs/natsauth"
)

// The committed production authorization block is what the generator
// writes from the Go lists (make nats-auth after changing them).
func TestCommittedAuthorizationConfigIsGenerated(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "kustomize", "base", "files", "nats-authorization.conf")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != natsauth.Config() {
		t.Fatalf("%s is stale: run make nats-auth", path)
	}
}

// The generated block parses, with the NKeys from the environment.
func TestConfigParses(t *testing.T) {
	for _, id := range natsauth.All() {
		t.Setenv(id.EnvVar(), "U"+strings.Repeat("A", 55))
	}
	m, err := conf.Parse(natsauth.Config())
	if err != nil {
		t.Fatal(err)
	}
	users := m["authorization"].(map[string]any)["users"].([]any)
	if len(users) != len(natsauth.All()) {
		t.Fatalf("%d users, want %d", len(users), len(natsauth.All()))
	}
}

// Each identity subscribes only to its own inbox (and lifecycle to the
// operations it answers, the cloud adapter to the instance-shape
// questions): no service can read another's replies.
func TestSubscriptionsAreOwnInboxOnly(t *testing.T) {
	for _, id := range natsauth.All() {
		want := []string{"_INBOX." + string(id) + ".>"}
		answers := true
		switch id {
		case natsauth.Lifecycle:
			want = append([]string{"nodesmith.lifecycle.ops"}, want...)
		case natsauth.CloudAdapter:
			want = append([]string{"nodesmith.cloud.shapes"}, want...)
		default:
			answers = false
		}
		if got := id.Permissions().Subscribe; !slices.Equal(got, want) {
			t.Errorf("%s subscribes %q, want %q", id, got, want)
		}
		if id.Permissions().AllowResponses != answers {
			t.Errorf("%s: allow_responses is for the services answering requests only (lifecycle, cloud adapter)", id)
		}
		for _, s := range id.Permissions().Publish {
			if s == ">" || s == "$JS.API.>" || s == "$KV.>" || s == "nodesmith.>" {
				t.Errorf("%s may publish %q", id, s)
			}
		}
	}
}
