// Command lifecycle runs the nodesmith lifecycle service: the instance
// state machine and the only writer of state. See the module README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := realMain(ctx, os.Args[1:])
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "lifecycle:", err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context, args []string) error {
	cfg := service.DefaultConfig()
	logOpts := logging.Options{Service: "lifecycle"}
	fs := flag.NewFlagSet("lifecycle", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	logOpts.RegisterFlags(fs)
	checkOnly := fs.Bool("check-config", false, "validate --config-file and exit")
	if err := config.Parse(fs, args, nil); err != nil {
		return err
	}
	if *checkOnly {
		if cfg.ConfigFile == "" {
			return errors.New("--check-config needs --config-file")
		}
		if err := service.ValidateConfigFile(cfg.ConfigFile); err != nil {
			return err
		}
		fmt.Println(cfg.ConfigFile, "is valid")
		return nil
	}
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	return service.Run(ctx, cfg, service.Deps{Logger: log})
}
