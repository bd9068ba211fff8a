package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (a *app) clustersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "clusters",
		Aliases: []string{"cluster"},
		Short:   "Create, inspect, resize, log in to and delete training clusters",
		Long: `Training clusters: node pools of GPU machines with Slurm on top, described
in a JSON file (see "loom clusters example", examples/clusters/ in the
repository and docs/clusters.md for the spec field by field).

  loom clusters example a3-ultra-4node | loom clusters create -f -
  loom clusters list
  loom clusters describe a3-ultra-4node
  loom clusters resize a3-ultra-4node train 5
  loom clusters slurm-conf a3-ultra-4node
  loom clusters login a3-ultra-4node
  loom clusters delete a3-ultra-4node`,
	}
	cmd.AddCommand(a.clustersCreateCommand(), a.clustersGetCommand(), a.clustersListCommand(),
		a.clustersDescribeCommand(), a.clustersUpdateCommand(), a.clustersResizeCommand(),
		a.clustersSlurmConfCommand(), a.clustersLoginCommand(), a.clustersDeleteCommand(), a.clustersGoodputCommand(),
		a.clustersExampleCommand())
	return cmd
}

func (a *app) clustersExampleCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "example [NAME]",
		Short: "Print an example cluster file (default the demo's: 2 local CPU nodes)",
		Long: `Print the cluster file examples/clusters/NAME.json, built into loom, so
that a cluster can be created from anywhere, without the repository. NAME
is one of these (default demo):
  ` + strings.Join(exampleClusterNames(), ", ") + `

  loom clusters example | loom clusters create -f -
  loom clusters example one-node-8gpu | loom clusters create -f -
  loom clusters example > my-cluster.json   # to edit it first`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := "demo"
			if len(args) == 1 {
				name = args[0]
			}
			if !slices.Contains(exampleClusterNames(), name) {
				return usagef("no example cluster %q: the examples are %s", name, strings.Join(exampleClusterNames(), ", "))
			}
			_, err := cmd.OutOrStdout().Write(mustExampleCluster(name))
			return err
		},
	}
}

// demoCreateCommand is the command a hint suggests to create a first
// cluster, from the working directory dir: the example file by its
// absolute path where dir is the repository's root (it holds
// demoClusterPath), so the command still works when pasted elsewhere;
// otherwise (loom installed with go install, run anywhere) the built-in
// copy, which needs no file.
func demoCreateCommand(dir string) string {
	if dir != "" {
		p := filepath.Join(dir, demoClusterPath)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return "loom clusters create -f " + shellJoin([]string{p})
		}
	}
	return "loom clusters example | loom clusters create -f -"
}

// demoCreateHint is demoCreateCommand from the working directory.
func demoCreateHint() string {
	dir, _ := os.Getwd()
	return demoCreateCommand(dir)
}

func (a *app) clustersCreateCommand() *cobra.Command {
	var file string
	var async bool
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create a cluster from a JSON file and wait until it is RUNNING",
		Long: `Create a cluster from a file holding a loom.v1.Cluster in JSON, e.g.

  {"name": "demo",
   "compute": {"nodePools": [{"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 2}]}}

"name" is the cluster id or its full name (projects/P/clusters/ID). Field names
may be camelCase or snake_case. Mistakes are reported with the field's path,
all at once. The command shows the operation's progress (a bar on a terminal)
and returns when it ends, or at once with --async.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("give the cluster file with -f FILE, or - for standard input (loom clusters example prints one)")
			}
			req, err := a.readClusterFile(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			op, err := a.createCluster(cmd.Context(), req)
			if err != nil {
				return err
			}
			id := req.GetClusterId()
			return a.followOperation(cmd, op, opView{
				title: "Creating cluster " + id,
				what:  "create cluster " + id,
				async: async,
				final: func(op *loomv1.Operation, took time.Duration) string {
					c := op.GetCluster()
					return fmt.Sprintf("Cluster %s is %s: %d of %d nodes ready (%s)", id, clusterStateLong(c),
						c.GetStatus().GetReadyNodes(), c.GetStatus().GetTotalNodes(), elapsed(took))
				},
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "cluster `FILE` (JSON loom.v1.Cluster; - reads it from standard input, e.g. piped from loom clusters example)")
	cmd.Flags().BoolVar(&async, "async", false, "print the operation's name and return without waiting")
	return cmd
}

// maxClusterFileBytes bounds a cluster file read from standard input, as
// the gateway bounds the request it becomes.
const maxClusterFileBytes = 4 << 20

// readClusterFile reads and parses a cluster file into a create request;
// file "-" is read from stdin (`loom clusters example | loom clusters
// create -f -`).
func (a *app) readClusterFile(file string, stdin io.Reader) (*loomv1.CreateClusterRequest, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, maxClusterFileBytes+1))
		if err == nil && len(data) > maxClusterFileBytes {
			return nil, usagef("the cluster file on standard input is more than %d MiB", maxClusterFileBytes>>20)
		}
		file = "standard input"
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("read cluster file: %w", err)
	}
	return parseClusterFile(file, data, a.project)
}

