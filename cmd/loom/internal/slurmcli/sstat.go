package slurmcli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// sstatDefaultFields is sstat's default format (Slurm 22.05).
const sstatDefaultFields = "JobID,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS," +
	"MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,AveCPUFreq," +
	"ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ConsumedEnergy,MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask," +
	"AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,TRESUsageInAve,TRESUsageInMax," +
	"TRESUsageInMaxNode,TRESUsageInMaxTask,TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot," +
	"TRESUsageOutAve,TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutMin,TRESUsageOutMinNode," +
	"TRESUsageOutMinTask,TRESUsageOutTot"

var sstatOptions = []optDef{
	{long: []string{"allsteps"}, short: 'a', arg: noArg},
	{long: []string{"helpformat"}, short: 'e', arg: noArg},
	{long: []string{"help"}, short: 'h', arg: noArg},
	{long: []string{"pidformat"}, short: 'i', arg: noArg},
	{long: []string{"jobs"}, short: 'j', arg: requiredArg},
	{long: []string{"noheader"}, short: 'n', arg: noArg},
	{long: []string{"noconvert"}, arg: noArg},
	{long: []string{"format", "fields"}, short: 'o', arg: requiredArg},
	{long: []string{"parsable"}, short: 'p', arg: noArg},
	{long: []string{"parsable2"}, short: 'P', arg: noArg},
	{long: []string{"usage"}, arg: noArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
}

// sstatRow is one running step sstat shows: its id ("12.0", "12.batch"),
// nodes and its tasks' usage so far.
type sstatRow struct {
	id    string
	nodes []string
	stat  *usageStat
}

// sstatFields are the fields sstat knows: JobID, Nodelist and the
// statistics of usage.go.
func sstatFields(u units) []sacctField {
	fields := []sacctField{
		{"JobID", -12, func(r sacctRow) string { return r.id }},
		{"Nodelist", 20, func(r sacctRow) string {
			if r.step == "batch" {
				return r.run.GetBatchUsage().GetNode()
			}
			return compressHosts(r.nodes())
		}},
	}
	for _, f := range usageFields(u) {
		fields = append(fields, sacctField{f.name, f.width, func(r sacctRow) string {
			s := r.usage()
			if s == nil {
				s = &usageStat{}
			}
			return f.value(s)
		}})
	}
	return fields
}

// sstat is the sstat command: what a running job's steps have used so far,
// as their agents last reported it (every accounting interval, 30 s by
// default).
func (c *cmd) sstat(ctx context.Context, args []string) error {
	p := &optParser{prog: "sstat", defs: sstatOptions}
	opts, rest, err := p.parse(args)
	if err != nil {
		return usage("sstat", err)
	}
	spec, refs := sstatDefaultFields, rest
	all, noHeader, helpFormatOnly, parsable := false, false, false, 0
	unitsOpt := defaultUnits
	for _, o := range opts {
		switch o.key {
		case "help", "usage":
			fmt.Fprint(c.stdout, sstatUsage)
			return nil
		case "version":
			return c.printVersion()
		case "allsteps":
			all = true
		case "helpformat":
			helpFormatOnly = true
		case "pidformat":
			return c.errorf("--pidformat is not supported: Loom does not report a step's process ids; use --format")
		case "jobs":
			refs = append(refs, splitList(o.value)...)
		case "noheader":
			noHeader = true
		case "noconvert":
			unitsOpt.raw = true
		case "format":
			spec = o.value
		case "parsable":
			parsable = 1
		case "parsable2":
			parsable = 2
		}
	}
	known := sstatFields(unitsOpt)
	if helpFormatOnly {
		fmt.Fprint(c.stdout, helpFormat(known))
		return nil
	}
	type ref struct{ job, step string }
	var want []ref
	for _, item := range refs {
		id, step, hasStep := strings.Cut(item, ".")
		base, task, isTask := strings.Cut(id, "_")
		if !isDigits(base) || (isTask && !isDigits(task)) || (hasStep && step != "batch" && !isDigits(step)) {
			return &Error{Code: 1, Text: "sstat: fatal: Bad job/step specified: " + item}
		}
		if hasStep && step != "batch" {
			n, _ := strconv.Atoi(step)
			step = strconv.Itoa(n)
		}
		want = append(want, ref{strings.TrimLeft(id, "0"), step})
	}
	if len(want) == 0 {
		return c.errorf("You didn't give me any jobs to stat.")
	}
	fields, err := parseSacctFormat(spec, known)
	if err != nil {
		return c.errorf("%v", err)
	}
	jobs, err := c.listJobs(ctx, &loomv1.ListJobsRequest{})
	if err == nil {
		jobs, err = c.withArrayTasks(ctx, jobs, false)
	}
	if err != nil {
		return err
	}
	byID := jobsByID(jobs)
	var rows []sacctRow
	for _, w := range want {
		j := byID[w.job]
		if j == nil {
			c.complainf("couldn't get steps for job %s", w.job)
			continue
		}
		got, err := c.sstatRows(ctx, j, w.job, w.step, all)
		if err != nil {
			return err
		}
		rows = append(rows, got...)
	}
	fmt.Fprint(c.stdout, fieldsOut{parsable: parsable, delim: "|", noHeader: noHeader}.sacctTable(fields, rows))
	return nil
}

// jobsByID finds jobs as a user names one: by the id squeue shows ("12",
// an array task's "15_3") or by its own job id (an array task's "17"; the
// array's first task has the array's id, as under Slurm). Pending array
// tasks not split off ("15_[4-7]") are not there: nothing of them runs;
// the last one left ("15_7") is the array's record, as Slurm's.
func jobsByID(jobs []*loomv1.Job) map[string]*loomv1.Job {
	byID := map[string]*loomv1.Job{}
	for _, r := range newArrayView(jobs).rows(jobs, false) {
		if !strings.Contains(r.id, "[") {
			byID[r.id] = r.job
		}
	}
	for _, j := range jobs {
		meta := j.GetArray() != "" && j.GetArrayJobId() == "" // an array's pending tasks
		if _, ok := byID[j.GetJobId()]; !ok && j.GetJobId() != "" && !meta {
			byID[j.GetJobId()] = j
		}
	}
	return byID
}

// sstatRows are the rows of job j (shown as id) for step ("" : its
// lowest-numbered running job step, or with all its batch script and every
// running job step), saying on stderr what is not running.
func (c *cmd) sstatRows(ctx context.Context, j *loomv1.Job, id, step string, all bool) ([]sacctRow, error) {
	if j.GetState() != loomv1.JobState_RUNNING {
		if step != "" {
			c.complainf("StepId=%s.%s not found running.", id, step)
		} else {
			c.complainf("No steps running for job %s", id)
		}
		return nil, nil
	}
	var rows []sacctRow
	if step == "batch" || (step == "" && all) {
		rows = append(rows, batchStatRow(j, id))
	}
	if step == "batch" {
		return rows, nil
	}
	steps, err := c.jobSteps(ctx, j.GetName(), 0)
	if err != nil {
		return nil, c.rpcError("list job steps", err)
	}
	found := false
	for _, s := range steps {
		sid := strconv.Itoa(int(s.GetStepId()))
		if s.GetState() != loomv1.JobState_RUNNING || (step != "" && sid != step) {
			continue
		}
		found = true
		rows = append(rows, sacctRow{job: j, id: id + "." + sid, step: sid, jstep: withTaskSlots(s)})
		if step == "" && !all {
			break // the lowest-numbered one
		}
	}
	if step != "" && !found {
		c.complainf("StepId=%s.%s not found running.", id, step)
	}
	return rows, nil
}

// batchStatRow is the running batch script's row: what it reported so
// far, or zeros on its host before its first report.
func batchStatRow(j *loomv1.Job, id string) sacctRow {
	run := &loomv1.JobRun{Nodes: j.GetNodes()}
	if runs := j.GetRuns(); len(runs) > 0 {
		run = runs[len(runs)-1]
	}
	if run.GetBatchUsage() == nil {
		host := j.GetBatchHost()
		if host == "" && len(run.GetNodes()) > 0 {
			host = run.GetNodes()[0]
		}
		run = &loomv1.JobRun{Attempt: run.GetAttempt(), Nodes: run.GetNodes(), BatchUsage: &loomv1.TaskUsage{Node: host}}
	}
	return sacctRow{job: j, id: id + ".batch", step: "batch", run: run}
}

// withTaskSlots is s with a zero usage for each task its agents have not
// reported yet, so that sstat counts every task and names its node.
func withTaskSlots(s *loomv1.JobStep) *loomv1.JobStep {
	have := map[int32]bool{}
	for _, u := range s.GetTaskUsage() {
		have[u.GetRank()] = true
	}
	out := &loomv1.JobStep{StepId: s.GetStepId(), State: s.GetState(), Nodes: s.GetNodes(), TaskUsage: s.GetTaskUsage()}
	for k, ranks := range stepRanks(s) {
		for _, rank := range ranks {
			if !have[rank] && k < len(s.GetNodes()) {
				out.TaskUsage = append(out.TaskUsage, &loomv1.TaskUsage{Rank: rank, Node: s.GetNodes()[k]})
			}
		}
	}
	return out
}

const sstatUsage = `Usage: sstat [options] -j job[.stepid]
  -a, --allsteps      Print all steps for the given job(s) when no step is
                      specified.
  -e, --helpformat    Print a list of fields that can be specified with the
                      '--format' option
  -h, --help          Print this description of use.
  -j, --jobs          Format is <job(.step)>. Stat this job step or
                      comma-separated list of job steps. This option is
                      required. The step portion will default to the lowest
                      numbered (not batch, extern, etc) step running if not
                      specified, unless the --allsteps flag is set where not
                      specifying a step will result in all running steps to
                      be displayed.
  -n, --noheader      No header will be added to the beginning of output.
                      The default is to print a header.
  -o, --format        Comma separated list of fields. (use "--helpformat"
                      for a list of available fields).
  -p, --parsable      output will be '|' delimited with a '|' at the end
  -P, --parsable2     output will be '|' delimited without a '|' at the end
  --usage             Display brief usage message.
  -V, --version       Print version.

Loom: the figures are what each task's processes used as their node's agent
last reported it (every accounting interval, the agent's -acct-interval, 30 s
by default); page faults, CPU frequencies and energy are not counted (0).
`
