package harness

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// EchoServer answers length-prefixed frames with the same bytes: a round
// trip over loopback TCP between two processes with no gRPC, HTTP/2 or
// protobuf at all. B1 measures it beside the gRPC floor to show what this
// machine's scheduling alone costs a request and its answer.
type EchoServer struct {
	l net.Listener
	// Addr is the listening address.
	Addr string
}

// StartEcho serves on addr ("127.0.0.1:0": any port).
func StartEcho(addr string) (*EchoServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &EchoServer{l: l, Addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveEcho(c)
		}
	}()
	return s, nil
}

func serveEcho(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	var hdr [4]byte
	buf := make([]byte, 0, 4096)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > 1<<20 {
			return
		}
		buf = append(buf[:0], hdr[:]...)
		buf = append(buf, make([]byte, n)...)
		if _, err := io.ReadFull(r, buf[4:]); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// Stop closes the listener.
func (s *EchoServer) Stop() { _ = s.l.Close() }

// EchoClient times round trips to an EchoServer over one connection.
type EchoClient struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
	// Latencies are the round trips measured so far.
	Latencies []time.Duration
}

// DialEcho connects to an EchoServer.
func DialEcho(addr string) (*EchoClient, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &EchoClient{c: c, r: bufio.NewReader(c)}, nil
}

// RoundTrips sends n frames of size bytes, one at a time, and records each
// round trip.
func (e *EchoClient) RoundTrips(n, size int) error {
	frame := make([]byte, 4+size)
	binary.BigEndian.PutUint32(frame, uint32(size))
	if cap(e.buf) < len(frame) {
		e.buf = make([]byte, len(frame))
	}
	back := e.buf[:len(frame)]
	for range n {
		_ = e.c.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		if _, err := e.c.Write(frame); err != nil {
			return fmt.Errorf("echo write: %w", err)
		}
		if _, err := io.ReadFull(e.r, back); err != nil {
			return fmt.Errorf("echo read: %w", err)
		}
		e.Latencies = append(e.Latencies, time.Since(start))
	}
	return nil
}

// Close closes the connection.
func (e *EchoClient) Close() error {
	if e.c == nil {
		return errors.New("not connected")
	}
	return e.c.Close()
}
