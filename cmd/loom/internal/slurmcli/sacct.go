package slurmcli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	sacctDefaultFields = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
	sacctBriefFields   = "JobID,State,ExitCode"
	// sacctLongFields is -l's list: Slurm 22.05's LONG_FIELDS
	// (src/sacct/sacct.h), in its order.
	sacctLongFields = "JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS," +
		"MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,AllocCPUS,Elapsed,State,ExitCode," +
		"AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ReqMem,ConsumedEnergy,MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask,AveDiskRead," +
		"MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,ReqTRES,AllocTRES,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode," +
		"TRESUsageInMaxTask,TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutMax,TRESUsageOutMaxNode," +
		"TRESUsageOutMaxTask,TRESUsageOutAve,TRESUsageOutTot"
)

var sacctOptions = []optDef{
	{long: []string{"allusers"}, short: 'a', arg: noArg},
	{long: []string{"accounts"}, short: 'A', arg: requiredArg},
	{long: []string{"array"}, arg: noArg},
	{long: []string{"brief"}, short: 'b', arg: noArg},
	{long: []string{"completion"}, short: 'c', arg: noArg},
	{long: []string{"delimiter"}, arg: requiredArg},
	{long: []string{"duplicates"}, short: 'D', arg: noArg},
	{long: []string{"helpformat"}, short: 'e', arg: noArg},
	{long: []string{"endtime"}, short: 'E', arg: requiredArg},
	{long: []string{"federation"}, arg: noArg},
	{long: []string{"help"}, short: 'h', arg: noArg},
	{long: []string{"jobs"}, short: 'j', arg: requiredArg},
	{long: []string{"long"}, short: 'l', arg: noArg},
	{long: []string{"allclusters"}, short: 'L', arg: noArg},
	{long: []string{"local"}, arg: noArg},
	{long: []string{"clusters", "cluster"}, short: 'M', arg: requiredArg},
	{long: []string{"noheader"}, short: 'n', arg: noArg},
	{long: []string{"name"}, arg: requiredArg},
	{long: []string{"nodelist"}, short: 'N', arg: requiredArg},
	{long: []string{"noconvert"}, arg: noArg},
	{long: []string{"format"}, short: 'o', arg: requiredArg},
	{long: []string{"parsable"}, short: 'p', arg: noArg},
	{long: []string{"parsable2"}, short: 'P', arg: noArg},
	{long: []string{"qos"}, short: 'q', arg: requiredArg},
	{long: []string{"partition"}, short: 'r', arg: requiredArg},
	{long: []string{"state"}, short: 's', arg: requiredArg},
	{long: []string{"starttime"}, short: 'S', arg: requiredArg},
	{long: []string{"truncate"}, short: 'T', arg: noArg},
	{long: []string{"user", "uid"}, short: 'u', arg: requiredArg},
	{long: []string{"usage"}, arg: noArg},
	{long: []string{"units"}, arg: requiredArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
	{long: []string{"allocations"}, short: 'X', arg: noArg},
}

// sacctRow is one line of sacct: a job's allocation (step "") or its
// batch step, for one run of the job.
type sacctRow struct {
	job  *loomv1.Job
	id   string
	step string
	// run is the attempt shown; nil means the job's current one.
	run *loomv1.JobRun
	// pendingTasks marks an array's not-yet-started tasks ("12_[3-7]").
	pendingTasks bool
	// jstep is the job step (srun) a "12.0" row shows (sacctsteps.go).
	jstep *loomv1.JobStep
	// derived is a job's row's DerivedExitCode, from its run's job steps
	// ("0:0" when none ended or they are not known).
	derived string
	// cpu is, on a job's row, the CPU time of the steps listed with it
	// (its batch script's and its job steps').
	cpu *usageStat
}

// usage is what the row's step's tasks used (nil: a job's row, or nothing
// reported).
func (r sacctRow) usage() *usageStat {
	switch {
	case r.jstep != nil:
		return statOf(r.jstep.GetTaskUsage())
	case r.step == "batch":
		if u := r.batchRun().GetBatchUsage(); u != nil {
			return statOf([]*loomv1.TaskUsage{u})
		}
	}
	return nil
}

// batchRun is the run a batch step's row shows: its own, else the job's
// current one, its last (nil when the job keeps none).
func (r sacctRow) batchRun() *loomv1.JobRun {
	if r.run != nil {
		return r.run
	}
	if runs := r.job.GetRuns(); len(runs) > 0 {
		return runs[len(runs)-1]
	}
	return nil
}

// cpuTimes is the row's CPU time, user and system: its step's tasks', or a
// job's steps' together.
func (r sacctRow) cpuTimes() (user, system time.Duration) {
	s := r.cpu
	if r.step != "" {
		s = r.usage()
	}
	if s == nil {
		return 0, 0
	}
	return s.user, s.system
}

func (r sacctRow) state() loomv1.JobState {
	if r.jstep != nil {
		return r.jstep.GetState()
	}
	if r.run != nil {
		return r.run.GetState()
	}
	return effectiveState(r.job)
}

func (r sacctRow) started() bool {
	if r.jstep != nil {
		return r.jstep.GetStartTime() != nil
	}
	if r.run != nil {
		return r.run.GetStartTime() != nil
	}
	return r.job.GetStartTime() != nil && r.state() != loomv1.JobState_PENDING && !r.pendingTasks
}

func (r sacctRow) start() *timestamppb.Timestamp {
	if r.jstep != nil {
		return r.jstep.GetStartTime()
	}
	if r.run != nil {
		return r.run.GetStartTime()
	}
	return r.job.GetStartTime()
}

func (r sacctRow) end() *timestamppb.Timestamp {
	if r.jstep != nil {
		return r.jstep.GetEndTime()
	}
	if r.run != nil {
		return r.run.GetEndTime()
	}
	if r.state().Terminal() {
		return r.job.GetEndTime()
	}
	return nil
}

func (r sacctRow) nodes() []string {
	if r.jstep != nil {
		return r.jstep.GetNodes()
	}
	if r.run != nil {
		return r.run.GetNodes()
	}
	return r.job.GetNodes()
}

// exitCode is the row's ExitCode "code:signal", as sacct prints it.
func (r sacctRow) exitCode() string {
	if r.jstep != nil {
		return sacctExitCode(r.jstep.GetExitCode(), r.jstep.ExitSignal)
	}
	if run := r.batchRun(); r.step == "batch" && run != nil && run.BatchExitSignal != nil {
		// The batch script's own end, as its agent reported it: killed
		// by a cancel or the time limit it is 0:15, as Slurm's, where
		// the job's row says 0:0.
		return sacctExitCode(run.GetBatchExitCode(), run.BatchExitSignal)
	}
	if r.run != nil {
		return sacctExitCode(r.run.GetExitCode(), r.run.ExitSignal)
	}
	return sacctExitCode(r.job.GetExitCode(), r.job.ExitSignal)
}

// requested is the job as it asked: for a node range (-N1-3) that got
// its nodes, the same job without them, so it counts its minimum, as
// Slurm 22.05 keeps a job's tres_req (sacct's ReqNodes, ReqCPUS, ReqTRES)
// apart from what it got; a started job without its run's layout
// (node_tasks, node_cpus: an exclusive run's whole nodes are what it got,
// not its ReqCPUS); any other job as it is.
func requested(j *loomv1.Job) *loomv1.Job {
	rng := j.GetMaxNodeCount() > 0 && len(j.GetNodes()) > 0
	if !rng && len(j.GetNodeTasks()) == 0 && len(j.GetNodeCpus()) == 0 {
		return j
	}
	asked := proto.Clone(j).(*loomv1.Job)
	asked.NodeTasks, asked.NodeCpus = nil, nil
	if rng {
		asked.Nodes = nil
	}
	return asked
}

// sacctExitCode is sacct's ExitCode "code:signal": Slurm 22.05's sacct
// (src/sacct/print.c, PRINT_EXITCODE) takes 128 from an exit status of 128
// or more, so a script's `exit 130` is 2:0 there while scontrol (and sacct
// -c's completion file) say 130:0. DerivedExitCode keeps the status whole.
func sacctExitCode(code int32, sig *int32) string {
	status, signal := exitParts(code, sig)
	if status >= 128 {
		status -= 128
	}
	return fmt.Sprintf("%d:%d", status, signal)
}

// elapsed is how long the row's run has lasted.
func (r sacctRow) elapsed(now time.Time) int64 {
	if !r.started() || r.start() == nil {
		return 0
	}
	end := now
	if e := r.end(); e != nil {
		end = e.AsTime()
	}
	return max(int64(end.Sub(r.start().AsTime())/time.Second), 0)
}

// stepState is the batch step's state for a job state, as Slurm records
// it (a killed step is CANCELLED).
func stepState(s loomv1.JobState) string {
	switch s {
	case loomv1.JobState_TIMEOUT, loomv1.JobState_PREEMPTED, loomv1.JobState_NODE_FAIL, loomv1.JobState_CANCELLED:
		return "CANCELLED"
	}
	return stateLong(s)
}

// exitCodeString is Slurm's ExitCode "code:signal" (sacct, scontrol).
func exitCodeString(code int32, sig *int32) string {
	status, signal := exitParts(code, sig)
	return fmt.Sprintf("%d:%d", status, signal)
}

// exitParts splits Loom's exit code into Slurm's exit status and signal.
// sig is the signal the agent said ended the program (0: it exited with
// code, even 128+n by itself); nil where it did not say (records from
// before it did, ends that are not a program's): then a code 128+n
// (n <= 64) reads as signal n, as Loom reports a death by signal n.
func exitParts(code int32, sig *int32) (status, signal int32) {
	switch {
	case sig != nil && *sig > 0:
		return 0, *sig
	case sig != nil:
		return code, 0
	case code > 128 && code < 128+65:
		return 0, code - 128
	}
	return code, 0
}

// sacctField is one sacct field: its width (negative: left-justified)
// and value.
type sacctField struct {
	name  string
	width int
	value func(r sacctRow) string
}

// sacctFields are the fields sacct knows, with Slurm's default widths.
func sacctFields(now time.Time, loc *time.Location, limit func(*loomv1.Job) int64, u units) []sacctField {
	ts := func(t *timestamppb.Timestamp, unknown string) string {
		if t == nil {
			return unknown
		}
		return formatTimestamp(t.AsTime(), loc)
	}
	job := func(f func(r sacctRow) string) func(r sacctRow) string {
		return func(r sacctRow) string {
			if r.step != "" {
				return ""
			}
			return f(r)
		}
	}
	cpus := func(r sacctRow) int {
		if !r.started() {
			return 0
		}
		j := r.job
		if r.run != nil && (len(j.GetNodeTasks()) > 0 || len(j.GetNodeCpus()) > 0) {
			// An earlier run (-D): the record's layout is the current
			// run's, which may have other nodes; the request's spread.
			j = proto.Clone(j).(*loomv1.Job)
			j.NodeTasks, j.NodeCpus = nil, nil
		}
		if r.step == "batch" {
			if _, _, ok := runLayout(j); ok || j.GetCpusPerGpu() > 0 {
				// The batch host's, as Slurm's: the run's first node
				// (3 of -N2 -n4's packed 3,1), not an even share.
				return jobNodeCPUs(j)[0]
			}
			return max(jobCPUs(j)/max(len(r.nodes()), 1), 1)
		}
		if r.jstep != nil {
			return stepCPUs(j, r.jstep)
		}
		return jobCPUs(j)
	}
	// allocNodes is how many nodes a started row holds: the batch step
	// runs on the first node alone.
	allocNodes := func(r sacctRow) int {
		if r.step == "batch" {
			return 1
		}
		return max(len(r.nodes()), 1)
	}
	tres := func(r sacctRow, alloc bool) string {
		if alloc && !r.started() {
			return ""
		}
		j := r.job
		n, ncpus := jobNodeCount(requested(j)), jobCPUs(requested(j))
		if alloc {
			n, ncpus = allocNodes(r), cpus(r)
		}
		parts := []string{fmt.Sprintf("billing=%d", ncpus), fmt.Sprintf("cpu=%d", ncpus)}
		gpus := int(j.GetGpus())
		if g := int(j.GetGpusPerNode()); g > 0 {
			gpus = g * n
		}
		if alloc && j.GetAllocGpus() > 0 {
			gpus = int(j.GetAllocGpus())
			if r.step == "batch" {
				gpus = max(gpus/max(len(r.nodes()), 1), 1)
			}
		}
		if gpus > 0 {
			parts = append(parts, fmt.Sprintf("gres/gpu=%d", gpus))
		}
		if m := j.GetMemMb(); m > 0 {
			parts = append(parts, "mem="+memString(m*int64(n)))
		}
		parts = append(parts, fmt.Sprintf("node=%d", n))
		return strings.Join(parts, ",")
	}
	fields := []sacctField{
		{"Account", 10, func(r sacctRow) string { return r.job.GetAccount() }},
		{"AllocCPUS", 10, func(r sacctRow) string { return strconv.Itoa(cpus(r)) }},
		{"AllocNodes", 10, func(r sacctRow) string {
			if !r.started() {
				return "0"
			}
			return strconv.Itoa(allocNodes(r))
		}},
		{"AllocTRES", 10, func(r sacctRow) string { return tres(r, true) }},
		{"Cluster", 10, func(r sacctRow) string { return shortName(r.job.GetCluster()) }},
		{"Comment", 14, func(sacctRow) string { return "" }},
		{"CPUTime", 10, func(r sacctRow) string { return formatDuration(r.elapsed(now) * int64(cpus(r))) }},
		{"CPUTimeRAW", 10, func(r sacctRow) string { return strconv.FormatInt(r.elapsed(now)*int64(cpus(r)), 10) }},
		{"DerivedExitCode", 15, job(func(r sacctRow) string {
			if r.derived == "" {
				return "0:0"
			}
			return r.derived
		})},
		{"Elapsed", 10, func(r sacctRow) string { return formatDuration(r.elapsed(now)) }},
		{"ElapsedRaw", 10, func(r sacctRow) string { return strconv.FormatInt(r.elapsed(now), 10) }},
		{"Eligible", 19, job(func(r sacctRow) string { return ts(eligibleAt(r.job), "Unknown") })},
		{"End", 19, func(r sacctRow) string { return ts(r.end(), "Unknown") }},
		{"ExitCode", 8, func(r sacctRow) string { return r.exitCode() }},
		{"Group", 9, job(func(r sacctRow) string { return r.job.GetUser() })},
		{"JobID", -12, func(r sacctRow) string { return r.id }},
		{"JobIDRaw", -12, func(r sacctRow) string {
			if r.step != "" {
				return r.job.GetJobId() + "." + r.step
			}
			return r.job.GetJobId()
		}},
		{"JobName", 10, func(r sacctRow) string {
			if r.jstep != nil {
				return stepName(r.jstep)
			}
			if r.step != "" {
				return r.step
			}
			return r.job.GetDisplayName()
		}},
		{"NCPUS", 10, func(r sacctRow) string { return strconv.Itoa(cpus(r)) }},
		{"NNodes", 8, func(r sacctRow) string {
			if r.started() {
				return strconv.Itoa(allocNodes(r))
			}
			return strconv.Itoa(jobNodeCount(r.job))
		}},
		{"NodeList", 15, func(r sacctRow) string {
			if !r.started() {
				return "None assigned"
			}
			if r.step == "batch" {
				if h := r.job.GetBatchHost(); h != "" {
					return h
				}
				if n := r.nodes(); len(n) > 0 {
					return n[0]
				}
			}
			return compressHosts(r.nodes())
		}},
		{"NTasks", 8, func(r sacctRow) string {
			if r.jstep != nil {
				return strconv.Itoa(int(r.jstep.GetNumTasks()))
			}
			if r.step == "batch" {
				return "1"
			}
			return ""
		}},
		{"Partition", 10, job(func(r sacctRow) string { return r.job.GetPartition() })},
		{"Priority", 10, job(func(r sacctRow) string { return strconv.FormatInt(r.job.GetPriority(), 10) })},
		{"QOS", 10, job(func(r sacctRow) string { return r.job.GetQos() })},
		{"Reason", 22, job(func(r sacctRow) string { return jobReason(r.job) })},
		{"ReqCPUS", 8, job(func(r sacctRow) string { return strconv.Itoa(jobCPUs(requested(r.job))) })},
		{"ReqMem", 10, job(func(r sacctRow) string { return memString(r.job.GetMemMb()) })},
		{"ReqNodes", 8, job(func(r sacctRow) string { return strconv.Itoa(jobNodeCount(requested(r.job))) })},
		{"ReqTRES", 10, job(func(r sacctRow) string { return tres(r, false) })},
		{"Reserved", 10, job(func(r sacctRow) string {
			elig := eligibleAt(r.job)
			if elig == nil {
				return "00:00:00"
			}
			until := now
			if r.started() && r.start() != nil {
				until = r.start().AsTime()
			}
			return formatDuration(max(int64(until.Sub(elig.AsTime())/time.Second), 0))
		})},
		{"Start", 19, func(r sacctRow) string {
			if !r.started() {
				// A job that ended without starting (cancelled while
				// pending) started and ended at once, as slurmctld
				// records it: Start is its End, Elapsed zero.
				if r.run == nil && r.jstep == nil && r.state().Terminal() && !r.pendingTasks {
					return ts(r.end(), "Unknown")
				}
				return "Unknown"
			}
			return ts(r.start(), "Unknown")
		}},
		{"State", 10, func(r sacctRow) string {
			if r.step != "" {
				// A job step cancelled by scancel JOB.STEP: who, as for
				// a job (Slurm keeps each step's requid).
				if by := r.jstep.GetCancelledBy(); by != "" && r.jstep.GetState() == loomv1.JobState_CANCELLED {
					return cancelledBy(by)
				}
				return stepState(r.state())
			}
			if by := r.job.GetCancelledBy(); by != "" && r.run == nil && r.state() == loomv1.JobState_CANCELLED {
				return cancelledBy(by)
			}
			return stateLong(r.state())
		}},
		{"Submit", 19, func(r sacctRow) string { return ts(r.job.GetSubmitTime(), "Unknown") }},
		{"Suspended", 10, func(sacctRow) string { return "00:00:00" }},
		{"Timelimit", 10, job(func(r sacctRow) string {
			l := limit(r.job)
			if l < 0 {
				return "UNLIMITED"
			}
			return formatDuration(l)
		})},
		{"TimelimitRaw", 10, job(func(r sacctRow) string {
			l := limit(r.job)
			if l < 0 {
				return "UNLIMITED"
			}
			return strconv.FormatInt(l/60, 10)
		})},
		{"User", 9, job(func(r sacctRow) string { return r.job.GetUser() })},
		{"WorkDir", 20, job(func(r sacctRow) string { return r.job.GetWorkDir() })},
		{"TotalCPU", 10, func(r sacctRow) string { u, sys := r.cpuTimes(); return cpuTotal(u + sys) }},
		{"UserCPU", 10, func(r sacctRow) string { u, _ := r.cpuTimes(); return cpuTotal(u) }},
		{"SystemCPU", 10, func(r sacctRow) string { _, sys := r.cpuTimes(); return cpuTotal(sys) }},
	}
	// The statistics of a step's tasks (usage.go); empty on a job's row
	// and where nothing was reported.
	for _, f := range usageFields(u) {
		if f.name == "NTasks" {
			continue // sacct's own, above
		}
		width := f.width
		if f.name == "AveDiskRead" || f.name == "AveDiskWrite" {
			width = 14 // sacct.c's; sstat.c's is 12
		}
		fields = append(fields, sacctField{f.name, width, func(r sacctRow) string {
			if s := r.usage(); s != nil {
				return f.value(s)
			}
			return ""
		}})
	}
	return fields
}

// parseSacctFormat parses --format "Field[%width],...": names are matched
// case-insensitively, or by a unique prefix; a width is at most
// maxFieldWidth either way (wider asks get that width).
func parseSacctFormat(spec string, known []sacctField) ([]sacctField, error) {
	var out []sacctField
	for _, item := range splitList(spec) {
		name, width, hasWidth := strings.Cut(item, "%")
		var f *sacctField
		for i := range known {
			if strings.EqualFold(known[i].name, name) {
				f = &known[i]
				break
			}
		}
		if f == nil {
			for i := range known {
				if len(name) > 0 && strings.HasPrefix(strings.ToLower(known[i].name), strings.ToLower(name)) {
					f = &known[i]
					break
				}
			}
		}
		if f == nil {
			return nil, fmt.Errorf("Invalid field requested: %q", name)
		}
		field := *f
		if hasWidth {
			n, err := strconv.Atoi(width)
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				n, err = maxFieldWidth, nil // past int: as wide as allowed, its sign kept below
				if strings.HasPrefix(width, "-") {
					n = -maxFieldWidth
				}
			}
			if err != nil {
				return nil, fmt.Errorf("Invalid field width: %q", item)
			}
			// Every cell is padded to its width, as squeue's -o: bound it.
			n = max(-maxFieldWidth, min(n, maxFieldWidth))
			if n != 0 {
				field.width = n
			}
		}
		out = append(out, field)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no fields in --format %q", spec)
	}
	return out, nil
}

