// Command lifecycle runs the nodesmith lifecycle service: the instance
// state machine and the only writer of state. See the module README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

func main() {
	cfg := service.DefaultConfig()
	var checkOnly bool
	command.Main("lifecycle", func(fs *flag.FlagSet) {
		cfg.RegisterFlags(fs)
		fs.BoolVar(&checkOnly, "check-config", false, "validate --config-file and exit")
	}, func(ctx context.Context, h command.Host) error {
		if checkOnly {
			return checkConfig(cfg.ConfigFile, os.Stdout)
		}
		return service.Run(ctx, cfg, service.Deps{Logger: h.Logger, Registry: h.Registry, Health: h.Health})
	})
}

// checkConfig validates the configuration file without starting anything
// (a CI or pre-deploy check), reporting every problem at once.
func checkConfig(file string, out io.Writer) error {
	if file == "" {
		return errors.New("--check-config needs --config-file")
	}
	warnings, err := service.CheckConfigFile(file)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		if _, err := fmt.Fprintln(out, "warning:", w); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(out, file, "is valid")
	return err
}
