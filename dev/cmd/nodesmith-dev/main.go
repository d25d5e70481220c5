// Command nodesmith-dev runs the whole nodesmith system in one process for
// development (`make run`): embedded NATS JetStream, the four services, a
// Tencent CVM emulator, SSH-able simulated VMs and a simulated cluster, or
// with --kube a real kube-apiserver where the VMs register their Nodes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodesmith/nodesmith/dev/embedded"
	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/logging"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := realMain(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodesmith-dev:", err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context, args []string) error {
	cfg := embedded.DefaultConfig()
	logOpts := logging.Options{Format: "text"}
	fs := flag.NewFlagSet("nodesmith-dev", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	logOpts.RegisterFlags(fs)
	if err := config.Parse(fs, args, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	return embedded.Run(ctx, cfg, log, func(a embedded.Addrs) {
		embedded.PrintBanner(os.Stdout, a, cfg.DataDir)
	})
}
