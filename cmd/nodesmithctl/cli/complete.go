package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/client"
)

// Shell completion of object names: asked of the gateway with the
// current context, quietly nothing when it cannot be reached.

const completionTimeout = 5 * time.Second

// names lists the names of a resource kind.
func (e *Env) names(res string) []string {
	c, err := e.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	var out []string
	switch res {
	case resGroups:
		gs, _ := c.ListGroups(ctx)
		for _, g := range gs {
			out = append(out, g.ID)
		}
	case resInstances:
		is, _ := c.ListInstances(ctx, client.InstanceQuery{})
		for _, in := range is {
			out = append(out, in.ID)
		}
	case resTemplates:
		ts, _ := c.ListTemplates(ctx)
		for _, t := range ts {
			out = append(out, t.Name)
		}
	case resAccounts:
		as, _ := c.ListAccounts(ctx)
		for _, a := range as {
			out = append(out, a.Name)
		}
	case resHooks:
		hs, _ := c.ListHooks(ctx)
		for _, h := range hs {
			out = append(out, h.Name)
		}
	}
	return out
}

// completeFirst completes the first argument with names of res.
func (e *Env) completeFirst(res string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return e.names(res), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeKindThenName completes "KIND NAME" (get, describe).
func (e *Env) completeKindThenName(kinds []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			return kinds, cobra.ShellCompDirectiveNoFileComp
		case 1:
			if res, err := parseResource(args[0]); err == nil {
				return e.names(res), cobra.ShellCompDirectiveNoFileComp
			}
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}
