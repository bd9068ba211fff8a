package slurmcli

import (
	"context"
	"fmt"
	osuser "os/user"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/termtext"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

var scontrolOptions = []optDef{
	{long: []string{"all"}, short: 'a', arg: noArg},
	{long: []string{"details"}, short: 'd', arg: noArg},
	{long: []string{"help"}, short: 'h', arg: noArg},
	{long: []string{"hide"}, arg: noArg},
	{long: []string{"clusters", "cluster"}, short: 'M', arg: requiredArg},
	{long: []string{"oneliner"}, short: 'o', arg: noArg},
	{long: []string{"quiet"}, short: 'Q', arg: noArg},
	{long: []string{"usage"}, short: 'u', arg: noArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
}

// record is one "scontrol show" entity: lines of "Key=Value" pairs.
type record [][]string

// write prints a record as scontrol does: the first line flush, the
// others indented by three spaces, then a blank line; oneliner joins
// everything on one line.
func (r record) write(b *strings.Builder, oneliner bool) {
	if oneliner {
		var all []string
		for _, l := range r {
			all = append(all, l...)
		}
		b.WriteString(strings.Join(all, " ") + "\n")
		return
	}
	for i, l := range r {
		if i > 0 {
			b.WriteString("   ")
		}
		b.WriteString(strings.Join(l, " ") + "\n")
	}
	b.WriteString("\n")
}

// scontrol is the scontrol command.
func (c *cmd) scontrol(ctx context.Context, args []string) error {
	p := &optParser{prog: "scontrol", defs: scontrolOptions}
	opts, rest, err := p.parse(args)
	if err != nil {
		return usage("scontrol", err)
	}
	oneliner, quiet, details := false, false, false
	for _, o := range opts {
		switch o.key {
		case "details":
			details = true
		case "help", "usage":
			fmt.Fprint(c.stdout, scontrolUsage)
			return nil
		case "version":
			return c.printVersion()
		case "oneliner":
			oneliner = true
		case "quiet":
			quiet = true
		case "clusters":
			if c.env.Cluster, err = c.oneCluster(o.value); err != nil {
				return err
			}
		}
	}
	if len(rest) == 0 {
		return c.errorf("no command given (interactive mode is not supported by Loom); see scontrol --help")
	}
	verb, params := strings.ToLower(rest[0]), rest[1:]
	switch verb {
	case "show":
		return c.scontrolShow(ctx, params, oneliner, details)
	case "hold", "uhold", "release", "requeue", "requeuehold":
		return c.scontrolJobAction(ctx, verb, params, quiet)
	case "update":
		return c.scontrolUpdate(ctx, params)
	case "reboot", "reboot_nodes":
		return c.scontrolReboot(ctx, params)
	case "version":
		return c.printVersion()
	case "help":
		fmt.Fprint(c.stdout, scontrolUsage)
		return nil
	case "ping":
		return c.scontrolPing(ctx)
	case "suspend", "resume", "top", "notify", "reconfigure", "shutdown", "create", "delete", "listpids", "takeover":
		return c.errorf("%q is not supported by Loom", verb)
	}
	return &Error{Code: 1, Text: fmt.Sprintf("invalid keyword: %s", rest[0])}
}

// scontrolShow is "scontrol show ENTITY [NAME]".
// details is -d: a job's record has its DerivedExitCode line, as Slurm's.
func (c *cmd) scontrolShow(ctx context.Context, params []string, oneliner, details bool) error {
	if len(params) == 0 {
		return c.errorf("too few arguments for keyword:show")
	}
	entity := strings.ToLower(params[0])
	name := ""
	if len(params) > 1 {
		name = params[1]
	}
	if len(params) > 2 {
		return c.errorf("too many arguments for keyword:show")
	}
	var b strings.Builder
	switch {
	case entity == "hostnames":
		expr := name
		if expr == "" {
			expr = c.env.Environ["SLURM_JOB_NODELIST"]
		}
		hosts, err := hostlist.Expand(expr)
		if err != nil {
			return c.errorf("Invalid hostlist: %s", expr)
		}
		for _, h := range hosts {
			b.WriteString(h + "\n")
		}
	case entity == "hostlist" || entity == "hostlistsorted":
		names, err := hostlist.Expand(name)
		if err != nil {
			return c.errorf("Invalid hostlist: %s", name)
		}
		b.WriteString(hostlist.Compress(names) + "\n")
	case strings.HasPrefix("jobs", entity) && len(entity) >= 1 || entity == "jobid":
		if err := c.showJobs(ctx, &b, name, oneliner, details); err != nil {
			return err
		}
	case strings.HasPrefix("nodes", entity) && len(entity) >= 2 || entity == "nodename":
		if err := c.showNodes(ctx, &b, name, oneliner); err != nil {
			return err
		}
	case strings.HasPrefix("steps", entity) && len(entity) >= 2:
		if err := c.showSteps(ctx, &b, name, oneliner); err != nil {
			return err
		}
	case strings.HasPrefix("partitions", entity) && len(entity) >= 2 || entity == "partitionname":
		if err := c.showPartitions(ctx, &b, name, oneliner); err != nil {
			return err
		}
	case strings.HasPrefix("config", entity) && len(entity) >= 2:
		if err := c.showConfig(ctx, &b); err != nil {
			return err
		}
	default:
		return c.errorf("invalid entity:%s for keyword:show", params[0])
	}
	fmt.Fprint(c.stdout, b.String())
	return nil
}

// showJobs prints "scontrol show job [ID]"; with details (-d) each
// record has the job's DerivedExitCode, as the scheduler kept it for its
// current run (from the run's job steps for a record from before).
func (c *cmd) showJobs(ctx context.Context, b *strings.Builder, id string, oneliner, details bool) error {
	var sel *jobSelector
	if id != "" {
		var err error
		if sel, err = parseJobSelector("scontrol", id); err != nil {
			return err
		}
	}
	// The ids asked for only, not the project's every job.
	jobs, err := c.listJobs(ctx, &loomv1.ListJobsRequest{JobIds: sel.listIDs()})
	if err != nil {
		return err
	}
	view := &squeueView{now: c.env.nowIn(c.loc), loc: c.loc}
	if view.jobsByID, err = c.withDependencyTargets(ctx, jobs); err != nil {
		return err
	}
	view.nodes = c.exclusiveNodes(ctx, jobs)
	rows := newArrayView(jobs).rows(jobs, false)
	sort.SliceStable(rows, func(a, b int) bool { return lessID(rows[a].id, rows[b].id) })
	n := 0
	var limitsLoaded bool
	var lookups stepLookups
	for _, r := range rows {
		if !sel.matchRow(r) {
			continue
		}
		if !limitsLoaded && r.job.GetTimeLimitSeconds() == 0 {
			view.limits, limitsLoaded = c.partitionLimits(ctx, jobs), true
		}
		derived := ""
		if details {
			derived = "0:0"
			if r.job.GetStartTime() != nil {
				if d, ok := c.derivedOf(ctx, r.job, nil, &lookups); ok {
					derived = d
				}
			}
		}
		for _, t := range sel.tasksOf(r) {
			jobRecord(t, view, derived).write(b, oneliner)
			n++
		}
	}
	if n == 0 {
		if id != "" {
			return &Error{Code: 1, Text: "slurm_load_jobs error: Invalid job id specified"}
		}
		b.WriteString("No jobs in the system\n")
	}
	return nil
}

func nullIfEmpty(s string) string { return orNull(s) }

// accountIDs are a job owner's UserId and GroupId as Slurm prints them,
// name(uid) and group(gid), when the owner is an account of this (login)
// machine; otherwise the name for both, Loom's users being names.
func accountIDs(user string) (uid, gid string) {
	ids := ownerIDs(user)
	if !ids.account {
		return user, user
	}
	return fmt.Sprintf("%s(%s)", user, ids.uid), fmt.Sprintf("%s(%s)", ids.group, ids.gid)
}

// osIDs is a job owner as squeue's %U, %g and %G print it; account is
// whether it is an account of this machine.
type osIDs struct {
	uid, group, gid string
	account         bool
}

// ownerIDs is user's uid, group name and gid when user is an account of
// this (login) machine, as Slurm's squeue prints them; otherwise the name
// for each, Loom's users being names.
func ownerIDs(user string) osIDs {
	u, err := osuser.Lookup(user)
	if user == "" || err != nil {
		return osIDs{uid: user, group: user, gid: user}
	}
	ids := osIDs{uid: u.Uid, group: user, gid: u.Gid, account: true}
	if g, err := osuser.LookupGroupId(u.Gid); err == nil {
		ids.group = g.Name
	}
	return ids
}

// jobRecord is a job as "scontrol show job" prints it; derived, when not
// empty, is its DerivedExitCode (scontrol -d), on the line after ExitCode.
func jobRecord(r jobRow, v *squeueView, derived string) record {
	j := r.job
	st := effectiveState(j)
	ts := func(t interface{ AsTime() time.Time }, ok bool, none string) string {
		if !ok {
			return none
		}
		return formatTimestamp(t.AsTime(), v.loc)
	}
	head := []string{"JobId=" + j.GetJobId()}
	if r.arrayTask != "N/A" && r.arrayTask != "" && (j.GetArrayJobId() != "" || isParent(j)) {
		head = append(head, "ArrayJobId="+r.arrayJobID, "ArrayTaskId="+r.arrayTask)
		if spec, err := ParseArray(j.GetArray()); err == nil && spec.Limit > 0 {
			head = append(head, fmt.Sprintf("ArrayTaskThrottle=%d", spec.Limit))
		}
	}
	head = append(head, "JobName="+j.GetDisplayName())
	exit := exitCodeString(j.GetExitCode(), j.ExitSignal)
	if runs := j.GetRuns(); (st == loomv1.JobState_CANCELLED || st == loomv1.JobState_TIMEOUT) && j.GetExitCode() == 0 &&
		len(runs) > 0 && runs[len(runs)-1].BatchExitSignal != nil {
		// Slurm 22.05's scontrol shows how the batch script died (0:15)
		// for a job cancelled or timed out while it ran.
		last := runs[len(runs)-1]
		exit = exitCodeString(last.GetBatchExitCode(), last.BatchExitSignal)
	}
	requeue := "1"
	if j.Requeue != nil && !j.GetRequeue() {
		requeue = "0"
	}
	limit := v.timeLimit(j)
	limitStr := "UNLIMITED"
	if limit >= 0 {
		limitStr = formatDuration(limit)
	}
	end := "Unknown"
	switch {
	case j.GetEndTime() != nil && st.Terminal():
		end = formatTimestamp(j.GetEndTime().AsTime(), v.loc)
	case isLive(j) && j.GetStartTime() != nil && limit >= 0:
		end = formatTimestamp(j.GetStartTime().AsTime().Add(time.Duration(limit)*time.Second), v.loc)
	case st == loomv1.JobState_PENDING && j.GetExpectedStartTime() != nil && limit >= 0:
		// As Slurm: the expected start plus the time limit.
		end = formatTimestamp(j.GetExpectedStartTime().AsTime().Add(time.Duration(limit)*time.Second), v.loc)
	}
	started := j.GetStartTime() != nil && st != loomv1.JobState_PENDING
	eligible := eligibleAt(j)
	accrue := eligible
	if accrue == nil && !j.GetHold() && j.GetStateReason() == "JobArrayTaskLimit" {
		// The tasks an array's limit holds back accrue age all the
		// same: Slurm 22.05 shows their AccrueTime beside
		// EligibleTime=Unknown.
		accrue = j.GetSubmitTime()
	}
	nodes := ""
	if len(j.GetNodes()) > 0 {
		nodes = compressHosts(j.GetNodes())
	}
	uid, gid := accountIDs(j.GetUser())
	rec := record{
		head,
		{"UserId=" + uid, "GroupId=" + gid, "MCS_label=N/A"},
		{"Priority=" + strconv.FormatInt(j.GetPriority(), 10), "Nice=" + strconv.Itoa(int(j.GetNice())), "Account=" + nullIfEmpty(j.GetAccount()), "QOS=" + nullIfEmpty(j.GetQos())},
		{"JobState=" + stateLong(st), "Reason=" + jobReason(j), "Dependency=" + dependencyText(j, v.jobsByID)},
		{"Requeue=" + requeue, "Restarts=" + strconv.Itoa(int(j.GetRestartCount())), "BatchFlag=1", "Reboot=0", "ExitCode=" + exit},
		{"RunTime=" + formatDuration(jobElapsed(j, v.now)), "TimeLimit=" + limitStr, "TimeMin=N/A"},
		{"SubmitTime=" + ts(j.GetSubmitTime(), j.GetSubmitTime() != nil, "Unknown"), "EligibleTime=" + ts(eligible, eligible != nil, "Unknown")},
		{"AccrueTime=" + ts(accrue, accrue != nil, "Unknown")},
		{"StartTime=" + ts(startOrExpected(j), started || j.GetExpectedStartTime() != nil, "Unknown"), "EndTime=" + end, "Deadline=N/A"},
		{"SuspendTime=None", "SecsPreSuspend=0", "LastSchedEval=" + ts(j.GetSubmitTime(), j.GetSubmitTime() != nil, "Unknown"), "Scheduler=Main"},
		{"Partition=" + j.GetPartition(), "AllocNode:Sid=" + orNull(j.GetSubmitHost()) + ":0"},
		{"ReqNodeList=" + orNull(compressHosts(j.GetNodelist())), "ExcNodeList=" + orNull(compressHosts(j.GetExclude()))},
		nodeListLine(nodes, j.GetSchedNodes()),
	}
	if derived != "" {
		// Slurm's -d: a line of its own after ExitCode's (rec[4]).
		rec = slices.Insert(rec, 5, []string{"DerivedExitCode=" + derived})
	}
	if h := j.GetBatchHost(); h != "" {
		rec = append(rec, []string{"BatchHost=" + h})
	}
	cpus := v.cpus(j)
	tres := fmt.Sprintf("cpu=%d,node=%d,billing=%d", cpus, jobNodeCount(j), cpus)
	if m := j.GetMemMb(); m > 0 {
		tres = fmt.Sprintf("cpu=%d,mem=%s,node=%d,billing=%d", cpus, memString(m*int64(jobNodeCount(j))), jobNodeCount(j), cpus)
	}
	gpus := int(j.GetGpusPerNode()) * jobNodeCount(j)
	if gpus == 0 {
		gpus = int(j.GetGpus())
	}
	if gpus > 0 {
		tres += fmt.Sprintf(",gres/gpu=%d", gpus)
	}
	over := "OK"
	switch {
	case j.GetExclusive():
		over = "NO"
	case j.GetExclusiveUser():
		over = "USER" // Slurm 22.05's word for --exclusive=user
	}
	command := "(null)"
	switch {
	case len(j.GetCommand()) > 0:
		// Argv is the submitter's, checked for size only: what another
		// user's terminal would take for escapes is printed as U+FFFD.
		command = termtext.Clean(strings.Join(j.GetCommand(), " "), 1<<20)
	case j.GetScriptPath() != "":
		command = j.GetScriptPath()
	}
	// A pattern the job has not opened yet (a pending job's) is shown as
	// Slurm shows it: absolute under WorkDir, its job fields expanded, the
	// node's (%N) and, for several pending tasks, the task's (%a) as
	// written.
	pending := func(pattern string) string {
		if pattern == "" {
			return ""
		}
		if !strings.HasPrefix(pattern, "/") {
			pattern = strings.TrimSuffix(j.GetWorkDir(), "/") + "/" + pattern
		}
		f := slurmspec.PatternFields{JobID: j.GetJobId(), ArrayJobID: j.GetJobId(), ArrayTaskID: "4294967294",
			Name: j.GetDisplayName(), User: j.GetUser(), Node: "%N"}
		if r.arrayJobID != "" && r.arrayTask != "N/A" {
			f.ArrayJobID, f.ArrayTaskID = r.arrayJobID, r.arrayTask
			if len(r.pending) > 1 {
				f.ArrayTaskID = "%a"
			}
		}
		return slurmspec.ExpandPattern(pattern, f)
	}
	stdout := j.GetOutputPath()
	if stdout == "" {
		stdout = pending(j.GetOutputPattern())
	}
	if stdout == "" {
		// Slurm's default, slurm-%j.out (slurm-%A_%a.out for arrays).
		name := "slurm-" + j.GetJobId() + ".out"
		if r.arrayJobID != "" && r.arrayTask != "N/A" {
			name = "slurm-" + r.arrayJobID + "_" + r.arrayTask + ".out"
			if len(r.pending) > 1 {
				name = "slurm-" + r.arrayJobID + "_%a.out"
			}
		}
		stdout = strings.TrimSuffix(j.GetWorkDir(), "/") + "/" + name
	}
	stderr := j.GetErrorPath()
	if stderr == "" {
		stderr = pending(j.GetErrorPattern())
	}
	if stderr == "" {
		stderr = stdout
	}
	rec = append(rec,
		[]string{"NumNodes=" + numNodes(j), "NumCPUs=" + strconv.Itoa(v.cpus(j)), "NumTasks=" + strconv.Itoa(jobTasks(j)),
			"CPUs/Task=" + strconv.Itoa(int(max(j.GetCpusPerTask(), 1))), "ReqB:S:C:T=0:0:*:*"},
		[]string{"TRES=" + tres},
		[]string{"Socks/Node=*", fmt.Sprintf("NtasksPerN:B:S:C=%d:0:*:*", j.GetNtasksPerNode()), "CoreSpec=*"},
		[]string{"MinCPUsNode=" + strconv.Itoa(int(max(j.GetCpusPerTask(), 1))), minMemory(j), "MinTmpDiskNode=0"},
		[]string{"Features=(null)", "DelayBoot=00:00:00"},
		[]string{"OverSubscribe=" + over, "Contiguous=0", "Licenses=(null)", "Network=(null)"},
		[]string{"Command=" + command},
		[]string{"WorkDir=" + j.GetWorkDir()},
		[]string{"StdErr=" + stderr},
		[]string{"StdIn=/dev/null"},
		[]string{"StdOut=" + stdout},
		[]string{"Power="},
	)
	if c := j.GetCpusPerGpu(); c > 0 {
		// --cpus-per-gpu, before the GPUs' line as Slurm 22.05 prints it.
		rec = append(rec, []string{"CpusPerTres=gres:gpu:" + strconv.Itoa(int(c))})
	}
	if n := j.GetGpus(); n > 0 && j.GetGpusPerTask() == 0 {
		// --gpus; with --gpus-per-task the total is Loom's (-n times
		// it), not a --gpus the job gave.
		rec = append(rec, []string{"TresPerJob=" + gpuTres(j.GetGpuType(), n)})
	}
	if t := tresPerNode(j); t != "N/A" {
		rec = append(rec, []string{"TresPerNode=" + t})
	}
	if n := j.GetGpusPerTask(); n > 0 {
		rec = append(rec, []string{"TresPerTask=" + gpuTres(j.GetGpuType(), n)})
	}
	if j.GetPlacement() != "" {
		rec = append(rec, []string{"Placement=" + j.GetPlacement()})
	}
	// Slurm 22.05 ends a job's record with an empty line ("   ", and a
	// trailing space with -o); its node and partition records do not.
	return append(rec, []string{""})
}

// nodeStateFull is n's state as scontrol prints it (slurmNodeState), a
// reboot asked for on a node with jobs on its base state
// (MIXED+REBOOT_REQUESTED), a node not responding with Slurm's flag
// (IDLE+NOT_RESPONDING).
func nodeStateFull(n *loomv1.SlurmNode) string {
	s := slurmNodeState(n.GetState())
	if n.GetState() == loomv1.SlurmNode_REBOOT_REQUESTED && (n.GetAllocGpus() > 0 || n.GetAllocCpus() > 0) {
		s = "MIXED+REBOOT_REQUESTED"
		if c, _ := nodeStateNames(n); strings.HasPrefix(c, "alloc@") {
			s = "ALLOCATED+REBOOT_REQUESTED"
		}
	}
	if n.GetNotResponding() {
		s += "+NOT_RESPONDING"
	}
	return s
}

// slurmNodeState is a node's state as scontrol prints it.
func slurmNodeState(s loomv1.SlurmNode_State) string {
	switch s {
	case loomv1.SlurmNode_IDLE:
		return "IDLE"
	case loomv1.SlurmNode_MIXED:
		return "MIXED"
	case loomv1.SlurmNode_ALLOCATED:
		return "ALLOCATED"
	case loomv1.SlurmNode_DRAINING:
		return "MIXED+DRAIN"
	case loomv1.SlurmNode_DRAINED:
		return "IDLE+DRAIN"
	case loomv1.SlurmNode_DOWN:
		return "DOWN"
	case loomv1.SlurmNode_REBOOT_REQUESTED:
		return "IDLE+REBOOT_REQUESTED"
	case loomv1.SlurmNode_REBOOT_ISSUED:
		return "DOWN+REBOOT_ISSUED"
	}
	return "UNKNOWN"
}

// showNodes prints "scontrol show node [NAME]".
func (c *cmd) showNodes(ctx context.Context, b *strings.Builder, name string, oneliner bool) error {
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return err
	}
	_, nodes, err := c.slurmView(ctx, cluster)
	if err != nil {
		return err
	}
	var want map[string]bool
	if name != "" {
		hosts, err := hostlist.Expand(name)
		if err != nil {
			return c.errorf("Invalid node name specification: %s", name)
		}
		want = map[string]bool{}
		for _, h := range hosts {
			want[h] = true
		}
	}
	sort.SliceStable(nodes, func(a, b int) bool { return naturalLess(nodes[a].GetHostname(), nodes[b].GetHostname()) })
	n := 0
	for _, nd := range nodes {
		if want != nil && !want[nd.GetHostname()] {
			continue
		}
		nodeRecord(nd, c.loc).write(b, oneliner)
		n++
	}
	if n == 0 {
		if name != "" {
			// On stdout, as Slurm 22.05's scontrol prints it, exit 1.
			fmt.Fprintf(c.stdout, "Node %s not found\n", name)
			return &Error{Code: 1}
		}
		b.WriteString("No nodes in the system\n")
	}
	return nil
}

// nodeRecord is a node as "scontrol show node" prints it.
func nodeRecord(n *loomv1.SlurmNode, loc *time.Location) record {
	cpus := max(n.GetCpus(), 1)
	gres := nodeGres(n)
	cfg := fmt.Sprintf("cpu=%d,mem=%dM,billing=%d", cpus, n.GetMemoryMb(), cpus)
	if n.GetGpus() > 0 {
		cfg += fmt.Sprintf(",gres/gpu=%d", n.GetGpus())
	}
	alloc := ""
	if n.GetAllocCpus() > 0 || n.GetAllocGpus() > 0 {
		alloc = fmt.Sprintf("cpu=%d", n.GetAllocCpus())
		if n.GetAllocGpus() > 0 {
			alloc += fmt.Sprintf(",gres/gpu=%d", n.GetAllocGpus())
		}
	}
	parts := strings.Join(n.GetPartitions(), ",")
	rec := record{
		{"NodeName=" + n.GetHostname(), "Arch=x86_64", "CoresPerSocket=1 "}, // CPUs= alone in slurm.conf: CPUS sockets of one core (sinfo %z)
		{fmt.Sprintf("CPUAlloc=%d", n.GetAllocCpus()), fmt.Sprintf("CPUEfctv=%d", cpus), fmt.Sprintf("CPUTot=%d", cpus), "CPULoad=N/A"},
		{"AvailableFeatures=" + nodeFeatures(n)},
		{"ActiveFeatures=" + nodeFeatures(n)},
		{"Gres=" + gres},
		{"NodeAddr=" + n.GetHostname(), "NodeHostName=" + n.GetHostname(), "Version=22.05.8"},
		{fmt.Sprintf("RealMemory=%d", n.GetMemoryMb()), "AllocMem=0", "FreeMem=N/A", fmt.Sprintf("Sockets=%d", cpus), "Boards=1"},
		{"State=" + nodeStateFull(n), "ThreadsPerCore=1", "TmpDisk=0", "Weight=1", "Owner=N/A", "MCS_label=N/A"},
		{"Partitions=" + parts + " "},
		{"BootTime=None", "SlurmdStartTime=None"},
		{"LastBusyTime=None"},
		{"CfgTRES=" + cfg},
		{"AllocTRES=" + alloc},
		{"CapWatts=n/a"},
		{"CurrentWatts=0", "AveWatts=0"},
		{"ExtSensorsJoules=n/s", "ExtSensorsWatts=0", "ExtSensorsTemp=n/s"},
	}
	if b := n.GetBlock(); b != "" {
		rec = append(rec, []string{"Block=" + b})
	}
	if r := n.GetReason(); r != "" {
		if n.GetReasonTime() != nil {
			// Slurm's "Reason=bad gpu [root@2026-01-02T15:04:05]".
			user, at := reasonSetter(n, loc)
			r += " [" + user + "@" + at + "]"
		}
		rec = append(rec, []string{"Reason=" + r})
	}
	return rec
}

// showPartitions prints "scontrol show partition [NAME]".
func (c *cmd) showPartitions(ctx context.Context, b *strings.Builder, name string, oneliner bool) error {
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return err
	}
	parts, nodes, err := c.slurmView(ctx, cluster)
	if err != nil {
		return err
	}
	byHost := map[string]*loomv1.SlurmNode{}
	for _, n := range nodes {
		byHost[n.GetHostname()] = n
	}
	n := 0
	for _, p := range parts {
		if name != "" && p.GetName() != name {
			continue
		}
		partitionRecord(p, byHost).write(b, oneliner)
		n++
	}
	if n == 0 {
		if name != "" {
			// On stdout, as Slurm 22.05's scontrol prints it, exit 1.
			fmt.Fprintf(c.stdout, "Partition %s not found\n", name)
			return &Error{Code: 1}
		}
		b.WriteString("No partitions in the system\n")
	}
	return nil
}

