package cvmemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	ln      net.Listener
	srv     *http.Server
	done    chan struct{}
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
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = e.Close()
		return nil, fmt.Errorf("cvmemu: listen %s: %w", addr, err)
	}
	s := &Server{
		Emulator: e,
		handler:  handler(e),
		ln:       ln,
		srv:      &http.Server{Handler: handler(e), ReadHeaderTimeout: 10 * time.Second},
		done:     make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("HTTP server stopped", "err", err)
		}
	}()
	e.log.Info(api+" emulator listening", "endpoint", s.Endpoint())
	return s, nil
}

// ServeHTTP serves the API the Server was started for (so a Hold can sit
// in front of a Server of either API).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Endpoint returns "host:port", the value for HttpProfile.Endpoint.
func (s *Server) Endpoint() string { return s.ln.Addr().String() }

// Close stops the HTTP server and the emulator.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.done
	return errors.Join(err, s.Emulator.Close())
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
// signature, no retries (tests see every answer).
func NewECSClient(endpoint, accessKeyID, accessKeySecret, region string) (*ecs.Client, error) {
	c, err := ecs.NewClient(&openapi.Config{
		AccessKeyId:     dara.String(accessKeyID),
		AccessKeySecret: dara.String(accessKeySecret),
		RegionId:        dara.String(region),
		Endpoint:        dara.String(endpoint),
		Protocol:        dara.String("http"),
	})
	if err != nil {
		return nil, fmt.Errorf("cvmemu: new ECS SDK client: %w", err)
	}
	return c, nil
}
