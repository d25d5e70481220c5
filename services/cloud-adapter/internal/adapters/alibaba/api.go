package alibaba

import (
	"context"
	"net/http"
	"strings"
	"sync"

	openapi "github.com/alibabacloud-go/darabonba-openapi/v2/client"
	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"
	"github.com/aliyun/credentials-go/credentials"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// API lists the only ECS calls the adapter makes, so tests can stand in
// for the SDK and a reader sees the whole cloud surface at a glance.
type API interface {
	RunInstancesWithContext(ctx context.Context, req *ecs.RunInstancesRequest, rt *dara.RuntimeOptions) (*ecs.RunInstancesResponse, error)
	DescribeInstancesWithContext(ctx context.Context, req *ecs.DescribeInstancesRequest, rt *dara.RuntimeOptions) (*ecs.DescribeInstancesResponse, error)
	DeleteInstancesWithContext(ctx context.Context, req *ecs.DeleteInstancesRequest, rt *dara.RuntimeOptions) (*ecs.DeleteInstancesResponse, error)
	TagResourcesWithContext(ctx context.Context, req *ecs.TagResourcesRequest, rt *dara.RuntimeOptions) (*ecs.TagResourcesResponse, error)
	DescribeInstanceTypesWithContext(ctx context.Context, req *ecs.DescribeInstanceTypesRequest, rt *dara.RuntimeOptions) (*ecs.DescribeInstanceTypesResponse, error)
	DescribeAvailableResourceWithContext(ctx context.Context, req *ecs.DescribeAvailableResourceRequest, rt *dara.RuntimeOptions) (*ecs.DescribeAvailableResourceResponse, error)
}

var _ API = (*ecs.Client)(nil)

// ClientFunc returns the API for an account and region. Errors are
// *ports.CloudError (auth when the account has no credentials).
type ClientFunc func(account, region string) (API, error)

// ClientOptions configure SDK clients; Credentials are the accounts' RAM
// AccessKeys (and STS tokens).
type ClientOptions = cloudcall.ClientOptions

// Clients builds and caches the SDK clients of each (account, region).
// An SDK client is not safe for concurrent use (every RPC call reads and
// clears its debug headers field), so each (account, region) has a pool
// and a call holds a client of its own for its duration.
type Clients struct {
	o     ClientOptions
	http  *httpClient
	cache *cloudcall.ClientCache[*pooled]
}

// NewClients returns a client cache.
func NewClients(o ClientOptions) *Clients {
	o = o.WithDefaults()
	return &Clients{o: o, http: &httpClient{c: &http.Client{Transport: o.Transport, Timeout: o.Timeout}}, cache: cloudcall.NewClientCache[*pooled](o.Credentials)}
}

// Get implements ClientFunc.
func (c *Clients) Get(account, region string) (API, error) {
	p, err := c.cache.Get(account, region, func() (*pooled, error) {
		cfg := &openapi.Config{
			RegionId:   dara.String(region),
			Protocol:   dara.String(strings.ToLower(c.o.Scheme)),
			Credential: accountCredential{account: account, store: c.o.Credentials},
			// Our transport and timeout; no SDK retries (RetryOptions nil):
			// retries are ours, bounded, jittered and rate-limited.
			HttpClient:     c.http,
			ReadTimeout:    dara.Int(int(c.o.Timeout.Milliseconds())),
			ConnectTimeout: dara.Int(int(c.o.Timeout.Milliseconds())),
		}
		if c.o.Endpoint != "" {
			cfg.Endpoint = dara.String(c.o.Endpoint)
		}
		cl, err := ecs.NewClient(cfg)
		if err != nil {
			return nil, err
		}
		p := &pooled{cfg: cfg}
		p.pool.Put(cl)
		return p, nil
	})
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return p, nil
}

// httpClient sends the SDK's requests with one shared http.Client (the
// SDK's own keeps a client per host with its own transport).
type httpClient struct{ c *http.Client }

func (h *httpClient) Call(req *http.Request, _ *http.Transport) (*http.Response, error) {
	return h.c.Do(req)
}

// pooled is the API of one (account, region) over a pool of SDK clients.
type pooled struct {
	cfg  *openapi.Config
	pool sync.Pool
}

func (p *pooled) get() (*ecs.Client, error) {
	if cl, ok := p.pool.Get().(*ecs.Client); ok {
		return cl, nil
	}
	// The same configuration built a client before, so this succeeds.
	return ecs.NewClient(p.cfg)
}

func (p *pooled) RunInstancesWithContext(ctx context.Context, req *ecs.RunInstancesRequest, rt *dara.RuntimeOptions) (*ecs.RunInstancesResponse, error) {
	cl, err := p.get()
	if err != nil {
		return nil, err
	}
	defer p.pool.Put(cl)
	return cl.RunInstancesWithContext(ctx, req, rt)
}

func (p *pooled) DescribeInstancesWithContext(ctx context.Context, req *ecs.DescribeInstancesRequest, rt *dara.RuntimeOptions) (*ecs.DescribeInstancesResponse, error) {
	cl, err := p.get()
	if err != nil {
		return nil, err
	}
	defer p.pool.Put(cl)
	return cl.DescribeInstancesWithContext(ctx, req, rt)
}

func (p *pooled) DeleteInstancesWithContext(ctx context.Context, req *ecs.DeleteInstancesRequest, rt *dara.RuntimeOptions) (*ecs.DeleteInstancesResponse, error) {
	cl, err := p.get()
	if err != nil {
		return nil, err
	}
	defer p.pool.Put(cl)
	return cl.DeleteInstancesWithContext(ctx, req, rt)
}

// accountCredential implements the SDK's credentials.Credential by looking
// the account's key up for every request.
type accountCredential struct {
	account string
	store   ports.Credentials
}

var _ credentials.Credential = accountCredential{}

func (a accountCredential) get() ports.Credential {
	c, _ := a.store.Lookup(a.account) // a missing key signs with "" and gets InvalidAccessKeyId back
	return c
}

// GetCredential returns one consistent snapshot of the key, as the SDK
// signs with it: a RAM AccessKey, or an STS triple when the account's
// credential has a security token.
func (a accountCredential) GetCredential() (*credentials.CredentialModel, error) {
	c := a.get()
	m := &credentials.CredentialModel{
		AccessKeyId:     dara.String(c.KeyID),
		AccessKeySecret: dara.String(c.Secret),
		Type:            dara.String("access_key"),
	}
	if c.SecurityToken != "" {
		m.SecurityToken = dara.String(c.SecurityToken)
		m.Type = dara.String("sts")
	}
	return m, nil
}

func (a accountCredential) GetAccessKeyId() (*string, error) { //nolint:revive // SDK interface
	return dara.String(a.get().KeyID), nil
}

func (a accountCredential) GetAccessKeySecret() (*string, error) {
	return dara.String(a.get().Secret), nil
}

func (a accountCredential) GetSecurityToken() (*string, error) {
	return dara.String(a.get().SecurityToken), nil
}

func (a accountCredential) GetBearerToken() *string { return dara.String("") }

func (a accountCredential) GetType() *string {
	if a.get().SecurityToken != "" {
		return dara.String("sts")
	}
	return dara.String("access_key")
}

func (p *pooled) TagResourcesWithContext(ctx context.Context, req *ecs.TagResourcesRequest, rt *dara.RuntimeOptions) (*ecs.TagResourcesResponse, error) {
	cl, err := p.get()
	if err != nil {
		return nil, err
	}
	defer p.pool.Put(cl)
	return cl.TagResourcesWithContext(ctx, req, rt)
}

func (p *pooled) DescribeInstanceTypesWithContext(ctx context.Context, req *ecs.DescribeInstanceTypesRequest, rt *dara.RuntimeOptions) (*ecs.DescribeInstanceTypesResponse, error) {
	cl, err := p.get()
	if err != nil {
		return nil, err
	}
	defer p.pool.Put(cl)
	return cl.DescribeInstanceTypesWithContext(ctx, req, rt)
}

func (p *pooled) DescribeAvailableResourceWithContext(ctx context.Context, req *ecs.DescribeAvailableResourceRequest, rt *dara.RuntimeOptions) (*ecs.DescribeAvailableResourceResponse, error) {
	cl, err := p.get()
	if err != nil {
		return nil, err
	}
	defer p.pool.Put(cl)
	return cl.DescribeAvailableResourceWithContext(ctx, req, rt)
}