// partitionRecord is a partition as "scontrol show partition" prints it.
func partitionRecord(p *loomv1.Partition, byHost map[string]*loomv1.SlurmNode) record {
	yes := func(v bool) string {
		if v {
			return "YES"
		}
		return "NO"
	}
	maxTime := "UNLIMITED"
	if secs, unlimited, err := ParseTimeLimit(p.GetMaxTime()); err == nil && !unlimited && p.GetMaxTime() != "" {
		maxTime = formatDuration(secs)
	}
	cpus, mem := 0, int64(0)
	for _, h := range p.GetNodes() {
		if n, ok := byHost[h]; ok {
			cpus += int(max(n.GetCpus(), 1))
			mem += n.GetMemoryMb()
		}
	}
	tres := fmt.Sprintf("cpu=%d,mem=%dM,node=%d,billing=%d", cpus, mem, len(p.GetNodes()), cpus)
	if p.GetTotalGpus() > 0 {
		tres += fmt.Sprintf(",gres/gpu=%d", p.GetTotalGpus())
	}
	state := strings.ToUpper(p.GetState())
	if state == "" {
		state = "UP"
	}
	return record{
		{"PartitionName=" + p.GetName()},
		{"AllowGroups=ALL", "AllowAccounts=ALL", "AllowQos=ALL"},
		{"AllocNodes=ALL", "Default=" + yes(p.GetDefault()), "QoS=N/A"},
		{"DefaultTime=NONE", "DisableRootJobs=NO", "ExclusiveUser=NO", "GraceTime=0", "Hidden=NO"},
		{"MaxNodes=UNLIMITED", "MaxTime=" + maxTime, "MinNodes=0", "LLN=NO", "MaxCPUsPerNode=UNLIMITED"},
		{"Nodes=" + orNull(compressHosts(p.GetNodes()))},
		{"PriorityJobFactor=1", fmt.Sprintf("PriorityTier=%d", p.GetPriorityTier()), "RootOnly=NO", "ReqResv=NO", "OverSubscribe=NO"},
		{"OverTimeLimit=NONE", "PreemptMode=REQUEUE"},
		{"State=" + state, fmt.Sprintf("TotalCPUs=%d", cpus), fmt.Sprintf("TotalNodes=%d", len(p.GetNodes())), "SelectTypeParameters=NONE"},
		{"JobDefaults=(null)"},
		{"DefMemPerNode=UNLIMITED", "MaxMemPerNode=UNLIMITED"},
		{"TRES=" + tres},
	}
}

