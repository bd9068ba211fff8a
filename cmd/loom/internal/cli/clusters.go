package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (a *app) clustersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "clusters",
		Aliases: []string{"cluster"},
		Short:   "Create, inspect and delete training clusters",
	}
	cmd.AddCommand(a.clustersCreateCommand(), a.clustersGetCommand(), a.clustersListCommand(), a.clustersDeleteCommand())
	return cmd
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

"name" is the cluster id or its full name (projects/P/clusters/ID). The command
shows the operation's progress and returns when it ends, unless --async.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("give the cluster file with -f FILE (see examples/clusters/demo.json)")
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("read cluster file: %w", err)
			}
			req, err := parseClusterFile(file, data, a.project)
			if err != nil {
				return err
			}
			op, err := a.createCluster(cmd.Context(), req)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if async {
				if a.output == "json" {
					return writeJSON(out, op)
				}
				fmt.Fprintf(out, "Creating cluster %s: operation %s\nFollow it with `loom clusters get %s`.\n", req.ClusterId, op.GetName(), req.ClusterId)
				return nil
			}
			progress := a.progressOut(cmd)
			fmt.Fprintf(progress, "Creating cluster %s (operation %s)\n", req.ClusterId, shortName(op.GetName()))
			start := time.Now()
			op, err = a.waitOperation(cmd.Context(), op, progress, "  ")
			if err != nil {
				return fmt.Errorf("create cluster %s: %w", req.ClusterId, err)
			}
			if a.output == "json" {
				return writeJSON(out, op)
			}
			c := op.GetCluster()
			fmt.Fprintf(out, "Cluster %s is %s: %d of %d nodes ready (%s)\n", req.ClusterId, clusterState(c),
				c.GetStatus().GetReadyNodes(), c.GetStatus().GetTotalNodes(), elapsed(time.Since(start)))
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "cluster file (JSON loom.v1.Cluster)")
	cmd.Flags().BoolVar(&async, "async", false, "return once the operation is accepted")
	return cmd
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
		return nil, a.explain("create cluster "+req.ClusterId, err)
	}
	return op, nil
}

func (a *app) clustersGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a cluster",
		Args:  exactArgs(1, "the cluster name, e.g. `loom clusters get demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.clusters()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			c, err := cl.GetCluster(ctx, &loomv1.GetClusterRequest{Name: a.clusterName(args[0])})
			if err != nil {
				return a.notFoundHint(a.explain("get cluster "+args[0], err), err, "loom clusters list")
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
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := cl.ListClusters(ctx, &loomv1.ListClustersRequest{Parent: a.parent()})
			if err != nil {
				return a.explain("list clusters", err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetClusters()) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No clusters in project %s. Create one with `loom clusters create -f examples/clusters/demo.json`.\n", a.project)
				return nil
			}
			return renderClusters(cmd.OutOrStdout(), resp.GetClusters(), a.now())
		},
	}
}

func (a *app) clustersDeleteCommand() *cobra.Command {
	var async bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a cluster (its nodes stop and its jobs are cancelled)",
		Args:  exactArgs(1, "the cluster name, e.g. `loom clusters delete demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := a.clusterName(args[0])
			op, err := a.deleteCluster(cmd.Context(), name)
			if err != nil {
				return a.notFoundHint(err, err, "loom clusters list")
			}
			out := cmd.OutOrStdout()
			if async {
				if a.output == "json" {
					return writeJSON(out, op)
				}
				fmt.Fprintf(out, "Deleting cluster %s: operation %s\n", shortName(name), op.GetName())
				return nil
			}
			progress := a.progressOut(cmd)
			fmt.Fprintf(progress, "Deleting cluster %s (operation %s)\n", shortName(name), shortName(op.GetName()))
			start := time.Now()
			op, err = a.waitOperation(cmd.Context(), op, progress, "  ")
			if err != nil {
				return fmt.Errorf("delete cluster %s: %w", shortName(name), err)
			}
			if a.output == "json" {
				return writeJSON(out, op)
			}
			fmt.Fprintf(out, "Cluster %s deleted (%s)\n", shortName(name), elapsed(time.Since(start)))
			return nil
		},
	}
	cmd.Flags().BoolVar(&async, "async", false, "return once the operation is accepted")
	return cmd
}

func (a *app) deleteCluster(ctx context.Context, name string) (*loomv1.Operation, error) {
	cl, err := a.clusters()
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	op, err := cl.DeleteCluster(cctx, &loomv1.DeleteClusterRequest{Name: name, RequestId: requestID()})
	if err != nil {
		return nil, a.explain("delete cluster "+shortName(name), err)
	}
	return op, nil
}

