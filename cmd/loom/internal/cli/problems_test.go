package cli

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFieldListKeepsAReasonWhole: an InvalidArgument lists its fields'
// problems joined by "; " (libs/errs), and a reason may hold "; " itself.
// A tester's CustomJob with a negative scheduling.timeout was told
//
//	job_spec.scheduling.timeout: must be a duration of 0 to a century (e.g. "3600s"
//	at most 876000h0m0s)
//
// the reason cut in two as if "at most ..." were another field's problem.
func TestFieldListKeepsAReasonWhole(t *testing.T) {
	t.Parallel()
	msg := `job_spec.scheduling.timeout: must be a duration of 0 to a century (e.g. "3600s"; at most 876000h0m0s); ` +
		`job_spec.worker_pool_specs[1].replica_count: at most 64 replicas per pool, got 300; ` +
		`orchestrator.slurm.partitions[1].default: only one partition may be the default; partitions[0] ("a") already is; ` +
		`job.env[A=B]: bad; display_name: required`
	want := []string{
		`job_spec.scheduling.timeout: must be a duration of 0 to a century (e.g. "3600s"; at most 876000h0m0s)`,
		`job_spec.worker_pool_specs[1].replica_count: at most 64 replicas per pool, got 300`,
		`orchestrator.slurm.partitions[1].default: only one partition may be the default; partitions[0] ("a") already is`,
		`job.env[A=B]: bad`,
		`display_name: required`,
	}
	got := fieldList(msg)
	if lines := strings.Split(got, "\n"); len(lines) != len(want) {
		t.Fatalf("fieldList gave %d lines, want %d:\n%s", len(lines), len(want), got)
	} else {
		for i, l := range lines {
			if l != "  "+want[i] {
				t.Errorf("line %d = %q, want %q", i, l, "  "+want[i])
			}
		}
	}
	// rewriteProblems (--flag names) sees each problem whole too.
	var seen []string
	_ = rewriteProblems(status.Error(codes.InvalidArgument, msg), func(p string) string { seen = append(seen, p); return p })
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("rewriteProblems saw %q", seen)
	}
	// Problems named by their flags (flagNames) stay apart.
	flagged := flagNames(status.Error(codes.InvalidArgument, "job.node_count: at most 64; got 65; job.env[A=B]: bad; job.partition: x"),
		map[string]string{"job.node_count": "--nodes", "job.env": "--env"})
	if got, want := fieldList(status.Convert(flagged).Message()), "  --nodes: at most 64; got 65\n  --env A=B: bad\n  job.partition: x"; got != want {
		t.Errorf("flags: %q, want %q", got, want)
	}
	// Text that is not field problems is left as one line.
	if got := fieldList("no fields here; nor here"); got != "  no fields here; nor here" {
		t.Errorf("plain text: %q", got)
	}
}

// TestRequestFieldsNamesFieldsAsTheFileDoes: the CLI names a create's
// fields as the file writes them (study_spec..., not
// hyperparameter_tuning_job.study_spec...), in a reason that names another
// field too: a tester's duplicate parameter id was told
// "study_spec.parameters[3].parameter_id: learning_rate is also
// hyperparameter_tuning_job.study_spec.parameters[0]".
func TestRequestFieldsNamesFieldsAsTheFileDoes(t *testing.T) {
	t.Parallel()
	err := status.Error(codes.InvalidArgument, "hyperparameter_tuning_job.study_spec.parameters[3].parameter_id: learning_rate is also "+
		"hyperparameter_tuning_job.study_spec.parameters[0]; hyperparameter_tuning_job.max_trial_count: must be at least 1, got -1 "+
		"(e.g. \"3600s\"; at most 2)")
	got := status.Convert(requestFields(err, "hyperparameter_tuning_job")).Message()
	want := "study_spec.parameters[3].parameter_id: learning_rate is also study_spec.parameters[0]; " +
		"max_trial_count: must be at least 1, got -1 (e.g. \"3600s\"; at most 2)"
	if got != want {
		t.Errorf("requestFields:\n got %q\nwant %q", got, want)
	}
}
