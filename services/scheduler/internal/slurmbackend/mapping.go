package slurmbackend

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/slurmmap"
	"github.com/loom-ml/loom/libs/slurmrest"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// Name is how refusals name this backend (slurmmap.Name).
const Name = slurmmap.Name

// CommentPrefix starts the --comment every job the backend submits carries
// ("loom:" and the Loom job's name): how a restarted backend finds a job
// it submitted but had not recorded the id of, among the jobs of the
// job's owner only (tag).
const CommentPrefix = "loom:"

// unmapped returns why job cannot go to Slurm yet, naming the first option
// that has no mapping ("" when it maps): slurmmap.Job, the predicate the
// gateway refuses a submission by first.
func unmapped(j *loomv1.Job) string { return slurmmap.Job(j) }

// ownerProblem says why a job of owner may not go to Slurm ("" when it
// may). The backend submits and cancels as the owner, with a token it
// mints for whatever name it is given, so the name is held to what the
// gateway lets in (an OS account name: a header with a newline would
// otherwise fail every poll, never the job) and the owners in refused
// (RefusedSet: root unless -slurm-allow-root-jobs, Slurm's own accounts)
// are refused, by one rule whose reason names both flags.
func ownerProblem(owner string, refused map[string]bool) string {
	if owner == "" {
		return Name + " runs every job as its owner in Slurm: this one has none"
	}
	if err := auth.CheckUserName(owner); err != nil {
		return fmt.Sprintf("job.user: %v (%s runs the job as that Slurm user)", err, Name)
	}
	if refused[owner] {
		return fmt.Sprintf("%s runs no job as %s: the scheduler refuses the owners of -slurm-refused-owners "+
			"(LOOM_SCHEDULER_SLURM_REFUSED_OWNERS; default slurm, whose account can read Slurm's JWT key) "+
			"and root unless -slurm-allow-root-jobs (LOOM_SCHEDULER_SLURM_ALLOW_ROOT_JOBS) is on: submit it as another user", Name, owner)
	}
	return ""
}

// refusal is the reason a refused job carries (slurmmap.Refusal).
func refusal(what string) string { return slurmmap.Refusal(what) }

// workDir is the job's working directory as the built-in engine takes it
// (-D, relative to the submit directory), "" when the job has neither.
func workDir(j *loomv1.Job) string {
	wd, submit := j.GetWorkDir(), j.GetSubmitDir()
	switch {
	case wd != "" && filepath.IsAbs(wd):
		return filepath.Clean(wd)
	case submit == "":
		return ""
	case wd == "":
		return submit
	}
	return filepath.Join(submit, wd)
}

// outputPath expands pattern p with the Loom job's own values (%j is the
// Loom job id, which the user was told, not Slurm's), leaving %N (the
// node, which only Slurm knows) for Slurm, and makes it absolute under wd.
func outputPath(p string, j *loomv1.Job, wd string) string {
	const pct = "\x00pct\x00"
	p = strings.ReplaceAll(p, "%%", pct)
	p = slurmspec.ExpandPattern(p, slurmspec.PatternFields{JobID: j.GetJobId(), ArrayJobID: j.GetJobId(),
		ArrayTaskID: "4294967294", Name: views.SlurmJobName(j), User: j.GetUser(), Node: "%N"})
	// A literal percent sign must reach Slurm as %% again, or Slurm would
	// read what follows it as a field.
	p = strings.ReplaceAll(p, pct, "%%")
	if !filepath.IsAbs(p) {
		p = filepath.Join(wd, p)
	}
	return p
}

// jobSpec maps a Loom batch job to Slurm's submission, with dep, its
// --dependency over Slurm's job ids (slurmDependency). problem names what
// has no mapping or is missing ("" when spec is good).
func jobSpec(j *loomv1.Job, dep string) (spec slurmrest.JobSpec, problem string) {
	if what := unmapped(j); what != "" {
		return spec, refusal(what)
	}
	if !strings.HasPrefix(j.GetScript(), "#!") {
		return spec, "the batch script must start with #! (slurmrestd runs no other)"
	}
	wd := workDir(j)
	if wd == "" {
		return spec, fmt.Sprintf("%s needs the job's working directory (work_dir or submit_dir): Slurm would run it in slurmrestd's own", Name)
	}
	env := make(map[string]string, len(j.GetEnv())+2)
	for k, v := range j.GetEnv() {
		env[k] = v
	}
	// Slurm's SLURM_JOB_ID is its own id; the job's Loom id, which
	// squeue, scancel and sacct take, comes with it.
	env["LOOM_JOB_ID"] = j.GetJobId()
	env["LOOM_JOB_NAME"] = j.GetName()
	nodes := int(max(j.GetNodeCount(), 1))
	spec = slurmrest.JobSpec{
		Script: j.GetScript(), Name: views.SlurmJobName(j), Partition: j.GetPartition(),
		Nodes: nodes, Tasks: int(j.GetNtasks()), CPUsPerTask: int(j.GetCpusPerTask()),
		GPUsPerNode: int(j.GetGpusPerNode()), MemoryPerNodeMB: j.GetMemMb(),
		TimeLimit: time.Duration(j.GetTimeLimitSeconds()) * time.Second, WorkingDir: wd,
		Environment: env, Account: j.GetAccount(), QOS: j.GetQos(),
		Comment: CommentPrefix + j.GetName(), Dependency: dep, Hold: j.GetHold(),
	}
	if b := j.GetBeginTime(); b != nil {
		spec.BeginTime = b.AsTime()
	}
	out := j.GetOutputPattern()
	if out == "" {
		out = "slurm-%j.out"
	}
	spec.StandardOutput = outputPath(out, j, wd)
	if e := j.GetErrorPattern(); e != "" {
		spec.StandardError = outputPath(e, j, wd)
	}
	if err := spec.Validate(); err != nil {
		return spec, err.Error()
	}
	return spec, ""
}

