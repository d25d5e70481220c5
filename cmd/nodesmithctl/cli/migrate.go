package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/migrate"
	"github.com/nodesmith/nodesmith/libs/restapi"
)

func init() { AddCommand(newMigrateCommand) }

func newMigrateCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Move from the prototype (cluster-autoscaler-grpc-cloud-provider) to nodesmith",
		Long: `Move from the prototype (cluster-autoscaler-grpc-cloud-provider) to nodesmith:
convert its nodegroup-config.yaml (migrate config), then hand its Running VMs,
listed in its nodegroup-status ConfigMap, to nodesmith's groups (migrate state).
See docs/migration.md.`,
	}
	cmd.AddCommand(newMigrateConfigCommand(env), newMigrateStateCommand(env))
	return cmd
}

func newMigrateConfigCommand(env *Env) *cobra.Command {
	var opts migrate.Options
	var secretsDir string
	cmd := &cobra.Command{
		Use:   "config PROTOTYPE_CONFIG",
		Short: "Convert the prototype's nodegroup-config.yaml to nodesmith's configuration file",
		Long: `Convert the prototype's nodegroup-config.yaml to nodesmith's configuration file,
written to standard output. Every field that cannot be carried over is reported on
standard error with its line. Cloud account keys are never written to the output:
with --secrets-dir they are written as the cloud adapter's credential files
(DIR/<account>/secretId and secretKey, mode 0600); without it, only a hint is printed.
Check the result with: lifecycle --check-config --config-file nodesmith.yaml`,
		Example: `  nodesmithctl migrate config nodegroup-config.yaml --secrets-dir ./credentials > nodesmith.yaml`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			res, err := migrate.ConvertConfig(data, opts)
			if err != nil {
				return err
			}
			for _, w := range res.Warnings {
				fmt.Fprintf(env.ErrOut, "warning: %s: %s\n", args[0], w)
			}
			if err := writeCredentials(env.ErrOut, res.Credentials, secretsDir); err != nil {
				return err
			}
			_, err = env.Out.Write(res.YAML)
			return err
		},
	}
	cmd.Flags().StringVar(&opts.HooksDir, "hooks-dir", "hooks", "where the prototype's after_created_hook.sh and before_delete_hook.sh will be, relative to the converted file")
	cmd.Flags().BoolVar(&opts.AdoptExisting, "adopt-existing", false, "set adoptExisting on every group (adopts matching Nodes automatically; migrate state is the explicit way)")
	cmd.Flags().StringVar(&secretsDir, "secrets-dir", "", "write the accounts' keys as credential files DIR/<account>/{secretId,secretKey} (mode 0600)")
	return cmd
}

// writeCredentials writes the accounts' keys as the cloud adapter's
// credential files, or prints how to; the values are never printed.
func writeCredentials(errOut io.Writer, creds []migrate.Credentials, dir string) error {
	for _, c := range creds {
		if dir == "" {
			fmt.Fprintf(errOut, "note: account %s has keys in the prototype's file; they are not in the output. "+
				"Rerun with --secrets-dir DIR to write them as files, then store them as the Secret cloud-credentials-%s (keys secretId, secretKey)\n", c.Account, c.Account)
			continue
		}
		adir := filepath.Join(dir, c.Account)
		if err := os.MkdirAll(adir, 0o700); err != nil {
			return err
		}
		files := map[string]string{"secretId": c.SecretID, "secretKey": c.SecretKey, "token": c.Token}
		for name, v := range files {
			if v == "" {
				continue
			}
			if err := writeSecretFile(filepath.Join(adir, name), v); err != nil {
				return err
			}
		}
		fmt.Fprintf(errOut, "wrote the keys of account %s to %s; store them as the cloud adapter's Secret:\n"+
			"  kubectl -n nodesmith create secret generic cloud-credentials-%s --from-file=secretId=%s --from-file=secretKey=%s\n",
			c.Account, adir, c.Account, filepath.Join(adir, "secretId"), filepath.Join(adir, "secretKey"))
	}
	return nil
}

