package slurmbackend

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/slurmmap"
	"github.com/loom-ml/loom/libs/slurmrest"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// changedFields names the fields of the job that differ between a and b,
// as proto.Equal sees each one.
func changedFields(a, b *loomv1.Job) []string {
	var out []string
	fds := a.ProtoReflect().Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		x, y := &loomv1.Job{}, &loomv1.Job{}
		if a.ProtoReflect().Has(fd) {
			x.ProtoReflect().Set(fd, a.ProtoReflect().Get(fd))
		}
		if b.ProtoReflect().Has(fd) {
			y.ProtoReflect().Set(fd, b.ProtoReflect().Get(fd))
		}
		if !proto.Equal(x, y) {
			out = append(out, string(fd.Name()))
		}
	}
	return out
}

// TestObserveReportsChange: for each field observe sets, a poll that
// changes it is reported (and changes only it), and a poll that changes
// nothing is not, so the poll writes and announces exactly the jobs whose
// GetJob changed. observe compares field by field rather than cloning the
// job; the oracle here is the clone and proto.Equal it replaced.
func TestObserveReportsChange(t *testing.T) {
	t.Parallel()
	running := slurmrest.Job{State: "RUNNING", StateReason: "None", Nodes: "node[1-2]", BatchHost: "node1",
		StartTime: 1700000000, TimeLimitMinutes: 2, Partition: "debug"}
	done := running
	done.State, done.EndTime = "COMPLETED", 1700000100
	with := func(sj slurmrest.Job, f func(*slurmrest.Job)) slurmrest.Job {
		f(&sj)
		return sj
	}
	cases := []struct {
		name     string
		from, to slurmrest.Job
		// old makes the settled record one written before a field was
		// kept (or by another path).
		old  func(*loomv1.Job)
		want []string // the fields the second poll changes; none: no change
	}{
		{name: "no change running", from: running, to: running},
		{name: "no change done", from: done, to: done},
		{name: "state", from: running, to: with(running, func(s *slurmrest.Job) { s.State = "COMPLETING" }), want: []string{"state"}},
		{name: "state reason", from: running, to: with(running, func(s *slurmrest.Job) { s.StateReason = "Prolog" }), want: []string{"state_reason"}},
		{name: "unknown Slurm state keeps the state", from: running, to: with(running, func(s *slurmrest.Job) { s.State = "SUSPENDED" }),
			want: []string{"state_reason"}},
		{name: "nodes", from: running, to: with(running, func(s *slurmrest.Job) { s.Nodes = "node[1-3]" }), want: []string{"nodes"}},
		{name: "nodes that do not expand", from: running, to: with(running, func(s *slurmrest.Job) { s.Nodes = "node[1-" }), want: []string{"nodes"}},
		{name: "nodes the same list written otherwise", from: running, to: with(running, func(s *slurmrest.Job) { s.Nodes = "node1,node2" })},
		{name: "nodes no longer listed are kept", from: running, to: with(running, func(s *slurmrest.Job) { s.Nodes = "" })},
		{name: "batch host", from: running, to: with(running, func(s *slurmrest.Job) { s.BatchHost = "node2" }), want: []string{"batch_host"}},
		{name: "batch host gone", from: running, to: with(running, func(s *slurmrest.Job) { s.BatchHost = "" }), want: []string{"batch_host"}},
		{name: "start time", from: running, to: with(running, func(s *slurmrest.Job) { s.StartTime++ }), want: []string{"start_time"}},
		{name: "start time first known", from: with(running, func(s *slurmrest.Job) { s.StartTime = 0 }), to: running, want: []string{"start_time"}},
		{name: "start time unknown again is kept", from: running, to: with(running, func(s *slurmrest.Job) { s.StartTime = 0 })},
		{name: "start time of a pending job is not taken", from: with(running, func(s *slurmrest.Job) { s.State, s.StartTime = "PENDING", 0 }),
			to: with(running, func(s *slurmrest.Job) { s.State = "PENDING" })},
		{name: "end time", from: done, to: with(done, func(s *slurmrest.Job) { s.EndTime++ }), want: []string{"end_time"}},
		{name: "end time unknown", from: done, to: with(done, func(s *slurmrest.Job) { s.EndTime = 0 }), want: []string{"end_time"}},
		{name: "end time first known", from: with(done, func(s *slurmrest.Job) { s.EndTime = 0 }), to: done, want: []string{"end_time"}},
		{name: "end time of a running job is not taken", from: running, to: with(running, func(s *slurmrest.Job) { s.EndTime = 1700000100 })},
		{name: "end", from: running, to: with(done, func(s *slurmrest.Job) { s.ExitCode = 3 << 8 }),
			want: []string{"state", "exit_code", "end_time", "exit_signal"}},
		{name: "exit code", from: done, to: with(done, func(s *slurmrest.Job) { s.ExitCode = 3 << 8 }), want: []string{"exit_code"}},
		{name: "exit signal alone", from: with(done, func(s *slurmrest.Job) { s.ExitCode = 143 << 8 }),
			to: with(done, func(s *slurmrest.Job) { s.ExitCode = 15 }), want: []string{"exit_signal"}},
		{name: "exit signal first known", from: done, to: done, old: func(j *loomv1.Job) { j.ExitSignal = nil }, want: []string{"exit_signal"}},
		{name: "time limit taken when the job has none", from: running, to: running, old: func(j *loomv1.Job) { j.TimeLimitSeconds = 0 },
			want: []string{"time_limit_seconds"}},
		{name: "time limit of the job's own is kept", from: running, to: with(running, func(s *slurmrest.Job) { s.TimeLimitMinutes = 5 })},
		{name: "partition taken when the job has none", from: running, to: running, old: func(j *loomv1.Job) { j.Partition = "" },
			want: []string{"partition"}},
		{name: "partition of the job's own is kept", from: running, to: with(running, func(s *slurmrest.Job) { s.Partition = "batch" })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := job("1")
			if !observe(j, tc.from, true) {
				t.Fatal("the first poll of a new job changed nothing")
			}
			// poll runs observe and checks its verdict against the
			// clone-and-compare it replaced.
			poll := func(what string, sj slurmrest.Job) []string {
				t.Helper()
				before := proto.Clone(j).(*loomv1.Job)
				told := observe(j, sj, false)
				if d := changedFields(before, j); len(d) > 0 {
					t.Errorf("%s: observe without apply changed %v", what, d)
				}
				got := observe(j, sj, true)
				diff := changedFields(before, j)
				if got != (len(diff) > 0) {
					t.Errorf("%s: observe reported %v, changed %v", what, got, diff)
				}
				if told != got {
					t.Errorf("%s: observe without apply told %v, with apply %v", what, told, got)
				}
				return diff
			}
			if diff := poll("the same poll again", tc.from); len(diff) > 0 {
				t.Errorf("the same poll again changed %v", diff)
			}
			if tc.old != nil {
				tc.old(j)
			}
			want := slices.Sorted(slices.Values(tc.want))
			if diff := slices.Sorted(slices.Values(poll("the next poll", tc.to))); !slices.Equal(diff, want) {
				t.Errorf("the next poll changed %v, want %v", diff, want)
			}
			if diff := poll("the next poll again", tc.to); len(diff) > 0 {
				t.Errorf("the next poll again changed %v", diff)
			}
		})
	}
}

