package cvmemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/profile"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"

	openapi "github.com/alibabacloud-go/darabonba-openapi/v2/client"
	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"
)

// Server is an Emulator served over plain HTTP.
type Server struct {
	*Emulator
	handler http.Handler
	// extra are the listeners ServeECS added.
	extraMu sync.Mutex
	extra   []*Server
	ln      net.Listener
	srv     *http.Server
	done    chan struct{}
	// fresh are the connections that have not sent a request yet.
	freshMu sync.Mutex
	fresh   map[net.Conn]struct{}
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves a new Emulator's
// CVM API.
func Start(addr string, cfg Config, opts ...Option) (*Server, error) {
	return start(addr, cfg, "CVM", func(e *Emulator) http.Handler { return e }, opts...)
}

// StartECS listens on addr and serves a new Emulator's Alibaba Cloud ECS
// API (see Emulator.ECS); NewECSClient talks to it. To serve both APIs
// from one emulator, serve e.ECS() on a second listener.
func StartECS(addr string, cfg Config, opts ...Option) (*Server, error) {
	return start(addr, cfg, "ECS", (*Emulator).ECS, opts...)
}

func start(addr string, cfg Config, api string, handler func(*Emulator) http.Handler, opts ...Option) (*Server, error) {
	e, err := New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	s, err := serve(e, addr, handler(e))
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	e.log.Info(api+" emulator listening", "endpoint", s.Endpoint())
	return s, nil
}

// serve serves h on a new listener at addr.
func serve(e *Emulator, addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cvmemu: listen %s: %w", addr, err)
	}
	s := &Server{
		Emulator: e,
		handler:  h,
		ln:       ln,
		done:     make(chan struct{}),
		fresh:    map[net.Conn]struct{}{},
	}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: s.trackConn}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("HTTP server stopped", "err", err)
		}
	}()
	return s, nil
}

// ServeHTTP serves the API the Server was started for (so a Hold can sit
// in front of a Server of either API).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Endpoint returns "host:port", the value for HttpProfile.Endpoint.
func (s *Server) Endpoint() string { return s.ln.Addr().String() }

// ServeECS serves the emulator's ECS API on a second listener at addr
// (e.g. "127.0.0.1:0"), next to the API the Server was started for, and
// returns its endpoint for NewECSClient. Both APIs share one emulator: its
// VMs, addresses, SSH guests, cluster and state file. Close stops it too.
func (s *Server) ServeECS(addr string) (string, error) {
	x, err := serve(s.Emulator, addr, s.ECS())
	if err != nil {
		return "", err
	}
	s.extraMu.Lock()
	s.extra = append(s.extra, x)
	s.extraMu.Unlock()
	s.log.Info("ECS endpoint listening", "endpoint", x.Endpoint())
	return x.Endpoint(), nil
}

// Close stops the HTTP servers and the emulator.
func (s *Server) Close() error {
	s.extraMu.Lock()
	extra := s.extra
	s.extra = nil
	s.extraMu.Unlock()
	var errs []error
	for _, x := range append(extra, s) {
		errs = append(errs, x.stopHTTP())
	}
	return errors.Join(append(errs, s.Emulator.Close())...)
}

// stopHTTP stops the HTTP server (not the emulator).
//
// Shutdown lets requests in flight finish, but waits 5s for connections
// that never sent one: a client's transport that dialled a spare
// connection for a burst of concurrent calls keeps it unused in its pool.
// Those are closed while Shutdown waits.
func (s *Server) stopHTTP() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.srv.Shutdown(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-shut:
			if err != nil {
				err = errors.Join(err, s.srv.Close())
			}
			<-s.done
			return err
		case <-tick.C:
			s.freshMu.Lock()
			for c := range s.fresh {
				_ = c.Close()
			}
			s.freshMu.Unlock()
		}
	}
}

// trackConn keeps s.fresh up to date (http.Server.ConnState).
func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.freshMu.Lock()
	defer s.freshMu.Unlock()
	if st == http.StateNew {
		s.fresh[c] = struct{}{}
	} else {
		delete(s.fresh, c)
	}
}

// ClientProfile returns the SDK client profile for talking to an emulator
// at endpoint ("host:port"): plain HTTP, POST, TC3-HMAC-SHA256.
func ClientProfile(endpoint string) *profile.ClientProfile {
	cp := profile.NewClientProfile()
	cp.HttpProfile.Endpoint = endpoint
	cp.HttpProfile.Scheme = "HTTP"
	cp.HttpProfile.ReqMethod = "POST"
	cp.SignMethod = "TC3-HMAC-SHA256"
	return cp
}

// NewClient returns an official SDK CVM client for an emulator at endpoint.
func NewClient(endpoint, secretID, secretKey, region string) (*cvm.Client, error) {
	c, err := cvm.NewClient(common.NewCredential(secretID, secretKey), region, ClientProfile(endpoint))
	if err != nil {
		return nil, fmt.Errorf("cvmemu: new SDK client: %w", err)
	}
	return c, nil
}

// NewECSClient returns an official SDK ECS client for an ECS emulator at
// endpoint ("host:port"): plain HTTP, the SDK's default ACS3-HMAC-SHA256
// signature, no retries (tests see every answer), its own HTTP client (see
// sdkHTTPClient). Like every client of the SDK it is not safe for
// concurrent use (each RPC call writes a field of the client): give each
// goroutine its own.
func NewECSClient(endpoint, accessKeyID, accessKeySecret, region string) (*ecs.Client, error) {
	c, err := ecs.NewClient(&openapi.Config{
		AccessKeyId:     dara.String(accessKeyID),
		AccessKeySecret: dara.String(accessKeySecret),
		RegionId:        dara.String(region),
		Endpoint:        dara.String(endpoint),
		Protocol:        dara.String("http"),
		HttpClient:      sdkHTTPClient{&http.Client{Timeout: time.Minute}},
	})
	if err != nil {
		return nil, fmt.Errorf("cvmemu: new ECS SDK client: %w", err)
	}
	return c, nil
}

// sdkHTTPClient is a dara.HttpClient over its own http.Client. Without one
// the SDK shares a client per host between all its clients and rewrites its
// Timeout on every request while other requests read it: a data race under
// concurrent calls (go test -race finds it), even with one SDK client per
// goroutine.
type sdkHTTPClient struct{ c *http.Client }

func (h sdkHTTPClient) Call(r *http.Request, _ *http.Transport) (*http.Response, error) {
	return h.c.Do(r)
}
