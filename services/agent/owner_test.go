package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// Jobs run as their owners: these tests make real OS users (testkit.OSUsers;
// skipped, saying so, when not run as root) and run their jobs through a
// real agent, which runs as root as slurmd does.

// ownerEnv is an agent env whose shared dir other users can reach (t.TempDir
// is root's 0700), and a directory of the owner's, 0700, to write in.
func ownerEnv(t *testing.T, owner testkit.OSUser) (e *env, own string) {
	t.Helper()
	e = newEnv(t)
	for _, d := range []string{filepath.Dir(e.shared), e.shared} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	own = filepath.Join(e.shared, "own-"+owner.Name)
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, int(owner.UID), int(owner.GID)); err != nil {
		t.Fatal(err)
	}
	return e, own
}

// fileOf returns path's owner and mode.
func fileOf(t *testing.T, path string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

// TestJobRunsAsItsOwner: a step and a job step's tasks of user A run with
// A's uid, gid and supplementary groups (the job writes `id` into its
// output), learn them as SLURM_JOB_UID/GID, and their output files (and
// the task output directory the agent makes) are A's, 0600 (0700).
func TestJobRunsAsItsOwner(t *testing.T) {
	t.Parallel()
	a := testkit.OSUsers(t, 1)[0]
	e, own := ownerEnv(t, a)
	e.start(t)
	script := `id -u; id -g; id -G; echo "$SLURM_JOB_UID $SLURM_JOB_GID $USER"; pwd`
	out := filepath.Join(own, "logs", "slurm-1.out")
	st := startStep("1", script, map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_USER": a.Name}, out)
	st.User, st.WorkDir = a.Name, own
	publish(t, e.broker, command(st))
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		t.Fatalf("step exited %d", ev.ExitCode)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 5 {
		t.Fatalf("output %q, want id -u, -g, -G, the Slurm ids, pwd", b)
	}
	uid, gid := strconv.Itoa(int(a.UID)), strconv.Itoa(int(a.GID))
	var groups []string
	for _, g := range a.Groups {
		groups = append(groups, strconv.Itoa(int(g)))
	}
	got := strings.Fields(lines[2])
	if lines[0] != uid || lines[1] != gid || !reflect.DeepEqual(sorted(got), sorted(groups)) ||
		lines[3] != uid+" "+gid+" "+a.Name || lines[4] != own {
		t.Fatalf("the step of %s wrote %q; want uid %s gid %s groups %v, the same SLURM_JOB_UID/GID, cwd %s", a.Name, lines, uid, gid, groups, own)
	}
	if fu, fg, mode := fileOf(t, out); fu != a.UID || fg != a.GID || mode.Perm() != 0o600 {
		t.Fatalf("output file: uid %d gid %d mode %v, want %s's, 0600", fu, fg, mode, a.Name)
	}
	if fu, _, mode := fileOf(t, filepath.Dir(out)); fu != a.UID || mode.Perm() != 0o700 {
		t.Fatalf("output directory made for the step: uid %d mode %v, want %s's, 0700", fu, mode, a.Name)
	}
	// The owner's home under the shared dir is the owner's, 0700.
	if fu, _, mode := fileOf(t, filepath.Join(e.shared, a.Name)); fu != a.UID || mode.Perm() != 0o700 {
		t.Fatalf("home made for %s: uid %d mode %v, want theirs, 0700", a.Name, fu, mode)
	}

	outDir := filepath.Join(e.shared, ".loom", "steps", "2.0")
	l := launch("2", 0, 0, 2, outDir, "sh", "-c", `id -u; id -G`)
	l.User = a.Name
	publish(t, e.broker, command(l))
	if ev := waitTasks(t, e.broker, "2", 0, eventsv1.StepState_STEP_EXITED); !reflect.DeepEqual(ev.ExitCodes, []int32{0, 0}) {
		t.Fatalf("tasks exited %v", ev.ExitCodes)
	}
	for rank := range 2 {
		p := filepath.Join(outDir, fmt.Sprintf("task-%d.out", rank))
		b, err := os.ReadFile(p)
		if f := strings.Fields(string(b)); err != nil || len(f) < 2 || f[0] != uid || !reflect.DeepEqual(sorted(f[1:]), sorted(groups)) {
			t.Fatalf("task %d wrote %q (%v), want uid %s and groups %v", rank, b, err, uid, groups)
		}
		if fu, _, mode := fileOf(t, p); fu != a.UID || mode.Perm() != 0o600 {
			t.Fatalf("task output: uid %d mode %v, want %s's, 0600", fu, mode, a.Name)
		}
	}
	if fu, _, mode := fileOf(t, outDir); fu != a.UID || mode.Perm() != 0o700 || !mode.IsDir() {
		t.Fatalf("task output dir: uid %d mode %v, want %s's, 0700", fu, mode, a.Name)
	}
	if _, _, mode := fileOf(t, filepath.Dir(outDir)); mode.Perm() != 0o755 {
		t.Fatalf("the agent's .loom/steps: mode %v, want 0755 (root's: no user may make names there)", mode)
	}
}

// TestJobWithoutADirectoryRunsInItsOwnersHome: a job submitted without a
// directory (the API, a CustomJob) gets its owner's home under the shared
// dir as working directory (the scheduler's choice); the agent makes that
// home, the owner's, 0700, though the shared dir above it is root's, and
// the job's output goes there. Before, such a job of any user but root
// failed at once: its output was to be written in the shared dir itself.
func TestJobWithoutADirectoryRunsInItsOwnersHome(t *testing.T) {
	t.Parallel()
	a := testkit.OSUsers(t, 1)[0]
	e, _ := ownerEnv(t, a)
	e.start(t)
	home := filepath.Join(e.shared, a.Name)
	out := filepath.Join(home, "slurm-3.out")
	st := startStep("3", "pwd", map[string]string{"SLURM_JOB_ID": "3", "SLURM_JOB_USER": a.Name}, out)
	st.User, st.WorkDir = a.Name, home
	publish(t, e.broker, command(st))
	if ev := waitStep(t, e.broker, "3", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		t.Fatalf("step exited %d: %v", ev.ExitCode, ev)
	}
	if b, err := os.ReadFile(out); err != nil || strings.TrimSpace(string(b)) != home {
		t.Fatalf("output %q (%v), want the job's working directory %s", b, err, home)
	}
	if fu, _, mode := fileOf(t, home); fu != a.UID || mode.Perm() != 0o700 {
		t.Fatalf("home made for %s: uid %d mode %v, want theirs, 0700", a.Name, fu, mode)
	}
}

func sorted(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

// TestOwnerCannotWriteOrEnterWhereTheyMayNot: user A's job with --output
// into a directory of root's fails to start (no file made), one whose
// output names an existing file of root's fails and leaves it as it was
// (not emptied), and one with --chdir into a directory only root may enter
// fails: as under Slurm, the job fails and nothing is touched.
func TestOwnerCannotWriteOrEnterWhereTheyMayNot(t *testing.T) {
	t.Parallel()
	a := testkit.OSUsers(t, 1)[0]
	e, own := ownerEnv(t, a)
	e.start(t)
	rootDir := filepath.Join(e.shared, "root-only") // root's, 0755: readable, not writable
	if err := os.Mkdir(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(rootDir, "passwd")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(e.shared, "private") // root's, 0700, like /root
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}

	newFile := startStep("1", "echo hi", nil, filepath.Join(rootDir, "x"))
	trunc := startStep("2", "echo hi", nil, victim)
	chdir := startStep("3", "echo hi", nil, filepath.Join(own, "slurm-3.out"))
	chdir.WorkDir = private
	for _, s := range []*eventsv1.StartStep{newFile, trunc, chdir} {
		s.User = a.Name
		if s != chdir {
			s.WorkDir = "/"
		}
		publish(t, e.broker, command(s))
	}
	for _, job := range []string{"1", "2", "3"} {
		ev := waitStep(t, e.broker, job, eventsv1.StepState_STEP_FAILED_TO_START)
		if !strings.Contains(ev.Message, "permission denied") {
			t.Errorf("step %s failed with %q, want permission denied", job, ev.Message)
		}
	}
	if _, err := os.Stat(filepath.Join(rootDir, "x")); !os.IsNotExist(err) {
		t.Errorf("--output into root's directory made the file: %v", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
		t.Errorf("root's file after a job named it its output: %q (%v), want it untouched", b, err)
	}
	for _, job := range []string{"1", "2", "3"} {
		for _, ev := range stepEvents(t, e.broker, job) {
			if ev.State == eventsv1.StepState_STEP_RUNNING {
				t.Errorf("step %s ran", job)
			}
		}
	}
}

// TestUnknownOwnerFails: a job whose owner has no account on the node fails
// to start, step and tasks, with that reason (the scheduler ends the job
// FAILED with it); nothing hangs.
func TestUnknownOwnerFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	st := startStep("1", "echo hi", nil, filepath.Join(e.shared, "slurm-1.out"))
	st.User = "nosuchuser-q9"
	l := launch("2", 0, 0, 1, filepath.Join(e.shared, ".loom", "steps", "2.0"), "true")
	l.User = "nosuchuser-q9"
	publish(t, e.broker, command(st), command(l))
	want := "user nosuchuser-q9 has no account on node gpu-0001"
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_FAILED_TO_START); !strings.Contains(ev.Message, want) {
		t.Errorf("step failed with %q, want %q", ev.Message, want)
	}
	if ev := waitTasks(t, e.broker, "2", 0, eventsv1.StepState_STEP_FAILED_TO_START); !strings.Contains(ev.Message, want) {
		t.Errorf("tasks failed with %q, want %q", ev.Message, want)
	}
	if _, err := os.Stat(filepath.Join(e.shared, "slurm-1.out")); !os.IsNotExist(err) {
		t.Errorf("the refused step's output file exists: %v", err)
	}
}

// TestRootJobsOnlyWhereAllowed: with -allow-root-jobs off, a job of root
// and a job with no owner (which would run as the agent, root here) are
// refused with the reason; with it on, root's job runs as root.
func TestRootJobsOnlyWhereAllowed(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent refuses root jobs only when it runs as root")
	}
	off := newEnv(t)
	off.noRoot = true
	off.start(t)
	rootJob := startStep("1", "id -u", nil, filepath.Join(off.shared, "slurm-1.out"))
	rootJob.User = "root"
	noOwner := startStep("2", "id -u", nil, filepath.Join(off.shared, "slurm-2.out"))
	publish(t, off.broker, command(rootJob), command(noOwner))
	for _, job := range []string{"1", "2"} {
		ev := waitStep(t, off.broker, job, eventsv1.StepState_STEP_FAILED_TO_START)
		if !strings.Contains(ev.Message, "does not run jobs as root") || !strings.Contains(ev.Message, "-allow-root-jobs") {
			t.Errorf("root step %s failed with %q, want the refusal and the flag that allows it", job, ev.Message)
		}
		if _, err := os.Stat(filepath.Join(off.shared, "slurm-"+job+".out")); !os.IsNotExist(err) {
			t.Errorf("refused root step %s made its output: %v", job, err)
		}
	}

	on := newEnv(t)
	on.start(t)
	rootJob = startStep("1", "id -u", nil, filepath.Join(on.shared, "slurm-1.out"))
	rootJob.User = "root"
	publish(t, on.broker, command(rootJob))
	if ev := waitStep(t, on.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		t.Fatalf("allowed root step exited %d", ev.ExitCode)
	}
	if b, err := os.ReadFile(filepath.Join(on.shared, "slurm-1.out")); err != nil || string(b) != "0\n" {
		t.Fatalf("allowed root step wrote %q (%v), want uid 0", b, err)
	}
}

// TestModelDirOnlyTheSchedulers: the agent makes a job's model directory
// (models/<model>/job-<id>, its owner's, 0700) only where the scheduler
// said (StartStep.model_dir): a LOOM_MODEL_DIR the job set itself, here
// through a link the owner made in their own model directory to a
// directory of root's, makes nothing (it once had root make a directory of
// the owner's wherever the link led: a systemd drop-in, root on the node).
func TestModelDirOnlyTheSchedulers(t *testing.T) {
	t.Parallel()
	a := testkit.OSUsers(t, 1)[0]
	e, own := ownerEnv(t, a)
	e.start(t)
	mine := filepath.Join(e.shared, "models", "m", "job-1")
	st := startStep("1", "true", map[string]string{"LOOM_MODEL_DIR": mine}, filepath.Join(own, "1.out"))
	st.User, st.ModelDir = a.Name, mine
	publish(t, e.broker, command(st))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED)
	if fu, _, mode := fileOf(t, mine); fu != a.UID || mode.Perm() != 0o700 || !mode.IsDir() {
		t.Fatalf("model dir: uid %d mode %v, want %s's, 0700", fu, mode, a.Name)
	}
	target := t.TempDir() // root's, as /etc/systemd/system is
	if err := os.Symlink(target, filepath.Join(mine, "l")); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(mine, "l", "sshd.service.d")
	st = startStep("2", "true", map[string]string{"LOOM_MODEL_DIR": evil}, filepath.Join(own, "2.out"))
	st.User = a.Name
	publish(t, e.broker, command(st))
	waitStep(t, e.broker, "2", eventsv1.StepState_STEP_EXITED)
	// Even named as the scheduler's, a path deeper than models/<model>/
	// job-<id> is not made.
	st = startStep("3", "true", nil, filepath.Join(own, "3.out"))
	st.User, st.ModelDir = a.Name, evil
	publish(t, e.broker, command(st))
	waitStep(t, e.broker, "3", eventsv1.StepState_STEP_EXITED)
	if _, err := os.Lstat(filepath.Join(target, "sshd.service.d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a directory was made through the owner's link: %v", err)
	}
}

