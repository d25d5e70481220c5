package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
)

// floorMain is `bench floor`: the minimal CloudProvider server in its own
// process (as the gateway is), answering the seeded state rebuilt from
// the same deterministic seed. It prints its address and serves until
// stdin closes or it is signalled.
func floorMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench floor", flag.ContinueOnError)
	groups := fs.Int("groups", 100, "groups")
	instances := fs.Int("instances", 1000, "instances")
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	echoAddr := fs.String("echo-addr", "", "listen address of a TCP echo server (empty: none)")
	workers := fs.Uint("stream-workers", 0, "serve calls on this many gRPC stream workers (grpc.NumStreamWorkers) instead of a goroutine per call; 0: gRPC's default")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var opts []grpc.ServerOption
	if *workers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(min(*workers, 1024))))
	}
	f, err := harness.StartFloor(harness.BuildSeed(*groups, *instances, b1Seed), *addr, opts...)
	if err != nil {
		return err
	}
	defer f.Stop()
	if *echoAddr != "" {
		echo, err := harness.StartEcho(*echoAddr)
		if err != nil {
			return err
		}
		defer echo.Stop()
	}
	fmt.Println(f.Addr)
	<-ctx.Done()
	return nil
}

// startFloorProcess runs `bench floor` as a child process called name on a
// free port, with env added to its environment and, unless echoAddr is
// empty, a TCP echo server on echoAddr.
func startFloorProcess(ctx context.Context, e *env, name string, env []string, groups, instances int, echoAddr string, extra ...string) (*harness.Process, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	logFile := filepath.Join(e.tmp, name+".log")
	p, err := harness.StartProcess(name, self, append([]string{"floor", "-groups", strconv.Itoa(groups), "-instances", strconv.Itoa(instances), "-addr", addr, "-echo-addr", echoAddr}, extra...), env, logFile)
	if err != nil {
		return nil, "", err
	}
	if err := harness.WaitGRPCReachable(ctx, addr, time.Minute, func() error { return p.ExitedError(logFile) }); err != nil {
		p.Kill()
		return nil, "", err
	}
	return p, addr, nil
}
