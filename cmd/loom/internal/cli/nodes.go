package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

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
	var allProjects bool
	list := &cobra.Command{
		Use:     "list [CLUSTER | --cluster C | --all-projects]",
		Aliases: []string{"ls"},
		Short:   "List nodes (of one cluster, or of every cluster)",
		Long: `List nodes: NODE (the Slurm hostname), CLUSTER, POOL ("(login)" for login
nodes), STATE (the provisioner's: is the machine up), HEALTH (the health
service's state, as "loom health nodes CLUSTER" shows it: DRAINING for a
drained node, which Slurm shows as drain; "-" for a node that has not reported
to health, "?" where health could not be read, said under the table), GPUS,
ZONE, CAPACITY (RESERVATION, ON_DEMAND, SPOT, FLEX_START) and REASON/NEXT: for
a node that is not READY, why, and what Loom does next about it ("boot timeout
→ retry launch in 4s (attempt 3 of 5)"), then the reason health gave for its
state ("maint"; the first 50 columns).
The cluster is given as an argument, as "loom health nodes CLUSTER" takes it,
or with --cluster. --all-projects (or --project -) lists every cluster's nodes
in every project, PROJECT first: cluster administrators only. -o json is the
ListNodesResponse (the provisioner's view); "loom health nodes CLUSTER -o json"
has the health.`,
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
			switch {
			case allProjects && cluster != "":
				return fmt.Errorf("--all-projects lists every cluster's nodes: give it without a cluster, or give the cluster without it")
			case allProjects:
				parent = "projects/-/clusters/-"
			case cluster != "":
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
			health, err := a.listedNodeHealth(cmd, resp.GetNodes())
			if err != nil {
				return err
			}
			if err := renderNodes(cmd.OutOrStdout(), resp.GetNodes(), health.cell, strings.HasPrefix(parent, "projects/-/")); err != nil {
				return err
			}
			if health.note != "" {
				fmt.Fprintln(cmd.OutOrStdout(), health.note)
			}
			return nil
		},
	}
	list.Flags().StringVar(&cluster, "cluster", "", "only this cluster's nodes")
	list.Flags().BoolVar(&allProjects, "all-projects", false, "every project's nodes (cluster administrators; also --project -)")
	cmd.AddCommand(list)
	cmd.AddCommand(a.nodeHealthCommands()...)
	return cmd
}

// listedHealth is the health of the nodes loom nodes list shows, by
// cluster and hostname, and note, the line under the table that says why
// some could not be read ("" when all were).
type listedHealth struct {
	nodes  map[[2]string]*loomv1.NodeHealth
	unread map[string]bool // clusters whose health could not be read
	note   string
}

// cell is what loom nodes list shows of n's health: state, the HEALTH
// cell ("DRAINING"; "" (shown "-") when n has not reported to health, "?"
// when its cluster's health could not be read), and reason, why health
// put it there ("maint"; "" when there is none), which goes in the
// REASON/NEXT column the header names for it.
func (h listedHealth) cell(n *loomv1.Node) (state, reason string) {
	if h.unread[n.GetCluster()] {
		return "?", ""
	}
	nh := h.nodes[[2]string{n.GetCluster(), n.GetHostname()}]
	if nh == nil {
		return "", ""
	}
	return nodeHealthState(nh), nh.GetReason()
}

// listedNodeHealth reads the health of every cluster among nodes (one
// ListNodeHealth, paged, each). A health service that cannot be asked (a
// gateway without it, one unavailable now, a caller who may not read it)
// leaves those clusters' nodes "?" and says why under the table: the
// provisioner's list is still worth showing. Any other failure is the
// command's.
func (a *app) listedNodeHealth(cmd *cobra.Command, nodes []*loomv1.Node) (listedHealth, error) {
	h := listedHealth{nodes: map[[2]string]*loomv1.NodeHealth{}, unread: map[string]bool{}}
	var clusters []string
	seen := map[string]bool{}
	for _, n := range nodes {
		if cl := n.GetCluster(); !seen[cl] {
			seen[cl] = true
			clusters = append(clusters, cl)
		}
	}
	hs, err := a.healthClient()
	if err != nil {
		return h, err
	}
	var unread []string
	var why error
	var firstUnread string // its full name: the hint names its project
	for _, cl := range clusters {
		got, err := collect(a, cmd, 0, func(ctx context.Context, token string, size int32) ([]*loomv1.NodeHealth, string, error) {
			page, err := hs.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cl, PageToken: token, PageSize: size})
			return page.GetNodes(), page.GetNextPageToken(), err
		})
		switch codeOf(err) {
		case codes.OK, codes.NotFound: // NotFound: the cluster went since it was listed
		case codes.Unimplemented, codes.Unavailable, codes.PermissionDenied:
			h.unread[cl] = true
			unread = append(unread, shortName(cl))
			if why == nil {
				why, firstUnread = err, cl
			}
			continue
		default:
			return h, a.explain("read the health of the nodes of "+shortName(cl), err)
		}
		for _, nh := range got {
			h.nodes[[2]string{cl, nh.GetHostname()}] = nh
		}
	}
	if why != nil {
		// shortIn: from --all-projects, a bare id would ask the default
		// project. A Slurm command takes loom's flags before its name.
		target := a.shortIn(firstUnread)
		sinfo := "loom slurm sinfo -R -M " + target
		if id, project, other := strings.Cut(target, " --project "); other {
			sinfo = "loom --project " + project + " slurm sinfo -R -M " + id
		}
		next := "`loom health nodes " + target + "` shows it once it can be read"
		switch codeOf(why) {
		case codes.Unimplemented:
			next = "`" + sinfo + "` shows drained nodes"
		case codes.PermissionDenied:
			next = "a viewer of the cluster may read it (`loom auth whoami` says who you are)"
		}
		h.note = "HEALTH ?: " + a.explainMsg("could not read the node health of "+strings.Join(unread, ", "), why).Error() + "; " + next + "."
	}
	return h, nil
}