// sacctCell lays out one value as Slurm's print_fields_str: truncated
// values end in '+'.
func sacctCell(b *strings.Builder, v string, width int) {
	abs := width
	if abs < 0 {
		abs = -abs
	}
	if n := len([]rune(v)); n > abs && abs > 0 {
		v = firstRunes(v, abs-1) + "+"
	}
	if width < 0 {
		fmt.Fprintf(b, "%-*s ", abs, v)
	} else {
		fmt.Fprintf(b, "%*s ", abs, v)
	}
}

// sacct is the sacct command.
func (c *cmd) sacct(ctx context.Context, args []string) error {
	p := &optParser{prog: "sacct", defs: sacctOptions}
	opts, rest, err := p.parse(args)
	if err != nil {
		return usage("sacct", err)
	}
	if len(rest) > 0 {
		return c.errorf("Unrecognized option: %s", rest[0])
	}
	// The fields, as Slurm 22.05's options.c gathers them: each -o adds
	// to the list, -b's and then -l's fields come after, and
	// SACCT_FORMAT (else the default) only when there is none.
	var formats []string
	brief, long := false, false
	var users, accounts, names, parts, qos []string
	var sel *jobSelector
	var states stateSet
	var nodes map[string]bool
	var clusters []string // -M's list: one table of their jobs
	var startT, endT *time.Time
	allUsers, allocOnly, noHeader, dups, helpFormatOnly := false, false, false, false, false
	unitsOpt := defaultUnits
	parsable := 0 // 1: -p (trailing delimiter), 2: -P
	delim := "|"
	for _, o := range opts {
		switch o.key {
		case "help", "usage":
			fmt.Fprint(c.stdout, sacctUsage)
			return nil
		case "version":
			return c.printVersion()
		case "allusers":
			allUsers = true
		case "accounts":
			accounts = splitList(o.value)
		case "brief":
			brief = true
		case "completion":
			return c.errorf("job completion records (-c) are not kept by Loom; use sacct without -c")
		case "delimiter":
			delim = o.value
		case "duplicates":
			dups = true
		case "helpformat":
			helpFormatOnly = true
		case "endtime":
			t, err := parseSacctTime(o.value, c.now)
			if err != nil {
				return c.errorf("Invalid time specification (--endtime) %q: %v", o.value, err)
			}
			endT = &t
		case "jobs":
			if sel, err = parseJobSelector("sacct", o.value); err != nil {
				return err
			}
		case "long":
			long = true
		case "allclusters":
			c.env.Cluster, clusters = "", nil
		case "clusters":
			if clusters, err = c.clusterList(o.value); err != nil {
				return err
			}
		case "noheader":
			noHeader = true
		case "name":
			names = splitList(o.value)
		case "nodelist":
			hosts, err := hostlist.Expand(o.value)
			if err != nil {
				return c.errorf("Invalid node list: %s", o.value)
			}
			nodes = map[string]bool{}
			for _, h := range hosts {
				nodes[h] = true
			}
		case "format":
			formats = append(formats, o.value)
		case "parsable":
			parsable = 1
		case "parsable2":
			parsable = 2
		case "qos":
			qos = splitList(o.value)
		case "partition":
			parts = splitList(o.value)
		case "state":
			set, err := parseJobStates("sacct", o.value)
			if err != nil {
				// Slurm 22.05's sacct names the state it does not know, fatally.
				bad := o.value
				for _, item := range splitList(o.value) {
					if _, err := parseJobStates("sacct", item); err != nil {
						bad = item
						break
					}
				}
				return &Error{Code: 1, Text: fmt.Sprintf("sacct: fatal: unrecognized job state value '%s'", bad)}
			}
			if set != nil { // "all" leaves the filter as it was
				states = set
			}
		case "starttime":
			t, err := parseSacctTime(o.value, c.now)
			if err != nil {
				return c.errorf("Invalid time specification (--starttime) %q: %v", o.value, err)
			}
			startT = &t
		case "user":
			valid, invalid := resolveUsers(splitList(o.value))
			if len(invalid) > 0 {
				return c.errorf("Invalid user id: %s", invalid[0])
			}
			users = valid
		case "allocations":
			allocOnly = true
		case "noconvert":
			unitsOpt.raw = true
		case "units":
			spec, ok := parseUnits(o.value)
			if !ok {
				return c.errorf("Invalid unit type '%s'. Possible options are KMGTP", o.value)
			}
			unitsOpt.spec = spec
		}
	}
	if long && len(formats) > 0 {
		return &Error{Code: 1, Text: "sacct: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry."}
	}
	if brief {
		formats = append(formats, sacctBriefFields)
	}
	if long {
		formats = append(formats, sacctLongFields)
	}
	fieldSpec := strings.Join(formats, ",")
	if len(formats) == 0 {
		fieldSpec = sacctDefaultFields
		if v := c.env.Environ["SACCT_FORMAT"]; v != "" {
			fieldSpec = v
		}
	}
	view := &squeueView{now: c.env.nowIn(c.loc), loc: c.loc}
	known := sacctFields(view.now, c.loc, view.timeLimit, unitsOpt)
	if helpFormatOnly {
		fmt.Fprint(c.stdout, helpFormat(known))
		return nil
	}
	fields, err := parseSacctFormat(fieldSpec, known)
	if err != nil {
		return c.errorf("%v", err) // "sacct: error: Invalid field requested: ...", as Slurm 22.05's
	}
	if users == nil && !allUsers && c.env.User != "" && c.env.User != "root" {
		users = []string{c.env.User}
	}
	// Slurm's default window (man sacct, DEFAULT TIME WINDOW;
	// slurmdb_job_cond_def_start_end): with -s, the instant now, -E
	// defaulting to -S, and with -j and no -S the Epoch to now; without
	// -s, since midnight to now (with -j the Epoch).
	if states != nil {
		if startT == nil && sel == nil {
			t := view.now
			startT = &t
		}
		if endT == nil {
			t := view.now
			if startT != nil {
				t = *startT
			}
			endT = &t
		}
	} else if startT == nil && sel == nil {
		y, m, d := view.now.Date()
		t := time.Date(y, m, d, 0, 0, 0, 0, c.loc)
		startT = &t
	}
	// With -s and a window, a state is one the job was in during it
	// (inStateWindow): PENDING and RUNNING are asked of every job, as a
	// job that ran then may have ended since.
	stateWindow := states != nil
	listStates := states.list()
	if stateWindow && (states[loomv1.JobState_PENDING] || states[loomv1.JobState_RUNNING]) {
		listStates = nil
	}
	// A window that ends before it starts (-E before -S, or before today's
	// midnight; -S after now) is Slurm's error, not an empty list.
	if end := view.now; startT != nil {
		if endT != nil {
			end = *endT
		}
		if startT.After(end) {
			return c.errorf("Start time (%s) requested is after end time (%s).", formatTimestamp(*startT, c.loc), formatTimestamp(end, c.loc))
		}
	}
	// -M a,b: the jobs of each cluster in one table, as Slurm's sacct
	// asks its database for the list at once (no CLUSTER: lines).
	var jobs []*loomv1.Job
	err = c.forEachCluster(clusters, func(int) error {
		js, err := c.listJobs(ctx, &loomv1.ListJobsRequest{Users: users, Partitions: parts, Names: names, States: listStates, JobIds: sel.listIDs()})
		if err != nil {
			return err
		}
		if js, err = c.withArrayTasks(ctx, js, listStates != nil); err != nil {
			return err
		}
		jobs = append(jobs, js...)
		return nil
	})
	if err != nil {
		return err
	}
	q := &squeueQuery{users: newStringSet(users), parts: newStringSet(parts), names: newStringSet(names),
		accounts: newStringSet(accounts), qos: newStringSet(qos), nodes: nodes, sel: sel, states: states, anyState: true}
	inTime := func(r jobRow) bool { return inWindow(r.job, sel != nil, startT, endT, view.now) }
	if stateWindow {
		q.states = nil
		start := time.Unix(0, 0) // -j -s without -S: since the Epoch, as Slurm's
		if startT != nil {
			start = *startT
		}
		end := time.Unix(windowEnd(startT, endT, view.now), 0)
		inTime = func(r jobRow) bool { return inStateWindow(r, states, start, end) }
	}
	if formatSacctUses(fields, "Timelimit", "TimelimitRaw") {
		view.limits = c.partitionLimits(ctx, jobs)
	}
	rows := newArrayView(jobs).rows(jobs, false)
	sort.SliceStable(rows, func(a, b int) bool { return lessID(rows[a].id, rows[b].id) })
	var out []sacctRow
	var stepLookups stepLookups
	derived := formatSacctUses(fields, "DerivedExitCode")
	// withDerived is a job's row with its run's DerivedExitCode, when asked
	// for: as the scheduler kept it, else (a record from before) from the
	// steps its step rows list (asked for once).
	withDerived := func(r sacctRow) sacctRow {
		if derived && r.started() {
			r.derived, _ = c.derivedOf(ctx, r.job, r.run, &stepLookups)
		}
		return r
	}
	for _, r := range rows {
		if !q.match(r) || !inTime(r) {
			continue
		}
		pending := len(r.pending) > 0 // an array's tasks not started ("12_[3-7]", "12_7")
		if dups {
			runs := r.job.GetRuns()
			for i := 0; i+1 < len(runs); i++ {
				run := runs[i]
				out = append(out, withDerived(sacctRow{job: r.job, id: r.id, run: run}))
				if !allocOnly && run.GetStartTime() != nil {
					out = append(out, sacctRow{job: r.job, id: r.id + ".batch", step: "batch", run: run})
					out = append(out, c.stepRows(ctx, r.job, run, r.id, &stepLookups)...)
				}
			}
		}
		row := withDerived(sacctRow{job: r.job, id: r.id, pendingTasks: pending})
		out = append(out, row)
		if !allocOnly && row.started() {
			out = append(out, sacctRow{job: r.job, id: r.id + ".batch", step: "batch"})
			out = append(out, c.stepRows(ctx, r.job, nil, r.id, &stepLookups)...)
		}
	}

	// A job's row counts the CPU time of the steps listed after it.
	job := -1
	for i := range out {
		if out[i].step == "" {
			job = i
			continue
		}
		if job >= 0 && out[job].job == out[i].job {
			if out[job].cpu == nil {
				out[job].cpu = &usageStat{}
			}
			out[job].cpu.addCPU(out[i].usage())
		}
	}

	fmt.Fprint(c.stdout, fieldsOut{parsable: parsable, delim: delim, noHeader: noHeader}.sacctTable(fields, out))
	return nil
}

