package natsauth

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/nodesmith/nodesmith/libs/natsconn"
)

// Keys hold an NKey pair per identity: generated fresh at every start by
// the embedded stack and tests, which give each service its own seed.
// Deployed services get their seed from a Secret instead (NKeyFile).
type Keys struct {
	seeds  map[Identity][]byte
	public map[Identity]string
}

// GenerateKeys makes a fresh NKey user pair for every identity.
func GenerateKeys() (*Keys, error) {
	k := &Keys{seeds: map[Identity][]byte{}, public: map[Identity]string{}}
	for _, id := range All() {
		seed, pub, err := newUser()
		if err != nil {
			return nil, fmt.Errorf("natsauth: creating the %s nkey: %w", id, err)
		}
		k.seeds[id], k.public[id] = seed, pub
	}
	return k, nil
}

// Seed is id's private seed (the service's secret).
func (k *Keys) Seed(id Identity) []byte { return k.seeds[id] }

// PublicKey is id's public NKey (what the server holds).
func (k *Keys) PublicKey(id Identity) string { return k.public[id] }

// PublicKeys maps every identity to its public NKey.
func (k *Keys) PublicKeys() map[Identity]string {
	m := make(map[Identity]string, len(k.public))
	for id, pk := range k.public {
		m[id] = pk
	}
	return m
}

// ConnOptions sets o up to connect as id: its seed, its inbox prefix and,
// unless o names the connection, its name.
func (k *Keys) ConnOptions(id Identity, o natsconn.Options) natsconn.Options {
	o.NKeySeed, o.NKeyFile = k.Seed(id), ""
	o.InboxPrefix = id.InboxPrefix()
	if o.Name == "" {
		o.Name = string(id)
	}
	return o
}

func validUserKey(pk string) bool { return nkeys.IsValidPublicUserKey(pk) }

// ServerUsers are the embedded server's users for these keys.
func (k *Keys) ServerUsers() ([]*server.NkeyUser, error) { return ServerUsers(k.PublicKeys()) }

// NATSOptions are the nats.go options that authenticate as id (its seed
// and inbox prefix), for tools and harnesses that dial themselves.
func (k *Keys) NATSOptions(id Identity) []nats.Option {
	opt, err := natsconn.NKeySeedOption(k.Seed(id))
	if err != nil { // cannot happen: the seed was generated here
		panic(err)
	}
	return []nats.Option{opt, nats.CustomInboxPrefix(id.InboxPrefix())}
}

// WriteSeed writes id's seed to path (mode 0600) for a service process's
// --nats-nkey-file.
func (k *Keys) WriteSeed(path string, id Identity) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, append(append([]byte(nil), k.Seed(id)...), '\n'), 0o600)
}

// Admin is an unrestricted NATS user for test and harness scaffolding that
// plays no service (observing every message, deleting a bucket to simulate
// state loss). The production configuration never has one: add its User
// only to servers started by tests and harnesses.
type Admin struct {
	// User admits the admin to an embedded server.
	User *server.NkeyUser
	seed []byte
}

// NewAdmin makes a fresh admin NKey pair.
func NewAdmin() (*Admin, error) {
	seed, pub, err := newUser()
	if err != nil {
		return nil, fmt.Errorf("natsauth: creating the admin nkey: %w", err)
	}
	return &Admin{User: &server.NkeyUser{Nkey: pub}, seed: seed}, nil
}

// newUser makes a fresh NKey user pair: its seed and public key.
func newUser() (seed []byte, pub string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", err
	}
	if seed, err = kp.Seed(); err != nil {
		return nil, "", err
	}
	if pub, err = kp.PublicKey(); err != nil {
		return nil, "", err
	}
	return seed, pub, nil
}

// NATSOptions authenticate a connection as the admin.
func (a *Admin) NATSOptions() ([]nats.Option, error) {
	auth, err := natsconn.NKeySeedOption(a.seed)
	if err != nil {
		return nil, err
	}
	return []nats.Option{auth, nats.Name("admin")}, nil
}
