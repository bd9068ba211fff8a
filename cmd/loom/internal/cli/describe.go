package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// maxNotReady caps the "Nodes not ready" section of describe; the rest are
// counted and `loom nodes list` shows them all.
const maxNotReady = 10

func (a *app) clustersDescribeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a cluster in full: spec, pools, partitions, storage, conditions, nodes not ready",
		Long: `Show a cluster's spec and status in full: node pools with their ready,
provisioning, failed and draining counts; conditions with their reasons;
Slurm partitions and the nodes in them; where the shared home and scratch are;
the login node; and the most recent nodes that are not READY, with why and
what Loom does next about them. With --output json: {"cluster": ..., "nodes": [...]}.`,
		Args: exactArgs(1, "the cluster name, e.g. `loom clusters describe demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.getCluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			nodes, err := a.listNodes(cmd.Context(), c.GetName())
			if err != nil {
				return err
			}
			if a.output == "json" {
				return writeDescribeJSON(cmd.OutOrStdout(), c, nodes)
			}
			return renderDescribe(cmd.OutOrStdout(), c, nodes, a.now())
		},
	}
}

// listNodes lists the nodes under parent (a cluster name; ".../clusters/-"
// for every cluster).
func (a *app) listNodes(ctx context.Context, parent string) ([]*loomv1.Node, error) {
	cl, err := a.nodes()
	if err != nil {
		return nil, err
	}
	var nodes []*loomv1.Node
	err = paging.Each(func(token string) (string, error) {
		cctx, cancel := a.call(ctx)
		defer cancel()
		page, err := cl.ListNodes(cctx, &loomv1.ListNodesRequest{Parent: parent, PageToken: token})
		nodes = append(nodes, page.GetNodes()...)
		return page.GetNextPageToken(), err
	})
	if err != nil {
		return nil, a.notFoundHint(a.explain("list nodes", err), err, "loom clusters list")
	}
	return nodes, nil
}

