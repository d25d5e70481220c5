package secrets_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"
	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/libs/testwait"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/sealed"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/secrets"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/metrics"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

func mustKey(t *testing.T, b byte) *sealed.Key {
	t.Helper()
	k, err := sealed.NewKey(bytes.Repeat([]byte{b}, sealed.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Credentials stored with an account through the admin API (sealed in the
// catalog bucket) win over files; they follow changes and deletes, and an
// account the key cannot open falls back to the files with a clear error.
func TestCatalogCredentialsTakePrecedenceAndFollowChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS")
	}
	env := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, messaging.BucketCatalog)
	if err != nil {
		t.Fatal(err)
	}
	key := mustKey(t, 1)
	put := func(account string, k *sealed.Key, c *sealed.Credentials) {
		t.Helper()
		a := &statev1.CloudAccount{Name: account, Provider: "tencentcloud"}
		if c != nil {
			blob, err := k.SealCredentials(account, *c)
			if err != nil {
				t.Fatal(err)
			}
			a.SealedCredentials, a.KeyId = blob, k.ID()
		}
		data, _ := proto.Marshal(&statev1.CatalogEntry{Entry: &statev1.CatalogEntry_Account{Account: a}, Source: "api"})
		if _, err := kv.Put(ctx, messaging.CatalogKey(messaging.CatalogKeyAccount, account), data); err != nil {
			t.Fatal(err)
		}
	}
	// Present before the watch starts: loaded before Synced.
	put("team", key, &sealed.Credentials{KeyID: "cat-id", Secret: "cat-secret"})

	dir := t.TempDir()
	file := filepath.Join(dir, "creds.yaml")
	write(t, file, "accounts:\n  team: {secretId: file-id, secretKey: file-key}\n  other: {secretId: o-id, secretKey: o-key}\n")
	logs := &logtest.Buffer{}
	reg := prometheus.NewRegistry()
	s, err := secrets.New(secrets.Options{File: file, Logger: slog.New(slog.NewTextHandler(logs, nil)), Metrics: metrics.New(reg)})
	if err != nil {
		t.Fatal(err)
	}
	_, cajs := env.ConnectAs(t, natsauth.CloudAdapter)
	w := secrets.NewCatalogWatcher(s, cajs, key)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("catalog watch not synced")
	}
	if c := lookup(t, s, "team"); c.KeyID != "cat-id" || c.Secret != "cat-secret" {
		t.Fatalf("team after sync = %s/%v, want the catalog's", c.KeyID, c.Secret == "cat-secret")
	}
	eventuallyID := func(account, want string) {
		t.Helper()
		testwait.Until(t, 30*time.Second, account+"'s secretId "+want, func() bool {
			c, err := s.Lookup(account)
			return err == nil && c.KeyID == want
		})
	}
	// Rotated through the API.
	put("team", key, &sealed.Credentials{KeyID: "cat-id-2", Secret: "cat-secret-2"})
	eventuallyID("team", "cat-id-2")
	// A new account that only the catalog knows.
	// (Temporary credentials, e.g. an Alibaba Cloud STS AccessKey: the
	// security token travels with them.)
	put("fresh", key, &sealed.Credentials{KeyID: "STS.fresh-id", Secret: "fresh-secret", SecurityToken: "fresh-sts-token"})
	eventuallyID("fresh", "STS.fresh-id")
	if c := lookup(t, s, "fresh"); c.Secret != "fresh-secret" || c.SecurityToken != "fresh-sts-token" {
		t.Fatal("the catalog's temporary credentials lost their secret or security token")
	}
	eventuallyGauge(t, reg, "in_use", 2)
	// Sealed under another key: not usable, files apply, the error says why.
	put("team", mustKey(t, 2), &sealed.Credentials{KeyID: "x", Secret: "other-key-secret"})
	eventuallyID("team", "file-id")
	eventuallyGauge(t, reg, "unusable", 1)
	eventuallyGauge(t, reg, "in_use", 1)
	// Credentials cleared: files apply.
	put("other", key, &sealed.Credentials{KeyID: "o-cat", Secret: "o-cat-secret"})
	eventuallyID("other", "o-cat")
	put("other", key, nil)
	eventuallyID("other", "o-id")
	// Account deleted: gone from the catalog overlay.
	if err := kv.Delete(ctx, messaging.CatalogKey(messaging.CatalogKeyAccount, "fresh")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "the deleted catalog account to lose its credentials", func() bool {
		_, err := s.Lookup("fresh")
		return err != nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "sealed with a different key") || !strings.Contains(out, "sealed_with_key="+mustKey(t, 2).ID()) {
		t.Errorf("the key mismatch is not reported clearly:\n%s", out)
	}
	for _, secret := range []string{"cat-secret", "fresh-secret", "other-key-secret", "file-key"} {
		if strings.Contains(out, secret) {
			t.Errorf("a log line holds the secret %q", secret)
		}
	}
}

// eventuallyGauge waits until nodesmith_cloud_catalog_credentials{state}
// equals want.
func eventuallyGauge(t *testing.T, reg *prometheus.Registry, state string, want float64) {
	t.Helper()
	labels := map[string]string{"state": state}
	testwait.Until(t, 30*time.Second, fmt.Sprintf("catalog credentials gauge %s = %v", state, want), func() bool {
		return metricstest.Value(t, reg, "nodesmith_cloud_catalog_credentials", labels) == want
	})
}

// Without a key, sealed credentials are reported and not used.
func TestCatalogCredentialsWithoutAKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS")
	}
	env := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, messaging.BucketCatalog)
	if err != nil {
		t.Fatal(err)
	}
	blob, _ := mustKey(t, 1).SealCredentials("team", sealed.Credentials{KeyID: "i", Secret: "k"})
	data, _ := proto.Marshal(&statev1.CatalogEntry{Entry: &statev1.CatalogEntry_Account{Account: &statev1.CloudAccount{Name: "team", SealedCredentials: blob, KeyId: "abc"}}})
	if _, err := kv.Put(ctx, messaging.CatalogKey(messaging.CatalogKeyAccount, "team"), data); err != nil {
		t.Fatal(err)
	}
	s, err := secrets.New(secrets.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, cajs := env.ConnectAs(t, natsauth.CloudAdapter)
	w := secrets.NewCatalogWatcher(s, cajs, nil)
	go func() { _ = w.Run(ctx) }()
	<-w.Synced()
	if _, err := s.Lookup("team"); err == nil {
		t.Fatal("sealed credentials were used without a key")
	}
	var _ ports.Credentials = s
}