// Dependency reasons, as Slurm's squeue shows them: a job waiting on
// another is pending on ReasonDependency, in Slurm or before it is sent.
const ReasonDependency = "Dependency"

// Hold reasons, Slurm's: a job its owner held (or submitted with
// --hold), and one an operator held, which only an operator releases.
const (
	ReasonHeldUser  = "JobHeldUser"
	ReasonHeldAdmin = "JobHeldAdmin"
)

// dependees is how slurmDependency finds the records of the jobs a
// dependency names: by job name, nil when there is none.
type dependees func(name string) *record

// slurmDependency translates j's --dependency, over Loom's job ids in j's
// project, into Slurm's over Slurm's ids of the same jobs: Slurm knows
// only its own, and takes an id it does not hold for a job that ended
// (it starts the job at once). Every job named must have a record (of):
// one in Slurm gives its Slurm id; one not in Slurm yet (its submission
// deferred or under way) makes j wait for it (wait names the first, dep
// is ""), once every job named has been checked;
// one unknown here (never submitted to this backend, or dropped past
// -min-job-age) or that ended without reaching Slurm is a problem naming
// it, as is what Slurm's --dependency has and Loom's jobs cannot name here
// (aftercorr, afterburstbuffer, an array task). "+MIN" delays and '?'
// (any of) go to Slurm as given: slurmctld judges them.
func slurmDependency(j *loomv1.Job, of dependees) (dep, wait, problem string) {
	spec := j.GetDependency()
	if spec == "" {
		return "", "", ""
	}
	d, err := slurmspec.ParseDependency(spec)
	if err != nil {
		return "", "", fmt.Sprintf("job.dependency %q: %v", clipText(spec), err)
	}
	prefix := j.GetName()[:strings.LastIndexByte(j.GetName(), '/')+1]
	items := make([]string, 0, len(d.Items))
	for _, it := range d.Items {
		switch it.Type {
		case "singleton":
			// Slurm's singleton is of the job's name and user, which
			// the backend sends as Loom's (views.SlurmJobName, the owner).
			items = append(items, it.Type)
			continue
		case "after", "afterany", "afterok", "afternotok":
		default:
			return "", "", refusal("--dependency=" + it.Type)
		}
		el := it.Type
		for _, dj := range it.Jobs {
			if dj.Task >= 0 {
				return "", "", refusal("dependencies on array tasks (--dependency=" + it.Type + ":" + dj.JobID + "_" + strconv.Itoa(dj.Task) + ")")
			}
			r := of(prefix + dj.JobID)
			switch {
			case r == nil:
				return "", "", fmt.Sprintf("--dependency names job %s, which %s does not hold (a job not submitted to it, "+
					"or ended over -min-job-age ago): Slurm would take it for a job long ended and run this one at once (Slurm: %s)",
					dj.JobID, Name, slurmspec.MsgDependency)
			case r.slurmID == "" && r.job.GetState().Terminal():
				return "", "", fmt.Sprintf("--dependency names job %s, which ended %s without reaching Slurm: Slurm cannot wait on it (Slurm: %s)",
					dj.JobID, r.job.GetState(), slurmspec.MsgDependency)
			case r.slurmID == "":
				// Waited for once every job named is checked: a
				// return here left the rest unchecked, so a job
				// waiting for one could also name a job that did not
				// exist yet (a typo, a guessed id, its own), which
				// the poll then took for whatever job got that id,
				// even one waiting for this one: neither ever sent.
				if wait == "" {
					wait = dj.JobID
				}
				continue
			}
			el += ":" + r.slurmID
			if dj.DelayMinutes > 0 {
				el += "+" + strconv.Itoa(dj.DelayMinutes)
			}
		}
		items = append(items, el)
	}
	if wait != "" {
		return "", wait, ""
	}
	sep := ","
	if d.Any {
		sep = "?"
	}
	return strings.Join(items, sep), "", ""
}

// maxSlurmText bounds each text the backend copies from slurmrestd's reply
// into a job (a reason, a node list it could not expand, the batch host,
// the partition): Slurm's own are far shorter, and a reply of a broken or
// hostile slurmrestd (up to Client.MaxResponseBytes) must not grow every
// record, JobChanged and GetJob of the job past what Kafka or gRPC carry.
const maxSlurmText = 1024

