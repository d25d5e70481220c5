package secrets

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/sealed"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Catalog credentials: accounts written through the admin API may carry
// credentials sealed by the gateway (libs/sealed, the account name as
// associated data). WatchCatalog follows the catalog bucket's accounts and
// opens them with the same key (--secrets-key-file); they take precedence
// over the files and the environment for their account, so an operator's
// write through the API takes effect on every replica within moments,
// without a restart. An account whose sealed credentials cannot be opened
// (no key, another key) falls back to the other sources, with an error
// logged once per change that names the account and the key ids, never
// a secret.

// SetCatalogCredential installs (c non-nil) or removes the catalog
// credentials of account.
func (s *Store) SetCatalogCredential(account string, c *ports.Credential) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.catalog == nil {
		s.catalog = map[string]ports.Credential{}
	}
	if c == nil {
		delete(s.catalog, account)
		return
	}
	s.catalog[account] = *c
}

// pruneCatalog removes catalog credentials of accounts not in keep.
func (s *Store) pruneCatalog(keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a := range s.catalog {
		if !keep[a] {
			delete(s.catalog, a)
		}
	}
}

// CatalogWatcher mirrors the catalog's sealed account credentials into a
// Store.
type CatalogWatcher struct {
	store  *Store
	key    *sealed.Key
	js     jetstream.JetStream
	synced chan struct{}
	// unusable holds the accounts whose sealed credentials cannot be
	// opened (only the watch goroutine touches it).
	unusable map[string]bool
}

// NewCatalogWatcher returns a watcher; key may be nil (sealed credentials
// then cannot be used and are reported).
func NewCatalogWatcher(s *Store, js jetstream.JetStream, key *sealed.Key) *CatalogWatcher {
	return &CatalogWatcher{store: s, key: key, js: js, synced: make(chan struct{}), unusable: map[string]bool{}}
}

// Synced is closed once the catalog's accounts are loaded for the first time.
func (w *CatalogWatcher) Synced() <-chan struct{} { return w.synced }

// Run watches until ctx ends, re-establishing the watch with backoff.
func (w *CatalogWatcher) Run(ctx context.Context) error {
	prefix := messaging.CatalogKeyAccount + "."
	synced := false
	return messaging.WatchKV(ctx, w.js, messaging.BucketCatalog, messaging.CatalogKey(messaging.CatalogKeyAccount, ">"), 200*time.Millisecond, messaging.KVMirror{
		Apply: func(e jetstream.KeyValueEntry) {
			w.apply(strings.TrimPrefix(e.Key(), prefix), e)
			if synced {
				w.report()
			}
		},
		Synced: func(keys map[string]struct{}) {
			// Forget accounts deleted while the watch was down.
			seen := make(map[string]bool, len(keys))
			for k := range keys {
				seen[strings.TrimPrefix(k, prefix)] = true
			}
			w.store.pruneCatalog(seen)
			for a := range w.unusable {
				if !seen[a] {
					delete(w.unusable, a)
				}
			}
			w.report()
			if !synced {
				synced = true
				close(w.synced)
			}
		},
		Restarting: func(err error, delay time.Duration) {
			w.store.log.Warn("catalog credentials watch ended, re-establishing", "err", err, "in", delay)
		},
	})
}

// report updates the catalog credentials gauge.
func (w *CatalogWatcher) report() {
	w.store.mu.RLock()
	inUse := len(w.store.catalog)
	w.store.mu.RUnlock()
	w.store.o.Metrics.CatalogCredentials(inUse, len(w.unusable))
}

func (w *CatalogWatcher) apply(account string, e jetstream.KeyValueEntry) {
	log := w.store.log.With("account", account)
	delete(w.unusable, account)
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		w.store.SetCatalogCredential(account, nil)
		return
	}
	var rec statev1.CatalogEntry
	if err := proto.Unmarshal(e.Value(), &rec); err != nil {
		log.Error("skipping an undecodable catalog account", "revision", e.Revision(), "err", err)
		return
	}
	a := rec.GetAccount()
	if len(a.GetSealedCredentials()) == 0 {
		w.store.SetCatalogCredential(account, nil)
		log.Debug("catalog account has no stored credentials; files and environment apply")
		return
	}
	if w.key == nil {
		w.store.SetCatalogCredential(account, nil)
		w.unusable[account] = true
		log.Error("catalog account has sealed credentials but this cloud adapter has no --secrets-key-file; using files and environment instead",
			"sealed_with_key", a.GetKeyId())
		return
	}
	c, err := w.key.OpenCredentials(account, a.GetSealedCredentials(), a.GetKeyId())
	if err != nil {
		w.store.SetCatalogCredential(account, nil)
		w.unusable[account] = true
		log.Error("cannot open the catalog account's credentials; using files and environment instead",
			"sealed_with_key", a.GetKeyId(), "our_key", w.key.ID(), "err", err)
		return
	}
	w.store.SetCatalogCredential(account, &c)
	log.Info("catalog credentials in use for account", "key", w.key.ID(), "revision", e.Revision())
}