// jobIDArgs splits "12 13,14" into ids.
func jobIDArgs(params []string) []string {
	var ids []string
	for _, p := range params {
		ids = append(ids, splitList(p)...)
	}
	return ids
}

// scontrolJobAction is hold, uhold, release, requeue and requeuehold.
func (c *cmd) scontrolJobAction(ctx context.Context, verb string, params []string, quiet bool) error {
	ids := jobIDArgs(params)
	if len(ids) == 0 {
		return c.errorf("too few arguments for keyword:%s", verb)
	}
	actions := map[string][]string{
		"hold": {"hold"}, "uhold": {"uhold"}, "release": {"release"},
		"requeue": {"requeue"}, "requeuehold": {"requeue", "hold"},
	}[verb]
	if err := c.clusterExists(ctx); err != nil {
		return err
	}
	failed, unknown := false, false
	for _, id := range ids {
		if _, _, err := parseJobID(id); err != nil {
			fmt.Fprintf(c.stderr, "Invalid job id specified for job %s\n", id)
			failed = true
			continue
		}
		if c.notHere(ctx, id) {
			if !quiet {
				fmt.Fprintf(c.stderr, "Invalid job id specified for job %s\n", id)
			}
			unknown, failed = true, true
			continue
		}
		for _, action := range actions {
			if err := c.updateJob(ctx, &loomv1.UpdateJobRequest{Name: c.jobName(id), Action: action}); err != nil {
				text := updateErrorText(err)
				if !quiet {
					fmt.Fprintf(c.stderr, "%s for job %s\n", text, id)
				}
				unknown = unknown || text == "Invalid job id specified"
				failed = true
				break
			}
		}
	}
	if unknown && !quiet && (verb == "hold" || verb == "uhold" || verb == "release") {
		// Slurm 22.05's last word after holding or releasing a job it
		// does not know (checked here).
		fmt.Fprintln(c.stderr, "slurm_suspend error: Invalid job id specified")
	}
	if failed {
		return &Error{Code: 1}
	}
	return nil
}