// TestOwnersProgressAndMetricsAreRead: the progress and metrics files of a
// job of user A (not root) are read (the agent takes only files their
// run's owner owns, and that is A, for whom it made the run's directory),
// up to the step's end.
func TestOwnersProgressAndMetricsAreRead(t *testing.T) {
	t.Parallel()
	a := testkit.OSUsers(t, 1)[0]
	e, own := ownerEnv(t, a)
	e.start(t)
	script := `printf '{"step": 7}' > "$LOOM_PROGRESS_FILE.tmp" && mv "$LOOM_PROGRESS_FILE.tmp" "$LOOM_PROGRESS_FILE"
printf '{"val_loss": 0.5, "global_step": 7}\n' >> "$CLOUD_ML_HP_METRIC_FILE"`
	st := startStep("1", script, nil, filepath.Join(own, "slurm-1.out"))
	st.User, st.WorkDir = a.Name, own
	publish(t, e.broker, command(st))
	if ev := waitStep(t, e.broker, "1", eventsv1.StepState_STEP_EXITED); ev.ExitCode != 0 {
		t.Fatalf("step exited %d", ev.ExitCode)
	}
	var progress, metrics []int64
	for _, ev := range testkit.Events(t, e.broker, topics.StepEvents) {
		switch p := ev.Payload.(type) {
		case *eventsv1.StepProgress:
			progress = append(progress, p.Step)
		case *eventsv1.MetricsReported:
			for _, pt := range p.Points {
				metrics = append(metrics, pt.Step)
			}
		}
	}
	if !slices.Contains(progress, 7) || !slices.Equal(metrics, []int64{7}) {
		t.Fatalf("%s's step reported progress at %v and metrics at %v; want step 7 in both", a.Name, progress, metrics)
	}
}

