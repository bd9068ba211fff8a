// Package slurmcli implements the Slurm commands of a Loom login shell —
// sbatch, squeue, sinfo, scancel, sacct, scontrol, sprio, srun and sacctmgr — over
// the gateway's public API, with Slurm 22.05's options, output formats and
// error messages, so that users' scripts and habits work unchanged.
//
// Main runs one command. The parsers are pure functions other packages
// reuse: ParseSbatch (a whole sbatch invocation to a Job), ParseTimeLimit,
// ParseArray and ParseBegin; the other Slurm grammars are libs/slurmspec's.
package slurmcli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	osuser "os/user"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Commands are the Slurm commands Main runs.
var Commands = []string{"sbatch", "squeue", "sinfo", "scancel", "sacct", "scontrol", "sprio", "srun", "salloc", "sacctmgr", "sshare", "sstat", "seff"}

// Unsupported are the other Slurm commands users reach for, each with what
// to use instead. They are linked beside Commands (LinkCommands), so that
// in a login shell or a job they say so rather than fall through to a
// Slurm installed on the machine, which knows no Loom cluster.
var Unsupported = map[string]string{
	"sattach":  "follow a job's output with `loom jobs logs JOBID -f`",
	"sbcast":   "a cluster's nodes share its home directory: copy files there",
	"scrontab": "submit recurring work from your own scheduler with sbatch --begin",
	"sdiag":    "the scheduler's metrics are on its /metrics endpoint and Loom's dashboards",
	"sreport":  "sacct lists the jobs and their runs; `loom clusters goodput` sums a cluster's",
	"strigger": "Loom's events are on Kafka and Pub/Sub (docs/integration.md)",
	"sview":    "the web console shows the queue and the nodes (docs/console.md)",
}

// Version is what the commands print for --version / -V: Slurm's release
// they follow, so that tools parsing "slurm X.Y.Z" keep working.
const Version = "slurm 22.05.8 (Loom)"

// Env is what a Slurm command runs with: the gateway connection, the
// user's identity and the process environment.
type Env struct {
	// Conn is the connection to the gateway.
	Conn grpc.ClientConnInterface
	// Project owns the jobs (LOOM_PROJECT); default "default".
	Project string
	// Cluster is LOOM_CLUSTER: a cluster id ("demo") or full name
	// ("projects/p/clusters/demo"). When empty, commands that need one
	// use the project's only cluster.
	Cluster string
	// User is who the commands act as and show: the principal's user
	// (EnvFromOS), never USER or LOOM_USER.
	User string
	// Cwd is the working directory: sbatch's submit directory.
	Cwd string
	// Environ is the process environment (--export, SBATCH_* input
	// variables, SLURM_* of an enclosing allocation for srun).
	Environ map[string]string
	// Stdin is where sbatch reads a script given neither as a file nor
	// with --wrap, and what srun's tasks read; nil means empty.
	Stdin io.Reader
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Location is the time zone times are printed in; nil means Local.
	Location *time.Location
	// CallTimeout bounds each call to the gateway; 0 means 30 seconds.
	CallTimeout time.Duration
}

// EnvFromOS builds an Env from the process: the project and cluster from
// LOOM_PROJECT and LOOM_CLUSTER, the working directory, the environment
// and stdin. user is who the command acts as: the principal's user, which
// the caller learnt from the credential (the login daemon, WhoAmI); ""
// means the OS account running the command (AccountName). It is never
// taken from USER or LOOM_USER, which anyone can set: `USER=root scancel`
// is still its caller. With USER unset, Environ gets USER, the user's name
// (sbatch exports it to the job, as a login shell would have).
func EnvFromOS(conn grpc.ClientConnInterface, user string) Env {
	environ := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			environ[k] = v
		}
	}
	cwd, _ := os.Getwd()
	project := environ["LOOM_PROJECT"]
	if project == "" {
		project = "default"
	}
	if user == "" {
		user = AccountName()
	}
	if environ["USER"] == "" {
		// A login shell always has USER; a bare environment (a service, a
		// container's shell) is still some account, as Slurm goes by uid.
		environ["USER"] = user
	}
	return Env{Conn: conn, Project: project, Cluster: environ["LOOM_CLUSTER"], User: user,
		Cwd: cwd, Environ: environ, Stdin: os.Stdin}
}

// AccountName is the name of the OS account this process runs as (its
// uid, looked up in the account database), "" when it has none. It is
// what the OS established, as munge's uid is for Slurm: no variable
// changes it.
func AccountName() string {
	if u, err := osuser.Current(); err == nil {
		return u.Username
	}
	return ""
}

// Error is a refusal printed as the Slurm command prints it: Text is the
// whole message (one or more lines, without the final newline) and Code
// the exit status.
type Error struct {
	Text string
	Code int
}

// Error returns the message as the command prints it.
func (e *Error) Error() string { return e.Text }

// errorf makes the usual "prog: error: ..." refusal with exit status 1.
func errorf(prog, format string, args ...any) *Error {
	return &Error{Text: prog + ": error: " + fmt.Sprintf(format, args...), Code: 1}
}

