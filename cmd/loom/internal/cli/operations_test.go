package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestOperationsAgainstStack drives `loom operations` against the real
// stack: a cluster create (paced by a slow launch rate, so that it is still
// running) is listed, read, cancelled (its cluster is then deleted by a new
// delete operation that `wait` follows to its end), and the errors say
// what to do next.
func TestOperationsAgainstStack(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 90*time.Second)
	dir := t.TempDir()
	st, err := stack.Start(ctx, stack.Options{
		DataDir:      dir,
		AgentCommand: []string{os.Args[0]},
		AgentEnv:     []string{"LOOM_TEST_RUN_AGENT=1"},
		LogLevel:     "warn",
		// One agent every 4 s: a 6-node create runs for 20 s at least,
		// so the cancel below finds it running even on a loaded machine.
		ProvisionerArgs: []string{"-launch-rate=0.25", "-launch-concurrency=1"},
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		ctx := testkit.Context(t, time.Minute)
		if err := st.Close(ctx); err != nil {
			t.Errorf("close stack: %v", err)
		}
	})
	l := liveCLI{t: t, gw: st.GatewayAddr, token: adminKey(t, dir)}

	if out := l.ok("operations", "list"); !strings.Contains(out, "No operations in project default yet") {
		t.Errorf("empty list: %q", out)
	}

	file := filepath.Join(t.TempDir(), "slow.json")
	spec := `{"name": "slow", "compute": {"nodePools": [{"id": "cpu", "machineType": "n2-standard-8", "nodeCount": 6}]}}`
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	created := &loomv1.Operation{}
	l.json(created, "clusters", "create", "-f", file, "--async")
	id := shortName(created.GetName())

	// list: an aligned table, and JSON.
	out := l.ok("operations", "list")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "OPERATION") || !strings.Contains(lines[1], id) ||
		!strings.Contains(lines[1], "cluster slow") || !strings.Contains(lines[1], "RUNNING") {
		t.Fatalf("operations list:\n%s", out)
	}
	if h, r := strings.Index(lines[0], "VERB"), strings.Index(lines[1], "create"); h != r {
		t.Errorf("VERB at column %d, its value at %d: not aligned\n%s", h, r, out)
	}
	list := &loomv1.ListOperationsResponse{}
	l.json(list, "operations", "list", "--filter", "verb=create")
	if len(list.GetOperations()) != 1 || list.GetOperations()[0].GetName() != created.GetName() {
		t.Fatalf("operations list -o json: %v", list)
	}

	// get: fields, and JSON.
	if out := l.ok("operations", "get", id); !regexp.MustCompile(`Status:\s+RUNNING`).MatchString(out) || !strings.Contains(out, "loom operations wait "+id) {
		t.Errorf("operations get:\n%s", out)
	}
	got := &loomv1.Operation{}
	l.json(got, "operations", "get", created.GetName())
	if got.GetName() != created.GetName() || got.GetDone() {
		t.Fatalf("operations get -o json: %v", got)
	}

	// cancel: the create ends CANCELLED; the delete it started is followed.
	out = l.ok("operations", "cancel", id)
	m := regexp.MustCompile("loom operations wait ([0-9A-Z]+)`").FindStringSubmatch(out)
	if !strings.Contains(out, "Operation "+id+" cancelled") || m == nil {
		t.Fatalf("operations cancel:\n%s", out)
	}
	del := m[1]
	stdout, stderr, code := l.run("operations", "wait", id)
	if code != 1 || !strings.Contains(stderr, "Canceled") {
		t.Errorf("wait for the cancelled create: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = l.run("operations", "wait", del)
	if code != 0 || !strings.Contains(stdout, "Waiting for delete cluster slow (operation "+del+")\n") || !strings.Contains(stdout, "Operation "+del+" done") {
		t.Fatalf("wait for the delete: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := l.run("clusters", "get", "slow"); code == 0 || !strings.Contains(stderr, "not found") {
		t.Errorf("the cancelled cluster still exists: exit %d %s", code, stderr)
	}

	// Errors say what to do next.
	if _, stderr, code := l.run("operations", "cancel", del); code != 1 || !strings.Contains(stderr, "already done") {
		t.Errorf("cancel a done delete: exit %d %s", code, stderr)
	}
	if _, stderr, code := l.run("operations", "get", "nosuch"); code != 1 || !strings.Contains(stderr, "loom operations list") {
		t.Errorf("get an unknown operation: exit %d %s", code, stderr)
	}
	if out := l.ok("operations", "list", "--pending"); !strings.Contains(out, `match "done=false"`) {
		t.Errorf("list --pending once all are done: %q", out)
	}
	if _, stderr, code := l.run("operations", "list", "--filter", "verb=(("); code != 1 || !strings.Contains(stderr, "filter") {
		t.Errorf("bad filter: exit %d %s", code, stderr)
	}
}

// TestRenderOperations checks the table's columns and each status.
func TestRenderOperations(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := timestamppb.New(now.Add(-90 * time.Second))
	ops := []*loomv1.Operation{
		{Name: "projects/p/operations/A1", Metadata: &loomv1.OperationMetadata{Verb: "create", Target: "projects/p/clusters/demo", Progress: "1 of 2 nodes ready", CreateTime: at}},
		{Name: "projects/p/operations/B22", Done: true, Metadata: &loomv1.OperationMetadata{Verb: "delete", Target: "projects/p/clusters/demo", CreateTime: at}},
		{Name: "projects/p/operations/C3", Done: true, Result: &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: 1, Message: "cancelled"}},
			Metadata: &loomv1.OperationMetadata{Verb: "create", Target: "projects/p/clusters/x"}},
		{Name: "projects/p/operations/D4", Done: true, Result: &loomv1.Operation_Error{Error: &loomv1.OperationError{Code: 8, Message: "no capacity"}},
			Metadata: &loomv1.OperationMetadata{Verb: "export", Target: "projects/p/locations/l/models/m@1"}},
	}
	var b bytes.Buffer
	if err := renderOperations(&b, ops, now); err != nil {
		t.Fatal(err)
	}
	want := `OPERATION  VERB    TARGET        STATUS                      PROGRESS            AGE
A1         create  cluster demo  RUNNING                     1 of 2 nodes ready  1m
B22        delete  cluster demo  DONE                        -                   1m
C3         create  cluster x     CANCELLED                   -                   -
D4         export  model m@1     FAILED (ResourceExhausted)  -                   -
`
	golden(t, b.String(), want)
	if got := deleteOperationIn("cancelled; cluster c is being deleted by operation projects/p/operations/Z9"); got != "projects/p/operations/Z9" {
		t.Errorf("deleteOperationIn: %q", got)
	}
}
