// Package natsconn connects services to NATS with production defaults:
// reconnect forever with jittered backoff, credentials and TLS from files,
// logged connection events, and a drain on shutdown so in-flight messages are
// processed or returned rather than dropped.
package natsconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/nodesmith/nodesmith/libs/backoff"
)

// Options configure a connection. Secrets are file paths, never values.
type Options struct {
	URL  string
	Name string
	// CredsFile is a NATS .creds file (JWT + NKey seed).
	CredsFile string
	// NKeyFile is an NKey seed file.
	NKeyFile string
	// NKeySeed is an NKey seed held in memory: only for hosts that
	// generate identities at start (the embedded stack, tests); deployed
	// services read NKeyFile. No flag sets it.
	NKeySeed []byte
	// InboxPrefix is the prefix of the connection's reply subjects
	// (default "_INBOX"); each service has its own, the only one its NATS
	// identity may subscribe to.
	InboxPrefix string
	// UserFile and PasswordFile hold user/password credentials.
	UserFile, PasswordFile string
	// TokenFile holds a bearer token.
	TokenFile string
	// TLS: CAFile to verify the server; CertFile/KeyFile for client auth.
	CAFile, CertFile, KeyFile string
	// ConnectTimeout bounds the first connection attempt (retried until ctx ends).
	ConnectTimeout time.Duration
	// DrainTimeout bounds Drain at shutdown.
	DrainTimeout time.Duration
	Logger       *slog.Logger
}

// Connect dials NATS, retrying until ctx is done, and returns a connection
// that reconnects forever.
func Connect(ctx context.Context, o Options) (*nats.Conn, error) {
	if o.URL == "" {
		return nil, errors.New("nats url is empty")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 30 * time.Second
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(500*time.Millisecond, 2*time.Second),
		nats.Timeout(o.ConnectTimeout),
		nats.DrainTimeout(o.DrainTimeout),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Error("nats async error", "subject", subject, "err", err)
		}),
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading nkey seed %s: %w", o.NKeyFile, err)
		}
		opts = append(opts, opt)
	}
	if len(o.NKeySeed) > 0 {
		if o.NKeyFile != "" {
			return nil, errors.New("nats nkey file and in-memory seed are exclusive")
		}
		opt, err := NKeySeedOption(o.NKeySeed)
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if o.UserFile != "" || o.PasswordFile != "" {
		if o.UserFile == "" || o.PasswordFile == "" {
			return nil, errors.New("nats user and password files must be set together")
		}
		opts = append(opts, nats.UserInfoHandler(func() (string, string) {
			return readSecret(o.UserFile), readSecret(o.PasswordFile)
		}))
	}
	if o.TokenFile != "" {
		opts = append(opts, nats.TokenHandler(func() string { return readSecret(o.TokenFile) }))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" || o.KeyFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}

	b := backoff.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.JitterNone}.New()
	for {
		nc, err := nats.Connect(o.URL, opts...)
		if err == nil {
			log.Info("nats connected", "url", nc.ConnectedUrlRedacted(), "name", o.Name)
			return nc, nil
		}
		d := b.Next()
		log.Warn("nats connect failed, retrying", "err", err, "in", d)
		if werr := backoff.Wait(ctx, d); werr != nil {
			return nil, fmt.Errorf("connecting to nats: %w (last error: %w)", werr, err)
		}
	}
}

// Drain drains nc (finishing in-flight handlers and flushing publishes) and
// waits for it to close, at most the connection's drain timeout.
func Drain(nc *nats.Conn) {
	if nc == nil || nc.IsClosed() {
		return
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	<-closed
}

// NKeySeedOption authenticates a connection with an NKey seed held in
// memory (nats.NkeyOptionFromSeed reads it from a file).
func NKeySeedOption(seed []byte) (nats.Option, error) {
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("parsing nkey seed: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("nkey public key: %w", err)
	}
	return nats.Nkey(pub, kp.Sign), nil
}
