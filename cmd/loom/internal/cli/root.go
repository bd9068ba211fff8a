// Package cli is the `loom` command: the user's client of the gateway's
// public API (clusters, nodes, jobs, models; `loom auth` for the caller's
// credentials), plus `loom authd` (the login daemon), `loom up` (the embedded
// stack in the foreground) and `loom down` (what it leaves), `loom agent` (what the local provider starts per
// node), `loom train` (a tiny real trainer) and `loom demo`.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/creds"
	"github.com/loom-ml/loom/cmd/loom/internal/nvsmi"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Defaults of the global flags.
const (
	DefaultGateway = "127.0.0.1:7070"
	DefaultProject = "default"
)

// app holds the global flags and the gateway connection shared by the
// subcommands of one invocation.
type app struct {
	gateway string
	project string
	output  string
	// location is the training commands' --location (training.go).
	location string

	// now is the clock used to humanise times (tests fix it).
	now func() time.Time
	// pollInterval is how often operations are polled for progress.
	pollInterval time.Duration
	// callTimeout bounds each unary call to the gateway.
	callTimeout time.Duration
	// tty says whether a writer is a terminal, where progress is a bar
	// redrawn in place (tests force it).
	tty func(io.Writer) bool
	// environ is the caller's environment (os.Environ; tests give their
	// own, as they cannot change the process's in parallel).
	environ func() []string
	// stdin, when set, is what commands read as standard input (`-f -`)
	// instead of os.Stdin (tests give their own).
	stdin io.Reader
	// passwd is the account database a login looks the user's shell and
	// ids up in (/etc/passwd).
	passwd string
	// upAddrs are the addresses `loom up` listens on for a port base
	// (stack.AddrsAt; tests pick free ports).
	upAddrs func(base int) (stack.Addrs, error)
	// configDir, when set, is the CLI's config directory (the credentials
	// file's), instead of creds.Dir's: tests keep out of the real user's.
	configDir string
	// upRecordRead, when set, runs once gatewayOf has read a data
	// directory's loom-up.json and before it judges it (tests swap the
	// file there, as another user of a shared directory could).
	upRecordRead func(dir string)

	connMu sync.Mutex
	conn   *grpc.ClientConn
	// src finds the credential the connection sends (see credSource).
	src *creds.Source
	// fixedCred, when set, is the credential instead of src's search: the
	// administrator key of the stack `loom demo` started.
	fixedCred string
}

// Execute runs the loom command line args (without the program name) and
// returns the process exit status: 0 on success, 1 on failure (the error is
// written to stderr), 2 for bad usage.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return newApp().execute(ctx, args, stdout, stderr)
}

