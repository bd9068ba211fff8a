package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/testkit"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// TestCustomJobOutputOutlivesItsCluster: a CustomJob without a
// base_output_directory (the common case), run on its own ephemeral
// cluster on the local stack, writes its output to the training service's
// log directory (loom up's <data dir>/training/logs), so that `loom jobs
// logs` shows it after the job ended and its cluster, with its shared
// directory, was deleted. Before, it answered that the output file "no
// longer exists". The owner's directory there is made by the service, the
// owner's alone (0700), under directories only the service's user can
// change (0755): no other user could have made it first to read or
// redirect the output.
func TestCustomJobOutputOutlivesItsCluster(t *testing.T) {
	t.Parallel()
	s := startTrainingStack(t, 4*time.Minute)
	file := writeFile(t, "job.json", `{
  "displayName": "no-base-output",
  "jobSpec": {
    "workerPoolSpecs": [{
      "machineSpec": {"machineType": "n2-standard-8"},
      "replicaCount": 1,
      "containerSpec": {"command": ["/bin/sh", "-c", "echo out-of-m4-job; echo err-of-m4-job >&2"]}
    }]
  }
}`)
	res := s.must("jobs", "custom", "create", "-f", file, "--wait", "-o", "json")
	var j trainingv1.CustomJob
	if err := protojson.Unmarshal([]byte(res), &j); err != nil {
		t.Fatalf("create --wait -o json: %v\n%s", err, res)
	}
	if j.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("custom job: %v", &j)
	}
	userDir := filepath.Join(s.st.DataDir, "training", "logs", "default", j.GetUser())
	if j.GetOutputDir() != userDir || j.GetOutputWarning() != "" {
		t.Errorf("output_dir %q (want %s), output_warning %q", j.GetOutputDir(), userDir, j.GetOutputWarning())
	}
	id := j.GetName()[strings.LastIndexByte(j.GetName(), '/')+1:]
	testkit.WaitFor(t, time.Minute, "cluster cj-"+id+" deleted", func() (bool, error) {
		_, _, code := s.loom("clusters", "get", "cj-"+id)
		return code != 0, nil
	})
	out, errOut, code := s.loom("jobs", "logs", id)
	if code != 0 || !strings.Contains(out, "out-of-m4-job") || !strings.Contains(out, "err-of-m4-job") {
		t.Fatalf("loom jobs logs %s after its cluster was deleted: exit %d\n%s%s", id, code, out, errOut)
	}

	owner, err := osuser.Lookup(j.GetUser())
	if err != nil {
		t.Fatal(err)
	}
	self := uint32(os.Geteuid())
	for _, c := range []struct {
		path string
		uid  uint32
		perm os.FileMode
	}{
		{filepath.Join(s.st.DataDir, "training", "logs"), self, 0o755},
		{filepath.Join(s.st.DataDir, "training", "logs", "default"), self, 0o755},
		{userDir, owner.UID, 0o700},
		{filepath.Join(userDir, "job-"+id+".out"), owner.UID, 0o600},
	} {
		fi, err := os.Lstat(c.path)
		if err != nil {
			t.Error(err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != c.uid || fi.Mode().Perm() != c.perm {
			t.Errorf("%s: uid %d mode %v, want uid %d mode %v", c.path, st.Uid, fi.Mode().Perm(), c.uid, c.perm)
		}
	}
}
