package slurmcli

import (
	"strings"
	"testing"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
)

// TestClusterListRefused: -M "all" is refused by name, exit 1, by every
// command that reads -M, and Slurm's list ("a,b") by those that take one
// cluster (scontrol, sprio, sshare), instead of being looked up as one
// cluster named "a,b" ("cluster projects/P/clusters/a,b: not found").
func TestClusterListRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range [][]string{
		{"squeue", "--clusters=all"}, {"sinfo", "-M", "all"}, {"sacct", "-M", "all"}, {"scancel", "-M", "all", "12"},
		{"scontrol", "-M", "all", "show", "job", "12"}, {"scontrol", "-M", "demo,other", "show", "job", "12"},
		{"sprio", "-M", "demo,other"}, {"sshare", "-M", "ALL"},
	} {
		code, out, errOut := run(t, fixture(), tc[0], Env{}, tc[1:]...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, tc[0]+": error: -M ") ||
			!strings.Contains(errOut, "takes one cluster with -M (a list or 'all' is not supported): run it once per cluster\n") && !strings.Contains(errOut, "takes a list of clusters with -M, not 'all'\n") {
			t.Errorf("%v: %d %q %q; want the list refused, exit 1", tc, code, out, errOut)
		}
	}
	// One cluster still works.
	if code, out, errOut := run(t, fixture(), "squeue", Env{}, "-M", "demo", "-h", "-o", "%i", "-j", "12"); code != 0 || out != "12\n" {
		t.Errorf("squeue -M demo: %d %q %q", code, out, errOut)
	}
}

// TestUnknownClusterSaysSo: a cluster the project does not have, named with
// -M (alone or in a list) or LOOM_CLUSTER, is an error naming it, exit 1 (as
// Slurm's "can't be reached now, or it is an invalid entry for --cluster"),
// never an empty table: sinfo and scontrol's partitions and nodes as
// squeue, sacct and scancel (which then cancels nothing). The gateway
// answers NotFound for its partitions and nodes, as for its jobs.
func TestUnknownClusterSaysSo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  Env
		args []string
	}{
		{Env{}, []string{"sinfo", "-M", "nope"}},
		{Env{}, []string{"sinfo", "-M", "demo,nope"}},
		{Env{}, []string{"sinfo", "-N", "-M", "nope"}},
		{Env{Cluster: "nope"}, []string{"sinfo"}},
		{Env{}, []string{"scontrol", "-M", "nope", "show", "partition"}},
		{Env{Cluster: "nope"}, []string{"scontrol", "show", "node"}},
		{Env{}, []string{"scontrol", "-M", "nope", "ping"}},
		{Env{Cluster: "nope"}, []string{"scontrol", "ping"}},
		{Env{}, []string{"squeue", "-M", "nope"}},
		{Env{Cluster: "nope"}, []string{"squeue"}},
		{Env{}, []string{"sacct", "-M", "nope"}},
		{Env{}, []string{"sacct", "-M", "demo,nope"}},
		{Env{Cluster: "nope"}, []string{"sacct"}},
		{Env{}, []string{"scancel", "-M", "nope", "12"}},
		{Env{}, []string{"scancel", "-M", "demo,nope", "12"}},
		{Env{Cluster: "nope"}, []string{"scancel", "12"}},
		// Every scontrol verb that acts on jobs, before it acts (Slurm
		// 22.05 refuses "-M nope hold 1" whatever the job, exit 1).
		{Env{}, []string{"scontrol", "-M", "nope", "hold", "12"}},
		{Env{}, []string{"scontrol", "-M", "nope", "uhold", "99"}},
		{Env{}, []string{"scontrol", "-M", "nope", "release", "14"}},
		{Env{}, []string{"scontrol", "-M", "nope", "requeue", "12"}},
		{Env{}, []string{"scontrol", "-M", "nope", "requeuehold", "12"}},
		{Env{}, []string{"scontrol", "-M", "nope", "update", "JobId=12", "TimeLimit=5"}},
		{Env{}, []string{"scontrol", "-M", "nope", "update", "JobId=12", "TimeLimit=+5"}},
		{Env{Cluster: "nope"}, []string{"scontrol", "hold", "12"}},
	} {
		f := fixture()
		code, out, errOut := run(t, f, tc.args[0], tc.env, tc.args[1:]...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, tc.args[0]+": error: ") ||
			!strings.Contains(errOut, "projects/default/clusters/nope") || !strings.Contains(errOut, "not found") {
			t.Errorf("LOOM_CLUSTER=%s %v: %d %q %q; want an error naming the cluster, exit 1", tc.env.Cluster, tc.args, code, out, errOut)
		}
		if n := len(fakegw.Requests[*loomv1.CancelJobRequest](f)); n != 0 {
			t.Errorf("LOOM_CLUSTER=%s %v: %d cancels sent, want none", tc.env.Cluster, tc.args, n)
		}
		if n := len(fakegw.Requests[*loomv1.UpdateJobRequest](f)); n != 0 {
			t.Errorf("LOOM_CLUSTER=%s %v: %d updates sent, want none", tc.env.Cluster, tc.args, n)
		}
	}
}

