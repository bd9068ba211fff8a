package cli

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/cmd/loom/internal/trainer"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// demoClusterPath is where the demo looks for its cluster file, from the
// working directory; demoClusterJSON is the copy built in, used when the
// file is not there (a test keeps the two identical).
const demoClusterPath = "examples/clusters/demo.json"

// exampleClusterFiles holds a copy of every file of examples/clusters/, by
// its name there, so that `loom clusters example NAME` prints it from
// anywhere (go install puts no repository beside loom); a test keeps the
// copies identical to the files.
//
//go:embed exampleclusters/*.json
var exampleClusterFiles embed.FS

var demoClusterJSON = mustExampleCluster("demo")

// mustExampleCluster returns the built-in copy of
// examples/clusters/NAME.json; it panics when there is none, which only a
// wrong constant in this package can cause.
func mustExampleCluster(name string) []byte {
	b, err := exampleClusterFiles.ReadFile("exampleclusters/" + name + ".json")
	if err != nil {
		panic(err)
	}
	return b
}

// exampleClusterNames returns the names of the built-in example clusters
// (their files' names less .json), sorted.
func exampleClusterNames() []string {
	entries, _ := exampleClusterFiles.ReadDir("exampleclusters")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	return names
}

// demoModel is the model the demo's job registers a version of.
const demoModel = "demo-regressor"

// demoOptions configures runDemo.
type demoOptions struct {
	// timeout bounds the whole demo.
	timeout time.Duration
	// clusterFile is the cluster to create ("": demoClusterPath, else the
	// built-in copy).
	clusterFile string
	// executable is the program the job runs as `<executable> train ...`.
	executable string
	// stack configures the in-process Loom started when no gateway answers.
	stack stack.Options
	// epochs the job trains.
	epochs int
}

