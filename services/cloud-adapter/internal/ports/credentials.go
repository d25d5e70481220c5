package ports

import (
	"errors"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
)

// ErrNoCredentials is returned by Credentials.Lookup for an unknown account.
var ErrNoCredentials = errors.New("no credentials for account")

// Credential is one cloud account's API key (libs/cloudspec): key id,
// secret and, for temporary (STS) credentials, a security token, whatever
// the cloud calls them. Its String, GoString and LogValue hide the secret,
// so printing or logging one by mistake leaks nothing.
type Credential = cloudspec.Credentials

// Credentials gives the current credential of an account. Implementations
// pick up rotated secrets without a restart and are safe for concurrent use.
type Credentials interface {
	// Lookup returns account's credential or an error wrapping
	// ErrNoCredentials.
	Lookup(account string) (Credential, error)
}