// TestSqueueClusterList: squeue -M a,b lists each cluster in turn, as
// Slurm's _multi_cluster (src/squeue/squeue.c): "CLUSTER: a", its table,
// a blank line, "CLUSTER: b", its table; with -h neither the lines nor the
// headers, and Slurm's own format then names each line's cluster. A list
// past 16 clusters is refused by name, exit 1.
func TestSqueueClusterList(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, fixture(), "squeue", Env{}, "-M", "other,demo", "-o", "%i", "-j", "12,20")
	if want := "CLUSTER: other\nJOBID\n20\n\nCLUSTER: demo\nJOBID\n12\n"; code != 0 || out != want {
		t.Errorf("squeue -M other,demo: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, fixture(), "squeue", Env{}, "-M", "demo,other,demo", "-h", "-o", "%i", "-j", "12,20")
	if code != 0 || out != "12\n20\n" {
		t.Errorf("squeue -h -M demo,other,demo: %d %q %q, want 12 then 20", code, out, errOut)
	}
	// -h with Slurm's own format: each line starts with its cluster's
	// name, 10 wide (Slurm's _print_job, "cluster:10 "); not for one
	// cluster, nor for a format of one's own (above).
	code, out, errOut = run(t, fixture(), "squeue", Env{}, "-M", "other,demo", "-h", "-j", "12,20")
	if want := "other                      20       gpu elsewher    alice  R       0:00      1 \n" +
		"demo                       12       gpu    train    alice  R    1:02:03      2 gpu-[0001-0002]\n"; code != 0 || out != want {
		t.Errorf("squeue -h -M other,demo: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, fixture(), "squeue", Env{}, "-M", "demo", "-h", "-j", "12")
	if want := "                12       gpu    train    alice  R    1:02:03      2 gpu-[0001-0002]\n"; code != 0 || out != want {
		t.Errorf("squeue -h -M demo: %d %q %q, want %q", code, out, errOut, want)
	}
	many := strings.TrimSuffix(strings.Repeat("c,", 16), ",") + ",d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s"
	code, out, errOut = run(t, fixture(), "squeue", Env{}, "-M", many)
	if code != 1 || out != "" || errOut != "squeue: error: -M: at most 16 clusters, got 17\n" {
		t.Errorf("squeue -M (17 clusters): %d %q %q", code, out, errOut)
	}
}

// TestSinfoClusterList: sinfo -M a,b prints each cluster in turn, as Slurm's
// _multi_cluster (src/sinfo/sinfo.c): "CLUSTER: a", its table, a blank
// line, "CLUSTER: b", its table; with -h no such lines, and the default
// format then starts with the cluster's name, 8 wide (prepend_cluster_name),
// which a format of one's own does not.
func TestSinfoClusterList(t *testing.T) {
	t.Parallel()
	head := "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
	code, out, errOut := run(t, fixture(), "sinfo", Env{}, "-M", "other,demo", "-p", "debug")
	if want := "CLUSTER: other\n" + head + "\nCLUSTER: demo\n" + head + "debug        up    1:00:00      1    mix gpu-0003\n"; code != 0 || out != want {
		t.Errorf("sinfo -M other,demo: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, fixture(), "sinfo", Env{}, "-h", "-M", "other,demo", "-p", "debug")
	if want := "demo    debug        up    1:00:00      1    mix gpu-0003\n"; code != 0 || out != want {
		t.Errorf("sinfo -h -M other,demo: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, fixture(), "sinfo", Env{}, "-h", "-M", "other,demo", "-p", "debug", "-o", "%P %V")
	if want := "debug demo\n"; code != 0 || out != want {
		t.Errorf("sinfo -h -M other,demo -o: %d %q %q, want %q", code, out, errOut, want)
	}
	// One cluster: as before, its name in no column.
	code, out, errOut = run(t, fixture(), "sinfo", Env{}, "-h", "-M", "demo", "-p", "debug")
	if want := "debug        up    1:00:00      1    mix gpu-0003\n"; code != 0 || out != want {
		t.Errorf("sinfo -h -M demo: %d %q %q, want %q", code, out, errOut, want)
	}
}

// TestScancelClusterList: scancel -M a,b runs the cancel in each cluster in
// turn, as Slurm's (src/scancel/scancel.c _multi_cluster), printing no
// CLUSTER: lines; each cluster acts on its own jobs alone, so each job is
// cancelled once, and a signal to a job of a cluster not named is refused
// as Slurm's cluster refuses a job it does not know, exit 1.
func TestScancelClusterList(t *testing.T) {
	t.Parallel()
	f := fixture()
	code, out, errOut := run(t, f, "scancel", Env{}, "-M", "other,demo", "12", "20")
	if code != 0 || out != "" || errOut != "" {
		t.Errorf("scancel -M other,demo 12 20: %d %q %q", code, out, errOut)
	}
	var sent []string
	for _, r := range fakegw.Requests[*loomv1.CancelJobRequest](f) {
		sent = append(sent, r.GetName())
	}
	if want := "projects/default/jobs/20 projects/default/jobs/12"; strings.Join(sent, " ") != want {
		t.Errorf("cancels sent %v, want each job once, in its cluster's turn: %s", sent, want)
	}
	f = fixture()
	code, out, errOut = run(t, f, "scancel", Env{}, "-M", "other", "-s", "USR1", "12")
	if code != 1 || out != "" || errOut != "scancel: error: Kill job error on job id 12: Invalid job id specified\n" ||
		len(fakegw.Requests[*loomv1.CancelJobRequest](f)) != 0 {
		t.Errorf("scancel -M other -s USR1 12 (a job of demo): %d %q %q, %d sent; want it refused, none sent",
			code, out, errOut, len(fakegw.Requests[*loomv1.CancelJobRequest](f)))
	}
	// Filters: each cluster's matching jobs.
	f = fixture()
	if code, out, errOut := run(t, f, "scancel", Env{}, "-M", "demo,other", "-t", "RUNNING", "-n", "elsewhere,train"); code != 0 || out != "" || errOut != "" {
		t.Errorf("scancel -M demo,other -t RUNNING -n ...: %d %q %q", code, out, errOut)
	}
	sent = nil
	for _, r := range fakegw.Requests[*loomv1.CancelJobRequest](f) {
		sent = append(sent, r.GetName())
	}
	if want := "projects/default/jobs/12 projects/default/jobs/20"; strings.Join(sent, " ") != want {
		t.Errorf("cancels sent %v, want %s", sent, want)
	}
}

// TestScancelWorkingCluster: scancel in the cluster LOOM_CLUSTER names
// (the working cluster, as a login's environment sets it) acts on that
// cluster's jobs alone, as Slurm's scancel asks its own slurmctld only: a
// job id of another cluster is one it does not know (said with -v; for a
// signal an error, exit 1), and nothing is sent for it.
func TestScancelWorkingCluster(t *testing.T) {
	t.Parallel()
	f := fixture()
	code, out, errOut := run(t, f, "scancel", Env{Cluster: "other"}, "-v", "12")
	if code != 0 || out != "" || errOut != "scancel: Terminating job 12\nscancel: error: Kill job error on job id 12: Invalid job id specified\n" ||
		len(fakegw.Requests[*loomv1.CancelJobRequest](f)) != 0 {
		t.Errorf("LOOM_CLUSTER=other scancel -v 12 (a job of demo): %d %q %q, %d sent; want it unknown there, none sent",
			code, out, errOut, len(fakegw.Requests[*loomv1.CancelJobRequest](f)))
	}
	f = fixture()
	code, out, errOut = run(t, f, "scancel", Env{Cluster: "other"}, "-s", "USR1", "12")
	if code != 1 || out != "" || errOut != "scancel: error: Kill job error on job id 12: Invalid job id specified\n" ||
		len(fakegw.Requests[*loomv1.CancelJobRequest](f)) != 0 {
		t.Errorf("LOOM_CLUSTER=other scancel -s USR1 12: %d %q %q, %d sent; want it refused, none sent",
			code, out, errOut, len(fakegw.Requests[*loomv1.CancelJobRequest](f)))
	}
	// Its own job it cancels.
	f = fixture()
	if code, out, errOut := run(t, f, "scancel", Env{Cluster: "other"}, "20"); code != 0 || out != "" || errOut != "" ||
		len(fakegw.Requests[*loomv1.CancelJobRequest](f)) != 1 {
		t.Errorf("LOOM_CLUSTER=other scancel 20: %d %q %q, %d sent", code, out, errOut, len(fakegw.Requests[*loomv1.CancelJobRequest](f)))
	}
}

// TestScontrolWorkingCluster: scontrol's job-changing verbs act in the
// cluster -M or LOOM_CLUSTER names alone, as Slurm's scontrol asks its own
// slurmctld, which does not know another cluster's jobs: a job id of
// another cluster of the project is Slurm's invalid job id (its message,
// exit 1) and no update is sent for it, as "scontrol show job" already
// says; the cluster's own job is changed.
func TestScontrolWorkingCluster(t *testing.T) {
	t.Parallel()
	const invalid = "Invalid job id specified for job 13\n"
	const suspend = invalid + "slurm_suspend error: Invalid job id specified\n"
	for _, tc := range []struct {
		env  Env
		args []string
		want string
	}{
		{Env{Cluster: "other"}, []string{"hold", "13"}, suspend},
		{Env{Cluster: "other"}, []string{"uhold", "13"}, suspend},
		{Env{Cluster: "other"}, []string{"release", "13"}, suspend},
		{Env{Cluster: "other"}, []string{"requeue", "13"}, invalid},
		{Env{Cluster: "other"}, []string{"requeuehold", "13"}, invalid},
		{Env{Cluster: "other"}, []string{"update", "JobId=13", "TimeLimit=10"}, invalid},
		{Env{Cluster: "other"}, []string{"update", "JobId=13", "TimeLimit=+10"}, invalid},
		{Env{Cluster: "other"}, []string{"update", "Job=13", "Nice=5"}, invalid},
		{Env{Cluster: "other"}, []string{"hold", "15_0"}, "Invalid job id specified for job 15_0\nslurm_suspend error: Invalid job id specified\n"},
		{Env{}, []string{"-M", "other", "hold", "13"}, suspend},
		{Env{}, []string{"--clusters=other", "update", "JobId=13", "TimeLimit=10"}, invalid},
		// -M wins over LOOM_CLUSTER: job 20 is not demo's.
		{Env{Cluster: "other"}, []string{"-M", "demo", "hold", "20"}, "Invalid job id specified for job 20\nslurm_suspend error: Invalid job id specified\n"},
	} {
		f := fixture()
		code, out, errOut := run(t, f, "scontrol", tc.env, tc.args...)
		if n := len(fakegw.Requests[*loomv1.UpdateJobRequest](f)); code != 1 || out != "" || errOut != tc.want || n != 0 {
			t.Errorf("LOOM_CLUSTER=%s scontrol %v: %d %q %q, %d updates sent; want %q, exit 1, none sent",
				tc.env.Cluster, tc.args, code, out, errOut, n, tc.want)
		}
	}
	// -Q says nothing, still exit 1.
	f := fixture()
	if code, out, errOut := run(t, f, "scontrol", Env{Cluster: "other"}, "-Q", "hold", "13"); code != 1 || out != "" || errOut != "" ||
		len(fakegw.Requests[*loomv1.UpdateJobRequest](f)) != 0 {
		t.Errorf("LOOM_CLUSTER=other scontrol -Q hold 13: %d %q %q", code, out, errOut)
	}
	// A list: the other cluster's id refused, the working cluster's changed.
	f = fixture()
	code, out, errOut := run(t, f, "scontrol", Env{Cluster: "other"}, "hold", "13,20")
	if sent := fakegw.Requests[*loomv1.UpdateJobRequest](f); code != 1 || out != "" || errOut != suspend ||
		len(sent) != 1 || sent[0].GetName() != "projects/default/jobs/20" {
		t.Errorf("LOOM_CLUSTER=other scontrol hold 13,20: %d %q %q, sent %v; want 13 refused, 20 held", code, out, errOut, sent)
	}
	// Its own jobs it changes, every verb.
	for _, args := range [][]string{{"hold", "20"}, {"release", "20"}, {"requeue", "20"}, {"update", "JobId=20", "TimeLimit=10"}} {
		f := fixture()
		if code, out, errOut := run(t, f, "scontrol", Env{Cluster: "other"}, args...); code != 0 || out != "" || errOut != "" ||
			len(fakegw.Requests[*loomv1.UpdateJobRequest](f)) != 1 {
			t.Errorf("LOOM_CLUSTER=other scontrol %v: %d %q %q, %d sent; want it changed", args, code, out, errOut,
				len(fakegw.Requests[*loomv1.UpdateJobRequest](f)))
		}
	}
	// The verbs Loom does not serve change nothing, whatever the cluster.
	for _, verb := range []string{"suspend", "resume", "top", "notify"} {
		f := fixture()
		if code, _, errOut := run(t, f, "scontrol", Env{Cluster: "other"}, verb, "13"); code != 1 ||
			!strings.Contains(errOut, "is not supported by Loom") || len(fakegw.Requests[*loomv1.UpdateJobRequest](f)) != 0 {
			t.Errorf("LOOM_CLUSTER=other scontrol %s 13: %d %q", verb, code, errOut)
		}
	}
}

// TestSacctClusterList: sacct -M a,b lists the jobs of every cluster named
// in one table, by job id, without CLUSTER: lines, as Slurm's sacct asks
// its database for the list at once.
func TestSacctClusterList(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, fixture(), "sacct", Env{}, "-M", "other,demo", "-X", "-P", "-o", "JobID,Cluster", "-j", "12,20")
	if want := "JobID|Cluster\n12|demo\n20|other\n"; code != 0 || out != want {
		t.Errorf("sacct -M other,demo: %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, fixture(), "sacct", Env{}, "-M", "other", "-X", "-P", "-n", "-o", "JobID", "-j", "12,20")
	if code != 0 || out != "20\n" {
		t.Errorf("sacct -M other: %d %q %q, want 20 alone", code, out, errOut)
	}
}

// TestPingAsksWhichCluster: scontrol ping in a project of several clusters,
// none named (no -M, no LOOM_CLUSTER), says what sinfo and sbatch say then
// (set LOOM_CLUSTER or use -M), exit 1, not that the controller is DOWN: the
// gateway answered. With the project's only cluster it pings that one.
func TestPingAsksWhichCluster(t *testing.T) {
	t.Parallel()
	f := fixture()
	env := Env{Conn: f.Dial(t), Project: "default", CallTimeout: 10 * time.Second}
	want := "project \"default\" has several clusters (demo, other): set LOOM_CLUSTER or use -M\n"
	for _, name := range []string{"sinfo", "scontrol"} {
		args := []string{"ping"}
		if name == "sinfo" {
			args = nil
		}
		code, out, errOut := runWith(t, env, name, args...)
		if code != 1 || out != "" || errOut != name+": error: "+want {
			t.Errorf("%s %v with several clusters: %d %q %q, want %q, exit 1", name, args, code, out, errOut, name+": error: "+want)
		}
	}
	solo := &fakegw.Gateway{Clusters: []*loomv1.Cluster{{Name: demoCluster}}}
	env.Conn = solo.Dial(t)
	if code, out, errOut := runWith(t, env, "scontrol", "ping"); code != 0 || !strings.HasSuffix(out, " is UP\n") || errOut != "" {
		t.Errorf("scontrol ping with one cluster: %d %q %q, want UP", code, out, errOut)
	}
}
