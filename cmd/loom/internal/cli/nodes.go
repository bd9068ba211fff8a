package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (a *app) nodesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "nodes",
		Aliases: []string{"node"},
		Short:   "Inspect the nodes of clusters; drain, repair, report them",
	}
	var cluster string
	list := &cobra.Command{
		Use:     "list [CLUSTER | --cluster C]",
		Aliases: []string{"ls"},
		Short:   "List nodes (of one cluster, or of every cluster)",
		Long: `List nodes: NODE (the Slurm hostname), CLUSTER, POOL ("(login)" for login
nodes), STATE, GPUS, ZONE, CAPACITY (RESERVATION, ON_DEMAND, SPOT, FLEX_START)
and REASON/NEXT: for a node that is not READY, why, and what Loom does next
about it ("boot timeout → retry launch in 4s (attempt 3 of 5)"). The cluster
is given as an argument, as "loom health nodes CLUSTER" takes it, or with
--cluster.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if cluster != "" && cluster != args[0] {
					return fmt.Errorf("two clusters given: %q and --cluster %q; give one", args[0], cluster)
				}
				cluster = args[0]
			}
			cl, err := a.nodes()
			if err != nil {
				return err
			}
			parent := a.clusterName("-")
			if cluster != "" {
				parent = a.clusterName(cluster)
			}
			resp := &loomv1.ListNodesResponse{}
			err = paging.Each(func(token string) (string, error) {
				ctx, cancel := a.call(cmd.Context())
				defer cancel()
				page, err := cl.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: parent, PageToken: token})
				resp.Nodes = append(resp.Nodes, page.GetNodes()...)
				return page.GetNextPageToken(), err
			})
			if err != nil {
				return a.notFoundHint(a.explain("list nodes", err), err, "loom clusters list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetNodes()) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "No nodes.")
				return nil
			}
			return renderNodes(cmd.OutOrStdout(), resp.GetNodes())
		},
	}
	list.Flags().StringVar(&cluster, "cluster", "", "only this cluster's nodes")
	cmd.AddCommand(list)
	cmd.AddCommand(a.nodeHealthCommands()...)
	return cmd
}
