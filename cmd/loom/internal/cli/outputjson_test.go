package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// readCommands are the commands that show something (a get, a list, a
// describe), by path, each with the arguments that make it show something
// of jsonGateway's: TestEveryReadHasJSON runs each with -o json. A new
// command goes here or in notReads, or that test fails.
var readCommands = map[string][]string{
	"loom audit":               nil,
	"loom auth keys list":      nil,
	"loom auth members list":   nil,
	"loom auth oidc-binding":   nil,
	"loom auth whoami":         nil,
	"loom capacity":            nil,
	"loom clusters describe":   {"a3u"},
	"loom clusters get":        {"demo"},
	"loom clusters goodput":    {"demo"},
	"loom clusters list":       nil,
	"loom clusters slurm-conf": {"a3u"},
	"loom health events":       {"demo"},
	"loom health nodes":        {"demo"},
	"loom health policy":       {"demo"},
	"loom health results":      {"demo"},
	"loom health scans":        {"demo"},
	"loom hptuning get":        {"1"},
	"loom hptuning list":       nil,
	"loom hptuning trials":     {"1"},
	"loom ingress":             nil,
	"loom ingress messages":    nil,
	"loom ingress producers":   nil,
	"loom jobs custom get":     {"1"},
	"loom jobs custom list":    nil,
	"loom jobs get":            {"7"},
	"loom jobs goodput":        {"7"},
	"loom jobs list":           nil,
	"loom jobs watch":          {"7"},
	"loom metrics":             {"7"},
	"loom models get":          {"demo-regressor"},
	"loom models list":         nil,
	"loom models versions":     {"demo-regressor"},
	"loom nodes list":          nil,
	"loom operations get":      {"op1"},
	"loom operations list":     nil,
	"loom pipelines get":       {"1"},
	"loom pipelines list":      nil,
	"loom recipes list":        nil,
	"loom recipes show":        {"gemma2-9b-sft"},
	"loom reservations get":    {"r1"},
	"loom reservations list":   nil,
}

// streams are the reads that follow something as it changes: with -o json
// they write one JSON object a line, as it comes.
var streams = map[string]bool{"loom jobs watch": true}

// notReads are the runnable commands that show nothing of the gateway's,
// with why -o json is not theirs to honour (where a command changes
// something and --output json prints what it made, it says so).
var notReads = map[string]string{
	"loom agent":                     "the node agent, started by the provider",
	"loom auth keys create":          "a change (-o json prints the key made)",
	"loom auth keys revoke":          "a change (-o json prints the key revoked)",
	"loom auth login":                "a change: saves a credential",
	"loom auth logout":               "a change: forgets a credential",
	"loom auth members remove":       "a change",
	"loom auth members set":          "a change (-o json prints the membership)",
	"loom auth oidc-binding release": "a change (-o json prints the binding released)",
	"loom authd":                     "a daemon",
	"loom clusters create":           "a change: follows its operation (-o json prints the operation)",
	"loom clusters delete":           "a change: follows its operation (-o json prints the operation)",
	"loom clusters example":          "prints a cluster file, JSON already",
	"loom clusters login":            "opens a shell on the login node",
	"loom clusters resize":           "a change: follows its operation (-o json prints the operation)",
	"loom clusters update":           "a change: follows its operation (-o json prints the operation)",
	"loom demo":                      "starts a demo stack",
	"loom down":                      "stops what loom up left",
	"loom health scan":               "a change: starts a scan (-o json prints it, or its results with --wait)",
	"loom hptuning cancel":           "a change",
	"loom hptuning create":           "a change (-o json prints the tuning job)",
	"loom jobs cancel":               "a change",
	"loom jobs custom cancel":        "a change",
	"loom jobs custom create":        "a change (-o json prints the CustomJob)",
	"loom jobs logs":                 "the job's own output, as its program wrote it",
	"loom jobs submit":               "a change (-o json prints the job)",
	"loom models alias":              "a change (-o json prints the version)",
	"loom models delete":             "a change",
	"loom models export":             "a change: follows its operation (-o json prints the operation)",
	"loom models upload":             "a change: follows its operation (-o json prints the operation)",
	"loom nodes drain":               "a change",
	"loom nodes inject-fault":        "a change (test clusters)",
	"loom nodes quarantine":          "a change",
	"loom nodes reboot":              "a change",
	"loom nodes reimage":             "a change",
	"loom nodes replace":             "a change",
	"loom nodes report-faulty":       "a change",
	"loom nodes resume":              "a change",
	"loom operations cancel":         "a change (-o json prints the operation)",
	"loom operations wait":           "follows an operation (-o json prints it when done)",
	"loom pipelines cancel":          "a change",
	"loom pipelines create":          "a change (-o json prints the pipeline)",
	"loom recipes launch":            "a change (-o json prints what it submitted)",
	"loom reservations create":       "a change: follows its operation (-o json prints the operation)",
	"loom reservations delete":       "a change: follows its operation (-o json prints the operation)",
	"loom sim":                       "runs a simulation here (-o json prints its report)",
	"loom slurm":                     "Slurm's commands print in Slurm's formats (-o is their --format)",
	"loom train":                     "a trainer, run by jobs",
	"loom up":                        "runs the stack in the foreground",
}