// notHere reports whether job id is one the gateway knows in another
// cluster than the one -M or LOOM_CLUSTER names (the working cluster):
// Slurm's scontrol asks its own slurmctld alone, which does not know
// another cluster's jobs, so hold, release, requeue and update take such
// an id as an invalid one, as "scontrol show job" and scancel do. With
// neither set, scontrol acts in every cluster of the project.
func (c *cmd) notHere(ctx context.Context, id string) bool {
	return c.clusterFilter() != "" && c.elsewhere(ctx, c.jobName(id))
}

// parseJobID checks a job id argument: "12" or "12_3".
func parseJobID(s string) (id, task string, err error) {
	id, task, isTask := strings.Cut(s, "_")
	if !isDigits(id) || (isTask && !isDigits(task)) {
		return "", "", fmt.Errorf("invalid job id %q", s)
	}
	return id, task, nil
}

// updateJob sends req as the caller (the OS user: the gateway decides
// whether they own the job or administer jobs).
func (c *cmd) updateJob(ctx context.Context, req *loomv1.UpdateJobRequest) error {
	req.User = c.env.User
	cctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.jobsClient().UpdateJob(cctx, req)
	return err
}

// nodeListLine is scontrol show job's NodeList line: with the nodes a
// pending job's reservation holds, SchedNodeList as Slurm's.
func nodeListLine(nodes string, sched []string) []string {
	if len(sched) == 0 {
		return []string{"NodeList=" + nodes}
	}
	return []string{"NodeList=" + nodes, "SchedNodeList=" + compressHosts(sched)}
}