// TestUpdateUnmapped: hold, uhold and release alone are carried out; any
// other action, and any field to change beside them (every field of
// UpdateJob beyond whom and what, found by reflection so that one added
// later is covered), is refused by name.
func TestUpdateUnmapped(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"hold", "uhold", "release"} {
		if got := slurmmap.Update(&eventsv1.UpdateJob{Job: "projects/p/jobs/1", Cluster: "c", Action: a, User: "ana", Admin: true}); got != "" {
			t.Errorf("%s: refused %q", a, got)
		}
	}
	if got := slurmmap.Update(&eventsv1.UpdateJob{Action: "requeue"}); got == "" {
		t.Error("requeue: carried out")
	}
	fields := (&eventsv1.UpdateJob{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch fd.Name() {
		case "job", "cluster", "action", "user", "admin":
			continue
		}
		p := &eventsv1.UpdateJob{Action: "hold"}
		m := p.ProtoReflect()
		switch {
		case fd.Message() != nil:
			m.Set(fd, m.NewField(fd)) // present, though empty
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("x"))
		case fd.Kind() == protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case fd.Kind() == protoreflect.Int32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(1))
		case fd.Kind() == protoreflect.Int64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(1))
		default:
			t.Fatalf("field %s: kind %v not covered by this test", fd.Name(), fd.Kind())
		}
		if got := slurmmap.Update(p); got == "" {
			t.Errorf("hold with %s set: carried out, want refused", fd.Name())
		}
	}
}

// TestSlurmDependencyChecksEveryJob: a dependency waits for a job not in
// Slurm yet only once every job it names is checked. It returned at the
// first such job, so a job also naming one that did not exist yet (a
// typo, a guessed id, its own) was held back instead of refused, and the
// poll then took the id for whatever job got it: one waiting for this job
// left both pending, never sent.
func TestSlurmDependencyChecksEveryJob(t *testing.T) {
	t.Parallel()
	recs := map[string]*record{
		"projects/p/jobs/7": {job: &loomv1.Job{Name: "projects/p/jobs/7", State: loomv1.JobState_RUNNING}, slurmID: "101"},
		"projects/p/jobs/9": {job: &loomv1.Job{Name: "projects/p/jobs/9", State: loomv1.JobState_PENDING}},
	}
	of := func(name string) *record { return recs[name] }
	for _, c := range []struct{ dep, wait, problem string }{
		{"afterok:9:11", "", "--dependency names job 11, which"},
		{"afterok:9,afterany:11", "", "--dependency names job 11, which"},
		{"afterok:9?afterok:10", "", "--dependency names job 10, which"}, // its own id
		{"afterok:9:7_2", "", "dependencies on array tasks"},
		{"afterok:9:7", "9", ""},
		{"afterany:7,afterok:9", "9", ""},
	} {
		j := &loomv1.Job{Name: "projects/p/jobs/10", Dependency: c.dep}
		dep, wait, problem := slurmDependency(j, of)
		if wait != c.wait || !strings.HasPrefix(problem, c.problem) || (c.problem == "") != (problem == "") || dep != "" {
			t.Errorf("--dependency=%s: dep %q, wait %q, problem %q; want wait %q, problem %q...", c.dep, dep, wait, problem, c.wait, c.problem)
		}
	}
}