// waitOperation polls op until it is done, writing each new progress message
// to progress (prefixed with indent). A failed operation is an error.
func (a *app) waitOperation(ctx context.Context, op *loomv1.Operation, progress io.Writer, indent string) (*loomv1.Operation, error) {
	ops, err := a.operations()
	if err != nil {
		return nil, err
	}
	last := ""
	for {
		if p := op.GetMetadata().GetProgress(); p != "" && p != last {
			fmt.Fprintf(progress, "%s%s\n", indent, p)
			last = p
		}
		if op.GetDone() {
			if e := op.GetError(); e != nil {
				return op, fmt.Errorf("operation failed: %s: %s", codes.Code(e.GetCode()), e.GetMessage())
			}
			return op, nil
		}
		select {
		case <-ctx.Done():
			return op, fmt.Errorf("stopped waiting for operation %s (it goes on; see `loom clusters list`): %w", op.GetName(), ctx.Err())
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

// notFoundHint adds "list them with <list>" to a NotFound error.
func (a *app) notFoundHint(explained, raw error, list string) error {
	if codeOf(raw) == codes.NotFound {
		return fmt.Errorf("%w (see `%s`)", explained, list)
	}
	return explained
}

var clusterIDPattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// parseClusterFile reads a loom.v1.Cluster in protojson (path is for
// messages) and returns the request that creates it. Its "name" is the
// cluster id, or the full name whose project then wins over project.
// Output-only fields (status, times) are dropped, so that the JSON of
// `loom clusters get -o json` can be fed back in.
func parseClusterFile(path string, data []byte, project string) (*loomv1.CreateClusterRequest, error) {
	if strings.TrimSpace(string(data)) == "" {
		return nil, fmt.Errorf("%s: the file is empty; it should hold a cluster in JSON, e.g. {\"name\": \"demo\", \"compute\": {\"nodePools\": [{\"id\": \"cpu\", \"nodeCount\": 2}]}}", path)
	}
	var c loomv1.Cluster
	if err := protojson.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: not a valid cluster: %s", path, describeProtoJSONError(data, err))
	}
	name := strings.TrimSpace(c.GetName())
	if name == "" {
		return nil, fmt.Errorf("%s: field \"name\" is required: the cluster id, e.g. \"demo\"", path)
	}
	id := name
	if strings.HasPrefix(name, "projects/") {
		parts := strings.Split(name, "/")
		if len(parts) != 4 || parts[1] == "" || parts[2] != "clusters" {
			return nil, fmt.Errorf("%s: field \"name\": %q is not a cluster name; use the id (\"demo\") or projects/PROJECT/clusters/ID", path, name)
		}
		project, id = parts[1], parts[3]
	}
	if !clusterIDPattern.MatchString(id) {
		return nil, fmt.Errorf("%s: field \"name\": %q is not a valid cluster id: use lowercase letters, digits and hyphens, start with a letter, end with a letter or digit, at most 63 characters", path, id)
	}
	c.Name = "projects/" + project + "/clusters/" + id
	c.Status, c.CreateTime, c.UpdateTime = nil, nil, nil
	return &loomv1.CreateClusterRequest{Parent: "projects/" + project, ClusterId: id, Cluster: &c}, nil
}

var protoJSONPos = regexp.MustCompile(`\(line (\d+):(\d+)\)`)

// describeProtoJSONError rewrites a protojson error: without its "proto:"
// prefix and the irregular spacing it adds on purpose, and led by the path
// of the field at the position it reports, e.g.
// "field compute.nodePools[0].nodeCount: invalid value for int32 field
// nodeCount: "two" (line 3:20)".
func describeProtoJSONError(data []byte, err error) string {
	s := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\u00a0", " ")), " ")
	s = strings.TrimSpace(strings.TrimPrefix(s, "proto:"))
	m := protoJSONPos.FindStringSubmatch(s)
	if m == nil {
		return s
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	s = strings.ReplaceAll(strings.TrimSpace(strings.Replace(s, m[0], "", 1)), " :", ":")
	s = strings.TrimPrefix(strings.TrimSpace(s), ":")
	s = strings.TrimSpace(s) + " (line " + m[1] + ":" + m[2] + ")"
	if p := jsonPathAt(data, offsetOf(data, line, col)); p != "" {
		s = "field " + p + ": " + s
	}
	return s
}

// offsetOf converts a 1-based line and column to a byte offset in data.
func offsetOf(data []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return len(data)
		}
		off += i + 1
	}
	return min(off+col-1, len(data))
}

// jsonPathAt returns the path ("compute.nodePools[0].id") of the key or
// value of data that spans byte offset off, or "" when none does.
func jsonPathAt(data []byte, off int) string {
	type frame struct {
		path     string
		array    bool
		idx      int    // array: index of the next element
		key      string // object: the key whose value comes next
		afterKey bool
	}
	join := func(f frame) string {
		if f.array {
			return fmt.Sprintf("%s[%d]", f.path, f.idx)
		}
		if f.path == "" {
			return f.key
		}
		return f.path + "." + f.key
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []frame
	done := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].array {
				stack[n-1].idx++
			} else {
				stack[n-1].afterKey = false
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		end := int(dec.InputOffset())
		n := len(stack)
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:n-1]
			done()
			continue
		}
		if n > 0 && !stack[n-1].array && !stack[n-1].afterKey {
			stack[n-1].key, stack[n-1].afterKey = tok.(string), true
			if end > off {
				return join(stack[n-1])
			}
			continue
		}
		path := ""
		if n > 0 {
			path = join(stack[n-1])
		}
		if end > off {
			return path
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, frame{path: path, array: d == '['})
			continue
		}
		done()
	}
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
