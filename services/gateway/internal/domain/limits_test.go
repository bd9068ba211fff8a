package domain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// wantRefused checks that err is an InvalidArgument whose message has each
// of wants (the field and pieces of its reason).
func wantRefused(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want %q", wants)
	}
	fields(t, err) // an *errs.InvalidError
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %.300q does not have %q", err, want)
		}
	}
}

func TestSubmitJobFieldLimits(t *testing.T) {
	t.Parallel()
	hosts := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("h%061d", i) // 62 characters, a valid hostname
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		mutate func(*loomv1.Job)
		want   string
	}{
		{"script too large", func(j *loomv1.Job) { j.Command, j.Script = nil, strings.Repeat("x", MaxScriptBytes+1) },
			fmt.Sprintf("job.script: %d bytes, longer than the limit of %d", MaxScriptBytes+1, MaxScriptBytes)},
		{"NUL in a script", func(j *loomv1.Job) { j.Command, j.Script = nil, "#!/bin/sh\necho \x00hi" }, "job.script: holds a NUL byte at offset 15"},
		{"NUL in an argument", func(j *loomv1.Job) { j.Command = []string{"python", "a\x00b"} }, "job.command[1]: holds a NUL byte at offset 1"},
		{"too many arguments", func(j *loomv1.Job) { j.Command = make([]string, MaxArgs+1); j.Command[0] = "x" },
			fmt.Sprintf("job.command: %d arguments, more than the limit of %d", MaxArgs+1, MaxArgs)},
		{"arguments too large", func(j *loomv1.Job) { j.Command = []string{"x", strings.Repeat("a", MaxArgvBytes)} },
			fmt.Sprintf("job.command: %d bytes of arguments, more than the limit of %d", MaxArgvBytes+1, MaxArgvBytes)},
		{"NUL in an env value", func(j *loomv1.Job) { j.Env = map[string]string{"LR": "0.1\x00"} }, "job.env[LR]: value holds a NUL byte"},
		{"env too large", func(j *loomv1.Job) { j.Env = map[string]string{"BIG": strings.Repeat("v", MaxEnvBytes)} },
			fmt.Sprintf("job.env: %d bytes of variables, more than the limit of %d", MaxEnvBytes+5, MaxEnvBytes)},
		{"too many env vars", func(j *loomv1.Job) {
			j.Env = map[string]string{}
			for i := 0; i <= MaxEnvVars; i++ {
				j.Env[fmt.Sprintf("V%d", i)] = ""
			}
		}, fmt.Sprintf("job.env: %d variables, more than the limit of %d", MaxEnvVars+1, MaxEnvVars)},
		{"long display name", func(j *loomv1.Job) { j.DisplayName = strings.Repeat("n", MaxNameBytes+1) },
			fmt.Sprintf("job.display_name: %d bytes, longer than the limit of %d", MaxNameBytes+1, MaxNameBytes)},
		{"ANSI escape in the name", func(j *loomv1.Job) { j.DisplayName = "ok\x1b[2K\r  99 fake" }, `job.display_name: "ok\x1b[2K\r  99 fake" holds the control character U+001B`},
		{"newline in the user", func(j *loomv1.Job) { j.User = "ana\nroot" }, "job.user: \"ana\\nroot\" holds the control character U+000A"},
		{"bidi override in the account", func(j *loomv1.Job) { j.Account = "a\u202eb" }, "job.account: \"a\\u202eb\" holds the control character U+202E"},
		{"control in the partition", func(j *loomv1.Job) { j.Partition = "train\x07" }, "job.partition: \"train\\a\" holds the control character U+0007"},
		{"control in the qos", func(j *loomv1.Job) { j.Qos = "\u009bnormal" }, "job.qos: \"\\u009bnormal\" holds the control character U+009B"},
		{"long work dir", func(j *loomv1.Job) { j.WorkDir = "/" + strings.Repeat("d", MaxPathBytes) },
			fmt.Sprintf("job.work_dir: %d bytes, longer than the limit of %d", MaxPathBytes+1, MaxPathBytes)},
		{"long script path", func(j *loomv1.Job) { j.ScriptPath = "/" + strings.Repeat("s", MaxPathBytes) },
			fmt.Sprintf("job.script_path: %d bytes, longer than the limit of %d", MaxPathBytes+1, MaxPathBytes)},
		{"control in the output pattern", func(j *loomv1.Job) { j.OutputPattern = "out\x1b.txt" }, "job.output_pattern: \"out\\x1b.txt\" holds the control character U+001B"},
		{"output pattern of many names", func(j *loomv1.Job) { j.OutputPattern = strings.Repeat("%x", 2048) },
			fmt.Sprintf("job.output_pattern: may expand to %d bytes (%%x, %%u and %%N each up to %d, ids up to 20 digits), more than the limit of %d", 2048*MaxNameBytes, MaxNameBytes, MaxPathBytes)},
		{"error pattern of many names", func(j *loomv1.Job) { j.ErrorPattern = "/scratch/" + strings.Repeat("%u/%N/", 10) },
			fmt.Sprintf("job.error_pattern: may expand to %d bytes", 9+20*(MaxNameBytes+1))},
		{"long dependency", func(j *loomv1.Job) { j.Dependency = "afterok:" + strings.Repeat("1:", MaxSpecBytes/2) + "1" },
			fmt.Sprintf("job.dependency: %d bytes, longer than the limit of %d", 8+MaxSpecBytes+1, MaxSpecBytes)},
		{"dependency on too many jobs", func(j *loomv1.Job) {
			var b strings.Builder
			b.WriteString("afterok")
			for i := 1; i <= slurmspec.MaxDependencyJobs+1; i++ {
				fmt.Fprintf(&b, ":%d", i)
			}
			j.Dependency = b.String()
		}, fmt.Sprintf(`job.dependency: "afterok:1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21:22"… (3905 bytes): more than %d job references`, slurmspec.MaxDependencyJobs)},
		{"array too large in all", func(j *loomv1.Job) { j.Command, j.Script, j.Array = nil, strings.Repeat("x", 100<<10), "0-1000" },
			"job.array: 1001 tasks of "},
		{"too many hosts", func(j *loomv1.Job) { j.Nodelist = hosts(MaxHosts + 1) }, fmt.Sprintf("job.nodelist: %d hosts, more than the limit of %d", MaxHosts+1, MaxHosts)},
		{"begin past 2262", func(j *loomv1.Job) { j.BeginTime = timestamppb.New(time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)) },
			"job.begin_time: 2263-01-01T00:00:00Z is after 2200-01-01T00:00:00Z, the latest begin time"},
		{"begin out of range", func(j *loomv1.Job) { j.BeginTime = &timestamppb.Timestamp{Seconds: 1 << 62} }, "job.begin_time: "},
		{"every field within bounds, too large together", func(j *loomv1.Job) {
			j.Command, j.Script = nil, strings.Repeat("x", MaxScriptBytes)
			j.Env = map[string]string{"BIG": strings.Repeat("v", MaxEnvBytes-10)}
			// No node count: -N2 with 4,096 hosts is refused first
			// (slurmspec.FitNodes), a count of its own.
			j.Nodelist, j.Exclude, j.NodeCount = hosts(MaxHosts), hosts(MaxHosts), 0
		}, fmt.Sprintf("job: is %d bytes encoded, more than the limit of %d", 0, MaxCommandBytes)}, // the size: see below
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := goodJob()
			tc.mutate(req.Job)
			err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize)
			if strings.HasPrefix(tc.want, "job: is 0 bytes") {
				// The size depends on the encoding: check the field and the limit.
				wantRefused(t, err, "job: is ", fmt.Sprintf("bytes encoded, more than the limit of %d for one request", MaxCommandBytes))
				return
			}
			wantRefused(t, err, tc.want)
		})
	}
	t.Run("array within its bound", func(t *testing.T) {
		t.Parallel()
		req := goodJob()
		req.Job.Command, req.Job.Script, req.Job.Array = nil, strings.Repeat("x", 32<<10), "0-1000"
		if err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize); err != nil {
			t.Fatalf("1001 tasks of a 32 KiB script: %v", err)
		}
	})
	t.Run("request id", func(t *testing.T) {
		t.Parallel()
		req := goodJob()
		req.RequestId = strings.Repeat("r", MaxRequestIDBytes+1)
		wantRefused(t, ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize), fmt.Sprintf("request_id: %d bytes, longer than the limit of %d", MaxRequestIDBytes+1, MaxRequestIDBytes))
	})
}