// readVerbs are the last words of a command's path that make it a read:
// such a command cannot be excused in notReads.
var readVerbs = map[string]bool{"get": true, "list": true, "ls": true, "describe": true, "show": true, "versions": true, "status": true}

// jsonGateway is the CLI fixture with something in every service a read
// asks: health, goodput, audit records, ingress, training resources,
// metrics, operations, API keys, members and an OIDC binding; every call
// is alice's (a cluster administrator, admin of project default) with
// token "tok-alice".
func jsonGateway(t *testing.T) string {
	t.Helper()
	f := newHealthGatewayData(t)
	alice := fakegw.UserPrincipal("alice")
	alice.ClusterAdmin, alice.Roles, alice.How = true, map[string]string{"default": "admin"}, "api-key"
	f.Auth = &fakegw.Auth{Now: time.Now, Principals: map[string]*loomv1.Principal{"tok-alice": alice},
		Keys:         []*loomv1.ApiKey{{Name: "users/alice/keys/k1", CreateTime: ts(time.Hour)}},
		Members:      []*loomv1.Member{{Parent: "projects/default", User: "alice", Role: "admin"}},
		OidcBindings: map[string]*loomv1.OidcBinding{"alice": {Name: "users/alice/oidcBinding", Issuer: "https://idp", Subject: "a1"}}}
	tr := &fakegw.Training{Resources: map[string]proto.Message{}, Progress: map[string][]proto.Message{}}
	cj := trainingParent + "/customJobs/1"
	tr.Resources[cj] = customJob(t, cj, trainingv1.JobState_JOB_STATE_RUNNING)
	hp := trainingParent + "/hyperparameterTuningJobs/1"
	tr.Resources[hp] = tuningJob(t, hp, trainingv1.JobState_JOB_STATE_RUNNING, trial("1", trainingv1.Trial_SUCCEEDED, 0.5, 0.01))
	tp := trainingParent + "/trainingPipelines/1"
	tr.Resources[tp] = &trainingv1.TrainingPipeline{Name: tp, DisplayName: "p", State: trainingv1.PipelineState_PIPELINE_STATE_RUNNING, CreateTime: ts(time.Hour)}
	f.Training = tr
	f.Ingress = &fakegw.Ingress{
		Producers: []*loomv1.IngressProducer{{Project: "default", Source: "//pipelines/etl", Principal: "users/ana", Received: 1, Accepted: 1, LastTime: ts(time.Minute)}},
		Messages: []*loomv1.IngressMessage{{Id: "m1", Source: "//pipelines/etl", Type: "loom.ingress.v1.SubmitJob", Project: "default",
			Outcome: "ACCEPTED", Code: "OK", ReceivedTime: ts(time.Minute), Deliveries: 1}},
	}
	f.AuditRecords = []*loomv1.AuditRecord{{Id: "1", Time: ts(time.Minute), Principal: "users/ana", Method: "/loom.v1.JobService/SubmitJob",
		Resource: "projects/default", Decision: "allowed", Code: "OK", Project: "default"}}
	f.Metrics = map[string][]*trainingv1.Series{"projects/default/jobs/7": {{Metric: "loss", Count: 2, First: 6.3, Last: 5.1, Min: 5.1, Max: 6.3}}}
	f.Operations = []*loomv1.Operation{{Name: "projects/default/operations/op1", Metadata: &loomv1.OperationMetadata{Verb: "create", Target: demoName}}}
	f.ModelVersions = []*loomv1.Model{{Name: "projects/default/models/demo-regressor@1", VersionId: "1", CreateTime: ts(time.Hour)}}
	return f.Serve(t)
}