func (a *app) execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	defer a.close()
	if len(args) > 0 && args[0] == nvsmi.Name {
		return nvsmi.Main(args[1:], os.Getenv, time.Now(), stdout, stderr)
	}
	if flags, name, rest, ok := slurmInvocation(args); ok {
		return a.executeSlurm(ctx, flags, name, rest, stdout, stderr)
	}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if a.stdin != nil {
		root.SetIn(a.stdin)
	}
	if err := root.ExecuteContext(ctx); err != nil {
		var x exitError
		if errors.As(err, &x) {
			if x.msg != "" {
				fmt.Fprintln(stderr, x.msg)
			}
			return x.code
		}
		fmt.Fprintln(stderr, "Error:", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// exitError ends the command with its own exit status, and msg (when set)
// on stderr as it is: for commands that pass on another program's status
// (`loom clusters login NAME -- CMD`) or speak for a program they stand in
// for (the Slurm commands).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func newApp() *app {
	return &app{
		now:          time.Now,
		pollInterval: 250 * time.Millisecond,
		callTimeout:  30 * time.Second,
		tty:          isTerminal,
		environ:      os.Environ,
		passwd:       "/etc/passwd",
		upAddrs:      stack.AddrsAt,
	}
}

// usageError is a mistake in the command line.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// projectError refuses a project (from --project, else from LOOM_PROJECT)
// that is no project id, before any call: the gateway's refusal would come
// through each command's own words, which name the project whole ("set the
// role of alice in projects/aaa..."). "-" is every project's, which some
// lists take.
func projectError(project string, fromFlag bool) error {
	if project == resname.Wildcard || resname.ValidID(project) {
		return nil
	}
	from := "--project"
	if !fromFlag {
		from = "LOOM_PROJECT"
	}
	return usagef("%s must be a project id such as %q (lowercase letters, digits and hyphens, starting with a letter, not ending in a hyphen, at most %d characters), got %s",
		from, DefaultProject, resname.MaxIDLen, quotedCut(project, maxQuoted))
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "loom",
		Short: "Loom: a control plane for ML training",
		Long: `Loom runs training clusters and jobs on your machines.

Start everything on this machine with "loom up" (or try "loom demo"), then:
  loom clusters example one-node-8gpu | loom clusters create -f -
  loom clusters describe one-node-8gpu
  loom clusters resize one-node-8gpu gpu 2
  loom clusters login one-node-8gpu
  loom jobs submit --cluster one-node-8gpu --nodes 2 --model tiny -- loom train --epochs 100
  loom jobs logs 1
  loom clusters delete one-node-8gpu

Capacity: "loom reservations create" reserves machines for clusters to
claim; "loom capacity" shows what is free where. "loom operations" lists,
waits for and cancels long-running operations. Every get and list takes
--output json.

Every call carries your credential: "loom up" saves an administrator key
for you; for another gateway, "loom auth login" (see "loom auth --help").`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Name() == "agent" {
				// Configured by LOOM_* variables only; the client's flags
				// do not concern it.
				return nil
			}
			switch a.output {
			case "table", "json":
			default:
				return usagef("--output must be table or json, got %q", a.output)
			}
			f := cmd.Flag("project")
			return projectError(a.project, f == nil || f.Changed)
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// A negative number given as an argument ("loom clusters resize
		// c pool -1") reads as flags to the parser, which said "unknown
		// shorthand flag: '1' in -1": say what is wrong with it instead.
		if m := negativeArg.FindStringSubmatch(err.Error()); m != nil {
			return usagef("%s: a count or an id cannot be negative (see %q)", m[1], cmd.CommandPath()+" --help")
		}
		return usagef("%v (see %q)", err, cmd.CommandPath()+" --help")
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.gateway, "gateway", a.defaultGateway(), "gateway gRPC address (LOOM_GATEWAY; default: that of the \"loom up\" running with LOOM_DATA_DIR or ~/.loom, else "+DefaultGateway+")")
	pf.StringVar(&a.project, "project", config.Env("LOOM_PROJECT", DefaultProject), "project that short names belong to (LOOM_PROJECT)")
	pf.StringVarP(&a.output, "output", "o", "table", "output format of get and list: table or json")

	root.AddCommand(
		a.upCommand(),
		a.downCommand(),
		a.agentCommand(),
		a.clustersCommand(),
		a.nodesCommand(),
		a.healthCommand(),
		a.reservationsCommand(),
		a.capacityCommand(),
		a.jobsCommand(),
		a.modelsCommand(),
		a.operationsCommand(),
		a.metricsCommand(),
		a.hptuningCommand(),
		a.pipelinesCommand(),
		a.trainCommand(),
		a.demoCommand(),
		a.slurmCommand(),
		a.simCommand(),
		a.authCommand(),
		a.authdCommand(),
		a.auditCommand(),
		a.ingressCommand(),
		a.recipesCommand(),
	)
	refuseUnknownSubcommands(root)
	return root
}

// groupOnly annotates a command that only groups others
// (refuseUnknownSubcommands): it shows nothing of its own.
const groupOnly = "loom.group-only"

// refuseUnknownSubcommands makes every command that only groups others
// (loom, loom clusters, loom auth keys) refuse an unknown subcommand as bad
// usage (exit 2, with cobra's suggestions); alone, it shows its help.
// Cobra itself showed a group's help and exited 0 for `loom clusters lst`,
// so that a script's typo looked like success.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.Runnable() || !c.HasSubCommands() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[groupOnly] = "true"
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2 // cobra's own default
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usagef("%s (see %q)", msg, cmd.CommandPath()+" --help")
	}
}

