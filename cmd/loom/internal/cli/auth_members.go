package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// authMembersCommand is `loom auth members`: who holds which role in the
// project (AuthService.ListMembers and SetMember), for its admins and the
// cluster administrators.
func (a *app) authMembersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List and set who holds which role in the project (viewer, user, admin)",
		Long: `Roles per project, each including the ones below it: viewer (get, list,
watch and read logs), user (also submit, and cancel, hold and update their
own jobs), admin (everything in the project, other users' jobs and the
members included). --global with role cluster-admin makes a cluster
administrator (nodes, capacity, reservations, every project). A user
without a role in a project finds nothing there: its resources are NotFound
to them. The project's admins and the cluster administrators may list and
set members. A project's last admin (and the last cluster administrator)
cannot be removed or demoted, not even by themselves: make another member
admin first.`,
	}
	var global bool
	parent := func() string {
		if global {
			return "global"
		}
		return a.parent()
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the project's members: USER ROLE",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.authService()
			if err != nil {
				return err
			}
			members, err := collect(a, cmd, 0, func(ctx context.Context, token string, size int32) ([]*loomv1.Member, string, error) {
				resp, err := cl.ListMembers(ctx, &loomv1.ListMembersRequest{Parent: parent(), PageToken: token, PageSize: size})
				return resp.GetMembers(), resp.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list the members of "+parent(), err)
			}
			out := cmd.OutOrStdout()
			if a.output == "json" {
				return writeJSON(out, &loomv1.ListMembersResponse{Members: members})
			}
			if len(members) == 0 {
				fmt.Fprintf(out, "No members of %s. `loom auth members set USER ROLE` adds one.\n", parent())
				return nil
			}
			tw := newTable(out)
			row(tw, "USER", "ROLE")
			for _, m := range members {
				row(tw, m.GetUser(), m.GetRole())
			}
			return tw.Flush()
		},
	}
	set := &cobra.Command{
		Use:   "set USER ROLE",
		Short: "Give USER a role in the project (viewer, user, admin; with --global: cluster-admin)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("give the user and the role, e.g. `loom auth members set alice user`")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.setMember(cmd, parent(), args[0], args[1])
		},
	}
	remove := &cobra.Command{
		Use:   "remove USER",
		Short: "Take USER's role in the project away",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("give the user, e.g. `loom auth members remove alice`")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.setMember(cmd, parent(), args[0], "")
		},
	}
	cmd.PersistentFlags().BoolVar(&global, "global", false, "the cluster administrators (role cluster-admin) instead of the project's members")
	cmd.AddCommand(list, set, remove)
	return cmd
}

// setMember gives user role under parent ("" removes them) and says what
// was done.
func (a *app) setMember(cmd *cobra.Command, parent, user, role string) error {
	cl, err := a.authService()
	if err != nil {
		return err
	}
	ctx, cancel := a.call(cmd.Context())
	defer cancel()
	m, err := cl.SetMember(ctx, &loomv1.SetMemberRequest{Parent: parent, User: user, Role: role})
	if err != nil {
		return a.explain("set the role of "+user+" in "+parent, err)
	}
	if a.output == "json" {
		return writeJSON(cmd.OutOrStdout(), m)
	}
	if role == "" {
		fmt.Fprintf(cmd.OutOrStdout(), "%s has no role in %s any more.\n", user, parent)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s is %s in %s.\n", user, role, parent)
	return nil
}