// TestEveryReadHasJSON walks the command tree: every runnable command is a
// read (readCommands) or says why it is not (notReads), so that a new get
// or list cannot forget --output json; and every read, run with -o json
// against the fake gateway, prints JSON and nothing else: one object (a
// list's: the List response, its items in an array field, as AIP-132's
// response with next_page_token), or for a stream one object a line.
func TestEveryReadHasJSON(t *testing.T) {
	t.Parallel()
	gw := jsonGateway(t)
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		if path == "loom slurm" {
			// Slurm's own commands, in Slurm's formats.
			seen[path] = true
			return
		}
		if c.Runnable() && !c.Hidden && c.Annotations[groupOnly] == "" {
			seen[path] = true
			args, read := readCommands[path]
			why, excused := notReads[path]
			last := path[strings.LastIndex(path, " ")+1:]
			switch {
			case excused && readVerbs[last]:
				t.Errorf("%s is a read (its verb is %q): it takes -o json, it cannot be in notReads", path, last)
			case excused && read:
				t.Errorf("%s is in both readCommands and notReads (%s)", path, why)
			case excused:
			case !read:
				t.Errorf("%s: a new command: add it to readCommands (with the args of a read from jsonGateway) or to notReads (saying why -o json is not its)", path)
			default:
				checkJSON(t, gw, path, args)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newApp().rootCommand())
	for path := range notReads {
		if !seen[path] {
			t.Errorf("notReads has %s, which is no command any more", path)
		}
	}
	for path := range readCommands {
		if !seen[path] {
			t.Errorf("readCommands has %s, which is no command any more", path)
		}
	}
}

// checkJSON runs the read at path with args and -o json, as alice.
func checkJSON(t *testing.T, gw, path string, args []string) {
	t.Helper()
	argv := append(strings.Fields(strings.TrimPrefix(path, "loom ")), args...)
	out, errOut, code := runWith(t, gw, func(a *app) { a.environ = func() []string { return []string{"LOOM_TOKEN=tok-alice"} } },
		append(argv, "-o", "json")...)
	if code != 0 {
		t.Errorf("%s -o json: exit %d: %s", strings.Join(argv, " "), code, errOut)
		return
	}
	var objs []map[string]any
	if streams[path] {
		for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("%s -o json: a line is not one JSON object (%v): %q", strings.Join(argv, " "), err, line)
				return
			}
			objs = append(objs, m)
		}
	} else {
		dec := json.NewDecoder(strings.NewReader(out))
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Errorf("%s -o json: not one JSON object (%v):\n%s", strings.Join(argv, " "), err, out)
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			t.Errorf("%s -o json: more than one JSON value:\n%s", strings.Join(argv, " "), out)
			return
		}
		objs = append(objs, m)
	}
	if len(objs) == 0 || len(objs[0]) == 0 {
		t.Errorf("%s -o json: printed nothing of the fixture's (the fixture lacks what it reads?):\n%s", strings.Join(argv, " "), out)
	}
	if last := path[strings.LastIndex(path, " ")+1:]; last == "list" || last == "versions" {
		hasArray := false
		for _, v := range objs[0] {
			if _, ok := v.([]any); ok {
				hasArray = true
			}
		}
		if !hasArray {
			t.Errorf("%s -o json: a list's JSON is its List response, its items in an array field:\n%s", strings.Join(argv, " "), out)
		}
	}
	if !bytes.HasSuffix([]byte(out), []byte("\n")) {
		t.Errorf("%s -o json: does not end its output with a newline", strings.Join(argv, " "))
	}
}
