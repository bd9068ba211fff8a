// Package promtest checks libs/dashboards against a real Prometheus
// (Debian's prometheus package) scraping a real embedded stack: every
// target up, every panel's and every alert's query answering, and
// promtool's lint of every service's /metrics.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/cmd/loom/internal/agentcmd"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/dashboards"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/testkit/need"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestMain turns this test binary into an agent when the local provider
// starts it as one (agents are real processes).
func TestMain(m *testing.M) {
	if os.Getenv("LOOM_TEST_RUN_AGENT") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := agentcmd.Run(ctx, nil, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// preObs are the metrics served before the base set of
// docs/observability.md "## Metrics" landed: the Go runtime's, the
// process', the agent's DCGM fields and loom_gpu_*. See obsLanded.
func preObs(metric string) bool {
	return !strings.HasPrefix(metric, "loom_") || strings.HasPrefix(metric, "loom_gpu_")
}

// TestDashboardsAgainstPrometheus starts Debian's prometheus on a generated
// configuration (1 s scrapes) pointing at every service of an embedded
// stack and, through file-based discovery (LOOM_METRICS_SD_DIR), at the
// agents of a two-node cluster, waits until every target is up, runs a cluster and a
// job, then evaluates every panel's query and every alert's check through
// Prometheus' HTTP API: any that returns nothing fails (a dead panel names
// a metric or a label no service exports).
//
// Alerts are checked by their Check form (`> bool`): a healthy stack fires
// none, and a firing-form query that returns nothing cannot tell "healthy"
// from "names nothing"; the Check returns 0 for each series looked at.
func TestDashboardsAgainstPrometheus(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a whole stack and Prometheus; skipped with -short")
	}
	need.Tools(t, "apt-get install prometheus", "prometheus", "promtool")

	// Agents listen on ports they choose and register them in sdDir, as
	// `loom up -metrics-sd` has them do.
	sdDir := t.TempDir()
	opts := stack.Options{DataDir: t.TempDir(), LogLevel: "warn", AgentCommand: []string{os.Args[0]},
		AgentEnv: []string{"LOOM_AGENT_GPU_MODE=simulated", "LOOM_TEST_RUN_AGENT=1", "LOOM_METRICS_SD_DIR=" + sdDir}}
	s, err := stack.Start(testkit.Context(t, 90*time.Second), opts)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close stack: %v", err)
		}
	})
	conn := dial(t, s)
	// Two nodes: two agents, found by Prometheus through their files.
	const agents = 2
	cl := createCluster(t, conn, "prom", &loomv1.NodePool{Id: "gpu", MachineType: "a3-highgpu-1g", NodeCount: agents,
		AcceleratorType: "nvidia-h100-80gb", AcceleratorCount: 1})

	a := s.Addrs
	targets := []dashboards.Target{
		{Service: "gateway", Addrs: []string{a.GatewayHTTP}}, {Service: "provisioner", Addrs: []string{a.ProvisionerHTTP}},
		{Service: "scheduler", Addrs: []string{a.SchedulerHTTP}}, {Service: "health", Addrs: []string{a.HealthHTTP}},
		{Service: "registry", Addrs: []string{a.RegistryHTTP}}, {Service: "training", Addrs: []string{a.TrainingHTTP}},
		{Service: "bridge", Addrs: []string{a.BridgeHTTP}}, {Service: "agent", FileSD: []string{dashboards.AgentFileSD(sdDir)}},
	}
	prom := startPrometheus(t, targets)
	wantUp := len(targets) - 1 + agents
	var agentAddrs []string
	testkit.WaitFor(t, 60*time.Second, "every target up in Prometheus, the agents' found through file_sd", func() (bool, error) {
		active, err := activeTargets(prom)
		if err != nil {
			return false, nil
		}
		up := 0
		agentAddrs = agentAddrs[:0]
		for _, tg := range active {
			if tg.Health == "up" {
				up++
			}
			if tg.Labels["job"] == "agent" {
				agentAddrs = append(agentAddrs, tg.Labels["instance"])
			}
		}
		return up == wantUp && len(active) == wantUp && len(agentAddrs) == agents, nil
	})
	for i, tg := range targets {
		if tg.Service == "agent" {
			targets[i].Addrs = agentAddrs // for promtool's lint below
		}
	}

	// The workload: a job on the cluster, to its end.
	jobs := loomv1.NewJobServiceClient(conn)
	job, err := jobs.SubmitJob(waitCtx(t, 10*time.Second), &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: cl.Name, DisplayName: "prom", Command: []string{"/bin/sh", "-c", "echo hello"}, NodeCount: 1, GpusPerNode: 1}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 90*time.Second, "the job ends", func() (bool, error) {
		j, err := jobs.GetJob(waitCtx(t, 5*time.Second), &loomv1.GetJobRequest{Name: job.Name})
		if err != nil {
			return false, nil
		}
		if j.State.Terminal() && j.State != loomv1.JobState_COMPLETED {
			return false, fmt.Errorf("job ended %v: %s", j.State, j.StateReason)
		}
		return j.State == loomv1.JobState_COMPLETED, nil
	})
	// One message through the Kafka ingress, so that the bridge's ingress
	// panels have data, and the bridge's IngressService answers through the
	// gateway once it is decided.
	key, err := s.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(s.BrokerAddr), Topic: topics.Ingress, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	err = w.WriteMessages(waitCtx(t, 10*time.Second), kafka.Message{Value: []byte(`{"parent":"projects/default","job":{"cluster":"` + cl.Name +
		`","command":["/bin/sh","-c","true"],"nodeCount":1,"gpusPerNode":1}}`), Headers: []kafka.Header{
		{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("prom-1")}, {Key: "ce_source", Value: []byte("//promtest")},
		{Key: "ce_type", Value: []byte("loom.ingress.v1.SubmitJob")}, {Key: "ce_credential", Value: []byte(key)},
		{Key: "content-type", Value: []byte("application/json")}}})
	_ = w.Close()
	if err != nil {
		t.Fatalf("produce to %s: %v", topics.Ingress, err)
	}
	var ingressErr error
	testkit.WaitFor(t, 60*time.Second, "the ingress message accepted (loom ingress, through the gateway)", func() (bool, error) {
		ps, err := loomv1.NewIngressServiceClient(conn).ListIngressProducers(waitCtx(t, 10*time.Second),
			&loomv1.ListIngressProducersRequest{Parent: "projects/default"})
		ingressErr = err
		return err == nil && len(ps.GetProducers()) == 1 && ps.GetProducers()[0].GetAccepted() == 1, nil
	})
	// Every target scraped 5 s after the job's end, so that rates over the
	// workload exist everywhere.
	ended := float64(time.Now().Unix())
	testkit.WaitFor(t, 30*time.Second, "every target scraped 5 s after the job", func() (bool, error) {
		v, err := query(prom, `min(timestamp(up))`)
		if err != nil || len(v) != 1 {
			return false, err
		}
		last, err := strconv.ParseFloat(fmt.Sprint(v[0].Value[1]), 64)
		return err == nil && last >= ended+5, nil
	})

	// Before docs/observability.md's base set is merged (obs), only the
	// metrics that predate it are checked; after, every panel is.
	landed, err := query(prom, `loom_build_info`)
	if err != nil {
		t.Fatal(err)
	}
	obsLanded := len(landed) > 0
	if !obsLanded {
		t.Logf("loom_build_info is not exported yet: panels and alerts on the base set's metrics are listed, not failed")
	}
	if ingressErr != nil {
		t.Errorf("ListIngressProducers through the gateway: %v", ingressErr)
	}
	var awaiting []string
	answered := map[string]bool{} // service/panel id
	for _, d := range dashboards.All() {
		for _, p := range d.Panels() {
			q := p.PromQL(d.Service, "1m")
			v, err := query(prom, q)
			switch {
			case err != nil:
				t.Errorf("%s/%s: %s: %v", d.Service, p.ID, q, err)
			case len(v) > 0:
				answered[d.Service+"/"+p.ID] = true
			case !obsLanded && !preObs(p.Metric):
				awaiting = append(awaiting, d.Service+"/"+p.ID)
			default:
				t.Errorf("%s/%s returns nothing: %s", d.Service, p.ID, q)
			}
		}
	}
	for _, al := range dashboards.Alerts() {
		q := alertCheck(al)
		v, err := query(prom, q)
		switch {
		case err != nil:
			t.Errorf("alert %s: %s: %v", al.Name, q, err)
		case len(v) > 0:
			// A healthy stack fires nothing.
			for _, smp := range v {
				if smp.Value[1] != "0" {
					t.Errorf("alert %s would fire on a healthy stack: %v = %v", al.Name, smp.Metric, smp.Value[1])
				}
			}
		case !obsLanded && al.Name != "LoomTargetDown":
			awaiting = append(awaiting, "alert "+al.Name)
		default:
			t.Errorf("alert %s's check returns nothing: %s", al.Name, q)
		}
	}
	if len(awaiting) > 0 {
		t.Logf("awaiting the base set (obs): %s", strings.Join(awaiting, ", "))
	}

	// The console's dashboards, from the same definitions: `loom up`'s
	// gateway scrapes its services itself (-metrics-targets; not the
	// agents, whose ports it does not know). A gauge or counter panel that
	// Prometheus answers has series there too (a p99 of no observations
	// is NaN in Prometheus and left out by the gateway).
	consoleSeries := func(svc string) map[string]int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.RESTAddr+"/v1/dashboards/"+svc, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET /v1/dashboards/%s: %v", svc, err)
		}
		defer resp.Body.Close()
		var d dashboards.Data
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/dashboards/%s: %d %v", svc, resp.StatusCode, err)
		}
		out := map[string]int{}
		for _, p := range d.Panels {
			out[p.ID] = len(p.Series)
		}
		return out
	}
	for _, d := range dashboards.All() {
		if d.Service == "agent" {
			continue
		}
		testkit.WaitFor(t, 30*time.Second, "the console's "+d.Service+" dashboard answering as Prometheus does", func() (bool, error) {
			got := consoleSeries(d.Service)
			for _, p := range d.Panels() {
				if answered[d.Service+"/"+p.ID] && p.Fn != dashboards.P99 && p.Fn != dashboards.Ratio && got[p.ID] == 0 {
					return false, nil
				}
			}
			return true, nil
		})
	}

	// promtool's lint of every target's exposition, but for the families
	// that keep dcgm-exporter's names and labels (dcgmCompatible).
	for _, tg := range targets {
		for _, addr := range tg.Addrs {
			body, err := get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatalf("%s /metrics: %v", tg.Service, err)
			}
			cmd := exec.Command("promtool", "check", "metrics")
			cmd.Stdin = bytes.NewReader(withoutDCGM(body))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool check metrics on %s's /metrics (%s): %v\n%s", tg.Service, addr, err, out)
			}
		}
	}

	// The files follow the agents: once the cluster is deleted (its
	// agents stopped), they are gone, and so are the agent targets.
	op, err := loomv1.NewClusterServiceClient(conn).DeleteCluster(waitCtx(t, 10*time.Second), &loomv1.DeleteClusterRequest{Name: cl.Name})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 90*time.Second, "the agents' files removed and their targets dropped", func() (bool, error) {
		o, err := loomv1.NewOperationServiceClient(conn).GetOperation(waitCtx(t, 5*time.Second), &loomv1.GetOperationRequest{Name: op.Name})
		if err != nil || !o.GetDone() {
			return false, nil
		}
		files, _ := filepath.Glob(dashboards.AgentFileSD(sdDir))
		active, err := activeTargets(prom)
		if err != nil || len(files) > 0 {
			return false, nil
		}
		for _, tg := range active {
			if tg.Labels["job"] == "agent" {
				return false, nil
			}
		}
		return true, nil
	})
}

