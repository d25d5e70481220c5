package cloudtest

import (
	"sync"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Creds is a ports.Credentials tests can change while adapters use it
// (key rotation).
type Creds struct {
	mu sync.Mutex
	m  map[string]ports.Credential
}

// NewCreds returns Creds holding m's accounts.
func NewCreds(m map[string]ports.Credential) *Creds {
	c := &Creds{m: map[string]ports.Credential{}}
	for a, cr := range m {
		c.m[a] = cr
	}
	return c
}

// Lookup implements ports.Credentials.
func (c *Creds) Lookup(account string) (ports.Credential, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cr, ok := c.m[account]
	if !ok {
		return ports.Credential{}, ports.ErrNoCredentials
	}
	return cr, nil
}

// Set installs account's credential.
func (c *Creds) Set(account string, cr ports.Credential) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[account] = cr
}