// writeDescribeJSON writes {"cluster": c, "nodes": [...]} in protojson.
func writeDescribeJSON(w io.Writer, c *loomv1.Cluster, nodes []*loomv1.Node) error {
	cj, err := protojson.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	nj := make([]json.RawMessage, len(nodes))
	for i, n := range nodes {
		if nj[i], err = protojson.Marshal(n); err != nil {
			return fmt.Errorf("encode JSON: %w", err)
		}
	}
	b, err := json.MarshalIndent(struct {
		Cluster json.RawMessage   `json:"cluster"`
		Nodes   []json.RawMessage `json:"nodes"`
	}{cj, nj}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func renderDescribe(w io.Writer, c *loomv1.Cluster, nodes []*loomv1.Node, now time.Time) error {
	st := c.GetStatus()
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", c.GetName())
	if c.GetDisplayName() != "" {
		fmt.Fprintf(tw, "Display name:\t%s\n", c.GetDisplayName())
	}
	if c.GetDescription() != "" {
		fmt.Fprintf(tw, "Description:\t%s\n", c.GetDescription())
	}
	fmt.Fprintf(tw, "State:\t%s\n", clusterStateLong(c))
	if st.GetMessage() != "" {
		fmt.Fprintf(tw, "Message:\t%s\n", st.GetMessage())
	}
	fmt.Fprintf(tw, "Nodes:\t%d of %d ready\n", st.GetReadyNodes(), st.GetTotalNodes())
	if n := c.GetNetwork(); n != nil {
		fmt.Fprintf(tw, "Network:\t%s\n", describeNetwork(n))
	}
	home := c.GetStorage().GetHome()
	if st.GetHomeDir() != "" || st.GetSharedDir() != "" || home != nil {
		fmt.Fprintf(tw, "Home:\t%s\n", describeStorage(homeDir(c), home.GetMountPath(),
			fmt.Sprintf("%s %d GiB", orDash(home.GetTier()), home.GetCapacityGib()), home != nil))
	}
	if sc := c.GetStorage().GetScratch(); st.GetScratchDir() != "" || sc != nil {
		fmt.Fprintf(tw, "Scratch:\t%s\n", describeStorage(st.GetScratchDir(), sc.GetMountPath(),
			fmt.Sprintf("%d GiB at %d MB/s per TiB", sc.GetCapacityGib(), sc.GetThroughputMbpsPerTib()), sc != nil))
	}
	if login := describeLogin(c); login != "" {
		fmt.Fprintf(tw, "Login node:\t%s\n", login)
	}
	if len(c.GetLabels()) > 0 {
		fmt.Fprintf(tw, "Labels:\t%s\n", labels(c.GetLabels()))
	}
	fmt.Fprintf(tw, "Created:\t%s\n", ago(c.GetCreateTime(), now))
	if c.GetUpdateTime() != nil {
		fmt.Fprintf(tw, "Updated:\t%s\n", ago(c.GetUpdateTime(), now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nNode pools:")
	tw = newTable(w)
	row(tw, "  ID", "MACHINE TYPE", "GPUS/NODE", "CAPACITY", "ZONE", "TARGET", "READY", "PROVISIONING", "FAILED", "DRAINING")
	for _, p := range c.GetCompute().GetNodePools() {
		ps := poolStatus(c, p, nodes)
		row(tw, "  "+p.GetId(), p.GetMachineType(), gpusPerNode(p), describeCapacity(p.GetCapacity()), poolZone(c, p),
			itoa(ps.GetTarget()), itoa(ps.GetReady()), itoa(ps.GetProvisioning()), itoa(ps.GetFailed()), itoa(ps.GetDraining()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if slurm := c.GetOrchestrator().GetSlurm(); len(slurm.GetPartitions()) > 0 {
		fmt.Fprintln(w, "\nPartitions:")
		tw = newTable(w)
		row(tw, "  ID", "NODE SETS", "NODES", "MAX TIME", "DEFAULT", "PRIORITY TIER")
		for _, part := range slurm.GetPartitions() {
			def := "no"
			if part.GetDefault() {
				def = "yes"
			}
			maxTime := part.GetMaxTime()
			if maxTime == "" {
				maxTime = "UNLIMITED"
			}
			row(tw, "  "+part.GetId(), strings.Join(part.GetNodeSetIds(), ","), partitionNodes(c, part, nodes),
				maxTime, def, itoa(part.GetPriorityTier()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if conds := st.GetConditions(); len(conds) > 0 {
		fmt.Fprintln(w, "\nConditions:")
		tw = newTable(w)
		row(tw, "  TYPE", "STATUS", "REASON", "CHANGED", "MESSAGE")
		for _, cond := range conds {
			row(tw, "  "+cond.GetType(), cond.GetStatus(), cond.GetReason(), ago(cond.GetLastTransitionTime(), now), cond.GetMessage())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	notReady := nodesNotReady(nodes)
	if len(notReady) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nNodes not ready (%d):\n", len(notReady))
	tw = newTable(w)
	row(tw, "  NODE", "POOL", "STATE", "AGE", "REASON", "NEXT ACTION")
	for i, n := range notReady {
		if i == maxNotReady {
			break
		}
		row(tw, "  "+n.GetHostname(), nodePool(n), nodeState(n), age(n.GetCreateTime(), now), n.GetReason(), n.GetNextAction())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(notReady) > maxNotReady {
		fmt.Fprintf(w, "  ... and %d more: `loom nodes list --cluster %s`\n", len(notReady)-maxNotReady, shortName(c.GetName()))
	}
	return nil
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func describeNetwork(n *loomv1.NetworkConfig) string {
	var parts []string
	if n.GetName() != "" {
		parts = append(parts, n.GetName())
	}
	if n.GetZone() != "" {
		parts = append(parts, "zone "+n.GetZone())
	}
	if n.GetMtu() > 0 {
		parts = append(parts, fmt.Sprintf("MTU %d", n.GetMtu()))
	}
	return orDash(strings.Join(parts, ", "))
}

// describeStorage is "DIR (SPEC, mounted at MOUNT)".
func describeStorage(dir, mount, spec string, hasSpec bool) string {
	var extra []string
	if hasSpec {
		extra = append(extra, spec)
	}
	if mount != "" {
		extra = append(extra, "mounted at "+mount)
	}
	s := orDash(dir)
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// describeLogin is "HOST (N × MACHINE)", from the status and the spec.
func describeLogin(c *loomv1.Cluster) string {
	host := c.GetStatus().GetLoginNode()
	ln := c.GetOrchestrator().GetSlurm().GetLoginNodes()
	if host == "" && ln == nil {
		return ""
	}
	s := orDash(host)
	if ln != nil {
		s += fmt.Sprintf(" (%d × %s)", ln.GetCount(), orDash(ln.GetMachineType()))
	}
	return s
}

func gpusPerNode(p *loomv1.NodePool) string {
	if p.GetAcceleratorCount() == 0 {
		return "0"
	}
	if p.GetAcceleratorType() == "" {
		return itoa(p.GetAcceleratorCount())
	}
	return fmt.Sprintf("%d × %s", p.GetAcceleratorCount(), p.GetAcceleratorType())
}

// describeCapacity is "RESERVATION r1", "SPOT", "ON_DEMAND" (the default).
func describeCapacity(c *loomv1.CapacitySource) string {
	t := c.GetType()
	if t == loomv1.CapacitySource_TYPE_UNSPECIFIED {
		t = loomv1.CapacitySource_ON_DEMAND
	}
	if t == loomv1.CapacitySource_RESERVATION && c.GetReservation() != "" {
		return "RESERVATION " + shortName(c.GetReservation())
	}
	return t.String()
}

func poolZone(c *loomv1.Cluster, p *loomv1.NodePool) string {
	if p.GetZone() != "" {
		return p.GetZone()
	}
	return c.GetNetwork().GetZone()
}

// poolStatus is the pool's counts from the cluster's status, or counted
// from its nodes when the status has none for it.
func poolStatus(c *loomv1.Cluster, p *loomv1.NodePool, nodes []*loomv1.Node) *loomv1.NodePoolStatus {
	for _, ps := range c.GetStatus().GetNodePools() {
		if ps.GetId() == p.GetId() {
			return ps
		}
	}
	ps := &loomv1.NodePoolStatus{Id: p.GetId(), Target: p.GetNodeCount()}
	for _, n := range nodes {
		if n.GetNodePool() != p.GetId() || n.GetRole() == "login" {
			continue
		}
		switch n.GetState() {
		case loomv1.Node_READY:
			ps.Ready++
		case loomv1.Node_PROVISIONING:
			ps.Provisioning++
		case loomv1.Node_FAILED, loomv1.Node_DOWN:
			ps.Failed++
		case loomv1.Node_DRAINING:
			ps.Draining++
		}
	}
	return ps
}

// partitionNodes is the Slurm hostlist of the compute nodes in a
// partition's node sets, e.g. "a3u-[0001-0004]".
func partitionNodes(c *loomv1.Cluster, part *loomv1.SlurmPartition, nodes []*loomv1.Node) string {
	pools := map[string]bool{}
	for _, id := range part.GetNodeSetIds() {
		for _, ns := range c.GetOrchestrator().GetSlurm().GetNodeSets() {
			if ns.GetId() == id {
				pools[ns.GetNodePoolId()] = true
			}
		}
	}
	var hosts []string
	for _, n := range nodes {
		if pools[n.GetNodePool()] && n.GetRole() != "login" && n.GetState() != loomv1.Node_DELETING {
			hosts = append(hosts, n.GetHostname())
		}
	}
	return hostlist.Compress(hosts)
}

// nodesNotReady are the compute and login nodes that are not READY, the
// most recently created first.
func nodesNotReady(nodes []*loomv1.Node) []*loomv1.Node {
	var out []*loomv1.Node
	for _, n := range nodes {
		if n.GetState() != loomv1.Node_READY {
			out = append(out, n)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		ti, tj := out[i].GetCreateTime().AsTime(), out[j].GetCreateTime().AsTime()
		if !ti.Equal(tj) {
			return ti.After(tj)
		}
		return out[i].GetHostname() < out[j].GetHostname()
	})
	return out
}

// slurmFiles are the files of GetSlurmConfig, by --file name.
var slurmFiles = []struct {
	key, file string
	get       func(*loomv1.SlurmConfig) string
}{
	{"slurm", "slurm.conf", (*loomv1.SlurmConfig).GetSlurmConf},
	{"gres", "gres.conf", (*loomv1.SlurmConfig).GetGresConf},
	{"topology", "topology.conf", (*loomv1.SlurmConfig).GetTopologyConf},
}

func (a *app) clustersSlurmConfCommand() *cobra.Command {
	var which string
	cmd := &cobra.Command{
		Use:   "slurm-conf NAME [--file slurm|gres|topology]",
		Short: "Print the cluster's rendered slurm.conf, gres.conf and topology.conf",
		Long: `Print the Slurm configuration Loom renders for the cluster from its spec and
nodes. Without --file all three files are printed, each under a
"==> FILE <==" header; with --file only that file, as it is, so that
"loom clusters slurm-conf demo --file slurm > slurm.conf" works.`,
		Args: exactArgs(1, "the cluster name, e.g. `loom clusters slurm-conf demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var pick func(*loomv1.SlurmConfig) string
			if which != "" {
				var keys []string
				for _, f := range slurmFiles {
					keys = append(keys, f.key)
					if which == f.key || which == f.file {
						pick = f.get
					}
				}
				if pick == nil {
					return usagef("--file must be one of %s, got %q", strings.Join(keys, ", "), which)
				}
			}
			cl, err := a.clusters()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			conf, err := cl.GetSlurmConfig(ctx, &loomv1.GetSlurmConfigRequest{Name: a.clusterName(args[0])})
			if err != nil {
				return a.notFoundHint(a.explain("get the Slurm configuration of cluster "+args[0], err), err, "loom clusters list")
			}
			out := cmd.OutOrStdout()
			if a.output == "json" {
				return writeJSON(out, conf)
			}
			if pick != nil {
				_, err := io.WriteString(out, withNewline(pick(conf)))
				return err
			}
			for i, f := range slurmFiles {
				if i > 0 {
					fmt.Fprintln(out)
				}
				fmt.Fprintf(out, "==> %s <==\n%s", f.file, withNewline(f.get(conf)))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&which, "file", "", "print only this file: slurm, gres or topology")
	return cmd
}

// withNewline ends non-empty text with a newline.
func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