// TestTasksCannotProbeWhereTheOwnerCannotLook: srun --chdir into a
// directory its owner cannot reach fails the same whether the directory
// is there or not. The agent looked with root's eyes: a missing one
// failed "no such directory" before anything started, one that was there
// started and failed to enter it, so any user could learn which names
// exist in another's 0700 home.
func TestTasksCannotProbeWhereTheOwnerCannotLook(t *testing.T) {
	t.Parallel()
	a := testkit.OSUsers(t, 1)[0]
	e, _ := ownerEnv(t, a)
	e.start(t)
	private := filepath.Join(e.shared, "private") // root's, 0700, like another's home
	if err := os.MkdirAll(filepath.Join(private, "there"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	msgs := map[string]string{}
	for i, name := range []string{"there", "missing"} {
		job := fmt.Sprint(i + 1)
		l := launch(job, 0, 0, 1, filepath.Join(e.shared, ".loom", "steps", job+".0"), "true")
		l.User, l.WorkDir = a.Name, filepath.Join(private, name)
		publish(t, e.broker, command(l))
		ev := testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
			tc, ok := ev.Payload.(*eventsv1.TasksChanged)
			return ok && tc.Job == "projects/p/jobs/"+job && (tc.State == eventsv1.StepState_STEP_FAILED_TO_START || tc.State == eventsv1.StepState_STEP_EXITED)
		}).Payload.(*eventsv1.TasksChanged)
		msgs[name] = ev.State.String() + ": " + strings.ReplaceAll(ev.Message, name, "NAME")
	}
	if msgs["there"] != msgs["missing"] || !strings.Contains(msgs["there"], "permission denied") {
		t.Fatalf("srun --chdir where its owner cannot look: into a directory that is there %q, into one that is not %q; want the same, permission denied",
			msgs["there"], msgs["missing"])
	}
}
