// Command kube-apiserver-ensure builds the kube-apiserver that
// tools/kube/kubetest runs (once per machine, into the user cache
// directory) and prints its path. `make kube-apiserver` runs it before the
// tests, so no test's timeout has to cover the five-minute build.
//
//	go run ./cmd/kube-apiserver-ensure          # build if missing, print the path
//	go run ./cmd/kube-apiserver-ensure -check   # exit 1 if not built yet
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := realMain(ctx, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "kube-apiserver-ensure:", err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kube-apiserver-ensure", flag.ContinueOnError)
	check := fs.Bool("check", false, "only report whether the binary is built (exit status 1 if not)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *check {
		info, err := kubetest.LocateAPIServer()
		if err != nil {
			return err
		}
		if !info.Exists {
			return fmt.Errorf("kube-apiserver %s not built yet (would be %s)", kubetest.KubernetesVersion, info.Path)
		}
		fmt.Println(info.Path)
		return nil
	}
	start := time.Now()
	built := false
	path, err := kubetest.EnsureAPIServer(ctx, func(format string, args ...any) {
		built = true
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	})
	if err != nil {
		return err
	}
	if built {
		fmt.Fprintf(os.Stderr, "built in %s\n", time.Since(start).Round(time.Second))
	}
	fmt.Println(path)
	return nil
}