// updateErrorText is Slurm's wording for a refused update.
func updateErrorText(err error) string {
	st := status.Convert(err)
	switch st.Code() {
	case codes.NotFound:
		return "Invalid job id specified"
	case codes.PermissionDenied:
		return "Access/permission denied"
	case codes.Unavailable:
		return "Unable to contact the Loom gateway (connect failure)"
	case codes.Unimplemented:
		return "Job updates are not served by this Loom gateway yet"
	}
	return st.Message()
}

// scontrolUpdate is "scontrol update JobId=... | NodeName=...".
func (c *cmd) scontrolUpdate(ctx context.Context, params []string) error {
	if len(params) == 0 {
		return c.errorf("too few arguments for keyword:update")
	}
	kv := map[string]string{}
	var order []string
	for _, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return &Error{Code: 1, Text: "Invalid input: " + p + "\nRequest aborted"}
		}
		// order keeps each key as written: Slurm's refusal of one it
		// does not update names it so ("Bogus=1").
		kv[strings.ToLower(k)] = v
		order = append(order, k)
	}
	switch {
	case has(kv, "jobid", "job"):
		return c.updateJobParams(ctx, kv, order)
	case has(kv, "nodename", "node"):
		return c.updateNodeParams(ctx, kv, order)
	case has(kv, "partitionname", "partition"):
		return c.updatePartitionParams(ctx, kv, order)
	}
	return &Error{Code: 1, Text: "No valid entity in update command\nInput line must include \"NodeName\", \"PartitionName\", \"Reservation/ReservationName\", \"JobId\", \"SuspendExcNodes\", \"SuspendExcParts\", \"SuspendExcStates\" or \"FrontendName\""}
}

