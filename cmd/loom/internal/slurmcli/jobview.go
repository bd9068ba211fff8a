package slurmcli

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// jobStates are Slurm's job state names and compact codes per Loom state.
var jobStates = []struct {
	state         loomv1.JobState
	code, long    string
	pendingOrLive bool
}{
	{loomv1.JobState_PENDING, "PD", "PENDING", true},
	{loomv1.JobState_RUNNING, "R", "RUNNING", true},
	{loomv1.JobState_CONFIGURING, "CF", "CONFIGURING", true},
	{loomv1.JobState_COMPLETING, "CG", "COMPLETING", true},
	{loomv1.JobState_COMPLETED, "CD", "COMPLETED", false},
	{loomv1.JobState_FAILED, "F", "FAILED", false},
	{loomv1.JobState_CANCELLED, "CA", "CANCELLED", false},
	{loomv1.JobState_TIMEOUT, "TO", "TIMEOUT", false},
	{loomv1.JobState_NODE_FAIL, "NF", "NODE_FAIL", false},
	{loomv1.JobState_PREEMPTED, "PR", "PREEMPTED", false},
	{loomv1.JobState_REQUEUED, "RQ", "REQUEUED", true},
	{loomv1.JobState_OUT_OF_MEMORY, "OOM", "OUT_OF_MEMORY", false},
}

// effectiveState treats an unset state as PENDING (a job the scheduler
// has not seen yet).
func effectiveState(j *loomv1.Job) loomv1.JobState {
	if j.GetState() == loomv1.JobState_JOB_STATE_UNSPECIFIED {
		return loomv1.JobState_PENDING
	}
	return j.GetState()
}

// stateCode is squeue's %t: "PD", "R", ...
func stateCode(s loomv1.JobState) string {
	for _, st := range jobStates {
		if st.state == s {
			return st.code
		}
	}
	return "PD"
}

// stateLong is squeue's %T and sacct's State: "PENDING", ...
func stateLong(s loomv1.JobState) string {
	for _, st := range jobStates {
		if st.state == s {
			return st.long
		}
	}
	return "PENDING"
}

// parseJobStates parses a -t/--states list (codes or names, any case, or
// "all") into the set of states it names; nil means "all": no filter.
func parseJobStates(prog, s string) (stateSet, error) {
	states := stateSet{}
	for _, item := range splitList(s) {
		if strings.EqualFold(item, "all") {
			return nil, nil
		}
		found := false
		for _, st := range jobStates {
			if strings.EqualFold(item, st.code) || strings.EqualFold(item, st.long) ||
				(st.state == loomv1.JobState_CANCELLED && strings.EqualFold(item, "CANCELED")) {
				states[st.state] = true
				found = true
				break
			}
		}
		if !found {
			var names []string
			for _, st := range jobStates {
				names = append(names, st.long)
			}
			return nil, &Error{Code: 1, Text: fmt.Sprintf("%s: error: Invalid job state specified: %s\n%s: error: Valid job states include: %s",
				prog, item, prog, strings.Join(names, ","))}
		}
	}
	return states, nil
}

// jobReason is a job's Slurm reason: what the scheduler said, else Slurm's
// usual one for the state.
func jobReason(j *loomv1.Job) string {
	if r := j.GetStateReason(); r != "" {
		return r
	}
	switch effectiveState(j) {
	case loomv1.JobState_PENDING:
		if j.GetHold() {
			return "JobHeldUser"
		}
		return "None"
	case loomv1.JobState_FAILED:
		return "NonZeroExitCode"
	case loomv1.JobState_TIMEOUT:
		return "TimeLimit"
	case loomv1.JobState_NODE_FAIL:
		return "NodeDown"
	case loomv1.JobState_OUT_OF_MEMORY:
		return "OutOfMemory"
	}
	return "None"
}