func (a *app) demoCommand() *cobra.Command {
	opts := demoOptions{timeout: 2 * time.Minute, epochs: 200}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show Loom end to end: a cluster, a 2-node training job, a registered model",
		Long: `Run the whole flow once: create the demo cluster (2 local nodes), run
"loom train" on both nodes with model output "demo-regressor", print the
job's output and the registered model version, then delete the cluster.
The cluster file is examples/clusters/demo.json under the working directory
where it is there (the repository's root), else the copy built into loom
that "loom clusters example" prints, so the demo runs from anywhere.

It uses the gateway at --gateway when one answers there; otherwise it starts
Loom in this process (temporary data, free ports), prints its gateway and
web console, and stops it at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.executable = executable()
			opts.stack.LogLevel = "error"
			return a.runDemo(cmd.Context(), opts, cmd.OutOrStdout())
		},
	}
	cmd.Flags().DurationVar(&opts.timeout, "timeout", opts.timeout, "give up when the demo takes longer")
	cmd.Flags().StringVarP(&opts.clusterFile, "file", "f", "", "cluster `FILE` (default ./"+demoClusterPath+" where it exists, else the built-in copy \"loom clusters example\" prints)")
	cmd.Flags().IntVar(&opts.epochs, "epochs", opts.epochs, "epochs the demo job trains")
	return cmd
}

// runDemo runs the demo, writing its story to out.
func (a *app) runDemo(parent context.Context, opts demoOptions, out io.Writer) (err error) {
	begin := time.Now()
	ctx, cancel := context.WithTimeout(parent, opts.timeout)
	defer cancel()
	step := "starting"
	say := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
	defer func() {
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			err = fmt.Errorf("the demo did not finish within %s (while %s): %w", opts.timeout, step, err)
		} else if err != nil {
			err = fmt.Errorf("demo failed while %s: %w", step, err)
		}
	}()
	// Cleanups run on every path, each with its own time even when ctx is
	// over, so that a failed demo does not leave a cluster or a stack behind.
	var cleanups []func(context.Context) error
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(parent), 30*time.Second)
			if cerr := cleanups[i](cctx); cerr != nil && err == nil {
				err = cerr
			}
			ccancel()
		}
		if err == nil {
			say("Demo finished in %s", elapsed(time.Since(begin)))
		}
	}()

	step = "looking for a gateway"
	if a.gatewayAnswers(ctx) {
		say("Using the Loom gateway at %s", a.gateway)
	} else {
		step = "starting Loom"
		say("No Loom gateway at %s: starting Loom in this process", a.gateway)
		st, err := stack.Start(ctx, opts.stack)
		if err != nil {
			return err
		}
		// Its administrator key (the gateway made it at this start) is the
		// demo's credential; it is not saved anywhere.
		key, kerr := st.AdminKey()
		if kerr != nil && !errors.Is(kerr, fs.ErrNotExist) {
			return kerr
		}
		a.useGateway(st.GatewayAddr, key)
		// The console is named as `loom up` names its own, so that the
		// demo can be watched there while it runs.
		say("Loom is up: gateway %s (gRPC), REST and web console http://%s/ (%s)", st.GatewayAddr, st.RESTAddr, elapsed(time.Since(begin)))
		cleanups = append(cleanups, func(ctx context.Context) error {
			// The connection goes first, so that closing the gateway does
			// not wait for it.
			a.close()
			say("Stopping the in-process Loom")
			if err := st.Close(ctx); err != nil {
				return fmt.Errorf("stop Loom: %w", err)
			}
			return nil
		})
	}

	step = "reading the cluster file"
	path, data, err := demoCluster(opts.clusterFile)
	if err != nil {
		return err
	}
	req, err := parseClusterFile(path, data, a.project)
	if err != nil {
		return err
	}
	clusterName := req.GetCluster().GetName()

	step = "creating cluster " + req.ClusterId
	say("Creating cluster %s from %s (%s)", req.ClusterId, path, poolSummary(req.GetCluster()))
	t0 := time.Now()
	op, err := a.createCluster(ctx, req)
	if err != nil {
		if codeOf(err) == codes.AlreadyExists {
			return fmt.Errorf("%w; delete it with `loom clusters delete %s` and run the demo again", err, req.ClusterId)
		}
		return err
	}
	deleted := false
	cleanups = append(cleanups, func(ctx context.Context) error {
		if deleted {
			return nil
		}
		op, err := a.deleteCluster(ctx, clusterName, "")
		if err == nil {
			_, err = a.waitOperation(ctx, op, io.Discard, "")
		}
		if err != nil {
			return fmt.Errorf("delete cluster %s: %w", req.ClusterId, err)
		}
		return nil
	})
	op, err = a.waitOperation(ctx, op, out, "    ")
	if err != nil {
		return err
	}
	say("Cluster %s is %s (%s)", req.ClusterId, clusterState(op.GetCluster()), elapsed(time.Since(t0)))

	step = "running the training job"
	nodes := op.GetCluster().GetStatus().GetTotalNodes()
	if nodes < 1 {
		nodes = totalNodes(req.GetCluster())
	}
	nodes = min(nodes, 2)
	job := &loomv1.Job{
		Cluster:     clusterName,
		DisplayName: "demo-train",
		Command: []string{opts.executable, "train", "--epochs", fmt.Sprint(opts.epochs),
			"--checkpoint-every", "50", "--log-every", fmt.Sprint(max(1, opts.epochs/8))},
		NodeCount:   nodes,
		ModelOutput: &loomv1.ModelOutput{ModelId: demoModel},
	}
	t0 = time.Now()
	j, err := a.submitJob(ctx, job)
	if err != nil {
		return err
	}
	say("Submitted job %s: `loom train --epochs %d` on %d nodes, model output %q", jobID(j), opts.epochs, nodes, demoModel)
	final, err := a.followJob(ctx, j.GetName(), out, "    ")
	if err != nil {
		return err
	}
	say("Job %s %s in %s", jobID(final), strings.ToLower(jobState(final)), elapsed(time.Since(t0)))

	step = "reading the job's output"
	var logs bytes.Buffer
	logErr := a.copyLogs(ctx, &loomv1.ReadJobLogsRequest{Name: final.GetName()}, &logs)
	say("Output of job %s (%s):", jobID(final), final.GetOutputPath())
	writeIndented(out, logs.Bytes(), "    ")
	if logErr != nil {
		return logErr
	}
	if err := jobOutcome(final); err != nil {
		return err
	}

	step = "waiting for the model version"
	v, err := a.waitModelVersion(ctx, demoModel, final.GetName())
	if err != nil {
		return err
	}
	say("Registered model version:")
	var vb bytes.Buffer
	_ = renderVersion(&vb, v, a.now())
	writeIndented(out, vb.Bytes(), "    ")
	if m, err := readModelFile(v.GetArtifactUri()); err == nil {
		fmt.Fprintf(out, "    model.json: %s, %d epochs, final loss %.6f, lr %g\n", m.Kind, m.Epochs, m.FinalLoss, m.Hyperparameters.LearningRate)
	}

	step = "deleting cluster " + req.ClusterId
	say("Deleting cluster %s", req.ClusterId)
	t0 = time.Now()
	dop, err := a.deleteCluster(ctx, clusterName, "")
	if err != nil {
		return err
	}
	deleted = true
	if _, err := a.waitOperation(ctx, dop, out, "    "); err != nil {
		return err
	}
	say("Cluster %s deleted (%s)", req.ClusterId, elapsed(time.Since(t0)))
	step = "stopping"
	return nil
}

// gatewayAnswers says whether a gateway answers ListClusters at a.gateway
// within a short time, on a connection of its own (without a credential:
// a gateway that refuses the anonymous call is there all the same).
func (a *app) gatewayAnswers(ctx context.Context) bool {
	conn, err := grpc.NewClient(a.gateway, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = loomv1.NewClusterServiceClient(conn).ListClusters(cctx, &loomv1.ListClustersRequest{Parent: a.parent()})
	switch codeOf(err) {
	case codes.OK, codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}

// useGateway points the app at another gateway, dropping any connection;
// cred, when set, is the credential of every call to it.
func (a *app) useGateway(addr, cred string) {
	a.close()
	a.gateway = addr
	a.fixedCred = cred
}

// demoCluster returns the cluster file to use and its contents.
func demoCluster(path string) (string, []byte, error) {
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", nil, fmt.Errorf("read cluster file: %w", err)
		}
		return path, b, nil
	}
	if b, err := os.ReadFile(demoClusterPath); err == nil {
		return demoClusterPath, b, nil
	}
	return "the built-in demo cluster", demoClusterJSON, nil
}

func totalNodes(c *loomv1.Cluster) int32 {
	var n int32
	for _, p := range c.GetCompute().GetNodePools() {
		n += p.GetNodeCount()
	}
	return n
}

// poolSummary describes the node pools, e.g. "2 × n2-standard-8 in pool cpu".
func poolSummary(c *loomv1.Cluster) string {
	var parts []string
	for _, p := range c.GetCompute().GetNodePools() {
		s := fmt.Sprintf("%d × %s in pool %s", p.GetNodeCount(), p.GetMachineType(), p.GetId())
		if p.GetAcceleratorCount() > 0 {
			s += fmt.Sprintf(", %d × %s each", p.GetAcceleratorCount(), p.GetAcceleratorType())
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// waitModelVersion polls the registry until the version made by job appears.
func (a *app) waitModelVersion(ctx context.Context, model, job string) (*loomv1.ModelVersion, error) {
	cl, err := a.models()
	if err != nil {
		return nil, err
	}
	for {
		var found *loomv1.ModelVersion
		err := paging.Each(func(token string) (string, error) {
			cctx, cancel := a.call(ctx)
			defer cancel()
			resp, err := cl.ListModelVersions(cctx, &loomv1.ListModelVersionsRequest{Parent: a.modelName(model), PageToken: token})
			for _, v := range resp.GetVersions() {
				if v.GetSourceJob() == job {
					found = v
				}
			}
			return resp.GetNextPageToken(), err
		})
		if err != nil && codeOf(err) != codes.NotFound {
			return nil, a.explain("list versions of model "+model, err)
		}
		if found != nil {
			return found, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no version of model %s from job %s yet: %w", model, shortName(job), ctx.Err())
		case <-time.After(a.pollInterval):
		}
	}
}

// readModelFile reads model.json under a file:// artifact URI.
func readModelFile(uri string) (trainer.Model, error) {
	var m trainer.Model
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		return m, fmt.Errorf("not a file URI: %q", uri)
	}
	b, err := os.ReadFile(filepath.Join(u.Path, trainer.ModelFile))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// writeIndented writes text with indent before every line.
func writeIndented(w io.Writer, text []byte, indent string) {
	s := strings.TrimRight(string(text), "\n")
	if s == "" {
		fmt.Fprintf(w, "%s(empty)\n", indent)
		return
	}
	for _, line := range strings.Split(s, "\n") {
		fmt.Fprintf(w, "%s%s\n", indent, line)
	}
}

// elapsed formats a duration for progress lines: "340ms", "2.4s", "1m3s".
func elapsed(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
