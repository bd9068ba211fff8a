package cli

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// updatablePaths are the fields of a cluster that `loom clusters update`
// compares and sends, in the order of the update mask (proto field paths;
// libs/clusterspec.ValidateUpdate says which an update may change).
var updatablePaths = []string{
	"display_name",
	"description",
	"labels",
	"compute.node_pools",
	"orchestrator.slurm.login_nodes",
	"orchestrator.slurm.node_sets",
	"orchestrator.slurm.partitions",
	"orchestrator.slurm.prolog_scripts",
	"orchestrator.slurm.epilog_scripts",
}

// fixedPaths are fields set at creation that no update changes.
var fixedPaths = []string{"network", "storage"}

// drainGraceFlag is the --drain-grace option of update and resize.
type drainGraceFlag struct{ d time.Duration }

func (f *drainGraceFlag) register(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.d, "drain-grace", 0,
		"when shrinking, how long drained nodes' jobs may run before they are requeued (default: the server's, 5m)")
}

// seconds is the grace for the request: 0 leaves the server's default.
func (f *drainGraceFlag) seconds() (int32, error) {
	if f.d < 0 {
		return 0, usagef("--drain-grace must not be negative, got %s", f.d)
	}
	s := math.Ceil(f.d.Seconds())
	if s > math.MaxInt32 {
		return 0, usagef("--drain-grace %s is too long", f.d)
	}
	return int32(s), nil
}