// createCluster sends req with a fresh request id.
func (a *app) createCluster(ctx context.Context, req *loomv1.CreateClusterRequest) (*loomv1.Operation, error) {
	cl, err := a.clusters()
	if err != nil {
		return nil, err
	}
	req.RequestId = requestID()
	cctx, cancel := a.call(ctx)
	defer cancel()
	op, err := cl.CreateCluster(cctx, req)
	if err != nil {
		return nil, a.explain("create cluster "+req.ClusterId, specFields(err))
	}
	return op, nil
}

// specFields rewrites an InvalidArgument about a request's cluster so that
// its fields are named as in the cluster file: "cluster.network.mtu: ..."
// becomes "network.mtu: ...". Other errors are returned as they are.
func specFields(err error) error {
	return rewriteProblems(err, func(p string) string { return strings.TrimPrefix(p, "cluster.") })
}

// getCluster reads one cluster; arg is its id or full name.
func (a *app) getCluster(ctx context.Context, arg string) (*loomv1.Cluster, error) {
	cl, err := a.clusters()
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	c, err := cl.GetCluster(cctx, &loomv1.GetClusterRequest{Name: a.clusterName(arg)})
	if err != nil {
		return nil, a.notFoundHint(a.explain("get cluster "+arg, err), err, "loom clusters list")
	}
	return c, nil
}

func (a *app) clustersGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a cluster (see also `describe` for its nodes, conditions and partitions)",
		Args:  exactArgs(1, "the cluster name, e.g. `loom clusters get demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.getCluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), c)
			}
			return renderCluster(cmd.OutOrStdout(), c, a.now())
		},
	}
}

func (a *app) clustersListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the project's clusters",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.clusters()
			if err != nil {
				return err
			}
			resp := &loomv1.ListClustersResponse{}
			err = paging.Each(func(token string) (string, error) {
				ctx, cancel := a.call(cmd.Context())
				defer cancel()
				page, err := cl.ListClusters(ctx, &loomv1.ListClustersRequest{Parent: a.parent(), PageToken: token})
				resp.Clusters = append(resp.Clusters, page.GetClusters()...)
				return page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list clusters", err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetClusters()) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No clusters in project %s. Create one with `%s`.\n", a.project, demoCreateHint())
				return nil
			}
			return renderClusters(cmd.OutOrStdout(), resp.GetClusters(), a.now())
		},
	}
}

func (a *app) clustersDeleteCommand() *cobra.Command {
	var async bool
	var etag string
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a cluster (its nodes stop, its jobs are cancelled, its capacity is released)",
		Args:  exactArgs(1, "the cluster name, e.g. `loom clusters delete demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := a.clusterName(args[0])
			op, err := a.deleteCluster(cmd.Context(), name, etag)
			if err != nil {
				return a.notFoundHint(err, err, "loom clusters list")
			}
			id := shortName(name)
			return a.followOperation(cmd, op, opView{
				title: "Deleting cluster " + id,
				what:  "delete cluster " + id,
				async: async,
				final: func(_ *loomv1.Operation, took time.Duration) string {
					return fmt.Sprintf("Cluster %s deleted (%s)", id, elapsed(took))
				},
			})
		},
	}
	cmd.Flags().BoolVar(&async, "async", false, "print the operation's name and return without waiting")
	cmd.Flags().StringVar(&etag, "etag", "", "delete only while the cluster's etag is this `ETAG` (as loom clusters get NAME -o json shows it)")
	return cmd
}

// deleteCluster sends a DeleteCluster with a fresh request id; etag, when
// set, makes the delete conditional on the cluster's spec (AIP-154).
func (a *app) deleteCluster(ctx context.Context, name, etag string) (*loomv1.Operation, error) {
	cl, err := a.clusters()
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	op, err := cl.DeleteCluster(cctx, &loomv1.DeleteClusterRequest{Name: name, RequestId: requestID(), Etag: etag})
	if err != nil {
		return nil, a.explain("delete cluster "+shortName(name), err)
	}
	return op, nil
}

