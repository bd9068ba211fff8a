package cli

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/libs/recipes"
	"github.com/loom-ml/loom/libs/slurmspec"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestRecipesList(t *testing.T) {
	t.Parallel()
	out, errOut, code := run(t, "127.0.0.1:1", "recipes", "list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 1+len(recipes.Names()) {
		t.Fatalf("%d lines, want a header and %d recipes:\n%s", len(lines), len(recipes.Names()), out)
	}
	// Aligned: every column starts where its header does.
	for _, col := range []string{"VERSION", "TASK", "FRAMEWORK", "MODEL", "NODES", "GPUS", "GPU ", "PARALLELISM", "SEQ", "BATCH"} {
		at := strings.Index(lines[0], col)
		for _, l := range lines[1:] {
			if at <= 0 || len(l) <= at || l[at-1] != ' ' || l[at] == ' ' {
				t.Errorf("column %s (at %d) is not aligned in %q", col, at, l)
			}
		}
	}
	if !strings.Contains(out, "llama3-70b-pretrain  1        pretrain  torchrun   meta-llama/Meta-Llama-3-70B") ||
		!strings.Contains(out, "tp8 fsdp8") || !strings.Contains(out, "cp2 dp4") {
		t.Errorf("table:\n%s", out)
	}
	out, _, code = run(t, "127.0.0.1:1", "recipes", "list", "--output", "json")
	// An object with the list under its plural, as every other list's
	// answer ({"jobs": [...]}), so a script reads each the same way.
	var list struct{ Recipes []recipes.Recipe }
	rs := &list.Recipes
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(*rs) != len(recipes.Names()) || (*rs)[0].Name != "gemma2-9b-sft" {
		t.Errorf("list --output json: exit %d\n%s", code, out)
	}
}

func TestRecipesShow(t *testing.T) {
	t.Parallel()
	out, errOut, code := run(t, "127.0.0.1:1", "recipes", "show", "llama3-8b-grpo", "--set", "lr.peak=2e-6", "--set", "lr.min=2e-6")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Name:           llama3-8b-grpo (version 1)\n",
		"Framework:      torchrun (trl.scripts.grpo)\n",
		"Resources:      1 × 8 nvidia-h100-80gb (a3-highgpu-8g)\n",
		"Learning rate:  2e-06 peak, 2e-06 min, 0 warm-up steps, constant decay, 1000 steps\n",
		"Small variant:  loom train --learning_rate=0.01 --batch_size=16",
		"Sources:\n  - github.com/huggingface/trl",
		"  rl.num_generations        int     8                                    an integer in [2, 1024]\n",
		"  lr.decay                  enum    constant                             one of cosine, linear, constant\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	// A recipe without RL settings does not list the rl.* keys.
	if out, _, _ := run(t, "127.0.0.1:1", "recipes", "show", "llama3-8b-pretrain"); strings.Contains(out, "rl.") {
		t.Errorf("pretraining recipe lists rl.* keys:\n%s", out)
	}
	out, _, code = run(t, "127.0.0.1:1", "recipes", "show", "gemma2-9b-sft", "-o", "json")
	var r recipes.Recipe
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Framework != recipes.MaxText {
		t.Errorf("show -o json: exit %d\n%s", code, out)
	}
	_, errOut, code = run(t, "127.0.0.1:1", "recipes", "show", "llama4")
	if code != 2 || !strings.Contains(errOut, `no recipe "llama4"; the recipes are: gemma2-9b-sft,`) {
		t.Errorf("unknown recipe: exit %d, %q", code, errOut)
	}
}

// TestRenderedScriptsAreWhatSbatchAccepts parses every recipe's scripts
// as `loom slurm sbatch` does before the gateway sees them: the options
// are Slurm's, and the job has the recipe's nodes, GPUs and time.
func TestRenderedScriptsAreWhatSbatchAccepts(t *testing.T) {
	t.Parallel()
	for _, r := range recipes.List() {
		for _, o := range []recipes.Options{{}, {FromCheckpoint: "gs://b/ck/step-9"}, {Small: true}} {
			script, err := recipes.Sbatch(r, o)
			if err != nil {
				t.Fatal(err)
			}
			job, err := slurmcli.ParseSbatch(nil, []byte(script), map[string]string{"USER": "ada"})
			if err != nil {
				t.Fatalf("%s %+v: sbatch refuses the script: %v\n%s", r.Name, o, err, script)
			}
			nodes, gpus, limit := int32(r.Nodes), int32(r.GPUsPerNode), r.TimeLimit
			if o.Small {
				nodes, gpus, limit = 1, 0, recipes.SmallTimeLimit
			}
			secs, _, err := slurmspec.ParseTimeLimit(limit)
			if err != nil {
				t.Fatal(err)
			}
			if job.GetNodeCount() != nodes || job.GetGpusPerNode() != gpus || job.GetTimeLimitSeconds() != secs ||
				job.GetDisplayName() != recipes.JobName(r, o) || job.GetOutputPattern() != "%x-%j.out" || job.GetScript() != script {
				t.Errorf("%s %+v: job %v", r.Name, o, job)
			}
			if !o.Small && (!job.GetExclusive() || job.GetNtasksPerNode() < 1) {
				t.Errorf("%s: not exclusive or no tasks per node: %v", r.Name, job)
			}
		}
	}
}