// heldWindow is how far back alertCheck looks for an alert with a For: the
// stack has not run for an alert's For (minutes), but every target was up
// before the workload began, longer ago than this when the alerts are read.
const heldWindow = 10 * time.Second

// alertCheck is the query that tells whether al would fire: its Check, which
// for an alert with a For must have held at every rule evaluation (1 s) of
// the last heldWindow (at most its For), as Prometheus fires it only once
// Expr held for the For. A Check at one instant took one scrape that missed
// Prometheus' 1 s timeout (a process starved on a loaded machine; its up is
// 0 until the next scrape) for LoomTargetDown firing, which takes 2 minutes
// of failed scrapes.
func alertCheck(al dashboards.Alert) string {
	if al.For <= 0 {
		return al.Check
	}
	return fmt.Sprintf("min_over_time((%s)[%ds:1s])", al.Check, int(min(al.For, heldWindow).Seconds()))
}

// promTarget is one of Prometheus' active targets.
type promTarget struct {
	Labels    map[string]string `json:"labels"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

// activeTargets asks Prometheus for its active targets.
func activeTargets(prom string) ([]promTarget, error) {
	var r struct {
		Data struct {
			ActiveTargets []promTarget `json:"activeTargets"`
		} `json:"data"`
	}
	err := getJSON(prom+"/api/v1/targets", &r)
	return r.Data.ActiveTargets, err
}

// dcgmCompatible reports whether a metric family is one the agent serves
// under dcgm-exporter's own names and labels (DCGM_FI_DEV_*{Hostname,
// modelName, UUID}), so that NVIDIA's dashboards and alerts work on Loom's
// nodes unchanged: promtool's style lint (snake_case labels, _total
// counters) is not theirs to pass.
func dcgmCompatible(name string) bool {
	return strings.HasPrefix(name, "DCGM_FI_") || strings.HasPrefix(name, "loom_gpu_") || strings.HasPrefix(name, "loom_node_disk_")
}

// withoutDCGM drops the dcgmCompatible families from an exposition.
func withoutDCGM(body []byte) []byte {
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(body), "\n") {
		name := line
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" {
			name = f[2]
		} else if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !dcgmCompatible(name) {
			out.WriteString(line)
		}
	}
	return out.Bytes()
}

// startPrometheus runs prometheus on a configuration scraping targets
// every second, with the rules loaded, and returns its base URL.
func startPrometheus(t *testing.T, targets []dashboards.Target) string {
	t.Helper()
	dir := t.TempDir()
	cfg := dashboards.ScrapeConfig(targets, dashboards.ScrapeOptions{Interval: time.Second, RuleFiles: []string{"rules.yml"}})
	for name, data := range map[string][]byte{"prometheus.yml": cfg, "rules.yml": dashboards.Rules()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := testkit.FreeAddr()
	var out bytes.Buffer
	cmd := exec.Command("prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	base := "http://" + addr
	testkit.WaitFor(t, 30*time.Second, "prometheus ready", func() (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("prometheus exited: %s", out.String())
		default:
		}
		_, err := get(base + "/-/ready")
		return err == nil, nil
	})
	return base
}

// sample is one element of an instant vector from /api/v1/query.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates q at now; a scalar result counts as one sample.
func query(base, q string) ([]sample, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(base+"/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	var v []sample
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", r.Data.ResultType)
	}
	if err := json.Unmarshal(r.Data.Result, &v); err != nil {
		return nil, err
	}
	return v, nil
}

func get(u string) ([]byte, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err == nil && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest {
		err = fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return b, err
}

func getJSON(u string, v any) error {
	b, err := get(u)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func dial(t *testing.T, s *stack.Stack) *grpc.ClientConn {
	t.Helper()
	key, err := s.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(key)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func waitCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createCluster creates a cluster through the gateway and waits for RUNNING.
func createCluster(t *testing.T, conn *grpc.ClientConn, id string, pools ...*loomv1.NodePool) *loomv1.Cluster {
	t.Helper()
	clusters := loomv1.NewClusterServiceClient(conn)
	ops := loomv1.NewOperationServiceClient(conn)
	var op *loomv1.Operation
	testkit.WaitFor(t, 60*time.Second, "gateway accepts CreateCluster", func() (bool, error) {
		var err error
		op, err = clusters.CreateCluster(waitCtx(t, 5*time.Second), &loomv1.CreateClusterRequest{
			Parent: "projects/default", ClusterId: id, RequestId: "create-" + id,
			Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: pools}}})
		return err == nil, nil
	})
	testkit.WaitFor(t, 90*time.Second, "cluster "+id+" RUNNING", func() (bool, error) {
		got, err := ops.WaitOperation(waitCtx(t, 20*time.Second), &loomv1.WaitOperationRequest{Name: op.Name, TimeoutSeconds: 10})
		if err != nil {
			return false, nil
		}
		if e := got.GetError(); e != nil {
			return false, fmt.Errorf("create %s failed: %v", id, e)
		}
		op = got
		return got.Done, nil
	})
	return op.GetCluster()
}
