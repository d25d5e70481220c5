package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newScaleCommand(env *Env) *cobra.Command {
	to := -1
	cmd := &cobra.Command{
		Use:   "scale GROUP --to N",
		Short: "Set a node group's target size",
		Long: `Set a node group's target size (within its bounds). Lifecycle creates or
deletes instances to reach it; follow it with nodesmithctl watch --group GROUP.
Cluster Autoscaler may change the target again afterwards.`,
		Example:           `  nodesmithctl scale web --to 5 && nodesmithctl watch --group web --until-stable --timeout 10m`,
		Args:              exactArgs(1),
		ValidArgsFunction: env.completeFirst(resGroups),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to < 0 {
				return usagef(fmt.Errorf("--to N is required (a non-negative target size)"))
			}
			c, err := env.client()
			if err != nil {
				return err
			}
			ctx, cancel := requestContext(cmd)
			defer cancel()
			g, err := c.ScaleGroup(ctx, args[0], to)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Out, "group/%s scaled: target %d (min %d, max %d)\n", g.ID, g.TargetSize, g.MinSize, g.MaxSize)
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", -1, "the new target size")
	return cmd
}

func newRetryCommand(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:               "retry INSTANCE",
		Short:             "Retry an instance's current step now (clears its backoff and creation failure)",
		Args:              exactArgs(1),
		ValidArgsFunction: env.completeFirst(resInstances),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := env.client()
			if err != nil {
				return err
			}
			ctx, cancel := requestContext(cmd)
			defer cancel()
			in, err := c.RetryInstance(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Out, "instance/%s retried (state %s)\n", in.ID, in.State)
			return nil
		},
	}
}

func newDeleteCommand(env *Env) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete INSTANCE",
		Short: "Delete an instance, through its before_delete hook (the drain) unless --force",
		Long: `Delete an instance the way a Cluster Autoscaler scale-down does: its group's
target drops by one and the instance runs its before_delete hook (which
drains the node) before its VM is terminated. Refused when that would take
the group below its minimum size.

--force skips the hook: the VM is terminated without draining. The group's
target drops by one too, except at its minimum size, where lifecycle
creates a replacement.`,
		Example: `  nodesmithctl delete web-7f3k
  nodesmithctl delete web-7f3k --force`,
		Args:              exactArgs(1),
		ValidArgsFunction: env.completeFirst(resInstances),
		RunE: func(cmd *cobra.Command, args []string) error {
			return deleteInstance(cmd, env, args[0], force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "skip the before_delete hook and terminate now")
	return cmd
}

func newDrainCommand(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "drain INSTANCE",
		Short: "Drain and delete an instance (the same as delete without --force)",
		Long: `drain is delete without --force: the instance's before_delete hook drains
its node, then its VM is terminated and its group's target drops by one.
nodesmith has no cordon-only operation: the before_delete hook is where a
node is cordoned and drained.`,
		Args:              exactArgs(1),
		ValidArgsFunction: env.completeFirst(resInstances),
		RunE: func(cmd *cobra.Command, args []string) error {
			return deleteInstance(cmd, env, args[0], false)
		},
	}
}

func deleteInstance(cmd *cobra.Command, env *Env, id string, force bool) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	ctx, cancel := requestContext(cmd)
	defer cancel()
	in, err := c.DeleteInstance(ctx, id, force)
	if err != nil {
		return err
	}
	how := "deleting through its before_delete hook"
	if force {
		how = "force-deleted (no hook)"
	}
	fmt.Fprintf(env.Out, "instance/%s %s (state %s)\n", in.ID, how, in.State)
	return nil
}