// opView says how followOperation presents one long-running operation.
type opView struct {
	// title heads the progress, e.g. "Creating cluster demo".
	title string
	// what names the action in errors, e.g. "create cluster demo".
	what string
	// async: print the operation and return without waiting.
	async bool
	// hint follows the operation's name when async; without one, how to
	// follow it: "Follow it with `loom operations wait ID`.".
	hint string
	// final is the line printed when the operation succeeded.
	final func(op *loomv1.Operation, took time.Duration) string
}

// followOperation waits for op (showing its progress) and reports how it
// ended; with v.async it prints the operation instead. With --output json
// the operation itself goes to stdout (progress to stderr).
func (a *app) followOperation(cmd *cobra.Command, op *loomv1.Operation, v opView) error {
	out := cmd.OutOrStdout()
	if v.async {
		if a.output == "json" {
			return writeJSON(out, op)
		}
		fmt.Fprintf(out, "%s: operation %s\n", v.title, op.GetName())
		hint := v.hint
		if hint == "" {
			// What the command does without --async: follow it to its
			// end, with its progress, exit 1 when it fails.
			hint = fmt.Sprintf("Follow it with `loom operations wait %s`.", a.shortIn(op.GetName()))
		}
		fmt.Fprintln(out, hint)
		return nil
	}
	progress := a.progressOut(cmd)
	fmt.Fprintf(progress, "%s (operation %s)\n", v.title, shortName(op.GetName()))
	start := time.Now()
	op, err := a.waitOperation(cmd.Context(), op, progress, "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", v.what, err)
	}
	if a.output == "json" {
		return writeJSON(out, op)
	}
	fmt.Fprintln(out, v.final(op, time.Since(start)))
	return nil
}

// waitOperation polls op until it is done, showing its progress on w
// (prefixed with indent): a bar redrawn in place on a terminal, else a line
// per change. A failed operation is an error.
func (a *app) waitOperation(ctx context.Context, op *loomv1.Operation, w io.Writer, indent string) (*loomv1.Operation, error) {
	ops, err := a.operations()
	if err != nil {
		return nil, err
	}
	view := &progressView{w: w, tty: a.tty != nil && a.tty(w), indent: indent}
	defer view.finish()
	for {
		view.show(op)
		if op.GetDone() {
			if e := op.GetError(); e != nil {
				return op, fmt.Errorf("operation failed: %s: %s", codes.Code(e.GetCode()), e.GetMessage())
			}
			return op, nil
		}
		select {
		case <-ctx.Done():
			return op, fmt.Errorf("stopped waiting for operation %s (it goes on without us): %w", op.GetName(), ctx.Err())
		case <-time.After(a.pollInterval):
		}
		cctx, cancel := a.call(ctx)
		next, err := ops.GetOperation(cctx, &loomv1.GetOperationRequest{Name: op.GetName()})
		cancel()
		if err != nil {
			return op, a.explain("get operation "+op.GetName(), err)
		}
		op = next
	}
}