// jobElapsed is how long the job has run (squeue TIME, sacct Elapsed).
func jobElapsed(j *loomv1.Job, now time.Time) int64 {
	if j.GetStartTime() == nil || effectiveState(j) == loomv1.JobState_PENDING {
		return 0
	}
	end := now
	// A COMPLETING job's attempt has ended: its time stops at its end.
	if j.GetEndTime() != nil && (!isLive(j) || effectiveState(j) == loomv1.JobState_COMPLETING) {
		end = j.GetEndTime().AsTime()
	}
	d := int64(end.Sub(j.GetStartTime().AsTime()) / time.Second)
	if d < 0 {
		return 0
	}
	return d
}

// isLive says whether the job is running or about to (not pending, not ended).
func isLive(j *loomv1.Job) bool {
	switch effectiveState(j) {
	case loomv1.JobState_RUNNING, loomv1.JobState_CONFIGURING, loomv1.JobState_COMPLETING:
		return true
	}
	return false
}

// jobNodeCount is the job's node count: its allocation once it has one,
// else what it asked for.
func jobNodeCount(j *loomv1.Job) int {
	if n := len(j.GetNodes()); n > 0 {
		return n
	}
	return int(max(j.GetNodeCount(), 1))
}

// eligibleAt is when the job became eligible to run, Slurm's
// EligibleTime (scontrol show job, sacct's Eligible and its time window):
// its --begin, else its submit time; nil for a pending job Slurm keeps no
// such time for: held, waiting on a dependency, or an array's tasks
// waiting on its task limit (as_mysql_job.c records those as never
// eligible). Slurm 22.05 (beside Loom) clears a --begin already passed
// when it holds or releases a job: a hold keeps only a --begin ahead of
// the hold (sbatch -H --begin=now+20 says the begin while held, past it
// too), and a release makes the job eligible at the release (or at a
// --begin still ahead). The hold's time is Job.hold_change_time, the
// submit time for a job submitted held.
func eligibleAt(j *loomv1.Job) *timestamppb.Timestamp {
	changed, begin := j.GetHoldChangeTime(), j.GetBeginTime()
	if effectiveState(j) == loomv1.JobState_PENDING {
		switch {
		case j.GetHold():
			held := changed
			if held == nil {
				held = j.GetSubmitTime()
			}
			if begin != nil && held != nil && begin.AsTime().After(held.AsTime()) {
				return begin
			}
			return nil
		case j.GetStateReason() == "Dependency", j.GetStateReason() == "JobArrayTaskLimit":
			return nil
		}
	}
	if changed != nil && !j.GetHold() && (begin == nil || begin.AsTime().Before(changed.AsTime())) {
		return changed // released: eligible then
	}
	if begin != nil {
		return begin
	}
	return j.GetSubmitTime()
}

// numNodes is scontrol show job's NumNodes: shownNodes, or, for a job
// without nodes that asks a range (-N1-3) and never ran, the range, as
// Slurm 22.05 prints a pending one ("NumNodes=1-3"; squeue's %D its
// minimum, 1).
func numNodes(j *loomv1.Job) string {
	n := shownNodes(j)
	if most := int(j.GetMaxNodeCount()); len(j.GetNodes()) == 0 && most > n && lastRunNodes(j) == 0 {
		return strconv.Itoa(n) + "-" + strconv.Itoa(most)
	}
	return strconv.Itoa(n)
}

// shownNodes is the node count scontrol show job's NumNodes and squeue's
// %D show: jobNodeCount, but for a range job (-N1-3) waiting again after
// a run (requeued) the count its last run got, as Slurm 22.05's (its
// job's node_cnt outlives the allocation: -N1-3 run on 3 nodes, requeued,
// NumNodes=3 and %D 3, while NumCPUs and TRES are the request's again).
// Only the display: the range stays the request (Slurm's started again on
// 1 node when only 1 was free).
func shownNodes(j *loomv1.Job) int {
	if len(j.GetNodes()) == 0 && j.GetMaxNodeCount() > max(j.GetNodeCount(), 1) {
		if n := lastRunNodes(j); n > 0 {
			return n
		}
	}
	return jobNodeCount(j)
}

