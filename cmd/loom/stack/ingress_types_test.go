package stack

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestKafkaIngressEveryMessageType is issue 17's list of payloads, each
// produced to loom.ingress.v1 as JSON in its API request's shape (written
// here as a producer writes it, not marshalled from Loom's types) and
// applied through the real gateway, and the list of public events,
// each seen coming back out on loom.public.v1:
//
//   - SubmitJob: the job runs, its JobStateChanged reach COMPLETED;
//   - CancelJob of a second, long job: JobStateChanged CANCELLED;
//   - CreateCustomJob: the CustomJob runs (on its own cluster),
//     CustomJobStateChanged reaches JOB_STATE_SUCCEEDED;
//   - CancelCustomJob of a second, long CustomJob: JOB_STATE_CANCELLED;
//   - CreateHyperparameterTuningJob: a study whose trial reports its metric
//     ends JOB_STATE_SUCCEEDED, with a TrialFinished (SUCCEEDED);
//   - CancelHyperparameterTuningJob of a second, long study:
//     HyperparameterTuningJobStateChanged reaches JOB_STATE_CANCELLED;
//   - UploadModel of a real artifact directory: ModelVersionRegistered;
//   - ReportFaultyNodes of the cluster's node: NodeHealthChanged.
//
// The messages carry the administrator's key: reporting faulty nodes needs
// a cluster administrator, and the stack runs jobs as their owner's account
// on this machine.
func TestKafkaIngressEveryMessageType(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole stack with clusters")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startIngressStack(ctx, t)
	key, err := s.st.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	rs := s.readResults(ctx, t)
	var mu sync.Mutex
	var events []publicEvent
	readTopic(ctx, t, s.st.BrokerAddr, topics.Public, func(m kafka.Message) {
		ev := publicEvent{key: string(m.Key), headers: map[string]string{}}
		for _, h := range m.Headers {
			ev.headers[h.Key] = string(h.Value)
		}
		_ = json.Unmarshal(m.Value, &ev.data)
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	send := func(id, typ, data string) {
		t.Helper()
		s.produce(ctx, t, s.msg(id, typ, key, []byte(data)))
	}
	// accepted waits for the results of ids and returns the resource each
	// made (or acted on).
	accepted := func(ids ...string) map[string]string {
		t.Helper()
		var waiting []string
		defer func() {
			if t.Failed() {
				t.Logf("no result yet for %v", waiting)
			}
		}()
		testkit.WaitFor(t, 2*time.Minute, fmt.Sprintf("the results of %v", ids), func() (bool, error) {
			waiting = nil
			for _, id := range ids {
				switch r := rs.get(id); {
				case len(r) == 0:
					waiting = append(waiting, id)
				case r[0].GetOutcome() != publicv1.IngressResult_ACCEPTED:
					return false, fmt.Errorf("%s: %v", id, r[0])
				}
			}
			return len(waiting) == 0, nil
		})
		out := map[string]string{}
		for _, id := range ids {
			r := rs.get(id)
			if len(r) != 1 || r[0].GetOutcome() != publicv1.IngressResult_ACCEPTED || r[0].GetProject() != "default" {
				t.Fatalf("%s: results %v, want one ACCEPTED in project default", id, r)
			}
			out[id] = r[0].GetResource()
		}
		return out
	}

	// A model's artifacts, checked by the registry against their MANIFEST.
	art := t.TempDir()
	weights := []byte("weights of the ingress test")
	if err := os.WriteFile(filepath.Join(art, "model.bin"), weights, 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf("%x  model.bin\n", sha256.Sum256(weights))
	if err := os.WriteFile(filepath.Join(art, "MANIFEST"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	const cluster = "projects/default/clusters/ing"
	workers := func(script string) string {
		cmd, _ := json.Marshal([]string{"/bin/sh", "-c", script})
		return `{"workerPoolSpecs": [{"machineSpec": {"machineType": "n2-standard-8"}, "replicaCount": "1",
			"containerSpec": {"command": ` + string(cmd) + `}}]}`
	}
	study := func(trial string) string {
		return `{"parent": "projects/default/locations/us-central1",
		"hyperparameterTuningJob": {"displayName": "lr-sweep", "maxTrialCount": 1, "parallelTrialCount": 1,
		"studySpec": {"metrics": [{"metricId": "val_loss", "goal": "MINIMIZE"}],
			"parameters": [{"parameterId": "learning_rate", "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1}, "scaleType": "UNIT_LOG_SCALE"}]},
		"trialJobSpec": ` + workers(trial) + `}}`
	}
	send("t-submit", "SubmitJob", `{"parent": "projects/default", "job": {"cluster": "`+cluster+`", "displayName": "from-kafka",
		"script": "#!/bin/sh\ntrue\n", "nodeCount": 1}}`)
	send("t-submit-long", "SubmitJob", `{"parent": "projects/default", "job": {"cluster": "`+cluster+`", "script": "#!/bin/sh\nsleep 600\n", "nodeCount": 1}}`)
	send("t-cj", "CreateCustomJob", `{"parent": "projects/default/locations/us-central1",
		"customJob": {"displayName": "from-kafka", "jobSpec": `+workers("true")+`}}`)
	send("t-cj-long", "CreateCustomJob", `{"parent": "projects/default/locations/us-central1",
		"customJob": {"displayName": "long", "jobSpec": `+workers("sleep 600")+`}}`)
	send("t-study", "CreateHyperparameterTuningJob", study("sleep 600"))
	// The trial reports its metric as cloudml-hypertune does.
	send("t-study-run", "CreateHyperparameterTuningJob", study(`echo '{"val_loss": "0.5", "global_step": "1"}' >> "$CLOUD_ML_HP_METRIC_FILE"`))
	send("t-model", "UploadModel", `{"parent": "projects/default/locations/us-central1", "modelId": "ingress-model",
		"model": {"displayName": "from-kafka", "artifactUri": "file://`+art+`"}}`)
	made := accepted("t-submit", "t-submit-long", "t-cj", "t-cj-long", "t-study", "t-study-run", "t-model")
	for id, prefix := range map[string]string{"t-submit": "projects/default/jobs/", "t-cj": "projects/default/locations/us-central1/customJobs/",
		"t-study": "projects/default/locations/us-central1/hyperparameterTuningJobs/", "t-model": "projects/default/operations/"} {
		if !strings.HasPrefix(made[id], prefix) {
			t.Fatalf("%s made %q, want %s...", id, made[id], prefix)
		}
	}

	// The cancels name what the first messages made; the node is the
	// cluster's only one.
	nodes, err := loomv1.NewNodeServiceClient(s.gw).ListNodes(ctx, &loomv1.ListNodesRequest{Parent: cluster})
	if err != nil || len(nodes.GetNodes()) != 1 {
		t.Fatalf("ListNodes(%s) = %v, %v", cluster, nodes, err)
	}
	host := nodes.GetNodes()[0].GetHostname()
	send("t-cancel", "CancelJob", `{"name": "`+made["t-submit-long"]+`"}`)
	send("t-cancel-cj", "CancelCustomJob", `{"name": "`+made["t-cj-long"]+`"}`)
	send("t-cancel-study", "CancelHyperparameterTuningJob", `{"name": "`+made["t-study"]+`"}`)
	// Last: the faulty node is taken out of service, and the jobs on it
	// are done or cancelled by then.
	testkit.WaitFor(t, 2*time.Minute, "the jobs on "+cluster+" to end", func() (bool, error) {
		for _, id := range []string{"t-submit", "t-submit-long"} {
			j, err := loomv1.NewJobServiceClient(s.gw).GetJob(ctx, &loomv1.GetJobRequest{Name: made[id]})
			if err != nil {
				return false, err
			}
			switch j.GetState() {
			case loomv1.JobState_COMPLETED, loomv1.JobState_CANCELLED, loomv1.JobState_FAILED:
			default:
				return false, nil
			}
		}
		return true, nil
	})
	send("t-faulty", "ReportFaultyNodes", `{"cluster": "`+cluster+`", "hostnames": ["`+host+`"], "reason": "ECC storm (ingress test)"}`)
	accepted("t-cancel", "t-cancel-cj", "t-cancel-study", "t-faulty")

	// What came out: each wanted (type, subject, field = value) seen once
	// at least.
	type want struct{ typ, subject, field, value string }
	wants := []want{
		{"JobStateChanged", made["t-submit"], "state", "COMPLETED"},
		{"JobStateChanged", made["t-submit-long"], "state", "CANCELLED"},
		{"CustomJobStateChanged", made["t-cj"], "state", "JOB_STATE_SUCCEEDED"},
		{"CustomJobStateChanged", made["t-cj-long"], "state", "JOB_STATE_CANCELLED"},
		{"HyperparameterTuningJobStateChanged", made["t-study"], "state", "JOB_STATE_CANCELLED"},
		{"HyperparameterTuningJobStateChanged", made["t-study-run"], "state", "JOB_STATE_SUCCEEDED"},
		{"TrialFinished", "", "tuningJob", made["t-study-run"]},
		{"ModelVersionRegistered", "", "displayName", "from-kafka"},
		{"NodeHealthChanged", nodes.GetNodes()[0].GetName(), "hostname", host},
	}
	missing := func() []want {
		mu.Lock()
		defer mu.Unlock()
		var out []want
		for _, w := range wants {
			found := false
			for _, ev := range events {
				if ev.headers["ce_type"] == "loom.public.v1."+w.typ && (w.subject == "" || ev.headers["ce_subject"] == w.subject) &&
					fmt.Sprint(ev.data[w.field]) == w.value && ev.headers["ce_loomproject"] == "default" && ev.key == "default" {
					found = true
					break
				}
			}
			if !found {
				out = append(out, w)
			}
		}
		return out
	}
	defer func() {
		if t.Failed() {
			t.Logf("public events not seen: %v", missing())
		}
	}()
	testkit.WaitFor(t, 3*time.Minute, "every public event the messages caused", func() (bool, error) {
		return len(missing()) == 0, nil
	})
	// A model version's event names the version the upload made; the
	// trial finished with the metric it reported.
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range events {
		if ev.headers["ce_type"] == "loom.public.v1.TrialFinished" && ev.data["tuningJob"] == made["t-study-run"] &&
			(ev.data["state"] != "SUCCEEDED" || !strings.Contains(fmt.Sprint(ev.data["finalMeasurement"]), "val_loss")) {
			t.Errorf("TrialFinished %v, want SUCCEEDED with its val_loss", ev.data)
		}
		if ev.headers["ce_type"] == "loom.public.v1.ModelVersionRegistered" &&
			(ev.data["model"] != "projects/default/models/ingress-model" || ev.data["artifactUri"] != "file://"+art ||
				ev.headers["ce_subject"] != ev.data["version"] || !strings.HasPrefix(ev.headers["ce_subject"], "projects/default/models/ingress-model/versions/")) {
			t.Errorf("ModelVersionRegistered %v (subject %q), want model projects/default/models/ingress-model with artifacts file://%s",
				ev.data, ev.headers["ce_subject"], art)
		}
	}
}
