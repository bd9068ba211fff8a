package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/embedded"
)

// demoApp is an app whose --gateway answers nowhere, so that the demo starts
// its own stack, with agents and the job's trainer re-executing this test
// binary (see TestMain).
func demoApp(t *testing.T) (*app, demoOptions) {
	t.Helper()
	port, err := embedded.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	a := newApp()
	a.gateway = "127.0.0.1:" + strconv.Itoa(port)
	a.project = DefaultProject
	a.pollInterval = 50 * time.Millisecond
	a.configDir = t.TempDir()
	t.Cleanup(a.close)
	return a, demoOptions{
		timeout:    2 * time.Minute,
		executable: os.Args[0],
		epochs:     200,
		stack: stack.Options{
			DataDir:      t.TempDir(),
			AgentCommand: []string{os.Args[0]},
			AgentEnv:     []string{"LOOM_TEST_RUN_AGENT=1"},
			LogLevel:     "error",
		},
	}
}

// demoUpLine is the line the demo prints once its in-process Loom is up.
var demoUpLine = regexp.MustCompile(`^==> Loom is up: gateway (127\.0\.0\.1:\d+) \(gRPC\), REST and web console http://(127\.0\.0\.1:\d+)/ \([^)]+\)\n$`)

// consoleProbe is the demo's output, which opens the web console the
// demo's up line names while that line is written: the in-process Loom is
// stopped when the demo ends, so the console can only be seen during it.
type consoleProbe struct {
	bytes.Buffer
	gateway, rest string
	status        int
	body          []byte
	err           error
}

func (p *consoleProbe) Write(b []byte) (int, error) {
	if m := demoUpLine.FindSubmatch(b); m != nil {
		p.gateway, p.rest = string(m[1]), string(m[2])
		p.status, p.body, p.err = getConsole("http://" + p.rest + "/")
	}
	return p.Buffer.Write(b)
}

func getConsole(url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func TestDemoEndToEnd(t *testing.T) {
	t.Parallel()
	a, opts := demoApp(t)
	var out consoleProbe
	asked := a.gateway
	start := time.Now()
	if err := a.runDemo(context.Background(), opts, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	// The up line names the in-process Loom's console, which answered there.
	switch {
	case out.rest == "":
		t.Errorf("the demo did not print its Loom's gateway and console as %s", demoUpLine)
	case out.rest == out.gateway || out.rest == asked:
		t.Errorf("the console address %s is not the in-process Loom's REST port (gateway %s, asked %s)", out.rest, out.gateway, asked)
	case out.err != nil:
		t.Errorf("the console the demo printed, http://%s/: %v", out.rest, out.err)
	case out.status != http.StatusOK || !bytes.Contains(out.body, []byte("<title>Loom console</title>")):
		t.Errorf("the console the demo printed, http://%s/: %d %.200q", out.rest, out.status, out.body)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("demo took %s; it must stay well within two minutes", d)
	}
	s := out.String()
	for _, want := range []string{
		"==> No Loom gateway at " + asked + ": starting Loom in this process",
		"==> Creating cluster demo from the built-in demo cluster (2 × n2-standard-8 in pool cpu)",
		"    2 of 2 nodes ready\n",
		"==> Cluster demo is RUNNING",
		"on 2 nodes, model output \"demo-regressor\"",
		"    RUNNING on cpu-0001, cpu-0002\n",
		"    COMPLETED (exit 0)\n",
		"    epoch 1 loss ",
		"    epoch 200 loss ",
		"    rank 1: trained 200 epochs",
		"    Name:        projects/default/locations/global/models/demo-regressor@1\n",
		"    Source job:  projects/default/jobs/1\n",
		"    model.json: linear-regression, 200 epochs, final loss ",
		"==> Cluster demo deleted",
		"==> Stopping the in-process Loom",
		"==> Demo finished in ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", s)
	}
}

func TestDemoFailsClearly(t *testing.T) {
	t.Parallel()
	a, opts := demoApp(t)
	opts.clusterFile = writeFile(t, "bad.json", `{"name": "demo", "compute": {"nodePools": [{"id": "cpu", "nodeCount": 0}]}}`)
	var out bytes.Buffer
	err := a.runDemo(context.Background(), opts, &out)
	if err == nil {
		t.Fatalf("demo with a 0-node pool succeeded:\n%s", out.String())
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "demo failed while creating cluster demo: create cluster demo: invalid request:\n  ") ||
		!strings.Contains(msg, "node_count") {
		t.Fatalf("error = %q, want the invalid field named", msg)
	}
	if !strings.Contains(out.String(), "==> Stopping the in-process Loom") {
		t.Fatalf("the in-process Loom was not stopped:\n%s", out.String())
	}
}