func has(kv map[string]string, keys ...string) bool {
	for _, k := range keys {
		if _, ok := kv[k]; ok {
			return true
		}
	}
	return false
}

func first(kv map[string]string, keys ...string) string {
	for _, k := range keys {
		if v, ok := kv[k]; ok {
			return v
		}
	}
	return ""
}

// updateJobParams updates a job's TimeLimit, Partition, Nice, StartTime,
// Dependency, QOS, Account, JobName, NumNodes, NumTasks, MinMemoryNode,
// Gres/TresPerNode (GPUs), ReqNodeList, ExcNodeList and/or (an array's)
// ArrayTaskThrottle.
func (c *cmd) updateJobParams(ctx context.Context, kv map[string]string, order []string) error {
	ids := splitList(first(kv, "jobid", "job"))
	req := &loomv1.UpdateJobRequest{Action: "update"}
	for _, key := range order {
		k := strings.ToLower(key)
		v := kv[k]
		switch k {
		case "jobid", "job":
		case "timelimit":
			if strings.HasPrefix(v, "+") || strings.HasPrefix(v, "-") {
				continue // relative: per job below
			}
			secs, unlimited, err := ParseTimeLimit(v)
			if err != nil {
				return &Error{Code: 1, Text: "Invalid TimeLimit value: " + v}
			}
			if unlimited {
				return c.errorf("TimeLimit=UNLIMITED is not supported by Loom; give a time")
			}
			if secs == 0 {
				return &Error{Code: 1, Text: "Invalid TimeLimit value: " + v}
			}
			req.TimeLimitSeconds = secs
		case "partition":
			p, err := slurmspec.NormalizePartitions(v)
			if v == "" || err != nil {
				return &Error{Code: 1, Text: "Invalid Partition value: " + v}
			}
			req.Partition = p
		case "nice":
			n, err := parseNice(v)
			if err != nil {
				return &Error{Code: 1, Text: "Invalid nice value: " + v}
			}
			req.Nice = &n
		case "starttime", "begintime":
			at, err := ParseBegin(v, c.now)
			if err != nil {
				return &Error{Code: 1, Text: "Invalid StartTime value: " + v + " (" + err.Error() + ")"}
			}
			req.BeginTime = timestamppb.New(at)
		case "dependency":
			d := v
			req.Dependency = &d
		case "qos":
			q := v
			req.Qos = &q
		case "account":
			a := v
			req.Account = &a
		case "jobname", "name":
			if v == "" {
				return &Error{Code: 1, Text: "Invalid JobName value: it must not be empty"}
			}
			n := v
			req.JobName = &n
		case "numnodes", "reqnodes":
			// MIN-MAX is the job's new range, as Slurm's; a count alone
			// (or MIN-MIN) replaces a range.
			n, most, err := parseNodeCount(v)
			if err != nil {
				return &Error{Code: 1, Text: "Invalid NumNodes value: " + v + " (" + err.Error() + ")"}
			}
			req.NodeCount, req.MaxNodeCount = &n, nil
			if most > 0 {
				req.MaxNodeCount = &most
			}
		case "numtasks", "reqprocs":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 || !isDigits(v) {
				return &Error{Code: 1, Text: "Invalid NumTasks value: " + v}
			}
			req.Ntasks = proto.Int32(int32(n))
		case "minmemorynode":
			mb, err := parseMem(v)
			if err != nil {
				return &Error{Code: 1, Text: "Invalid MinMemoryNode value: " + v + " (" + err.Error() + ")"}
			}
			req.MemMb = &mb
		case "reqnodelist", "nodelist", "excnodelist":
			list := &loomv1.HostList{}
			if v != "" { // empty clears
				hosts, err := expandHosts(v)
				if err != nil {
					return &Error{Code: 1, Text: "Invalid node name specified: " + v + " (" + err.Error() + ")"}
				}
				list.Hosts = hosts
			}
			if k == "excnodelist" {
				req.Exclude = list
			} else {
				req.Nodelist = list
			}
		case "gres", "trespernode":
			typ, n, err := parseGres(v)
			if err != nil {
				return &Error{Code: 1, Text: "Invalid generic resource (gres) specification: " + v + " (" + err.Error() + ")"}
			}
			req.GpusPerNode, req.GpuType = &n, &typ
		case "arraytaskthrottle":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 0 || !isDigits(v) {
				return &Error{Code: 1, Text: "Invalid ArrayTaskThrottle value: " + v}
			}
			req.ArrayTaskThrottle = proto.Int32(int32(n))
		default:
			return &Error{Code: 1, Text: "Update of this parameter is not supported: " + key + "=" + v + "\nRequest aborted"}
		}
	}
	relative := kv["timelimit"]
	if !strings.HasPrefix(relative, "+") && !strings.HasPrefix(relative, "-") {
		relative = ""
	}
	if proto.Equal(req, &loomv1.UpdateJobRequest{Action: "update"}) && relative == "" {
		return &Error{Code: 1, Text: "No changes specified"}
	}
	if err := c.clusterExists(ctx); err != nil {
		return err
	}
	failed := false
	for _, id := range ids {
		if _, _, err := parseJobID(id); err != nil {
			fmt.Fprintf(c.stderr, "Invalid job id specified for job %s\n", id)
			failed = true
			continue
		}
		if c.notHere(ctx, id) {
			fmt.Fprintf(c.stderr, "Invalid job id specified for job %s\n", id)
			failed = true
			continue
		}
		r := proto.Clone(req).(*loomv1.UpdateJobRequest)
		r.Name = c.jobName(id)
		if relative != "" {
			delta, _, err := ParseTimeLimit(relative[1:])
			if err != nil {
				return &Error{Code: 1, Text: "Invalid TimeLimit value: " + relative}
			}
			cctx, cancel := c.call(ctx)
			j, err := c.jobsClient().GetJob(cctx, &loomv1.GetJobRequest{Name: r.Name})
			cancel()
			if err != nil {
				fmt.Fprintf(c.stderr, "%s for job %s\n", updateErrorText(err), id)
				failed = true
				continue
			}
			cur := j.GetTimeLimitSeconds()
			if cur == 0 {
				fmt.Fprintf(c.stderr, "Job %s has no time limit of its own to change relatively\n", id)
				failed = true
				continue
			}
			if relative[0] == '+' {
				r.TimeLimitSeconds = cur + delta
			} else if r.TimeLimitSeconds = cur - delta; r.TimeLimitSeconds <= 0 {
				fmt.Fprintf(c.stderr, "Invalid TimeLimit value: %s for job %s\n", relative, id)
				failed = true
				continue
			}
		}
		if err := c.updateJob(ctx, r); err != nil {
			fmt.Fprintf(c.stderr, "%s for job %s\n", updateErrorText(err), id)
			failed = true
		}
	}
	if failed {
		return &Error{Code: 1}
	}
	return nil
}