// invalid is Slurm's "Invalid --opt specification" refusal, with why.
func invalid(prog, opt, value string, why error) *Error {
	if why != nil {
		return errorf(prog, "Invalid %s specification %q: %v", opt, value, why)
	}
	return errorf(prog, "Invalid %s specification %q", opt, value)
}

// usage turns a getopt refusal into the command's two-line answer.
func usage(prog string, err error) *Error {
	var u *usageError
	if errors.As(err, &u) {
		return &Error{Text: u.msg + "\nTry \"" + prog + " --help\" for more information", Code: 1}
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return errorf(prog, "%v", err)
}

// Main runs the Slurm command name with its arguments (without the
// program name) and returns its exit status.
func Main(ctx context.Context, name string, args []string, env Env, stdout, stderr io.Writer) int {
	c := newCmd(name, env, stdout, stderr)
	var err error
	switch name {
	case "sbatch":
		err = c.sbatch(ctx, args)
	case "squeue":
		err = c.squeue(ctx, args)
	case "sinfo":
		err = c.sinfo(ctx, args)
	case "scancel":
		err = c.scancel(ctx, args)
	case "sacct":
		err = c.sacct(ctx, args)
	case "scontrol":
		err = c.scontrol(ctx, args)
	case "sprio":
		err = c.sprio(ctx, args)
	case "srun":
		err = c.srun(ctx, args)
	case "salloc":
		err = c.salloc(ctx, args) // salloc.go
	case "sacctmgr":
		err = c.sacctmgr(ctx, args) // sacctmgr.go
	case "sshare":
		err = c.sshare(ctx, args) // sshare.go
	case "sstat":
		err = c.sstat(ctx, args) // sstat.go
	case "seff":
		err = c.seff(ctx, args) // seff.go
	default:
		if instead, ok := Unsupported[name]; ok {
			fmt.Fprintf(stderr, "%s: error: Loom does not provide %s; %s (docs/slurm.md)\n", name, name, instead)
			return 1
		}
		fmt.Fprintf(stderr, "loom: %q is not a Slurm command Loom provides (%s)\n", name, strings.Join(Commands, ", "))
		return 2
	}
	if err == nil {
		return 0
	}
	var e *Error
	if !errors.As(err, &e) {
		e = errorf(name, "%v", err)
	}
	if e.Text != "" {
		fmt.Fprintln(stderr, e.Text)
	}
	return e.Code
}

// cmd is one command invocation: its name, environment and writers.
type cmd struct {
	name   string
	env    Env
	stdout io.Writer
	stderr io.Writer
	now    time.Time
	loc    *time.Location
}

func newCmd(name string, env Env, stdout, stderr io.Writer) *cmd {
	if env.Project == "" {
		env.Project = "default"
	}
	if env.Environ == nil {
		env.Environ = map[string]string{}
	}
	if env.CallTimeout == 0 {
		env.CallTimeout = 30 * time.Second
	}
	now := time.Now
	if env.Now != nil {
		now = env.Now
	}
	loc := env.Location
	if loc == nil {
		loc = time.Local
	}
	return &cmd{name: name, env: env, stdout: stdout, stderr: stderr, now: now().In(loc), loc: loc}
}

func (c *cmd) errorf(format string, args ...any) *Error { return errorf(c.name, format, args...) }

// complainf prints "prog: error: ..." and goes on: an error about one of
// several things asked for, after which Slurm's commands still exit 0.
func (c *cmd) complainf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "%s: error: %s\n", c.name, fmt.Sprintf(format, args...))
}

// warnf prints "prog: warning: ..." and goes on.
func (c *cmd) warnf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "%s: warning: %s\n", c.name, fmt.Sprintf(format, args...))
}

func (c *cmd) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.env.CallTimeout)
}

func (c *cmd) jobsClient() loomv1.JobServiceClient {
	return loomv1.NewJobServiceClient(c.env.Conn)
}

func (c *cmd) slurmClient() loomv1.SlurmServiceClient {
	return loomv1.NewSlurmServiceClient(c.env.Conn)
}

// rpcError explains a failed gateway call, as "prog: error: what: why".
func (c *cmd) rpcError(what string, err error) *Error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		return c.errorf("%s: Unable to contact the Loom gateway (connect failure): %s", what, st.Message())
	case codes.DeadlineExceeded:
		return c.errorf("%s: the Loom gateway did not answer in time", what)
	case codes.Unimplemented:
		return c.errorf("%s: this Loom gateway does not serve it yet (%s)", what, st.Message())
	default:
		return c.errorf("%s: %s", what, st.Message())
	}
}

// projectName is "projects/{project}".
func (c *cmd) projectName() string { return resname.Project{ID: c.env.Project}.String() }

// jobName is the resource name of job id (numeric, or "12_3").
func (c *cmd) jobName(id string) string { return resname.Job{Project: c.env.Project, ID: id}.String() }

// clusterName is the full name of the cluster the user means: -M /
// LOOM_CLUSTER, else the project's only cluster. It fails when there is
// none or more than one to choose from.
func (c *cmd) clusterName(ctx context.Context) (string, error) {
	if name := c.clusterFilter(); name != "" {
		return name, nil
	}
	names, err := c.projectClusters(ctx)
	if err != nil {
		return "", err
	}
	return c.onlyCluster(names)
}