// client returns the connection to the gateway, made on first use.
func (a *app) client() (*grpc.ClientConn, error) {
	a.connMu.Lock()
	defer a.connMu.Unlock()
	if a.conn == nil {
		// Every call carries the caller's credential (LOOM_TOKEN, the
		// login daemon, the credentials file), renewed when it expires.
		src := a.credSource()
		conn, err := grpc.NewClient(a.gateway, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(src.Credentials()))
		if err != nil {
			return nil, usagef("--gateway %q: %v", a.gateway, err)
		}
		src.Conn = conn
		a.conn = conn
	}
	return a.conn, nil
}

// close drops the gateway connection; the next call makes a new one.
func (a *app) close() {
	a.connMu.Lock()
	defer a.connMu.Unlock()
	if a.conn != nil {
		_ = a.conn.Close()
		a.conn = nil
	}
	a.src = nil
}

// explained is an error rewritten for the user that keeps the gRPC error
// it came from, so that callers can still ask for its code.
type explained struct {
	msg   string
	cause error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.cause }

func (a *app) clusters() (loomv1.ClusterServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewClusterServiceClient(c), nil
}

func (a *app) operations() (loomv1.OperationServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewOperationServiceClient(c), nil
}

func (a *app) reservations() (loomv1.ReservationServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewReservationServiceClient(c), nil
}

func (a *app) jobs() (loomv1.JobServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewJobServiceClient(c), nil
}

func (a *app) nodes() (loomv1.NodeServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewNodeServiceClient(c), nil
}

func (a *app) models() (loomv1.ModelServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewModelServiceClient(c), nil
}

// call bounds one unary call.
func (a *app) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.callTimeout)
}

// explain turns a gRPC error from the gateway into a message that says what
// went wrong and what to do next; what is the action, e.g. "get cluster demo".
func (a *app) explain(what string, err error) error {
	if err == nil {
		return nil
	}
	return &explained{msg: a.explainMsg(what, err).Error(), cause: err}
}