// updateNodeParams drains nodes, sets them down (their jobs end NODE_FAIL),
// reports them failing (health drains and repairs them) or resumes them.
func (c *cmd) updateNodeParams(ctx context.Context, kv map[string]string, order []string) error {
	expr := first(kv, "nodename", "node")
	hosts, err := hostlist.Expand(expr)
	if err != nil || len(hosts) == 0 {
		return &Error{Code: 1, Text: "Invalid node name specified: " + expr}
	}
	state, reason := "", kv["reason"]
	for _, key := range order {
		k := strings.ToLower(key)
		switch k {
		case "nodename", "node", "reason":
		case "state":
			switch strings.ToUpper(kv[k]) {
			case "DRAIN":
				state = "DRAIN"
			case "DOWN":
				state = "DOWN"
			case "RESUME", "UNDRAIN", "IDLE":
				state = "RESUME"
			case "FAIL":
				state = "FAIL"
			default:
				return &Error{Code: 1, Text: fmt.Sprintf("Invalid node state specified: %s (Loom supports DRAIN, DOWN, FAIL and RESUME)", kv[k])}
			}
		default:
			return &Error{Code: 1, Text: "Update of this parameter is not supported: " + key + "=" + kv[k] + "\nRequest aborted"}
		}
	}
	if state == "" {
		return &Error{Code: 1, Text: "No changes specified"}
	}
	if state != "RESUME" && strings.TrimSpace(reason) == "" {
		return &Error{Code: 1, Text: "You must specify a reason when DOWNING or DRAINING a node. Request denied"}
	}
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return err
	}
	if state == "FAIL" {
		return c.failNodes(ctx, cluster, hosts, reason)
	}
	for _, h := range hosts {
		cctx, cancel := c.call(ctx)
		_, err := c.slurmClient().UpdateSlurmNode(cctx, &loomv1.UpdateSlurmNodeRequest{Cluster: cluster, Hostname: h, State: state, Reason: reason, User: c.env.User})
		cancel()
		if err != nil {
			st := status.Convert(err)
			if st.Code() == codes.NotFound {
				return &Error{Code: 1, Text: fmt.Sprintf("slurm_update error: Invalid node name specified (%s)", h)}
			}
			return c.rpcError("slurm_update error", err)
		}
	}
	return nil
}