// lastRunNodes is how many nodes the job's last run got (0: it never ran).
func lastRunNodes(j *loomv1.Job) int {
	if runs := j.GetRuns(); len(runs) > 0 {
		return len(runs[len(runs)-1].GetNodes())
	}
	return 0
}

// rangeNodes is how many of free fitting nodes a job without nodes yet
// would start on: its minimum, or for a range (-N MIN-MAX) as many as are
// free up to the maximum, no more than its tasks (-n, else
// --ntasks-per-node times the minimum), and its minimum when the scheduler
// spreads its GPUs (--gpus alone): the scheduler's choice (domain's
// widen), as Slurm's.
func rangeNodes(j *loomv1.Job, free int) int {
	n := int(max(j.GetNodeCount(), 1))
	most := int(j.GetMaxNodeCount())
	if most <= n || j.GetGpusPerNode() == 0 && j.GetGpus() > 0 {
		return n
	}
	switch {
	case j.GetNtasks() > 0:
		most = min(most, int(j.GetNtasks()))
	case j.GetNtasksPerNode() > 0:
		most = min(most, int(j.GetNtasksPerNode())*n)
	}
	return max(n, min(most, free))
}

// jobCPUs is the job's CPU count as Slurm would allocate it: once it
// started, the sum of what its run holds (runLayout: an exclusive run's
// whole nodes among them); else tasks × CPUs per task, or with
// --cpus-per-gpu the sum of its nodes' (jobNodeCPUs).
func jobCPUs(j *loomv1.Job) int {
	if _, _, ok := runLayout(j); ok || j.GetCpusPerGpu() > 0 {
		sum := 0
		for _, c := range jobNodeCPUs(j) {
			sum += c
		}
		return sum
	}
	cpt := int(max(j.GetCpusPerTask(), 1))
	switch {
	case j.GetNtasks() > 0:
		return int(j.GetNtasks()) * cpt
	case j.GetNtasksPerNode() > 0:
		return jobNodeCount(j) * int(j.GetNtasksPerNode()) * cpt
	default:
		return jobNodeCount(j) * cpt
	}
}

// jobNodeCPUs is the CPUs of each of the job's nodes (jobNodeCount), as
// the scheduler gives them and Slurm's select/cons_tres counts them: the
// run's own (runLayout) once it started, else from the request
// (slurmspec.NodeCPUs): the node's tasks (spread evenly; at least 1) times
// CPUs per task, or the node's GPUs (--gpus-per-node, else --gpus spread
// as the tasks are, slurmspec.Share) times --cpus-per-gpu when that is
// more. --gpus=3 -N2 --cpus-per-gpu=2 is 4 and 2.
func jobNodeCPUs(j *loomv1.Job) []int {
	if _, cpus, ok := runLayout(j); ok {
		out := make([]int, len(cpus))
		for i, c := range cpus {
			out[i] = int(c)
		}
		return out
	}
	return nodeCPUsOver(j, jobNodeCount(j))
}

// runLayout is the tasks and CPUs the scheduler gave each of a started
// job's nodes (Job.node_tasks, node_cpus), which the request alone cannot
// say: Slurm's select packs -n onto the first nodes (-N2 -n4 on idle 4-CPU
// nodes is 3 and 1). ok is false for a record without them (pending, or
// from before they were kept) or whose counts do not match its nodes: the
// caller then lays the request out itself.
func runLayout(j *loomv1.Job) (tasks, cpus []int32, ok bool) {
	n := len(j.GetNodes())
	tasks, cpus = j.GetNodeTasks(), j.GetNodeCpus()
	if n == 0 || len(tasks) != n || len(cpus) != n {
		return nil, nil, false
	}
	return tasks, cpus, true
}