// sacctTable lays rows out in fields' columns (sacct's and sstat's).
func (o fieldsOut) sacctTable(fields []sacctField, rows []sacctRow) string {
	names, widths := make([]string, len(fields)), make([]int, len(fields))
	for i, f := range fields {
		names[i], widths[i] = f.name, f.width
	}
	cells := make([][]string, len(rows))
	for k, r := range rows {
		cells[k] = make([]string, len(fields))
		for i, f := range fields {
			cells[k][i] = f.value(r)
		}
	}
	var b strings.Builder
	o.writeFields(&b, names, widths, cells)
	return b.String()
}

// helpFormat is --helpformat's list of field names, four to a line.
func helpFormat(fields []sacctField) string {
	var b strings.Builder
	for i, f := range fields {
		fmt.Fprintf(&b, "%-20s", f.name)
		if i%4 == 3 || i == len(fields)-1 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func formatSacctUses(fields []sacctField, names ...string) bool {
	for _, f := range fields {
		for _, n := range names {
			if f.name == n {
				return true
			}
		}
	}
	return false
}

// inWindow says whether a job was around in the window [start, end), to
// the second, as Slurm 22.05's accounting query asks without -s
// (as_mysql_jobacct_process.c): it ended at or after start, or has not
// ended, and it was eligible before end (eligibleAt: a job whose --begin
// is still ahead, or held, is not listed), or, for jobs named by -j
// (byID), submitted before end. A nil end is now; an end that is now or
// start takes one second more, as slurmdb_job_cond_def_start_end does, so
// that second is in the window.
func inWindow(j *loomv1.Job, byID bool, start, end *time.Time, now time.Time) bool {
	if start != nil && j.GetEndTime() != nil && effectiveState(j).Terminal() && j.GetEndTime().GetSeconds() < start.Unix() {
		return false
	}
	e := windowEnd(start, end, now)
	if byID {
		return j.GetSubmitTime() == nil || j.GetSubmitTime().GetSeconds() < e
	}
	el := eligibleAt(j)
	return el != nil && el.GetSeconds() < e
}

// windowEnd is the window's end, in seconds, as Slurm 22.05 asks its
// database ([S,E)): end, else now, one second later where it is now or
// start, so that second is in the window (slurmdb_job_cond_def_start_end).
func windowEnd(start, end *time.Time, now time.Time) int64 {
	e := now.Unix()
	if end != nil {
		e = end.Unix()
	}
	if e == now.Unix() || start != nil && e == start.Unix() {
		e++
	}
	return e
}

// inStateWindow reports whether row r was in one of states between start
// and end, as Slurm 22.05's accounting query asks (as_mysql_jobacct_process.c,
// _state_time_string), to the second: PENDING, eligible before end and
// still waiting, or started (or ended without starting) after start;
// RUNNING, started before end and still running or ended after start; an
// end state, ended in it between start and end, both included; any other,
// in it now.
func inStateWindow(r jobRow, states stateSet, start, end time.Time) bool {
	j := r.job
	st := effectiveState(j)
	secs := func(t *timestamppb.Timestamp) int64 {
		if t == nil {
			return 0
		}
		return t.GetSeconds()
	}
	// 0: not started, not ended (Slurm's time_start, time_end).
	began, ended := secs(j.GetStartTime()), int64(0)
	if st == loomv1.JobState_PENDING || len(r.pending) > 0 || strings.Contains(r.id, "[") {
		began = 0
	}
	if st.Terminal() {
		ended = secs(j.GetEndTime())
	}
	eligible := secs(eligibleAt(j))
	s, e := start.Unix(), end.Unix()
	for want := range states {
		switch {
		case want == loomv1.JobState_PENDING:
			if eligible != 0 && eligible < e &&
				((began != 0 && s < began) || (began == 0 && ended != 0 && s < ended) || (began == 0 && ended == 0 && st == loomv1.JobState_PENDING)) {
				return true
			}
		case want == loomv1.JobState_RUNNING:
			if began != 0 && began < e && ((ended != 0 && s < ended) || (ended == 0 && !st.Terminal())) {
				return true
			}
		case want.Terminal():
			if st == want && ended != 0 && s <= ended && ended <= e {
				return true
			}
		case st == want:
			return true
		}
	}
	return false
}

// parseSacctTime parses -S/-E: Slurm's time forms (as --begin), plus
// YYYY-MM-DD[THH:MM[:SS]] and MMDD[YY].
func parseSacctTime(s string, now time.Time) (time.Time, error) {
	return ParsePast(s, now)
}

const sacctUsage = `Usage: sacct [options]
	Use --help for help
  -a, --allusers      Display jobs for all users.
  -A, --accounts      Use this comma separated list of accounts to select jobs.
  -b, --brief         Equivalent to '--format=jobstep,state,exitcode'.
  -D, --duplicates    Show all runs of requeued jobs.
  -e, --helpformat    Print a list of fields that can be specified with '--format'.
  -E, --endtime       Select jobs eligible before this time.
  -j, --jobs          Format is <job(.step)>. Display information about this job.
  -l, --long          Equivalent to specifying many fields.
  -M, --clusters      Cluster to query (overrides LOOM_CLUSTER).
  -n, --noheader      No header will be added to the beginning of output.
      --name          Display jobs that have any of these name(s).
  -N, --nodelist      Display jobs that ran on any of these nodes.
  -o, --format        Comma separated list of fields (Field%width).
  -p, --parsable      Output will be '|' delimited with a '|' at the end.
  -P, --parsable2     Output will be '|' delimited without a '|' at the end.
  -q, --qos           Only send data about jobs using these qos.
  -r, --partition     Comma separated list of partitions to select jobs from.
  -s, --state         Select jobs based on the state they were in during the time window.
  -S, --starttime     Select jobs eligible after this time (default: midnight; with -s, now).
  -u, --user          Use this comma separated list of users to select jobs.
  -X, --allocations   Only show statistics relevant to the job allocation itself.
      --delimiter     ASCII characters used to separate the fields when using -p or -P.
`

// cancelledBy is sacct's State of a job or step that user cancelled,
// Slurm's "CANCELLED by UID" (src/sacct/print.c, PRINT_STATE): the
// canceller's uid where this machine has their account, their name
// otherwise (Loom's users are names).
func cancelledBy(user string) string {
	return "CANCELLED by " + ownerIDs(user).uid
}