func (a *app) explainMsg(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	// The kind is said here, in the words of each case below: the
	// services' own word for it (libs/errs), first in a message or last,
	// would say it twice. NotFound and AlreadyExists keep theirs: "job
	// projects/p/jobs/9: not found" is the sentence, said once.
	msg := st.Message()
	if c := st.Code(); c != codes.NotFound && c != codes.AlreadyExists {
		msg = withoutKind(c, msg)
	}
	switch st.Code() {
	case codes.Unavailable:
		if a.unreachable(msg) {
			return fmt.Errorf("%s: cannot reach the Loom gateway at %s: is Loom running? start it with `%s` (or point --gateway / LOOM_GATEWAY at a running gateway)", what, a.gateway, a.upCommandHint())
		}
		return fmt.Errorf("%s: Loom is unavailable right now (%s); try again in a moment, and check the `loom up` logs if it persists", what, msg)
	case codes.InvalidArgument:
		return fmt.Errorf("%s: invalid request:\n%s", what, fieldList(msg))
	case codes.NotFound:
		if m := projectWall.FindStringSubmatch(msg); m != nil {
			// The gateway answers a project the caller holds no role in
			// as if it did not exist (ids cannot be probed): the other
			// lists of that project would say the same, so what helps is
			// which projects the caller is in, and who gives a role.
			return fmt.Errorf("%s: %s: you hold no role in project %s, or there is no such project (`loom auth whoami` lists your projects; pick one with --project or LOOM_PROJECT; an admin of %s gives you a role with `loom auth members set`)", what, msg, m[1], m[1])
		}
		return fmt.Errorf("%s: %s", what, msg)
	case codes.AlreadyExists:
		return fmt.Errorf("%s: %s", what, msg)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: the gateway at %s did not answer in time (%s)", what, a.gateway, msg)
	case codes.Unimplemented:
		return fmt.Errorf("%s: the gateway at %s does not support this (%s)", what, a.gateway, msg)
	case codes.Canceled:
		return fmt.Errorf("%s: cancelled", what)
	case codes.Unauthenticated:
		// No credential at all comes first: the gateway's words for that
		// are for any client ("send authorization: Bearer ..."), with the
		// method's gRPC name, where this one knows the command to run.
		if a.src == nil || a.src.From() == creds.FromNone {
			return fmt.Errorf("%s: not logged in to %s: run `loom auth login%s` (or set LOOM_TOKEN)", what, a.gateway, a.gatewayFlag())
		}
		if strings.HasPrefix(msg, creds.AuthdRefusal) || a.src.From() == creds.FromAuthd {
			// The login daemon of LOOM_AUTHD_SOCKET (a `loom clusters
			// login` shell) wins over a saved login: logging in again
			// changes nothing while it answers. Its own refusal is not
			// the gateway's.
			next := fmt.Sprintf("the login daemon wins over a saved login, so ask whoever runs it, or unset LOOM_AUTHD_SOCKET to use the login `loom auth login%s` saves", a.gatewayFlag())
			if strings.HasPrefix(msg, creds.AuthdRefusal) {
				return fmt.Errorf("%s: %s; %s", what, msg, next)
			}
			return fmt.Errorf("%s: the gateway at %s refused your credential (from the login daemon at %s): %s; %s", what, a.gateway, a.src.Authd, msg, next)
		}
		if a.src.From() == creds.FromEnv {
			// LOOM_TOKEN wins over a saved login: logging in again
			// changes nothing while it is set.
			return fmt.Errorf("%s: the gateway at %s refused your credential (from LOOM_TOKEN): %s; LOOM_TOKEN wins over a saved login, so set it to a valid key or token, or unset it to use the login `loom auth login%s` saves", what, a.gateway, msg, a.gatewayFlag())
		}
		if strings.Contains(msg, "loom auth login") {
			return fmt.Errorf("%s: %s", what, msg)
		}
		return fmt.Errorf("%s: the gateway at %s refused your credential (from %s): %s; run `loom auth login%s` again", what, a.gateway, a.src.From(), msg, a.gatewayFlag())
	case codes.PermissionDenied:
		// The gateway's refusals start with Slurm's words (and the
		// kind's, dropped above): said once, here.
		msg = withoutKind(st.Code(), strings.TrimPrefix(msg, "Access/permission denied: "))
		// What to do next: see whom the gateway took you for, and
		// which roles you hold, before asking for one. A project admin
		// cannot make a cluster administrator: say who can.
		if strings.Contains(msg, "needs a cluster administrator") {
			return fmt.Errorf("%s: permission denied: %s (`loom auth whoami` shows who you are and your roles; a cluster administrator makes another with `loom auth members set USER cluster-admin --global`)", what, msg)
		}
		return fmt.Errorf("%s: permission denied: %s (`loom auth whoami` shows who you are and your roles; a project admin grants one with `loom auth members set`)", what, msg)
	}
	return fmt.Errorf("%s: %s: %s", what, st.Code(), msg)
}

// withoutKind is msg without code's word as libs/errs words it ("failed
// precondition", "unauthenticated"), which the services put first
// ("unauthenticated: API key k1 was revoked") or last ("...; delete those
// clusters first: failed precondition"). A message that is only the word
// stays.
func withoutKind(code codes.Code, msg string) string {
	kind := strings.ToLower(codeWords.ReplaceAllString(code.String(), "$1 $2"))
	msg = strings.TrimPrefix(msg, kind+": ")
	return strings.TrimSuffix(msg, ": "+kind)
}

// projectWall matches the gateway's answer to a call in a project the
// caller holds no role in (docs/security.md "Projects are walls"),
// capturing the project id.
var projectWall = regexp.MustCompile(`^projects/([a-z][a-z0-9-]*): not found$`)