// nodeCPUsOver is jobNodeCPUs with the job's tasks and GPUs laid out over
// n nodes, however many the job itself names: --test-only's estimate may
// put it on another job's nodes (allocNodeCPUs).
func nodeCPUsOver(j *loomv1.Job, n int) []int {
	tasks := slurmspec.TaskLayout(j.GetNtasksPerNode(), j.GetNtasks(), n)
	out := make([]int, n)
	for i := range out {
		gpus := j.GetGpusPerNode()
		if gpus == 0 {
			gpus = slurmspec.Share(j.GetGpus(), n, i)
		}
		out[i] = int(slurmspec.NodeCPUs(int64(tasks[i]), int64(j.GetCpusPerTask()), int64(gpus), int64(j.GetCpusPerGpu())))
	}
	return out
}

// jobNodeTasks is the tasks on each of the job's nodes (jobNodeCount): the
// run's own (runLayout) once it started, else the request spread evenly
// (slurmspec.TaskLayout). The result is the caller's to change.
func jobNodeTasks(j *loomv1.Job) []int32 {
	if tasks, _, ok := runLayout(j); ok {
		return slices.Clone(tasks)
	}
	return slurmspec.TaskLayout(j.GetNtasksPerNode(), j.GetNtasks(), jobNodeCount(j))
}

// jobTasks is the job's task count.
func jobTasks(j *loomv1.Job) int {
	switch {
	case j.GetNtasks() > 0:
		return int(j.GetNtasks())
	case j.GetNtasksPerNode() > 0:
		return jobNodeCount(j) * int(j.GetNtasksPerNode())
	default:
		return jobNodeCount(j)
	}
}

// tresPerNode is squeue's %b: "gres:gpu[:type]:N", or "N/A".
func tresPerNode(j *loomv1.Job) string {
	n := j.GetGpusPerNode()
	if n == 0 {
		return "N/A"
	}
	return gpuTres(j.GetGpuType(), n)
}

// gpuTres is a GPU request as scontrol show job's Tres* lines write it:
// gres:gpu:N, with a type gres:gpu:TYPE:N.
func gpuTres(typ string, n int32) string {
	if typ != "" {
		return fmt.Sprintf("gres:gpu:%s:%d", typ, n)
	}
	return fmt.Sprintf("gres:gpu:%d", n)
}

// compressHosts is a node list as Slurm prints it: a hostlist expression.
func compressHosts(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return hostlist.Compress(names)
}

// jobRow is one line of squeue or sacct: a job, an array task, or an
// array's pending tasks shown together ("12_[3-7%2]").
type jobRow struct {
	job *loomv1.Job
	// id is the %i text.
	id string
	// arrayJobID and arrayTask are %F and %K ("N/A" when not an array).
	arrayJobID, arrayTask string
	// pending are the task indexes an array parent's row stands for.
	pending []int
}

// numericID orders ids numerically ("9" < "10").
func numericID(id string) int64 {
	n, _ := strconv.ParseInt(id, 10, 64)
	return n
}

// arrayView groups a job list's array parents and tasks. A job with
// array_job_id set is an array task; a job with array set and no
// array_job_id is the array's parent record, standing for the array's
// tasks that have no record of their own yet (pending).
type arrayView struct {
	// tasks maps an array job id to its task records.
	tasks map[string][]*loomv1.Job
}

func newArrayView(jobs []*loomv1.Job) arrayView {
	v := arrayView{tasks: map[string][]*loomv1.Job{}}
	for _, j := range jobs {
		if a := j.GetArrayJobId(); a != "" {
			v.tasks[a] = append(v.tasks[a], j)
		}
	}
	return v
}

// pendingIndexes are the parent's task indexes that have no task record.
func (v arrayView) pendingIndexes(parent *loomv1.Job) (idx []int, limit int) {
	spec, err := ParseArray(parent.GetArray())
	if err != nil {
		return nil, 0
	}
	have := map[int]bool{}
	for _, t := range v.tasks[parent.GetJobId()] {
		have[int(t.GetArrayTaskId())] = true
	}
	for _, i := range spec.Indexes() {
		if !have[i] {
			idx = append(idx, i)
		}
	}
	return idx, spec.Limit
}

