package tencent

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/profile"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
	tag "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/tag/v20180813"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// API lists the only calls the adapter makes (CVM's, and the Tag
// service's AttachResourcesTag for tagging existing VMs), so tests can
// stand in for the SDK and a reader sees the whole cloud surface at a
// glance.
type API interface {
	RunInstancesWithContext(ctx context.Context, req *cvm.RunInstancesRequest) (*cvm.RunInstancesResponse, error)
	DescribeInstancesWithContext(ctx context.Context, req *cvm.DescribeInstancesRequest) (*cvm.DescribeInstancesResponse, error)
	TerminateInstancesWithContext(ctx context.Context, req *cvm.TerminateInstancesRequest) (*cvm.TerminateInstancesResponse, error)
	AttachResourcesTagWithContext(ctx context.Context, req *tag.AttachResourcesTagRequest) (*tag.AttachResourcesTagResponse, error)
}

// sdkClients is the SDK's CVM client with the Tag service's for one
// account and region.
type sdkClients struct {
	*cvm.Client
	tag *tag.Client
}

func (s *sdkClients) AttachResourcesTagWithContext(ctx context.Context, req *tag.AttachResourcesTagRequest) (*tag.AttachResourcesTagResponse, error) {
	return s.tag.AttachResourcesTagWithContext(ctx, req)
}

var _ API = (*sdkClients)(nil)

// ClientFunc returns the API for an account and region. Errors are
// *ports.CloudError (auth when the account has no credentials).
type ClientFunc func(account, region string) (API, error)

// ClientOptions configure SDK clients.
type ClientOptions struct {
	// Credentials supplies each account's key, looked up on every request
	// so rotated secrets apply without new clients.
	Credentials ports.Credentials
	// Endpoint overrides the API host ("host:port"), e.g. for the emulator.
	Endpoint string
	// Scheme is "https" (default) or "http".
	Scheme string
	// Timeout bounds one HTTP request.
	Timeout time.Duration
	// Transport is shared by every client; nil means a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
}

// Clients builds and caches one SDK client per (account, region).
type Clients struct {
	o  ClientOptions
	mu sync.Mutex
	m  map[[2]string]*sdkClients
}

// NewClients returns a client cache.
func NewClients(o ClientOptions) *Clients {
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	return &Clients{o: o, m: map[[2]string]*sdkClients{}}
}

// Get implements ClientFunc.
func (c *Clients) Get(account, region string) (API, error) {
	if _, err := c.o.Credentials.Lookup(account); err != nil {
		return nil, ports.NewAuthError("NoCredentials", fmt.Sprintf("no credentials configured for account %q", account))
	}
	if region == "" {
		return nil, ports.NewInvalidParametersError("MissingRegion", "the command's target has no region")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := [2]string{account, region}
	if cl, ok := c.m[k]; ok {
		return cl, nil
	}
	cpf := profile.NewClientProfile()
	cpf.Language = "en-US"
	cpf.HttpProfile.ReqTimeout = int(math.Ceil(c.o.Timeout.Seconds()))
	cpf.HttpProfile.Endpoint = c.o.Endpoint
	if c.o.Scheme != "" {
		cpf.HttpProfile.Scheme = strings.ToUpper(c.o.Scheme)
	}
	// Retries are ours (bounded, jittered, rate-limited); the SDK's would
	// also inject random ClientTokens, which must never happen.
	cpf.NetworkFailureMaxRetries = 0
	cpf.RateLimitExceededMaxRetries = 0
	cred := accountCredential{account: account, store: c.o.Credentials}
	cl, err := cvm.NewClient(cred, region, cpf)
	if err != nil {
		return nil, ports.NewInvalidParametersError("ClientError", fmt.Sprintf("creating CVM client for %s/%s: %v", account, region, err))
	}
	cl.WithHttpTransport(c.o.Transport)
	// The Tag service has its own host (tag.tencentcloudapi.com); an
	// Endpoint override (the emulator) serves both.
	tcpf := *cpf
	tcpf.HttpProfile = profile.NewHttpProfile()
	*tcpf.HttpProfile = *cpf.HttpProfile
	tc, err := tag.NewClient(cred, region, &tcpf)
	if err != nil {
		return nil, ports.NewInvalidParametersError("ClientError", fmt.Sprintf("creating Tag client for %s/%s: %v", account, region, err))
	}
	tc.WithHttpTransport(c.o.Transport)
	both := &sdkClients{Client: cl, tag: tc}
	c.m[k] = both
	return both, nil
}

// accountCredential implements the SDK's CredentialIface by looking the
// account's key up for every request.
type accountCredential struct {
	account string
	store   ports.Credentials
}

func (a accountCredential) get() ports.Credential {
	c, _ := a.store.Lookup(a.account) // a missing key signs with "" and gets AuthFailure back
	return c
}

func (a accountCredential) GetSecretId() string  { return a.get().KeyID }         //nolint:revive // SDK interface
func (a accountCredential) GetSecretKey() string { return a.get().Secret }        //nolint:revive // SDK interface
func (a accountCredential) GetToken() string     { return a.get().SecurityToken } //nolint:revive // SDK interface

// GetCredential returns one consistent snapshot of the key, as the SDK
// signs with it.
func (a accountCredential) GetCredential() (string, string, string) {
	c := a.get()
	return c.KeyID, c.Secret, c.SecurityToken
}