// negativeArg matches pflag's error for a negative number where an
// argument was expected, capturing the number.
var negativeArg = regexp.MustCompile(`^unknown shorthand flag: '[0-9]' in (-[0-9][0-9.]*)$`)

// codeWords splits a gRPC code's name into words: FailedPrecondition →
// "Failed Precondition", as libs/errs words its kinds.
var codeWords = regexp.MustCompile(`([a-z])([A-Z])`)

// unreachable says whether an Unavailable message is about this client not
// reaching the gateway (rather than the gateway not reaching a service).
func (a *app) unreachable(msg string) bool {
	_, port, err := net.SplitHostPort(a.gateway)
	if err != nil {
		return true
	}
	if strings.Contains(msg, ":"+port) {
		return true
	}
	for _, s := range []string{"name resolver", "produced zero addresses", "no such host"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// problemStart matches the start of one field's problem in an
// InvalidArgument message: a field path ("job_spec.worker_pool_specs[1].replica_count",
// "job.env[A=B]"), or the flag flagNames put for it ("--nodes", "--env A=B"),
// and ": ".
var problemStart = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])*(\.[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])*)*|--[a-z][a-z0-9-]*( [^:;]+)?): `)

// problems splits an InvalidArgument message ("field: reason; field:
// reason", libs/errs.InvalidError) into its fields' problems. A reason may
// hold "; " itself ("(e.g. \"3600s\"; at most 876000h0m0s)"): a piece
// that does not start with a field path belongs to the problem before it.
func problems(msg string) []string {
	var out []string
	for _, part := range strings.Split(msg, "; ") {
		if len(out) > 0 && !problemStart.MatchString(part) {
			out[len(out)-1] += "; " + part
			continue
		}
		out = append(out, part)
	}
	return out
}

// fieldList renders an InvalidArgument message ("field: reason; field:
// reason", as libs/errs writes it) as one indented line per field.
func fieldList(msg string) string {
	var b strings.Builder
	for _, part := range problems(msg) {
		if part = strings.TrimSpace(part); part != "" {
			fmt.Fprintf(&b, "  %s\n", part)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// flagNames rewrites an InvalidArgument's field violations ("job.node_count:
// 4 is more than ...", errs.InvalidError's "field: reason; ..." message) to
// name the flag the user typed instead of the API field it set, by flags:
// API field → flag ("job.node_count" → "--nodes"). An indexed field
// ("job.env[A=B]") is named by its flag and the index ("--env A=B"). A
// field the command has no flag for, and any other error, is left as it
// is: that is what the user must look up. Every command that sends flags
// as a request maps them back here, in one place per command (its table).
func flagNames(err error, flags map[string]string) error {
	return rewriteProblems(err, func(part string) string {
		field, reason, ok := strings.Cut(part, ": ")
		if !ok {
			return part
		}
		base, index, _ := strings.Cut(field, "[")
		flag, ok := flags[base]
		if !ok {
			return part
		}
		if index = strings.TrimSuffix(index, "]"); index != "" {
			flag += " " + index
		}
		return flag + ": " + reason
	})
}

// rewriteProblems rewrites each problem of an InvalidArgument
// (errs.InvalidError's "field: reason; ..." message, split at "; ") with
// rewrite; err itself when no problem changed, or for any other error.
// specFields and flagNames name a refusal's fields as the user wrote them.
func rewriteProblems(err error, rewrite func(problem string) string) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return err
	}
	parts := problems(st.Message())
	changed := false
	for i, p := range parts {
		if q := rewrite(p); q != p {
			parts[i], changed = q, true
		}
	}
	if !changed {
		return err
	}
	return status.Error(codes.InvalidArgument, strings.Join(parts, "; "))
}

// progressOut returns where progress goes: stdout for tables, stderr for JSON
// so that stdout stays parseable.
func (a *app) progressOut(cmd *cobra.Command) io.Writer {
	if a.output == "json" {
		return cmd.ErrOrStderr()
	}
	return cmd.OutOrStdout()
}

// executable is this program's path, for commands that start it again.
func executable() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}