// onlyCluster is the project's one cluster of names (its every cluster):
// an error saying what to do when there is none or more than one.
func (c *cmd) onlyCluster(names []string) (string, error) {
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", c.errorf("project %q has no cluster; create one, or set LOOM_CLUSTER", c.env.Project)
	default:
		var ids []string
		for _, n := range names {
			ids = append(ids, shortName(n))
		}
		sort.Strings(ids)
		return "", c.errorf("project %q has several clusters (%s): set LOOM_CLUSTER or use -M", c.env.Project, strings.Join(ids, ", "))
	}
}

// projectClusters is the full names of the project's clusters.
func (c *cmd) projectClusters(ctx context.Context) ([]string, error) {
	var names []string
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		resp, err := loomv1.NewClusterServiceClient(c.env.Conn).ListClusters(cctx, &loomv1.ListClustersRequest{Parent: c.projectName(), PageToken: token})
		for _, cl := range resp.GetClusters() {
			names = append(names, cl.GetName())
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return nil, c.rpcError("listing clusters", err)
	}
	return names, nil
}

// clusterExists checks the cluster -M or LOOM_CLUSTER names (none named:
// nothing to check) before a command acts on jobs there, as Slurm's
// commands refuse an invalid -M before they act: one that does not exist
// (and has no jobs left) is the error squeue and "scontrol show job" give,
// naming it, not "Invalid job id specified" for each job. Other failures
// are left for the action itself to meet and say.
func (c *cmd) clusterExists(ctx context.Context) error {
	cluster := c.clusterFilter()
	if cluster == "" {
		return nil
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.jobsClient().ListJobs(cctx, &loomv1.ListJobsRequest{Parent: c.projectName(), Cluster: cluster, PageSize: 1})
	if code := status.Code(err); code == codes.NotFound || code == codes.InvalidArgument {
		return c.rpcError("slurm_load_jobs error", err)
	}
	return nil
}

// oneCluster checks -M's value: Loom's Slurm commands take one cluster.
// Slurm's list ("a,b") and "all" (one CLUSTER: section each) are refused
// by name, not looked up as one cluster named "a,b".
func (c *cmd) oneCluster(v string) (string, error) {
	v = strings.TrimSpace(v)
	if strings.Contains(v, ",") || strings.EqualFold(v, "all") {
		return "", c.errorf("-M %s: Loom's %s takes one cluster with -M (a list or 'all' is not supported): run it once per cluster", v, c.name)
	}
	return v, nil
}

// maxClusters bounds a -M list ("a,b,...") a command walks one by one.
const maxClusters = 16

// clusterList checks a -M value that may be Slurm's list ("a,b"): the
// clusters in order, each once, at most maxClusters; "all" is refused by
// name (Loom's CLI has no list of every cluster to walk).
func (c *cmd) clusterList(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "all") {
		return nil, c.errorf("-M %s: Loom's %s takes a list of clusters with -M, not 'all'", v, c.name)
	}
	var out []string
	seen := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, c.errorf("-M %s: an empty cluster name in the list", v)
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	if len(out) > maxClusters {
		return nil, c.errorf("-M: at most %d clusters, got %d", maxClusters, len(out))
	}
	return out, nil
}

// forEachCluster runs body once per cluster of clusters (-M's list) with
// c.env.Cluster set to it, as Slurm's _multi_cluster walks its list; with
// none, once as the command is (LOOM_CLUSTER or every cluster). The
// command's cluster is restored after.
func (c *cmd) forEachCluster(clusters []string, body func(i int) error) error {
	if len(clusters) == 0 {
		return body(0)
	}
	saved := c.env.Cluster
	defer func() { c.env.Cluster = saved }()
	for i, cl := range clusters {
		c.env.Cluster = cl
		if err := body(i); err != nil {
			return err
		}
	}
	return nil
}

// clusterFilter is the full name of -M / LOOM_CLUSTER, or "" (all).
func (c *cmd) clusterFilter() string {
	cl := strings.TrimSpace(c.env.Cluster)
	if cl == "" || strings.Contains(cl, "/") {
		return cl
	}
	return resname.Cluster{Project: c.env.Project, ID: cl}.String()
}

// clusterLine is the line Slurm's squeue, sinfo and sshare print before
// the table of a cluster named with -M: "CLUSTER: a3u\n" (the name as
// slurm.conf's ClusterName has it, the cluster's id).
func (c *cmd) clusterLine() string {
	return "CLUSTER: " + shortName(c.clusterFilter()) + "\n"
}

// shortName is the last part of a resource name.
func shortName(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}

// requestID is a random idempotency key for one submission.
func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// splitList splits a comma-separated option value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// printVersion answers --version.
func (c *cmd) printVersion() error {
	fmt.Fprintln(c.stdout, Version)
	return nil
}

// statusCodeRetryable says whether a broken stream may be reopened.
func statusCodeRetryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.Internal:
		return true
	}
	return false
}