// isParent says whether j is an array's parent record.
func isParent(j *loomv1.Job) bool { return j.GetArray() != "" && j.GetArrayJobId() == "" }

// rowKey is what pending tasks of one array must share to be shown as one
// row: slurmctld keeps an array's pending tasks as one record until one is
// changed on its own (held, renamed, given another nice, limit, QOS,
// account, partition, dependency, begin time or size), which then shows on
// a row of its own.
// A pending task's reason alone does not split it off (the scheduler gives
// the first in line Resources, the others Priority); a hold's does.
func rowKey(j *loomv1.Job) string {
	held := ""
	if j.GetHold() {
		held = j.GetStateReason()
	}
	return fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d\x00%s\x00%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%s", j.GetDisplayName(), j.GetPartition(), held,
		j.GetNice(), j.GetTimeLimitSeconds(), j.GetQos(), j.GetAccount(), j.GetDependency(), j.GetBeginTime().GetSeconds(),
		j.GetNodeCount(), j.GetNtasks(), j.GetMemMb(), j.GetGpusPerNode(), j.GetGpuType())
}

// rows turns jobs into display rows. perTask (squeue -r, sacct) shows
// one row per array task; otherwise an array's pending tasks share one
// row, as Slurm shows them, those alike (rowKey) together.
func (v arrayView) rows(jobs []*loomv1.Job, perTask bool) []jobRow {
	var out []jobRow
	mergedTask := map[string]bool{} // task records merged into their parent's row
	for _, j := range jobs {
		if !isParent(j) {
			continue
		}
		idx, limit := v.pendingIndexes(j)
		id := j.GetJobId()
		pending := effectiveState(j) == loomv1.JobState_PENDING
		if !perTask && pending {
			// Pending task records of this array join its row.
			for _, t := range v.tasks[id] {
				if effectiveState(t) == loomv1.JobState_PENDING && rowKey(t) == rowKey(j) {
					idx = append(idx, int(t.GetArrayTaskId()))
					mergedTask[t.GetName()] = true
				}
			}
			sort.Ints(idx)
			if len(idx) == 1 {
				// The last one left is that task, as Slurm's
				// "12_3" (no brackets, no %limit).
				out = append(out, jobRow{job: j, id: fmt.Sprintf("%s_%d", id, idx[0]), arrayJobID: id, arrayTask: strconv.Itoa(idx[0]), pending: idx})
			} else if len(idx) > 0 {
				s := slurmspec.FormatIndexes(idx)
				if limit > 0 {
					s += fmt.Sprintf("%%%d", limit)
				}
				out = append(out, jobRow{job: j, id: id + "_[" + s + "]", arrayJobID: id, arrayTask: s, pending: idx})
			}
			continue
		}
		if pending {
			for _, i := range idx {
				out = append(out, jobRow{job: j, id: fmt.Sprintf("%s_%d", id, i), arrayJobID: id, arrayTask: strconv.Itoa(i), pending: []int{i}})
			}
			continue
		}
		if len(v.tasks[id]) == 0 {
			// An array the scheduler keeps as one record.
			out = append(out, jobRow{job: j, id: id, arrayJobID: id, arrayTask: j.GetArray()})
		}
	}
	// Without a parent record, an array's pending tasks still share a row,
	// those alike (the first of them stands for the others).
	pendingTasks := map[string][]*loomv1.Job{}
	groupOf := func(j *loomv1.Job) string { return j.GetArrayJobId() + "\x00" + rowKey(j) }
	if !perTask {
		for _, j := range jobs {
			if a := j.GetArrayJobId(); a != "" && !mergedTask[j.GetName()] && effectiveState(j) == loomv1.JobState_PENDING {
				pendingTasks[groupOf(j)] = append(pendingTasks[groupOf(j)], j)
			}
		}
	}
	for _, j := range jobs {
		if isParent(j) {
			continue
		}
		if a := j.GetArrayJobId(); a != "" {
			if mergedTask[j.GetName()] && !perTask {
				continue
			}
			if group := pendingTasks[groupOf(j)]; !perTask && len(group) > 1 && effectiveState(j) == loomv1.JobState_PENDING {
				if group[0] != j {
					continue
				}
				var idx []int
				for _, t := range group {
					idx = append(idx, int(t.GetArrayTaskId()))
				}
				sort.Ints(idx)
				s := slurmspec.FormatIndexes(idx)
				// Task records carry the array's spec, so its %limit shows as Slurm shows it.
				if spec, err := ParseArray(j.GetArray()); err == nil && spec.Limit > 0 {
					s += fmt.Sprintf("%%%d", spec.Limit)
				}
				out = append(out, jobRow{job: j, id: a + "_[" + s + "]", arrayJobID: a, arrayTask: s, pending: idx})
				continue
			}
			task := strconv.Itoa(int(j.GetArrayTaskId()))
			out = append(out, jobRow{job: j, id: a + "_" + task, arrayJobID: a, arrayTask: task})
			continue
		}
		out = append(out, jobRow{job: j, id: j.GetJobId(), arrayJobID: j.GetJobId(), arrayTask: "N/A"})
	}
	return out
}