// failNodes is State=FAIL, Slurm's "expected to fail soon, unavailable by
// the administrator's request": the nodes are reported faulty to health
// (loom nodes report-faulty), which drains them as Slurm's FAIL does (their
// jobs asked to checkpoint first) and then repairs them, as after a failed
// check. Every name is checked before any is reported, so that a typo in a
// node list changes nothing.
func (c *cmd) failNodes(ctx context.Context, cluster string, hosts []string, reason string) error {
	_, nodes, err := c.slurmView(ctx, cluster)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, n := range nodes {
		known[n.GetHostname()] = true
	}
	for _, h := range hosts {
		if !known[h] {
			return &Error{Code: 1, Text: fmt.Sprintf("slurm_update error: Invalid node name specified (%s)", h)}
		}
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	if _, err := loomv1.NewHealthServiceClient(c.env.Conn).ReportFaultyNodes(cctx, &loomv1.ReportFaultyNodesRequest{
		Cluster: cluster, Hostnames: hosts, Reason: reason}); err != nil {
		return c.rpcError("slurm_update error", err)
	}
	return nil
}

// scontrolReboot is "scontrol reboot [ASAP] [nextstate=RESUME]
// [reason=TEXT] {ALL|NODELIST}": health's reboot of each node (loom nodes
// reboot), which drains it first (its jobs asked to checkpoint, as a
// fault that is not urgent), reboots it through the provisioner, checks
// it and puts it back in service: what ASAP and nextstate=RESUME ask of
// Slurm, so both are accepted and change nothing.
func (c *cmd) scontrolReboot(ctx context.Context, params []string) error {
	reason, expr := "", ""
	for _, p := range params {
		k, v, hasV := strings.Cut(p, "=")
		switch strings.ToLower(k) {
		case "asap":
		case "nextstate":
			if !strings.EqualFold(v, "RESUME") {
				return &Error{Code: 1, Text: fmt.Sprintf("Invalid nextstate %q: Loom returns a rebooted node to service once its check passes (nextstate=RESUME)", v)}
			}
		case "reason":
			reason = v
		default:
			if hasV || expr != "" {
				return &Error{Code: 1, Text: "Invalid input: " + p + "\nRequest aborted"}
			}
			expr = p
		}
	}
	if expr == "" {
		return &Error{Code: 1, Text: "Missing node list. Specify ALL|<NodeList>"}
	}
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return err
	}
	var hosts []string
	if strings.EqualFold(expr, "ALL") {
		_, nodes, err := c.slurmView(ctx, cluster)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			hosts = append(hosts, n.GetHostname())
		}
	} else if hosts, err = hostlist.Expand(expr); err != nil || len(hosts) == 0 {
		return &Error{Code: 1, Text: "Invalid node name specified: " + expr}
	}
	if reason == "" {
		reason = "reboot requested with scontrol"
	}
	health := loomv1.NewHealthServiceClient(c.env.Conn)
	for _, h := range hosts {
		cctx, cancel := c.call(ctx)
		_, err := health.UpdateNodeRemediation(cctx, &loomv1.UpdateNodeRemediationRequest{Cluster: cluster, Hostname: h,
			Action: loomv1.RemediationAction_ACTION_REBOOT, Reason: reason})
		cancel()
		if err != nil {
			if status.Code(err) == codes.NotFound {
				return &Error{Code: 1, Text: fmt.Sprintf("slurm_reboot_nodes error: Invalid node name specified (%s)", h)}
			}
			return c.rpcError("slurm_reboot_nodes error", err)
		}
	}
	return nil
}

const scontrolUsage = `scontrol [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -d or --details: print details
     -o or --oneliner: print information one line per record
     -Q or --quiet: print no messages other than error messages
     -M or --cluster: cluster to issue commands to (overrides LOOM_CLUSTER)
     -V or --version: print version information and exit

  <keyword> may be omitted from the execute line and scontrol will execute
  in interactive mode (not in Loom). Valid <COMMAND> values are:
     hold <job_list>          place hold on job(s)
     reboot [ASAP] [nextstate=RESUME] [reason=...] <ALL|NodeList>
                              drain nodes, reboot them and put them back once
                              their check passes (health's reboot)
     release <job_list>       permit specified job(s) to start
     requeue <job_id>         re-queue a batch job
     requeuehold <job_id>     re-queue and hold a batch job
     show <ENTITY> [<ID>]     display state of identified entity: job, node,
                              partition, hostnames, hostlist
     uhold <job_list>         place user hold on job(s)
     update <SPECIFICATIONS>  update job (JobId=ID TimeLimit=... Partition=...)
                              or node (NodeName=NAMES State=DRAIN|DOWN|FAIL|RESUME Reason=...)
     version                  display tool version number
`

// showConfig is scontrol show config: the cluster's slurm.conf as the
// gateway generates it (GetSlurmConfig), its Key=Value settings one per
// line in slurmctld's layout ("%-23s = %s"), sorted by key; the node and
// partition lines are scontrol show node's and partition's.
func (c *cmd) showConfig(ctx context.Context, b *strings.Builder) error {
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	conf, err := loomv1.NewClusterServiceClient(c.env.Conn).GetSlurmConfig(cctx, &loomv1.GetSlurmConfigRequest{Name: cluster})
	if err != nil {
		return c.rpcError("slurm_load_ctl_conf error", err)
	}
	settings := map[string]string{}
	for _, line := range strings.Split(conf.GetSlurmConf(), "\n") {
		line = strings.TrimSpace(line)
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(key, " \t") {
			continue
		}
		switch strings.ToLower(key) {
		case "nodename", "partitionname", "nodeset", "downnodes", "frontendname":
			continue
		}
		settings[key] = strings.TrimSpace(value)
	}
	fmt.Fprintf(b, "Configuration data as of %s\n", formatTimestamp(c.now, c.loc))
	for _, k := range sortedKeys(settings) {
		fmt.Fprintf(b, "%-23s = %s\n", k, settings[k])
	}
	fmt.Fprintf(b, "\nSlurmctld(primary) at %s is UP\n", c.gatewayHost())
	return nil
}

// minMemory is scontrol show job's memory request: MinMemoryCPU= for
// --mem-per-cpu, as Slurm 22.05 prints it (-N1-3 -n5 --mem-per-cpu=1024:
// MinMemoryCPU=1G), else MinMemoryNode=.
func minMemory(j *loomv1.Job) string {
	if j.GetMemPerCpuMb() > 0 {
		return "MinMemoryCPU=" + memString(minMemoryMB(j))
	}
	return "MinMemoryNode=" + memString(minMemoryMB(j))
}

// minMemoryMB is the job's memory request as Slurm 22.05 shows it in
// scontrol's MinMemory and squeue's %m: --mem-per-cpu's figure a CPU
// (squeue -n3 --mem-per-cpu=1000: 1000M, not the 3000M a node holds),
// else --mem's a node.
func minMemoryMB(j *loomv1.Job) int64 {
	if m := j.GetMemPerCpuMb(); m > 0 {
		return m
	}
	return j.GetMemMb()
}
