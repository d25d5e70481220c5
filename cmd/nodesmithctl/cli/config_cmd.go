package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newConfigCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage contexts in the configuration file",
		Long: `Manage contexts in the configuration file ($NODESMITHCONFIG or
~/.config/nodesmith/config.yaml, or --config). A context names a gateway's
REST URL, the CA bundle to verify it with and the file holding the bearer
token; the token itself is never stored in the configuration.`,
		Args: noArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "current-context",
		Short: "Print the current context",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			f, err := env.loadConfig()
			if err != nil {
				return err
			}
			if f.CurrentContext == "" {
				return errors.New("no current context is set (nodesmithctl config use-context NAME)")
			}
			fmt.Fprintln(env.Out, f.CurrentContext)
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			f, err := env.loadConfig()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.Out, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tSERVER\tTOKEN-FILE\tCERTIFICATE-AUTHORITY")
			for _, c := range f.Contexts {
				cur := ""
				if c.Name == f.CurrentContext {
					cur = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cur, c.Name, c.Server, c.TokenFile, c.CertificateAuthority)
			}
			return tw.Flush()
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:               "use-context NAME",
		Short:             "Make NAME the current context",
		Args:              exactArgs(1),
		ValidArgsFunction: env.completeContexts,
		RunE: func(_ *cobra.Command, args []string) error {
			f, err := env.loadConfig()
			if err != nil {
				return err
			}
			if _, ok := f.Context(args[0]); !ok {
				return fmt.Errorf("context %q is not in %s (nodesmithctl config get-contexts)", args[0], f.Path())
			}
			f.CurrentContext = args[0]
			if err := f.Save(); err != nil {
				return err
			}
			fmt.Fprintf(env.Out, "Switched to context %q.\n", args[0])
			return nil
		},
	})
	var current bool
	set := &cobra.Command{
		Use:   "set-context NAME",
		Short: "Create or change a context from --server, --token-file and --certificate-authority",
		Example: `  nodesmithctl config set-context prod --server https://gateway.example:8443 \
      --token-file ~/.config/nodesmith/prod.token --certificate-authority /etc/nodesmith/ca.pem --current`,
		Args: exactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			f, err := env.loadConfig()
			if err != nil {
				return err
			}
			c, existed := f.Context(args[0])
			c.Name = args[0]
			if env.Server != "" {
				c.Server = env.Server
			}
			// Paths on the command line are relative to the working
			// directory; the file's are relative to the file: store them
			// absolute.
			if env.TokenFile != "" {
				if c.TokenFile, err = absPath(env.TokenFile); err != nil {
					return err
				}
			}
			if env.CAFile != "" {
				if c.CertificateAuthority, err = absPath(env.CAFile); err != nil {
					return err
				}
			}
			f.Set(c)
			if current || f.CurrentContext == "" {
				f.CurrentContext = c.Name
			}
			if err := f.Save(); err != nil {
				return err
			}
			verb := "created"
			if existed {
				verb = "modified"
			}
			fmt.Fprintf(env.Out, "Context %q %s.\n", c.Name, verb)
			return nil
		},
	}
	set.Flags().BoolVar(&current, "current", false, "also make it the current context")
	cmd.AddCommand(set)
	cmd.AddCommand(&cobra.Command{
		Use:               "delete-context NAME",
		Short:             "Delete a context",
		Args:              exactArgs(1),
		ValidArgsFunction: env.completeContexts,
		RunE: func(_ *cobra.Command, args []string) error {
			f, err := env.loadConfig()
			if err != nil {
				return err
			}
			if !f.Delete(args[0]) {
				return fmt.Errorf("context %q is not in %s", args[0], f.Path())
			}
			if err := f.Save(); err != nil {
				return err
			}
			fmt.Fprintf(env.Out, "Context %q deleted.\n", args[0])
			return nil
		},
	})
	return cmd
}

func (e *Env) completeContexts(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	f, err := e.loadConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, c := range f.Contexts {
		names = append(names, c.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// exactArgs is cobra.ExactArgs as a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error { return usagef(cobra.ExactArgs(n)(cmd, args)) }
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error { return usagef(cobra.NoArgs(cmd, args)) }

// absPath makes p absolute, keeping a leading "~/" (the home directory
// wherever the file is used).
func absPath(p string) (string, error) {
	if strings.HasPrefix(p, "~/") || filepath.IsAbs(p) {
		return p, nil
	}
	return filepath.Abs(p)
}