// clipText cuts s to maxSlurmText bytes on a rune boundary, marking the cut.
func clipText(s string) string {
	if len(s) <= maxSlurmText {
		return s
	}
	cut := maxSlurmText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// observe brings job (the Loom record) to what Slurm reports of it (sj),
// and reports whether anything GetJob or JobChanged shows changed. A Slurm
// state Loom has no word for (slurmrest.LoomState) keeps the last known
// state and shows Slurm's word in the reason: never a guess. With apply
// false it only tells (job is left as it is): the poll asks first and
// clones only the jobs that changed, since it observes every active job
// every -slurm-poll and the clones of the unchanged ones were most of its
// mapping (BenchmarkMapPoll).
//
// Each field goes through a helper that assigns only a different value
// and says so, so with apply job is modified iff observe returns true.
func observe(job *loomv1.Job, sj slurmrest.Job, apply bool) bool {
	c := &change{apply: apply}
	// state is the job's state after this poll: what the rules below
	// read, whether or not they apply.
	state := job.GetState()
	st, ok := slurmrest.LoomState(sj.State)
	reason := sj.StateReason
	if reason == "None" {
		reason = ""
	}
	if ok {
		setField(c, &job.State, st)
		state = st
	} else {
		reason = "Slurm state " + sj.State
		if sj.StateReason != "" && sj.StateReason != "None" {
			reason += ": " + sj.StateReason
		}
	}
	setField(c, &job.StateReason, clipText(reason))
	// Held is what Slurm says: a held job is pending on one of its hold
	// reasons (priority 0), whoever held it, and a release clears it.
	setField(c, &job.Hold, state == loomv1.JobState_PENDING && (reason == ReasonHeldUser || reason == ReasonHeldAdmin))
	if sj.Nodes != "" {
		hosts, err := hostlist.Expand(sj.Nodes)
		if err != nil {
			hosts = []string{clipText(sj.Nodes)}
		}
		if !slices.Equal(job.Nodes, hosts) {
			c.changed = true
			if apply {
				job.Nodes = hosts
			}
		}
	}
	setField(c, &job.BatchHost, clipText(sj.BatchHost))
	if sj.StartTime > 0 && state != loomv1.JobState_PENDING {
		setTime(c, &job.StartTime, sj.StartTime)
	}
	if state.Terminal() {
		setTime(c, &job.EndTime, sj.EndTime)
		// exit_code is the wait status: code<<8, or the signal.
		code, sig := int32(sj.ExitCode>>8), int32(sj.ExitCode&0x7f)
		if sig != 0 {
			code = 128 + sig
		}
		setField(c, &job.ExitCode, code)
		if job.ExitSignal == nil || *job.ExitSignal != sig {
			c.changed = true
			if apply {
				job.ExitSignal = proto.Int32(sig)
			}
		}
	}
	if sj.TimeLimitMinutes > 0 && job.GetTimeLimitSeconds() == 0 {
		setField(c, &job.TimeLimitSeconds, sj.TimeLimitMinutes*60)
	}
	if job.GetPartition() == "" {
		setField(c, &job.Partition, clipText(sj.Partition))
	}
	return c.changed
}

// change is one observe's outcome: whether a field differed (changed),
// and whether observe assigns what differs (apply).
type change struct{ apply, changed bool }

// setField notes whether the scalar field *f differs from v and, when c
// applies, sets it.
func setField[T comparable](c *change, f *T, v T) {
	if *f == v {
		return
	}
	c.changed = true
	if c.apply {
		*f = v
	}
}

// setTime notes whether *f differs from the Unix time sec (unset when
// sec <= 0, as Slurm reports a time it has not got) as proto.Equal would
// see it (presence, seconds, nanos) and, when c applies, sets it; the
// timestamp is only made when it differs.
func setTime(c *change, f **timestamppb.Timestamp, sec int64) {
	switch {
	case sec <= 0 && *f == nil:
		return
	case sec > 0 && *f != nil && (*f).GetSeconds() == sec && (*f).GetNanos() == 0:
		return
	}
	c.changed = true
	if !c.apply {
		return
	}
	if sec <= 0 {
		*f = nil
	} else {
		*f = timestamppb.New(time.Unix(sec, 0))
	}
}

// run is the job's one attempt as Job.runs and the final JobChanged carry
// it (the gateway's accounting history).
func run(job *loomv1.Job) *loomv1.JobRun {
	r := &loomv1.JobRun{Attempt: 1, State: job.GetState(), Nodes: job.GetNodes(), StartTime: job.GetStartTime(),
		EndTime: job.GetEndTime(), ExitCode: job.GetExitCode(), Reason: job.GetStateReason()}
	if job.ExitSignal != nil {
		r.ExitSignal = proto.Int32(job.GetExitSignal())
	}
	return r
}

// slurmID is the Slurm job id as Loom shows it in the placement field
// (scontrol show job's explanation line).
func slurmID(id string) string {
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		return ""
	}
	return "Slurm job " + id
}