// jobSelector is a -j/--jobs list: ids "12" (a job or a whole array) and
// "12_3" (one array task).
type jobSelector struct {
	jobs  map[string]bool
	tasks map[string]bool
}

func parseJobSelector(prog, s string) (*jobSelector, error) {
	sel := &jobSelector{jobs: map[string]bool{}, tasks: map[string]bool{}}
	for _, item := range splitList(s) {
		id, task, isTask := strings.Cut(item, "_")
		if !isDigits(id) || (isTask && !isDigits(task)) {
			return nil, errorf(prog, "Invalid job id: %s", item)
		}
		id = strings.TrimLeft(id, "0")
		if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
			// Job ids start at 1; past int64 is no id either.
			return nil, errorf(prog, "Invalid job id: %s", item)
		}
		if isTask {
			n, err := strconv.Atoi(task)
			if err != nil || n > math.MaxInt32 {
				return nil, errorf(prog, "Invalid job id: %s", item)
			}
			sel.tasks[fmt.Sprintf("%s_%d", id, n)] = true
		} else {
			sel.jobs[id] = true
		}
	}
	return sel, nil
}

// maxListIDs is the most job ids one ListJobs filters on (the gateway's
// MaxFilterValues): a longer selection lists every job and picks.
const maxListIDs = 1000

// listIDs are the job ids a list of the selection's jobs asks for
// (ListJobsRequest.job_ids: a job, or every task of an array): the
// selected jobs', and the arrays' of the selected tasks; nil (every job)
// without a selection or past maxListIDs.
func (s *jobSelector) listIDs() []string {
	if s == nil {
		return nil
	}
	set := map[string]bool{}
	for id := range s.jobs {
		set[id] = true
	}
	for t := range s.tasks {
		id, _, _ := strings.Cut(t, "_")
		set[id] = true
	}
	if len(set) == 0 || len(set) > maxListIDs {
		return nil
	}
	return sortedKeys(set)
}

// matchRow says whether a display row is selected.
func (s *jobSelector) matchRow(r jobRow) bool {
	if s == nil {
		return true
	}
	j := r.job
	if s.jobs[j.GetJobId()] || s.jobs[j.GetArrayJobId()] {
		return true
	}
	for _, i := range r.pending {
		if s.tasks[fmt.Sprintf("%s_%d", r.arrayJobID, i)] {
			return true
		}
	}
	return s.tasks[r.id]
}

