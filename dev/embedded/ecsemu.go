package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// ecsServer serves an emulator's Alibaba Cloud ECS API on its own
// listener, beside the CVM API of the same emulator.
type ecsServer struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

func serveECS(addr string, e *cvmemu.Emulator, log *slog.Logger) (*ecsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ECS emulator: listen %s: %w", addr, err)
	}
	s := &ecsServer{ln: ln, srv: &http.Server{Handler: e.ECS(), ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ECS emulator stopped", "err", err)
		}
	}()
	log.Info("ECS emulator listening", "endpoint", s.Endpoint())
	return s, nil
}

// Endpoint is "host:port".
func (s *ecsServer) Endpoint() string { return s.ln.Addr().String() }

// Close stops serving (the emulator itself is closed with its CVM server).
func (s *ecsServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