func TestRecipesLaunchSubmitsTheScript(t *testing.T) {
	t.Parallel()
	f, gw := newFakeGateway(t)
	out, errOut, code := run(t, gw, "recipes", "launch", "llama3-70b-pretrain", "--cluster", "demo", "--set", "nodes=2",
		"--from-checkpoint", "gs://b/ck/step-500")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if out != "Submitted recipe llama3-70b-pretrain v1 as job 10 (projects/default/jobs/10) on cluster demo\n" {
		t.Errorf("output %q", out)
	}
	base, _ := recipes.Get("llama3-70b-pretrain")
	r, err := recipes.Apply(base, []string{"nodes=2"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := recipes.Sbatch(r, recipes.Options{FromCheckpoint: "gs://b/ck/step-500"})
	if err != nil {
		t.Fatal(err)
	}
	sub, ok := fakegw.LastRequest[*loomv1.SubmitJobRequest](f)
	j := sub.GetJob()
	if !ok || j.GetScript() != want || j.GetCluster() != "projects/default/clusters/demo" || j.GetNodeCount() != 2 ||
		j.GetGpusPerNode() != 8 || j.GetTimeLimitSeconds() != 172800 || !j.GetExclusive() || j.GetDisplayName() != "llama3-70b-pretrain" ||
		j.GetEnv()["LOOM_RECIPE"] != "llama3-70b-pretrain@1" || j.GetEnv()["LOOM_CONTAINER_IMAGE"] != r.ContainerImage ||
		j.GetWorkDir() != "" || sub.GetRequestId() == "" {
		t.Errorf("SubmitJob %v", sub)
	}
	if !strings.Contains(j.GetScript(), "--parallelism.data_parallel_shard_degree=2 ") || !strings.Contains(j.GetScript(), "--checkpoint.initial_load_path=gs://b/ck/step-500\n") {
		t.Errorf("script:\n%s", j.GetScript())
	}

	// --dry-run prints the script and submits nothing.
	before := len(fakegw.Requests[*loomv1.SubmitJobRequest](f))
	out, _, code = run(t, gw, "recipes", "launch", "llama3-70b-pretrain", "--set", "nodes=2", "--from-checkpoint", "gs://b/ck/step-500", "--dry-run")
	if code != 0 || out != want {
		t.Errorf("--dry-run: exit %d\n%s", code, out)
	}
	if n := len(fakegw.Requests[*loomv1.SubmitJobRequest](f)); n != before {
		t.Errorf("--dry-run submitted %d jobs", n-before)
	}
	// With --output json it prints the job that would be submitted.
	out, _, code = run(t, gw, "recipes", "launch", "llama3-8b-sft", "--cluster", "demo", "--dry-run", "-o", "json")
	var job loomv1.Job
	if code != 0 || protojson.Unmarshal([]byte(out), &job) != nil || job.GetNtasksPerNode() != 8 || job.GetCluster() != "projects/default/clusters/demo" {
		t.Errorf("--dry-run -o json: exit %d\n%s", code, out)
	}
}

func TestRecipesLaunchRefusals(t *testing.T) {
	t.Parallel()
	_, gw := newFakeGateway(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"llama3-8b-pretrain"}, "--cluster is required"},
		{[]string{"llama3-8b-pretrain", "--cluster", "demo", "--set", "tp=2"}, `--set: unknown key "tp"; the keys are: model,`},
		{[]string{"llama3-8b-pretrain", "--cluster", "demo", "--set", "micro_batch=0"}, `--set: micro_batch must be an integer in [1, 4096], got "0"`},
		{[]string{"llama3-8b-pretrain", "--cluster", "demo", "--set", "parallelism.tensor=3"}, "must equal nodes × gpus_per_node"},
		{[]string{"llama3-8b-pretrain", "--cluster", "demo", "--small", "--from-checkpoint", "gs://b/c"}, "--from-checkpoint with --small must be a file:// URI"},
		{[]string{"llama3-8b-pretrain", "--cluster", "demo", "--from-checkpoint", "$(reboot)"}, "--from-checkpoint must be 1 to 512 characters"},
		{[]string{"llama3-8b-pretrain", "--cluster", "demo", "--output-dir", "/o"}, "--output-dir is for --serverless"},
		{[]string{"nope", "--cluster", "demo"}, `no recipe "nope"`},
	} {
		_, errOut, code := run(t, gw, append([]string{"recipes", "launch"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("launch %v: exit %d, %q; want 2, %q", c.args, code, errOut, c.want)
		}
	}
}

// fakeTraining is a gateway serving only TrainingService's
// CreateCustomJob, recording the requests.
type fakeTraining struct {
	trainingv1.UnimplementedTrainingServiceServer
	mu   sync.Mutex
	reqs []*trainingv1.CreateCustomJobRequest
}

func (f *fakeTraining) CreateCustomJob(_ context.Context, r *trainingv1.CreateCustomJobRequest) (*trainingv1.CustomJob, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
	cj := proto.Clone(r.GetCustomJob()).(*trainingv1.CustomJob)
	cj.Name = r.GetParent() + "/customJobs/42"
	cj.State = trainingv1.JobState_JOB_STATE_QUEUED
	return cj, nil
}

func (f *fakeTraining) serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	trainingv1.RegisterTrainingServiceServer(s, f)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func TestRecipesLaunchServerless(t *testing.T) {
	t.Parallel()
	f := &fakeTraining{}
	gw := f.serve(t)
	out, errOut, code := run(t, gw, "recipes", "launch", "llama3-70b-pretrain", "--serverless", "--cluster", "a3u",
		"--location", "europe-west4", "--output-dir", "file:///data/out", "--set", "lr.peak=1e-4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if out != "Created custom job 42 (projects/default/locations/europe-west4/customJobs/42); follow it with `loom jobs custom get 42`\n" {
		t.Errorf("output %q", out)
	}
	base, _ := recipes.Get("llama3-70b-pretrain")
	r, _ := recipes.Apply(base, []string{"lr.peak=1e-4"})
	want, err := recipes.CustomJob(r, recipes.Options{}, recipes.CustomJobOptions{PersistentResourceID: "a3u", BaseOutputDirectory: "file:///data/out"})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	req := f.reqs[len(f.reqs)-1]
	f.mu.Unlock()
	if req.GetParent() != "projects/default/locations/europe-west4" || req.GetRequestId() == "" || !proto.Equal(req.GetCustomJob(), want) {
		t.Errorf("CreateCustomJob %v\nwant job %v", req, want)
	}
	pools := req.GetCustomJob().GetJobSpec().GetWorkerPoolSpecs()
	if len(pools) != 2 || pools[0].GetReplicaCount() != 1 || pools[1].GetReplicaCount() != 7 {
		t.Errorf("pools %v, want 1 + 7 replicas", pools)
	}

	// --dry-run prints the CustomJob; nothing is created.
	out, _, code = run(t, gw, "recipes", "launch", "llama3-8b-grpo", "--serverless", "--small", "--dry-run")
	var cj trainingv1.CustomJob
	if code != 0 || protojson.Unmarshal([]byte(out), &cj) != nil {
		t.Fatalf("--serverless --dry-run: exit %d\n%s", code, out)
	}
	g, _ := recipes.Get("llama3-8b-grpo")
	if small, _ := recipes.CustomJob(g, recipes.Options{Small: true}, recipes.CustomJobOptions{}); !proto.Equal(&cj, small) {
		t.Errorf("dry run %v, want %v", &cj, small)
	}
	f.mu.Lock()
	n := len(f.reqs)
	f.mu.Unlock()
	if n != 1 {
		t.Errorf("%d CreateCustomJob calls, want the first launch's only", n)
	}
	out, _, code = run(t, gw, "recipes", "launch", "gemma2-9b-sft", "--serverless", "-o", "json")
	if code != 0 || protojson.Unmarshal([]byte(out), &cj) != nil || cj.GetName() != "projects/default/locations/us-central1/customJobs/42" {
		t.Errorf("--serverless -o json: exit %d\n%s", code, out)
	}
}