// tasksOf is a matching row as the selector names it: a pending array
// record's row whose tasks are asked for by A_i (not the whole array by A)
// gives a row per task asked for, as Slurm's "scontrol show job A_2" prints
// that task (ArrayTaskId=2, its own StdOut); any other row is itself.
func (s *jobSelector) tasksOf(r jobRow) []jobRow {
	if s == nil || len(r.pending) < 2 || s.jobs[r.job.GetJobId()] || s.jobs[r.job.GetArrayJobId()] {
		return []jobRow{r}
	}
	var out []jobRow
	for _, i := range r.pending {
		if id := fmt.Sprintf("%s_%d", r.arrayJobID, i); s.tasks[id] {
			out = append(out, jobRow{job: r.job, id: id, arrayJobID: r.arrayJobID, arrayTask: strconv.Itoa(i), pending: []int{i}})
		}
	}
	if len(out) == 0 {
		return []jobRow{r}
	}
	return out
}

// listJobs fetches the jobs of the cluster filter (all clusters when
// unset) from the gateway, every page of them (at the largest page size:
// the fewest calls).
func (c *cmd) listJobs(ctx context.Context, req *loomv1.ListJobsRequest) ([]*loomv1.Job, error) {
	req.Parent = c.projectName()
	req.Cluster = c.clusterFilter()
	req.PageSize = paging.MaxSize
	var jobs []*loomv1.Job
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		req.PageToken = token
		resp, err := c.jobsClient().ListJobs(cctx, req)
		jobs = append(jobs, resp.GetJobs()...)
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return nil, c.rpcError("slurm_load_jobs error", err)
	}
	return jobs, nil
}

// withArrayTasks completes a filtered job list for the pending array
// parents in it: their task records the filter left out (running or
// finished tasks) are fetched too, so that the tasks each parent still
// stands for are known. The added records are shown only when they pass
// the command's own filters.
func (c *cmd) withArrayTasks(ctx context.Context, jobs []*loomv1.Job, filtered bool) ([]*loomv1.Job, error) {
	if !filtered {
		return jobs, nil
	}
	parents := map[string]bool{}
	users, names := stringSet{}, stringSet{}
	for _, j := range jobs {
		if isParent(j) && effectiveState(j) == loomv1.JobState_PENDING {
			parents[j.GetJobId()] = true
			users[j.GetUser()], names[j.GetDisplayName()] = true, true
		}
	}
	if len(parents) == 0 {
		return jobs, nil
	}
	var ids []string
	if len(parents) <= maxListIDs {
		ids = sortedKeys(parents) // the parents' tasks alone
	}
	more, err := c.listJobs(ctx, &loomv1.ListJobsRequest{Users: users.keys(), Names: names.keys(), JobIds: ids})
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, j := range jobs {
		have[j.GetName()] = true
	}
	for _, j := range more {
		if parents[j.GetArrayJobId()] && !have[j.GetName()] {
			jobs = append(jobs, j)
		}
	}
	return jobs, nil
}

// stringSet is a set of option values (-u, -p, -n, ...); nil matches all,
// an empty one nothing.
type stringSet map[string]bool

// newStringSet is the set of items: nil (all) for a nil list, an empty
// set (none) for an empty one, as when every user -u named was invalid.
func newStringSet(items []string) stringSet {
	if items == nil {
		return nil
	}
	s := stringSet{}
	for _, i := range items {
		s[i] = true
	}
	return s
}

func (s stringSet) match(v string) bool { return s == nil || s[v] }

// keys returns the set's members in order.
func (s stringSet) keys() []string { return sortedKeys(s) }

// stateSet is a -t filter; nil matches all.
type stateSet map[loomv1.JobState]bool

func (s stateSet) match(st loomv1.JobState) bool { return s == nil || s[st] }

func (s stateSet) list() []loomv1.JobState {
	var out []loomv1.JobState
	for _, st := range jobStates {
		if s[st.state] {
			out = append(out, st.state)
		}
	}
	return out
}
