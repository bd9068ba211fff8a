package jobstore

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestArrayRecordsBeforeTemplates: records written before arrays had
// templates (each task whole, the array with its task list) still load.
func TestArrayRecordsBeforeTemplates(t *testing.T) {
	t.Parallel()
	old := []byte(`{"name":"projects/p/jobs/5","cluster":"projects/p/clusters/c","job_id":"5","indexes":[1,3],"tasks":["projects/p/jobs/5","projects/p/jobs/6"]}`)
	a, err := DecodeArray(old)
	if err != nil || a.Template != nil || !reflect.DeepEqual(a.Indexes, []int32{1, 3}) ||
		!reflect.DeepEqual(a.Tasks, []string{"projects/p/jobs/5", "projects/p/jobs/6"}) {
		t.Fatalf("old array record: %+v, %v", a, err)
	}
	task := &JobRecord{Job: &loomv1.Job{Name: "projects/p/jobs/6", JobId: "6", ArrayJobId: "5", ArrayTaskId: 3, Env: map[string]string{"A": "b"}}}
	b, err := EncodeJob(task, nil) // no template: written whole
	if err != nil {
		t.Fatal(err)
	}
	j, err := DecodeTask("projects/p/jobs/6", b, func(string) *loomv1.Job { return nil })
	if err != nil || !proto.Equal(j.Job, task.Job) {
		t.Fatalf("whole task record: %v, %v", j, err)
	}
	// A difference without its array's template is refused, not guessed.
	enc, _ := EncodeArray(&Array{Name: "projects/p/jobs/5", JobID: "5", Indexes: []int32{1, 3},
		Tasks: []string{"projects/p/jobs/5", "projects/p/jobs/6"}, Template: &loomv1.Job{Name: "projects/p/jobs/5", JobId: "5"}})
	if !strings.Contains(string(enc), `"index_spec":"1,3"`) || strings.Contains(string(enc), `"tasks"`) {
		t.Fatalf("array record %s: want its tasks as an index spec", enc)
	}
	delta, _ := json.Marshal(jobRecord{Delta: true, Job: mustMarshal(t, &loomv1.Job{ArrayJobId: "5", ArrayTaskId: 3})})
	if _, err := DecodeTask("projects/p/jobs/6", delta, func(string) *loomv1.Job { return nil }); err == nil ||
		!strings.Contains(err.Error(), "no template") {
		t.Fatalf("difference without a template: %v", err)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