// writeSecretFile writes v to a new file readable by its owner only; an
// existing file is not overwritten.
func writeSecretFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: not overwriting credentials", path)
		}
		return err
	}
	if _, err := f.WriteString(v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newMigrateStateCommand(env *Env) *cobra.Command {
	var from, configFile string
	var apply, check bool
	cmd := &cobra.Command{
		Use:   "state --from STATUS",
		Short: "Adopt the prototype's Running VMs (from its nodegroup-status ConfigMap) into nodesmith's groups",
		Long: `Read the prototype's nodegroup-status ConfigMap (its YAML, as kubectl get -o yaml
prints it, or the JSON of its data) and print, per node group, the Running VMs to
adopt. Nothing is changed unless --apply is given: then each group's VMs are sent
to POST /api/v1/nodegroups/{group}/adopt, which checks each VM in the cloud, writes
it as a Running instance (the group's target grows by one per VM, within its max
size), and tags it with nodesmith's cluster tags. No VM is created or terminated;
running it again adopts nothing twice. --check asks the server for its plan
(a dry run: the cloud check, nothing written).

Instances without providerID in the status get the one their converted template
renders: pass the prototype's configuration with --config-file.`,
		Example: `  kubectl -n kube-system get cm nodegroup-status -o yaml > status.yaml
  nodesmithctl migrate state --from status.yaml --config-file nodegroup-config.yaml
  nodesmithctl migrate state --from status.yaml --config-file nodegroup-config.yaml --apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return usagef(errors.New("--from is required"))
			}
			if apply && check {
				return usagef(errors.New("--apply and --check exclude each other"))
			}
			data, err := os.ReadFile(from)
			if err != nil {
				return err
			}
			groups, err := migrate.ParseStatus(data)
			if err != nil {
				return fmt.Errorf("%s: %w", from, err)
			}
			var templates map[string]migrate.TemplateInfo
			var groupTemplates map[string]string
			if configFile != "" {
				cdata, err := os.ReadFile(configFile)
				if err != nil {
					return err
				}
				res, err := migrate.ConvertConfig(cdata, migrate.Options{})
				if err != nil {
					return fmt.Errorf("%s: %w", configFile, err)
				}
				templates, groupTemplates = res.Templates, res.Groups
			}
			plan := migrate.Plan(groups, templates, groupTemplates)
			printPlan(env.Out, plan)
			if !apply && !check {
				fmt.Fprintln(env.Out, "\nDry run: nothing changed. --check asks the server for its plan; --apply adopts.")
				return nil
			}
			c, err := env.client()
			if err != nil {
				return err
			}
			refused := 0
			for _, p := range plan {
				for start := 0; start < len(p.Adopt); start += restapi.MaxAdoptVMs {
					vms := make([]restapi.AdoptVM, 0, restapi.MaxAdoptVMs)
					for _, vm := range p.Adopt[start:min(start+restapi.MaxAdoptVMs, len(p.Adopt))] {
						vms = append(vms, restapi.AdoptVM(vm))
					}
					ctx, cancel := requestContext(cmd)
					resp, err := c.Adopt(ctx, p.Group, vms, check)
					cancel()
					if err != nil {
						return fmt.Errorf("group %s: %w", p.Group, err)
					}
					printAdopted(env.Out, resp)
					refused += resp.Refused
				}
			}
			if refused > 0 {
				return fmt.Errorf("%d VMs refused (see above)", refused)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the prototype's nodegroup-status ConfigMap (YAML) or its data (JSON or YAML)")
	cmd.Flags().StringVar(&configFile, "config-file", "", "the prototype's nodegroup-config.yaml, to render missing providerIDs")
	cmd.Flags().BoolVar(&apply, "apply", false, "adopt the VMs (default: print the plan only)")
	cmd.Flags().BoolVar(&check, "check", false, "ask the server for its plan (dry run: cloud check, nothing written)")
	return cmd
}

func printPlan(out io.Writer, plan []migrate.GroupPlan) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tVM\tNODE\tPROVIDER ID\tPLAN")
	for _, p := range plan {
		for _, vm := range p.Adopt {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tadopt\n", p.Group, vm.CloudID, vm.NodeName, vm.ProviderID)
		}
		for _, s := range p.Skipped {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\tskip (%s: %s)\n", p.Group, orDash(s.CloudID), orDash(s.NodeName), orDash(s.Status), s.Reason)
		}
	}
	tw.Flush()
}

func printAdopted(out io.Writer, r restapi.AdoptResponse) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tVM\tNODE\tRESULT\tINSTANCE\tMESSAGE")
	for _, o := range r.Results {
		result := o.Result
		if r.DryRun && result == "adopted" {
			result = "would adopt"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Group, o.CloudID, o.NodeName, result, orDash(o.InstanceID), strings.ReplaceAll(o.Message, "\n", " "))
	}
	tw.Flush()
	fmt.Fprintf(out, "group %s: %d adopted, %d already adopted, %d refused%s\n", r.Group, r.Adopted, r.AlreadyAdopted, r.Refused,
		map[bool]string{true: " (dry run)", false: ""}[r.DryRun])
}