// The largest job every bound lets through is a command that fits a
// record with room to spare: what the gateway accepts can be published.
func TestLargestAcceptedJobFits(t *testing.T) {
	t.Parallel()
	req := goodJob()
	j := req.Job
	j.Command, j.Script = nil, strings.Repeat("x", MaxScriptBytes)
	j.Env = map[string]string{"BIG": strings.Repeat("v", MaxEnvBytes-len("BIG")-2)}
	j.Export = strings.Repeat("e", MaxSpecBytes)
	j.DisplayName, j.User, j.Account, j.Qos = strings.Repeat("n", MaxNameBytes), strings.Repeat("u", MaxNameBytes), strings.Repeat("a", MaxNameBytes), strings.Repeat("q", MaxNameBytes)
	j.WorkDir, j.SubmitDir = "/"+strings.Repeat("w", MaxPathBytes-1), "/"+strings.Repeat("s", MaxPathBytes-1)
	j.ScriptPath = "/" + strings.Repeat("p", MaxPathBytes-1)
	j.OutputPattern, j.ErrorPattern = strings.Repeat("o", MaxPathBytes), strings.Repeat("e", MaxPathBytes)
	j.BeginTime = timestamppb.New(MaxBeginTime)
	if err := ValidateSubmitJob(req, existing(), slurmspec.DefaultMaxArraySize); err != nil {
		t.Fatalf("a job at the bounds refused: %v", err)
	}
	cmd := &eventsv1.SubmitJob{Job: AcceptJob(req, existing(), 1<<62, time.Now())}
	if n := proto.Size(cmd); n > MaxCommandBytes || n < MaxScriptBytes+MaxEnvBytes {
		t.Fatalf("command is %d bytes, want between %d and %d", n, MaxScriptBytes+MaxEnvBytes, MaxCommandBytes)
	}
}

