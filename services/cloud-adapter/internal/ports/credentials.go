package ports

import (
	"errors"
	"log/slog"
)

// ErrNoCredentials is returned by Credentials.Lookup for an unknown account.
var ErrNoCredentials = errors.New("no credentials for account")

// Credential is one cloud account's API key. Its String, GoString and
// LogValue hide the secret, so printing or logging one by mistake leaks
// nothing.
type Credential struct {
	SecretID  string
	SecretKey string
	// Token is an optional session token for temporary credentials.
	Token string
}

const redacted = "[redacted]"

func (Credential) String() string            { return redacted }
func (Credential) GoString() string          { return redacted }
func (Credential) LogValue() slog.Value      { return slog.StringValue(redacted) }
func (c Credential) Valid() bool             { return c.SecretID != "" && c.SecretKey != "" }
func (c Credential) Equal(o Credential) bool { return c == o }

// Credentials gives the current credential of an account. Implementations
// pick up rotated secrets without a restart and are safe for concurrent use.
type Credentials interface {
	// Lookup returns account's credential or an error wrapping
	// ErrNoCredentials.
	Lookup(account string) (Credential, error)
}