// clusterOrOnly is the full name of the cluster flag names, or, when it
// names none, of LOOM_CLUSTER's (a `loom clusters login` shell sets it),
// else of the project's only cluster, as the Slurm commands choose one; a
// usage error when the project has none or several. alt ends the error's
// advice (", or launch with --serverless").
func (a *app) clusterOrOnly(ctx context.Context, flag, alt string) (string, error) {
	if flag == "" {
		flag = config.Env("LOOM_CLUSTER", "")
	}
	if flag != "" {
		return a.clusterName(flag), nil
	}
	cs, err := a.clusters()
	if err != nil {
		return "", err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	// Two are enough to know there is more than one.
	resp, err := cs.ListClusters(cctx, &loomv1.ListClustersRequest{Parent: a.parent(), PageSize: 2})
	if err != nil {
		return "", a.explain("list the clusters to run on", err)
	}
	switch l := resp.GetClusters(); {
	case len(l) == 1 && resp.GetNextPageToken() == "":
		return l[0].GetName(), nil
	case len(l) == 0:
		return "", usagef("--cluster is required: project %s has no cluster yet; create one with `%s`%s", a.project, demoCreateHint(), alt)
	}
	return "", usagef("--cluster is required: project %s has several clusters (see `loom clusters list`)%s", a.project, alt)
}

// clusterFlag is " --cluster NAME" for a message's example command, ""
// when no cluster was named.
func clusterFlag(name string) string {
	if name == "" {
		return ""
	}
	return " --cluster " + name
}

// notFoundHint adds "(see `<list>`)" to a NotFound error whose message does
// not name list already.
func (a *app) notFoundHint(explained, raw error, list string) error {
	if codeOf(raw) != codes.NotFound || strings.Contains(statusMessage(raw), list) || projectWall.MatchString(statusMessage(raw)) {
		// The service's message may name the list already (the
		// registry's "no version 3 (loom models versions tiny lists
		// them)"): once is enough. A project the caller has no role in
		// is answered by explain: its lists would be refused the same.
		return explained
	}
	if strings.HasPrefix(statusMessage(raw), "cluster ") {
		// The cluster itself is missing (the gateway's "cluster NAME: not
		// found"): a list of its nodes or jobs would not help.
		list = "loom clusters list"
	}
	return fmt.Errorf("%w (see `%s`)", explained, list)
}

// parseClusterFile reads a loom.v1.Cluster in protojson (path is for
// messages) and returns the request that creates it. Its "name" is the
// cluster id, or the full name whose project then wins over project.
// Output-only fields (status, times) are dropped, so that the JSON of
// `loom clusters get -o json` can be fed back in.
func parseClusterFile(path string, data []byte, project string) (*loomv1.CreateClusterRequest, error) {
	c, err := parseClusterSpec(path, data)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSpace(c.GetName())
	if name == "" {
		return nil, fmt.Errorf("%s: field \"name\" is required: the cluster id, e.g. \"demo\"", path)
	}
	id := name
	if strings.HasPrefix(name, "projects/") {
		cn, err := resname.SplitCluster(name)
		if err != nil {
			return nil, fmt.Errorf("%s: field \"name\": %q is not a cluster name (%v); use the id (\"demo\") or projects/PROJECT/clusters/ID", path, name, err)
		}
		project, id = cn.Project, cn.ID
	}
	if !resname.ValidID(id) {
		return nil, fmt.Errorf("%s: field \"name\": %q is not a valid cluster id: use lowercase letters, digits and hyphens, start with a letter, end with a letter or digit, at most 63 characters", path, id)
	}
	cn := resname.Cluster{Project: project, ID: id}
	c.Name = cn.String()
	return &loomv1.CreateClusterRequest{Parent: cn.Parent().String(), ClusterId: id, Cluster: c}, nil
}

// parseClusterSpec reads a loom.v1.Cluster in protojson (path is for
// messages), without its output-only fields. Errors name the field by its
// path, e.g. "compute.node_pools[0].node_count".
func parseClusterSpec(path string, data []byte) (*loomv1.Cluster, error) {
	if strings.TrimSpace(string(data)) == "" {
		return nil, fmt.Errorf("%s: the file is empty; it should hold a cluster in JSON, e.g. {\"name\": \"demo\", \"compute\": {\"node_pools\": [{\"id\": \"cpu\", \"machine_type\": \"n2-standard-8\", \"node_count\": 2}]}}", path)
	}
	c, err := clusterspec.ParseJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid cluster: %s", path, tidyParseError(err))
	}
	c.Status, c.CreateTime, c.UpdateTime = nil, nil, nil
	return c, nil
}

var leadingPosition = regexp.MustCompile(`^\((line \d+:\d+)\):\s*`)

// tidyParseError writes a spec parse error as "field: reason (line L:C)":
// protojson puts the position first, and varies its spacing on purpose
// (non-breaking and doubled spaces), which a user's message should not.
func tidyParseError(err error) string {
	var inv *errs.InvalidError
	if !errors.As(err, &inv) {
		return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\u00a0", " ")), " ")
	}
	parts := make([]string, len(inv.Violations))
	for i, v := range inv.Violations {
		reason := strings.Join(strings.Fields(strings.ReplaceAll(v.Reason, "\u00a0", " ")), " ")
		if m := leadingPosition.FindStringSubmatch(reason); m != nil {
			reason = strings.TrimPrefix(reason, m[0]) + " (" + m[1] + ")"
		}
		parts[i] = v.Field + ": " + reason
	}
	return strings.Join(parts, "; ")
}

// requestID makes a call idempotent across retries of the same invocation.
func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// exactArgs is cobra.ExactArgs with a message that says what to give.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d: give %s", cmd.CommandPath(), n, len(args), what)
		}
		return nil
	}
}

func codeOf(err error) codes.Code { return status.Code(err) }