func TestOtherRequestLimits(t *testing.T) {
	t.Parallel()
	t.Run("drain reason", func(t *testing.T) {
		t.Parallel()
		req := &loomv1.UpdateSlurmNodeRequest{Cluster: "projects/default/clusters/c1", Hostname: "gpu-0001", State: "DRAIN"}
		req.Reason = "bad gpu\x1b[1A\x1b[2Kgpu-0002 idle"
		_, err := ValidateUpdateSlurmNode(req)
		wantRefused(t, err, "reason: \"bad gpu\\x1b[1A\\x1b[2Kgpu-0002 idle\" holds the control character U+001B")
		req.Reason = strings.Repeat("r", MaxReasonBytes+1)
		_, err = ValidateUpdateSlurmNode(req)
		wantRefused(t, err, fmt.Sprintf("reason: %d bytes, longer than the limit of %d", MaxReasonBytes+1, MaxReasonBytes))
		req.Reason, req.User = "bad gpu", "root\r"
		_, err = ValidateUpdateSlurmNode(req)
		wantRefused(t, err, "user: \"root\\r\" holds the control character U+000D")
	})
	t.Run("update and cancel callers", func(t *testing.T) {
		t.Parallel()
		_, err := ValidateUpdateJob(&loomv1.UpdateJobRequest{Action: "hold", User: "ana\x1b"})
		wantRefused(t, err, "user: ")
		_, err = ValidateUpdateJob(&loomv1.UpdateJobRequest{Action: "update", Partition: strings.Repeat("p", MaxNameBytes+1)})
		wantRefused(t, err, "partition: 257 bytes, longer than the limit of 256")
		wantRefused(t, CheckUser("ana\x00"), "user: ")
		if err := CheckUser("ana"); err != nil {
			t.Errorf("CheckUser(ana): %v", err)
		}
		wantRefused(t, CheckRequestID("a\nb"), "request_id: ")
	})
	t.Run("job step", func(t *testing.T) {
		t.Parallel()
		step := func() *loomv1.CreateJobStepRequest {
			return &loomv1.CreateJobStepRequest{Parent: "projects/default/jobs/7", Command: []string{"hostname"}}
		}
		req := step()
		req.Command = append(req.Command, "\x00")
		wantRefused(t, ValidateCreateJobStep(req), "command[1]: holds a NUL byte")
		req = step()
		req.Env = map[string]string{"A": "\x00"}
		wantRefused(t, ValidateCreateJobStep(req), "env[A]: value holds a NUL byte")
		req = step()
		req.Env = map[string]string{"A": strings.Repeat("v", MaxEnvBytes)}
		wantRefused(t, ValidateCreateJobStep(req), fmt.Sprintf("more than the limit of %d", MaxEnvBytes))
		req = step()
		req.Command = []string{"x", strings.Repeat("a", MaxArgvBytes)}
		wantRefused(t, ValidateCreateJobStep(req), fmt.Sprintf("command: %d bytes of arguments", MaxArgvBytes+1))
		// srun -w, -x, -r: hostnames, bounded.
		req = step()
		req.Nodelist, req.Exclude, req.Relative = []string{"gpu-0001"}, []string{"gpu-0002"}, 1
		if err := ValidateCreateJobStep(req); err != nil {
			t.Errorf("-w -x -r: %v", err)
		}
		req.Nodelist = []string{"gpu-0001", "bad host\x1b[2K"}
		wantRefused(t, ValidateCreateJobStep(req), "nodelist[1]: ")
		req = step()
		req.Exclude = make([]string, MaxHosts+1)
		wantRefused(t, ValidateCreateJobStep(req), fmt.Sprintf("exclude: %d hosts, more than the limit of %d", MaxHosts+1, MaxHosts))
		req = step()
		req.Relative = -1
		wantRefused(t, ValidateCreateJobStep(req), "relative: must be 0..4095, got -1")
		// srun -m: Slurm's grammar, bounded; a good one passes.
		req = step()
		req.Distribution = "plane=0"
		wantRefused(t, ValidateCreateJobStep(req), `distribution: "plane=0": Invalid plane size or size not specified`)
		req.Distribution = "cyclic:" + strings.Repeat("x", 100)
		wantRefused(t, ValidateCreateJobStep(req), "distribution: ")
		req.Distribution = "cyclic:block,Pack"
		if err := ValidateCreateJobStep(req); err != nil {
			t.Errorf("-m cyclic:block,Pack: %v", err)
		}
		// The tasks that read srun's input: all, one rank of the step's.
		for in, want := range map[string]string{"x": `input: "x": want all`, "01": `input: "01"`, "-1": `input: "-1"`,
			"4": "input: task 4 is not a task of the step (0..3)", "4096": "(0..4095)"} {
			req = step()
			req.Input = in
			if in != "4096" {
				req.Ntasks = 4
			}
			wantRefused(t, ValidateCreateJobStep(req), want)
		}
		for _, bad := range []struct {
			mod  func(*loomv1.CreateJobStepRequest)
			want string
		}{
			{func(r *loomv1.CreateJobStepRequest) { r.Pty, r.Input = true, "all" }, `input: with pty only task 0 reads input, got "all"`},
			{func(r *loomv1.CreateJobStepRequest) { r.Pty, r.PtyRows = true, -1 }, "pty_rows: must be 0..10000, got -1"},
			{func(r *loomv1.CreateJobStepRequest) { r.Pty, r.PtyCols = true, 1<<20 }, "pty_cols: must be 0..10000, got 1048576"},
			{func(r *loomv1.CreateJobStepRequest) { r.GpusPerTask = -1 }, "gpus_per_task: must be 0..1024, got -1"},
			{func(r *loomv1.CreateJobStepRequest) { r.Gpus = -1 }, "gpus: must be 0..1048576, got -1"},
			{func(r *loomv1.CreateJobStepRequest) { r.Gpus = 1<<20 + 1 }, "gpus: must be 0..1048576, got 1048577"},
			{func(r *loomv1.CreateJobStepRequest) { r.GpusPerNode = -1 }, "gpus_per_node: must be 0..1048576, got -1"},
			{func(r *loomv1.CreateJobStepRequest) { r.GpusPerNode = 1<<20 + 1 }, "gpus_per_node: must be 0..1048576, got 1048577"},
			{func(r *loomv1.CreateJobStepRequest) { r.CpusPerGpu = -2 }, "cpus_per_gpu: must be 0..4096, got -2"},
			{func(r *loomv1.CreateJobStepRequest) { r.CpusPerGpu = 4097 }, "cpus_per_gpu: must be 0..4096, got 4097"},
		} {
			req = step()
			bad.mod(req)
			wantRefused(t, ValidateCreateJobStep(req), bad.want)
		}
		for _, in := range []string{"", "all", "3"} {
			req = step()
			req.Input, req.Ntasks = in, 4
			if err := ValidateCreateJobStep(req); err != nil {
				t.Errorf("input %q: %v", in, err)
			}
		}
		// Counts whose products the scheduler takes in int32.
		req = step()
		req.NtasksPerNode = 1 << 30
		wantRefused(t, ValidateCreateJobStep(req), "ntasks_per_node: must be 0..4096, got 1073741824")
		req = step()
		req.CpusPerTask = 1 << 30
		wantRefused(t, ValidateCreateJobStep(req), "cpus_per_task: must be 0..4096, got 1073741824")
		req = step()
		req.WorkDir = "run/here"
		wantRefused(t, ValidateCreateJobStep(req), `work_dir: "run/here" must be an absolute path`)
	})
	t.Run("list filters", func(t *testing.T) {
		t.Parallel()
		err := listJobsErr(&loomv1.ListJobsRequest{Users: []string{"ana\x1b"}})
		wantRefused(t, err, "users[0]: ")
		err = listJobsErr(&loomv1.ListJobsRequest{Names: make([]string, MaxFilterValues+1)})
		wantRefused(t, err, fmt.Sprintf("names: %d values, more than the limit of %d", MaxFilterValues+1, MaxFilterValues))
	})
	t.Run("cluster text and size", func(t *testing.T) {
		t.Parallel()
		req := goodCluster()
		req.Cluster.DisplayName = "c\x1b[31m1"
		_, err := AcceptCluster(req)
		wantRefused(t, err, "cluster.display_name: ")
		req = goodCluster()
		req.Cluster.Description = "line one\nline\ttwo"
		if _, err := AcceptCluster(req); err != nil {
			t.Errorf("a description with newlines and tabs refused: %v", err)
		}
		req.Cluster.Description = "x\x1b"
		_, err = AcceptCluster(req)
		wantRefused(t, err, "cluster.description: ")
		// Ten thousand labels: the spec's count limit names the field first.
		req = goodCluster()
		req.Cluster.Labels = map[string]string{}
		for i := 0; len(req.Cluster.Labels) < MaxCommandBytes/50; i++ {
			req.Cluster.Labels[fmt.Sprintf("k%d", i)] = strings.Repeat("v", 63)
		}
		_, err = AcceptCluster(req)
		wantRefused(t, err, "cluster.labels: at most 64 labels")
		// The whole command's size is checked beside the fields' limits.
		var v errs.Validator
		checkCommandSize(&v, "cluster", &loomv1.Cluster{Description: strings.Repeat("d", MaxCommandBytes)})
		wantRefused(t, v.Err(), "cluster: is ", fmt.Sprintf("more than the limit of %d", MaxCommandBytes))
	})
	t.Run("reservation zone", func(t *testing.T) {
		t.Parallel()
		_, err := AcceptReservation(&loomv1.CreateReservationRequest{Parent: "projects/default", ReservationId: "r1",
			Reservation: &loomv1.Reservation{Zone: "us\x1b", MachineType: "a3-highgpu-8g", Count: 1}})
		wantRefused(t, err, "reservation.zone: ")
	})
	t.Run("error messages cut what they echo", func(t *testing.T) {
		t.Parallel()
		_, err := resname.ParseCluster(strings.Repeat("x", 1<<20))
		if err == nil || len(err.Error()) > 200 {
			t.Fatalf("error is %d bytes, want a short one", len(err.Error()))
		}
	})
}

// update_mask=status names nothing an update changes: refused, not
// answered with a done operation.
func TestUpdateMaskOfOutputOnlyFields(t *testing.T) {
	t.Parallel()
	for _, paths := range [][]string{{"status"}, {"status.state"}, {"name", "update_time"}} {
		req := &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "projects/default/clusters/c1"},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}}
		wantRefused(t, CheckUpdateRequest(req), "update_mask: names only output-only fields ("+strings.Join(paths, ", ")+")")
	}
	// Output-only paths beside updatable ones stay allowed (a REST PATCH
	// of a body read from GET names them all).
	req := &loomv1.UpdateClusterRequest{Cluster: &loomv1.Cluster{Name: "projects/default/clusters/c1"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name", "status", "labels"}}}
	if err := CheckUpdateRequest(req); err != nil {
		t.Fatalf("mask with labels refused: %v", err)
	}
}

// listJobsErr runs ValidateListJobs alone.
func listJobsErr(req *loomv1.ListJobsRequest) error {
	var v errs.Validator
	ValidateListJobs(&v, req)
	return v.Err()
}
