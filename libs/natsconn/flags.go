package natsconn

import "flag"

// RegisterFlags binds o's fields to --nats-* flags (and so to NODESMITH_NATS_*
// environment variables through config.Parse).
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	if o.URL == "" {
		o.URL = "nats://127.0.0.1:4222"
	}
	fs.StringVar(&o.URL, "nats-url", o.URL, "NATS server URL(s), comma separated")
	fs.StringVar(&o.CredsFile, "nats-creds-file", o.CredsFile, "NATS .creds file (JWT and NKey seed)")
	fs.StringVar(&o.NKeyFile, "nats-nkey-file", o.NKeyFile, "NATS NKey seed file")
	fs.StringVar(&o.UserFile, "nats-user-file", o.UserFile, "file holding the NATS user name")
	fs.StringVar(&o.PasswordFile, "nats-password-file", o.PasswordFile, "file holding the NATS password")
	fs.StringVar(&o.TokenFile, "nats-token-file", o.TokenFile, "file holding a NATS token")
	fs.StringVar(&o.CAFile, "nats-ca-file", o.CAFile, "CA bundle to verify the NATS server's TLS certificate")
	fs.StringVar(&o.CertFile, "nats-cert-file", o.CertFile, "client certificate for NATS mTLS")
	fs.StringVar(&o.KeyFile, "nats-key-file", o.KeyFile, "client key for NATS mTLS")
	fs.DurationVar(&o.DrainTimeout, "nats-drain-timeout", o.DrainTimeout, "how long shutdown waits for in-flight NATS work")
}