func (a *app) clustersUpdateCommand() *cobra.Command {
	var file, etag string
	var async bool
	var grace drainGraceFlag
	cmd := &cobra.Command{
		Use:   "update NAME -f FILE [--drain-grace 5m] [--etag ETAG]",
		Short: "Change a cluster to match a file: pool sizes, pools added or removed, node sets, partitions",
		Long: `Change a running cluster to match the spec in FILE (the same JSON as for
create; "name" may be left out). The updatable fields that differ between the
file and the cluster are sent, and only they: display_name, description,
labels, compute.node_pools (grow, shrink, add, remove), orchestrator.slurm
(login nodes, node sets, partitions, prolog and epilog scripts). Network and
storage are fixed at creation. A file without "orchestrator" (as without
network or storage) leaves it unchanged; "orchestrator": {} asks for the
generated partitions.

Shrinking a pool drains its nodes out of service first, then its
highest-numbered: they take no new jobs, and jobs still on them after
--drain-grace are requeued. A pool left out of the file is removed the same way, all its nodes drained; its node sets
and partitions must be left out with it. The command
shows progress and returns when the update ends, or at once with --async.
"loom clusters get NAME -o json" gives a file to start from.

That file holds the cluster's "etag", which identifies its spec as read: the
update is sent with it and applies only while the cluster still has that
spec, so that it cannot undo a change someone made since (it is refused,
saying so: get the cluster again, redo the change and rerun). --etag sets it
for a file without one. With neither, the update applies to the cluster as
it is then.`,
		Args: exactArgs(1, "the cluster name and -f FILE, e.g. `loom clusters update demo -f demo.json`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usagef("give the new spec with -f FILE (start from `loom clusters get %s -o json`)", args[0])
			}
			secs, err := grace.seconds()
			if err != nil {
				return err
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("read cluster file: %w", err)
			}
			want, err := parseClusterSpec(file, data)
			if err != nil {
				return err
			}
			switch {
			case etag == "":
			case want.GetEtag() != "" && want.GetEtag() != etag:
				return usagef("%s has etag %q but --etag says %q; give one of them", file, want.GetEtag(), etag)
			default:
				want.Etag = etag
			}
			name := a.clusterName(args[0])
			if n := want.GetName(); n != "" && n != shortName(name) && a.clusterName(n) != name {
				return usagef("%s names cluster %q, but the command updates %q; make them agree", file, n, shortName(name))
			}
			cur, err := a.getCluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			// Said here when the cluster read just now shows it; the
			// gateway and the provisioner refuse it too (ABORTED) when the
			// change lands between this read and the update.
			if e := want.GetEtag(); e != "" && cur.GetEtag() != "" && e != cur.GetEtag() {
				return fmt.Errorf("update cluster %s: the cluster changed since %s was read (its etag %q is now %q), and this update could undo that change; "+
					"get it again with `loom clusters get %s -o json`, make your change on that and run the update again",
					shortName(name), file, e, cur.GetEtag(), shortName(name))
			}
			want, mask, err := updateMask(cur, want)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			id := shortName(name)
			if len(mask) == 0 {
				if a.output == "json" {
					return writeJSON(cmd.OutOrStdout(), cur)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Cluster %s already matches %s; nothing to update.\n", id, file)
				return nil
			}
			want.Name = name
			want.Status, want.CreateTime, want.UpdateTime = nil, nil, nil
			op, err := a.updateCluster(cmd.Context(), want, mask, secs)
			if err != nil {
				return err
			}
			title := fmt.Sprintf("Updating cluster %s: %s", id, strings.Join(mask, ", "))
			if ch := poolChanges(cur, want); ch != "" {
				title += " (" + ch + ")"
			}
			return a.followOperation(cmd, op, opView{
				title: title,
				what:  "update cluster " + id,
				async: async,
				final: clusterFinal(id),
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "cluster file with the new spec (JSON loom.v1.Cluster)")
	cmd.Flags().StringVar(&etag, "etag", "", "update only while the cluster's etag is this one (default: the file's \"etag\", if any)")
	cmd.Flags().BoolVar(&async, "async", false, "print the operation's name and return without waiting")
	grace.register(cmd)
	return cmd
}

func (a *app) clustersResizeCommand() *cobra.Command {
	var async bool
	var grace drainGraceFlag
	cmd := &cobra.Command{
		Use:   "resize NAME POOL N",
		Short: "Set the number of nodes of one node pool (shrinking drains nodes first)",
		Long: `Set node pool POOL of cluster NAME to N nodes. Growing launches new nodes;
shrinking drains the nodes out of service first, then the highest-numbered
(no new jobs; jobs still running after --drain-grace are requeued), then removes them and releases
their capacity. Returns when the pool is at its new size, or at once with
--async. The resize is refused, not applied, when the cluster's spec changes
between its read and the update (its etag): run it again.`,
		Args: exactArgs(3, "the cluster, the node pool and the new node count, e.g. `loom clusters resize demo gpu 4`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[2])
			if err != nil || n < 0 || n > math.MaxInt32 {
				return usagef("N must be a node count (a whole number, at least 1), got %q", args[2])
			}
			if n == 0 {
				return usagef("a node pool keeps at least 1 node; to remove pool %s, update the cluster without it (and its node sets and partitions): `loom clusters update %s -f FILE`", args[1], args[0])
			}
			secs, err := grace.seconds()
			if err != nil {
				return err
			}
			cur, err := a.getCluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			id, poolID := shortName(cur.GetName()), args[1]
			want := proto.Clone(cur).(*loomv1.Cluster)
			want.Status, want.CreateTime, want.UpdateTime = nil, nil, nil
			var pool *loomv1.NodePool
			var ids []string
			for _, p := range want.GetCompute().GetNodePools() {
				ids = append(ids, p.GetId())
				if p.GetId() == poolID {
					pool = p
				}
			}
			if pool == nil {
				return fmt.Errorf("cluster %s has no node pool %q; its pools are %s", id, poolID, strings.Join(ids, ", "))
			}
			from := pool.GetNodeCount()
			if int(from) == n {
				if a.output == "json" {
					return writeJSON(cmd.OutOrStdout(), cur)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Pool %s of cluster %s already has %d %s; nothing to do.\n", poolID, id, n, plural(n, "node", "nodes"))
				return nil
			}
			pool.NodeCount = int32(n)
			// want keeps cur's etag: the pools sent are those just read,
			// which must not undo a change to them made since.
			op, err := a.updateCluster(cmd.Context(), want, []string{"compute.node_pools"}, secs)
			if codeOf(err) == codes.Aborted {
				return fmt.Errorf("resize cluster %s: the cluster changed while the resize was sent (its etag is no longer %q), and the resize could undo that change; "+
					"run the resize again: it reads the cluster afresh", id, cur.GetEtag())
			}
			if err != nil {
				return err
			}
			title := fmt.Sprintf("Resizing pool %s of cluster %s from %d to %d %s", poolID, id, from, n, plural(n, "node", "nodes"))
			if int(from) > n {
				title += "; the removed nodes drain first"
			}
			return a.followOperation(cmd, op, opView{
				title: title,
				what:  "resize cluster " + id,
				async: async,
				final: clusterFinal(id),
			})
		},
	}
	cmd.Flags().BoolVar(&async, "async", false, "print the operation's name and return without waiting")
	grace.register(cmd)
	return cmd
}

// clusterFinal is the last line of an update: the cluster's state and nodes.
func clusterFinal(id string) func(*loomv1.Operation, time.Duration) string {
	return func(op *loomv1.Operation, took time.Duration) string {
		c := op.GetCluster()
		if c == nil {
			return fmt.Sprintf("Cluster %s updated (%s)", id, elapsed(took))
		}
		return fmt.Sprintf("Cluster %s is %s: %d of %d nodes ready (%s)", id, clusterStateLong(c),
			c.GetStatus().GetReadyNodes(), c.GetStatus().GetTotalNodes(), elapsed(took))
	}
}

// updateCluster sends an UpdateCluster with a fresh request id.
func (a *app) updateCluster(ctx context.Context, c *loomv1.Cluster, mask []string, graceSeconds int32) (*loomv1.Operation, error) {
	cl, err := a.clusters()
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	op, err := cl.UpdateCluster(cctx, &loomv1.UpdateClusterRequest{
		Cluster:           c,
		UpdateMask:        &fieldmaskpb.FieldMask{Paths: mask},
		RequestId:         requestID(),
		DrainGraceSeconds: graceSeconds,
	})
	if err != nil {
		return nil, a.explain("update cluster "+shortName(c.GetName()), specFields(err))
	}
	return op, nil
}

// updateMask compares a cluster file (want, as parsed) with the cluster as
// it is (cur) after filling both with the defaults (clusterspec.Normalize),
// so that what the file leaves to defaults is no change. It returns the
// normalized spec to send and the updatable fields in which it differs. A
// fixed field (network, storage) that the file sets to something else is an
// error naming it, rather than a change silently left out.
func updateMask(cur, want *loomv1.Cluster) (*loomv1.Cluster, []string, error) {
	cur = proto.Clone(cur).(*loomv1.Cluster)
	clusterspec.Normalize(cur)
	norm := proto.Clone(want).(*loomv1.Cluster)
	clusterspec.Normalize(norm)
	var fixed []string
	for _, p := range fixedPaths {
		if _, set := project(want.ProtoReflect(), p); set && differs(cur, norm, p) {
			fixed = append(fixed, p)
		}
	}
	if len(fixed) > 0 {
		return nil, nil, usagef("%s cannot be changed on an existing cluster (the file differs from the cluster there); create a new cluster instead",
			strings.Join(fixed, " and "))
	}
	var mask []string
	for _, p := range updatablePaths {
		// A file without "orchestrator" leaves it as it is, as the API's
		// empty mask does and as network and storage left out are:
		// taking it as "none" would remove the cluster's partitions and
		// end their jobs. `"orchestrator": {}` asks for the generated one.
		if strings.HasPrefix(p, "orchestrator.") && want.GetOrchestrator() == nil {
			continue
		}
		if differs(cur, norm, p) {
			mask = append(mask, p)
		}
	}
	return norm, mask, nil
}

// differs says whether a and b hold different values at path (a dotted
// proto field path); unset and empty are the same.
func differs(a, b *loomv1.Cluster, path string) bool {
	pa, okA := project(a.ProtoReflect(), path)
	pb, okB := project(b.ProtoReflect(), path)
	if !okA || !okB {
		return okA != okB
	}
	return !proto.Equal(pa.Interface(), pb.Interface())
}

// project returns a message of m's type holding only the field at path (and
// the messages on the way to it), and whether that field is set in m.
func project(m protoreflect.Message, path string) (protoreflect.Message, bool) {
	name, rest, nested := strings.Cut(path, ".")
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || !m.Has(fd) {
		return nil, false
	}
	out := m.Type().New()
	if !nested {
		out.Set(fd, m.Get(fd))
		return out, true
	}
	if fd.Message() == nil || fd.IsList() || fd.IsMap() {
		return nil, false
	}
	child, ok := project(m.Get(fd).Message(), rest)
	if !ok {
		return nil, false
	}
	out.Set(fd, protoreflect.ValueOfMessage(child))
	return out, true
}

// poolChanges summarises how want's node pools differ from cur's in size
// and number: "pool gpu 4 → 5 nodes, new pool spot (2 nodes)".
func poolChanges(cur, want *loomv1.Cluster) string {
	old := map[string]int32{}
	for _, p := range cur.GetCompute().GetNodePools() {
		old[p.GetId()] = p.GetNodeCount()
	}
	var parts []string
	seen := map[string]bool{}
	for _, p := range want.GetCompute().GetNodePools() {
		seen[p.GetId()] = true
		n, ok := old[p.GetId()]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("new pool %s (%d %s)", p.GetId(), p.GetNodeCount(), plural(int(p.GetNodeCount()), "node", "nodes")))
		case n != p.GetNodeCount():
			parts = append(parts, fmt.Sprintf("pool %s %d → %d nodes", p.GetId(), n, p.GetNodeCount()))
		}
	}
	for _, p := range cur.GetCompute().GetNodePools() {
		if !seen[p.GetId()] {
			parts = append(parts, "pool "+p.GetId()+" removed")
		}
	}
	return strings.Join(parts, ", ")
}
