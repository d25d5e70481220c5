// Package cli is nodesmithctl's command tree. NewRootCommand builds it
// with its input and outputs, so tests and other modules run the CLI
// in-process; Main runs it and maps errors to exit codes.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
)

// Env is what every command shares: the streams and the global flags
// (context, server, token file), resolved into a client on demand.
type Env struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	// ConfigPath overrides $NODESMITHCONFIG and the default file.
	ConfigPath string
	// Context, Server, TokenFile and CAFile override the current context.
	Context   string
	Server    string
	TokenFile string
	CAFile    string
}

var (
	extraMu  sync.Mutex
	extraCmd []func(*Env) *cobra.Command
)

// AddCommand registers a top-level command built for each root command
// (call it from an init function: cli/migrate.go registers `migrate`).
func AddCommand(f func(*Env) *cobra.Command) {
	extraMu.Lock()
	defer extraMu.Unlock()
	extraCmd = append(extraCmd, f)
}

// NewRootCommand returns nodesmithctl's root command reading in and
// writing out and errOut.
func NewRootCommand(in io.Reader, out, errOut io.Writer) *cobra.Command {
	env := &Env{In: in, Out: out, ErrOut: errOut}
	root := &cobra.Command{
		Use:   "nodesmithctl",
		Short: "nodesmithctl controls a nodesmith installation through its REST API",
		Long: `nodesmithctl controls a nodesmith installation through the API gateway's REST API:
read and apply node groups, instance templates, cloud accounts and hooks,
scale groups, retry and delete instances, and watch scale-ups and scale-downs.

Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict,
5 unauthorized or forbidden, 6 timeout.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef(err) })
	pf := root.PersistentFlags()
	pf.StringVar(&env.ConfigPath, "config", "", "config file (default $NODESMITHCONFIG or ~/.config/nodesmith/config.yaml)")
	pf.StringVar(&env.Context, "context", "", "the context to use instead of the current one")
	pf.StringVar(&env.Server, "server", "", "the gateway's REST URL (overrides the context's)")
	pf.StringVar(&env.TokenFile, "token-file", "", "file holding the bearer token (overrides the context's)")
	pf.StringVar(&env.CAFile, "certificate-authority", "", "CA bundle file to verify the server with (overrides the context's)")

	for _, f := range builtin() {
		root.AddCommand(f(env))
	}
	extraMu.Lock()
	for _, f := range extraCmd {
		root.AddCommand(f(env))
	}
	extraMu.Unlock()
	return root
}

// builtin lists the commands of this package.
func builtin() []func(*Env) *cobra.Command {
	return []func(*Env) *cobra.Command{
		newConfigCommand, newGetCommand, newDescribeCommand, newApplyCommand,
		newScaleCommand, newRetryCommand, newDeleteCommand, newDrainCommand, newWatchCommand,
	}
}

// Main runs nodesmithctl with args and returns its exit code; errors go to
// errOut. SIGINT and SIGTERM cancel the command (a watch ends quietly).
func Main(args []string, in io.Reader, out, errOut io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, in, out, errOut)
}

// Run runs nodesmithctl with args under ctx and returns its exit code;
// errors go to errOut as "error: ...".
func Run(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	root := NewRootCommand(in, out, errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(errOut, "error:", err)
	}
	return ExitCode(err)
}
