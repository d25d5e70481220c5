package tencent

import (
	"context"
	"math"
	"strings"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/profile"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
	tag "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/tag/v20180813"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
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
	DescribeZoneInstanceConfigInfosWithContext(ctx context.Context, req *cvm.DescribeZoneInstanceConfigInfosRequest) (*cvm.DescribeZoneInstanceConfigInfosResponse, error)
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
type ClientOptions = cloudcall.ClientOptions

// Clients builds and caches one SDK client per (account, region).
type Clients struct {
	o     ClientOptions
	cache *cloudcall.ClientCache[*sdkClients]
}

// NewClients returns a client cache.
func NewClients(o ClientOptions) *Clients {
	o = o.WithDefaults()
	return &Clients{o: o, cache: cloudcall.NewClientCache[*sdkClients](o.Credentials)}
}

// Get implements ClientFunc.
func (c *Clients) Get(account, region string) (API, error) {
	cl, err := c.cache.Get(account, region, func() (*sdkClients, error) {
		cpf := profile.NewClientProfile()
		cpf.Language = "en-US"
		cpf.HttpProfile.ReqTimeout = int(math.Ceil(c.o.Timeout.Seconds()))
		cpf.HttpProfile.Endpoint = c.o.Endpoint
		cpf.HttpProfile.Scheme = strings.ToUpper(c.o.Scheme)
		// Retries are ours (bounded, jittered, rate-limited); the SDK's would
		// also inject random ClientTokens, which must never happen.
		cpf.NetworkFailureMaxRetries = 0
		cpf.RateLimitExceededMaxRetries = 0
		cred := accountCredential{account: account, store: c.o.Credentials}
		cl, err := cvm.NewClient(cred, region, cpf)
		if err != nil {
			return nil, err
		}
		cl.WithHttpTransport(c.o.Transport)
		// The Tag service has its own host (tag.tencentcloudapi.com); an
		// Endpoint override (the emulator) serves both.
		tcpf := *cpf
		tcpf.HttpProfile = profile.NewHttpProfile()
		*tcpf.HttpProfile = *cpf.HttpProfile
		tc, err := tag.NewClient(cred, region, &tcpf)
		if err != nil {
			return nil, err
		}
		tc.WithHttpTransport(c.o.Transport)
		return &sdkClients{Client: cl, tag: tc}, nil
	})
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return cl, nil
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
