package slurmcli

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/termtext"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Slurm's squeue formats.
const (
	squeueDefaultFormat = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
	squeueLongFormat    = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
	squeueStartFormat   = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
)

var squeueOptions = []optDef{
	{long: []string{"accounts", "account"}, short: 'A', arg: requiredArg},
	{long: []string{"all"}, short: 'a', arg: noArg},
	{long: []string{"array"}, short: 'r', arg: noArg},
	{long: []string{"array-unique"}, arg: noArg},
	{long: []string{"Format"}, short: 'O', arg: requiredArg},
	{long: []string{"format"}, short: 'o', arg: requiredArg},
	{long: []string{"federation"}, arg: noArg},
	{long: []string{"help"}, arg: noArg},
	{long: []string{"hide"}, arg: noArg},
	{long: []string{"iterate"}, short: 'i', arg: requiredArg},
	{long: []string{"jobs", "job"}, short: 'j', arg: optionalArg},
	{long: []string{"local"}, arg: noArg},
	{long: []string{"long"}, short: 'l', arg: noArg},
	{long: []string{"licenses"}, short: 'L', arg: requiredArg},
	{long: []string{"clusters", "cluster"}, short: 'M', arg: requiredArg},
	{long: []string{"me"}, arg: noArg},
	{long: []string{"name"}, short: 'n', arg: requiredArg},
	{long: []string{"noconvert"}, arg: noArg},
	{long: []string{"nodelist", "node", "nodes"}, short: 'w', arg: requiredArg},
	{long: []string{"noheader"}, short: 'h', arg: noArg},
	{long: []string{"partitions", "partition"}, short: 'p', arg: requiredArg},
	{long: []string{"priority"}, short: 'P', arg: noArg},
	{long: []string{"qos"}, short: 'q', arg: requiredArg},
	{long: []string{"reservation"}, short: 'R', arg: requiredArg},
	{long: []string{"sibling"}, arg: noArg},
	{long: []string{"sort"}, short: 'S', arg: requiredArg},
	{long: []string{"start"}, arg: noArg},
	{long: []string{"steps"}, short: 's', arg: optionalArg},
	{long: []string{"states", "state"}, short: 't', arg: requiredArg},
	{long: []string{"usage"}, arg: noArg},
	{long: []string{"users", "user"}, short: 'u', arg: requiredArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
}

// squeueLongNames maps -O/--Format names to the format letters.
var squeueLongNames = map[string]string{
	"account": "a", "jobarrayid": "i", "jobid": "A", "arrayjobid": "F", "arraytaskid": "K",
	"tres-per-node": "b", "gres": "b", "batchhost": "B", "mincpus": "c", "numcpus": "C",
	"mintmpdisk": "d", "numnodes": "D", "endtime": "e", "dependency": "E", "feature": "f",
	"groupname": "g", "oversubscribe": "h", "comment": "k", "timelimit": "l", "timeleft": "L",
	"minmemory": "m", "timeused": "M", "reqnodes": "n", "nodelist": "N", "command": "o",
	"contiguous": "O", "priority": "p", "partition": "P", "qos": "q", "prioritylong": "Q",
	"reason": "r", "reasonlist": "R", "starttime": "S", "statecompact": "t", "state": "T",
	"username": "u", "userid": "U", "reservation": "v", "submittime": "V", "wckey": "w",
	"licenses": "W", "exclude": "x", "nice": "y", "schednodes": "Y", "sct": "z", "workdir": "Z",
	"name": "j", "cluster": "cluster", "groupid": "G", "sockets": "H", "cores": "I", "threads": "J",
	"selectjobinfo": "s",
}

// squeueView is what squeue's fields need besides the row.
type squeueView struct {
	now time.Time
	loc *time.Location
	// limits are the partitions' MaxTime (seconds; -1 unlimited) by
	// cluster and partition, for jobs without their own time limit.
	limits map[string]map[string]int64
	// jobsByID is every job by id, for showing which dependencies still
	// hold a job back (scontrol show job).
	jobsByID map[string]*loomv1.Job
	// owners are the jobs' owners' ids (ownerIDs) looked up so far: %U,
	// %g and %G of every row would otherwise each ask the system's user
	// and group databases (NSS: maybe LDAP) again for the same owner.
	owners map[string]osIDs
	// nodes are the Slurm nodes of the clusters where a listed exclusive
	// job holds nodes (exclusiveNodes), by cluster: such a job's CPUs are
	// its nodes' (cpus).
	nodes map[string][]*loomv1.SlurmNode
}

// cpus is a job's CPU count as scontrol's NumCPUs and squeue's %C show it:
// an exclusive job that holds nodes has every CPU of them, as in Slurm
// (allocCPUs); any other its tasks × CPUs per task.
func (v *squeueView) cpus(j *loomv1.Job) int {
	return allocCPUs(j, j.GetNodes(), v.nodes[j.GetCluster()])
}

// exclusiveNodes reads the Slurm nodes of each cluster where one of jobs
// is exclusive and holds nodes (squeueView.nodes). A cluster whose nodes
// cannot be read is left out: its exclusive jobs then show their tasks'
// CPUs, as pending ones do, rather than failing the whole listing.
func (c *cmd) exclusiveNodes(ctx context.Context, jobs []*loomv1.Job) map[string][]*loomv1.SlurmNode {
	out := map[string][]*loomv1.SlurmNode{}
	for _, j := range jobs {
		cl := j.GetCluster()
		if _, done := out[cl]; done || cl == "" || !j.GetExclusive() || len(j.GetNodes()) == 0 {
			continue
		}
		nodes, err := c.slurmNodes(ctx, cl)
		if err != nil {
			continue
		}
		out[cl] = nodes
	}
	return out
}

// owner is ownerIDs(user), looked up once per view.
func (v *squeueView) owner(user string) osIDs {
	if ids, ok := v.owners[user]; ok {
		return ids
	}
	if v.owners == nil {
		v.owners = map[string]osIDs{}
	}
	ids := ownerIDs(user)
	v.owners[user] = ids
	return ids
}

// timeLimit is the job's time limit in seconds, -1 for none.
func (v *squeueView) timeLimit(j *loomv1.Job) int64 {
	if s := j.GetTimeLimitSeconds(); s > 0 {
		return s
	}
	if l, ok := v.limits[j.GetCluster()][j.GetPartition()]; ok {
		return l
	}
	return -1
}

func orNull(s string) string {
	if s == "" {
		return "(null)"
	}
	return s
}

// startOrExpected is a job's start time, or while it is pending the
// start the scheduler expects (its backfill reservation's; nil when none),
// as Slurm's StartTime is.
func startOrExpected(j *loomv1.Job) *timestamppb.Timestamp {
	if t := j.GetStartTime(); t != nil {
		return t
	}
	return j.GetExpectedStartTime()
}

func (v *squeueView) timeOrNA(t interface{ AsTime() time.Time }, set bool) string {
	if !set {
		return "N/A"
	}
	return formatTimestamp(t.AsTime(), v.loc)
}

// squeueFields are squeue's format letters.
func squeueFields(v *squeueView) fieldTable[jobRow] {
	str := func(header string, f func(j *loomv1.Job) string) fieldDef[jobRow] {
		return fieldDef[jobRow]{header: header, value: func(r jobRow) string { return f(r.job) }}
	}
	return fieldTable[jobRow]{fields: map[string]fieldDef[jobRow]{
		"a": str("ACCOUNT", func(j *loomv1.Job) string { return orNull(j.GetAccount()) }),
		"A": str("JOBID", func(j *loomv1.Job) string { return j.GetJobId() }),
		"b": str("TRES_PER_NODE", tresPerNode),
		"B": str("EXEC_HOST", func(j *loomv1.Job) string {
			if h := j.GetBatchHost(); h != "" {
				return h
			}
			if n := j.GetNodes(); len(n) > 0 {
				return n[0]
			}
			return "n/a"
		}),
		"c": str("MIN_CPUS", func(j *loomv1.Job) string { return strconv.Itoa(int(max(j.GetCpusPerTask(), 1))) }),
		"C": str("CPUS", func(j *loomv1.Job) string { return strconv.Itoa(v.cpus(j)) }),
		"d": str("MIN_TMP_DISK", func(*loomv1.Job) string { return "0" }),
		"D": str("NODES", func(j *loomv1.Job) string { return strconv.Itoa(shownNodes(j)) }),
		"e": str("END_TIME", func(j *loomv1.Job) string {
			switch {
			case j.GetEndTime() != nil && !isLive(j):
				return formatTimestamp(j.GetEndTime().AsTime(), v.loc)
			case isLive(j) && j.GetStartTime() != nil:
				l := v.timeLimit(j)
				if l < 0 {
					return "NONE"
				}
				return formatTimestamp(j.GetStartTime().AsTime().Add(time.Duration(l)*time.Second), v.loc)
			}
			return "N/A"
		}),
		// As scontrol's Dependency=: what is still in the way, marked
		// (squeueOnce reads the targets when the format has %E).
		"E": str("DEPENDENCY", func(j *loomv1.Job) string { return dependencyText(j, v.jobsByID) }),
		"f": str("FEATURES", func(*loomv1.Job) string { return "(null)" }),
		"F": {header: "ARRAY_JOB_ID", value: func(r jobRow) string { return r.arrayJobID }},
		// The owner's group name and gid, its uid (%U), when the owner is
		// an account of this machine, as Slurm's; else the name for each.
		"g": str("GROUP", func(j *loomv1.Job) string { return v.owner(j.GetUser()).group }),
		"G": str("GROUP", func(j *loomv1.Job) string { return v.owner(j.GetUser()).gid }),
		// Slurm's --sockets-per-node, --cores-per-socket and
		// --threads-per-core: Loom takes none of them ("*", as Slurm's
		// for a job that set none).
		"H": str("SOCKETS_PER_NODE", func(*loomv1.Job) string { return "*" }),
		"I": str("CORES_PER_SOCKET", func(*loomv1.Job) string { return "*" }),
		"J": str("THREADS_PER_CORE", func(*loomv1.Job) string { return "*" }),
		"h": str("OVER_SUBSCRIBE", func(j *loomv1.Job) string {
			if j.GetExclusive() {
				return "NO"
			}
			return "OK"
		}),
		"i": {header: "JOBID", value: func(r jobRow) string { return r.id }},
		"j": str("NAME", func(j *loomv1.Job) string { return j.GetDisplayName() }),
		"k": str("COMMENT", func(*loomv1.Job) string { return "(null)" }),
		"K": {header: "ARRAY_TASK_ID", value: func(r jobRow) string { return r.arrayTask }},
		"l": {header: "TIME_LIMIT", nocut: true, value: func(r jobRow) string {
			l := v.timeLimit(r.job)
			if l < 0 {
				return "UNLIMITED"
			}
			return formatSecs(l, true)
		}},
		"L": {header: "TIME_LEFT", nocut: true, value: func(r jobRow) string {
			l := v.timeLimit(r.job)
			if l < 0 {
				return "UNLIMITED"
			}
			return formatSecs(l-jobElapsed(r.job, v.now), true)
		}},
		"m": str("MIN_MEMORY", func(j *loomv1.Job) string { return memString(minMemoryMB(j)) }),
		"M": {header: "TIME", nocut: true, value: func(r jobRow) string { return formatSecs(jobElapsed(r.job, v.now), true) }},
		"n": {header: "REQ_NODES", value: func(r jobRow) string { return compressHosts(r.job.GetNodelist()) }},
		"N": {header: "NODELIST", nocut: true, value: func(r jobRow) string { return compressHosts(r.job.GetNodes()) }},
		"o": str("COMMAND", func(j *loomv1.Job) string {
			switch {
			case len(j.GetCommand()) > 0:
				// As scontrol prints it: no escapes of the submitter's.
				return termtext.Clean(strings.Join(j.GetCommand(), " "), 1<<20)
			case j.GetScriptPath() != "":
				return j.GetScriptPath()
			}
			return "(null)" // --wrap or standard input, as scontrol's Command=
		}),
		"O": str("CONTIGUOUS", func(*loomv1.Job) string { return "0" }),
		"p": str("PRIORITY", func(j *loomv1.Job) string {
			return fmt.Sprintf("%16.14f", float64(j.GetPriority())/float64(0xffffffff))
		}),
		"P": str("PARTITION", func(j *loomv1.Job) string { return j.GetPartition() }),
		"q": str("QOS", func(j *loomv1.Job) string { return orNull(j.GetQos()) }),
		"Q": str("PRIORITY", func(j *loomv1.Job) string { return strconv.FormatInt(j.GetPriority(), 10) }),
		"r": str("REASON", jobReason),
		"R": {header: "NODELIST(REASON)", value: func(r jobRow) string {
			j := r.job
			switch effectiveState(j) {
			case loomv1.JobState_PENDING, loomv1.JobState_REQUEUED, loomv1.JobState_TIMEOUT, loomv1.JobState_FAILED:
				return "(" + jobReason(j) + ")"
			}
			return compressHosts(j.GetNodes())
		}, nocut: false},
		// Slurm 22.05 prints nothing for %s (its select plugin's data):
		// no header, no value.
		"s": str("", func(*loomv1.Job) string { return "" }),
		"S": str("START_TIME", func(j *loomv1.Job) string { return v.timeOrNA(startOrExpected(j), startOrExpected(j) != nil) }),
		"t": str("ST", func(j *loomv1.Job) string { return stateCode(effectiveState(j)) }),
		"T": str("STATE", func(j *loomv1.Job) string { return stateLong(effectiveState(j)) }),
		"u": str("USER", func(j *loomv1.Job) string { return j.GetUser() }),
		"U": str("UID", func(j *loomv1.Job) string { return v.owner(j.GetUser()).uid }),
		"v": str("RESERVATION", func(*loomv1.Job) string { return "(null)" }),
		"V": str("SUBMIT_TIME", func(j *loomv1.Job) string { return v.timeOrNA(j.GetSubmitTime(), j.GetSubmitTime() != nil) }),
		"w": str("WCKEY", func(*loomv1.Job) string { return "(null)" }),
		"W": str("LICENSES", func(*loomv1.Job) string { return "(null)" }),
		"x": {header: "EXC_NODES", value: func(r jobRow) string { return compressHosts(r.job.GetExclude()) }},
		"y": str("NICE", func(j *loomv1.Job) string { return strconv.Itoa(int(j.GetNice())) }),
		"Y": {header: "SCHEDNODES", nocut: true, value: func(r jobRow) string {
			if n := r.job.GetSchedNodes(); len(n) > 0 {
				return compressHosts(n)
			}
			return "(null)"
		}},
		"z":       str("S:C:T", func(*loomv1.Job) string { return "*:*:*" }),
		"Z":       str("WORK_DIR", func(j *loomv1.Job) string { return j.GetWorkDir() }),
		"cluster": str("CLUSTER", func(j *loomv1.Job) string { return shortName(j.GetCluster()) }),
	}}
}

// memString is a memory size in MiB as squeue prints it ("4G", "512M").
func memString(mb int64) string {
	switch {
	case mb == 0:
		return "0"
	case mb%(1024*1024) == 0:
		return fmt.Sprintf("%dT", mb/(1024*1024))
	case mb%1024 == 0:
		return fmt.Sprintf("%dG", mb/1024)
	default:
		return fmt.Sprintf("%dM", mb)
	}
}

// squeue is the squeue command.
func (c *cmd) squeue(ctx context.Context, args []string) error {
	p := &optParser{prog: "squeue", defs: squeueOptions}
	opts, rest, err := p.parse(args)
	if err != nil {
		return usage("squeue", err)
	}
	env := c.env.Environ
	formatStr, longFormat := env["SQUEUE_FORMAT"], env["SQUEUE_FORMAT2"]
	sortSpec := env["SQUEUE_SORT"]
	perTask := env["SQUEUE_ARRAY"] != ""
	users, states, parts := splitList(env["SQUEUE_USERS"]), env["SQUEUE_STATES"], splitList(env["SQUEUE_PARTITION"])
	var names, accounts, qos []string
	var nodes map[string]bool
	var nodeHosts []string
	var sel *jobSelector
	jobsFlag, long, start, noHeader, steps := false, false, false, false, false
	clusterLine := false  // -M: "CLUSTER: NAME" before the table
	var clusters []string // -M's list, walked one by one
	stepList := ""
	iterate := 0
	formatSet, cliFormat, cliLongFormat := false, false, false
	for _, o := range opts {
		switch o.key {
		case "help", "usage":
			fmt.Fprint(c.stdout, squeueUsage)
			return nil
		case "version":
			return c.printVersion()
		case "accounts":
			accounts = splitList(o.value)
		case "array":
			perTask = true
		case "Format":
			// As Slurm's squeue: -o and -O together are refused, as the
			// second is read.
			if cliFormat {
				return c.errorf("-O (--Format) is incompatible with -o (--format)")
			}
			longFormat, formatStr, formatSet, cliLongFormat = o.value, "", true, true
		case "format":
			if cliLongFormat {
				return c.errorf("-o (--format) is incompatible with -O (--Format)")
			}
			formatStr, longFormat, formatSet, cliFormat = o.value, "", true, true
		case "iterate":
			n, err := strconv.Atoi(o.value)
			if err != nil || n <= 0 {
				return c.errorf("--iterate=%s", o.value)
			}
			iterate = n
		case "jobs":
			jobsFlag = true
			if o.hasValue {
				if sel, err = parseJobSelector("squeue", o.value); err != nil {
					return err
				}
			}
		case "long":
			long = true
		case "clusters":
			if clusters, err = c.clusterList(o.value); err != nil {
				return err
			}
			clusterLine = true
		case "me":
			users = []string{c.env.User}
		case "name":
			names = splitList(o.value)
		case "nodelist":
			hosts, err := hostlist.Expand(o.value)
			if err != nil {
				return c.errorf("'%s' invalid entry for --nodelist", o.value)
			}
			nodes, nodeHosts = map[string]bool{}, hosts
			for _, h := range hosts {
				nodes[h] = true
			}
		case "noheader":
			noHeader = true
		case "partitions":
			parts = splitList(o.value)
		case "qos":
			qos = splitList(o.value)
		case "sort":
			sortSpec = o.value
		case "start":
			start = true
		case "steps":
			steps, stepList = true, o.value
		case "states":
			states = o.value
		case "users":
			users = splitList(o.value)
		}
	}
	users = c.filterUsers(users)
	if nodes != nil {
		// As Slurm's squeue, a host the cluster does not have is an error
		// (a typo would otherwise look like an idle node).
		if err := c.checkHostsKnown(ctx, nodeHosts); err != nil {
			return err
		}
	}
	if len(rest) > 0 && steps && stepList == "" {
		stepList, rest = rest[0], rest[1:] // squeue -s 12.0, as getopt's optional argument is not
	}
	if len(rest) > 0 {
		if jobsFlag && sel == nil {
			if sel, err = parseJobSelector("squeue", rest[0]); err != nil {
				return err
			}
			rest = rest[1:]
		}
		if len(rest) > 0 {
			return &Error{Code: 1, Text: "squeue: error: Unrecognized option: " + rest[0] + "\n" + strings.TrimRight(squeueUsage, "\n")}
		}
	}
	if long && cliFormat {
		return &Error{Code: 1, Text: "squeue: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry."}
	}

	// Which format, as Slurm 22.05's squeue picks it: -o; else --start's
	// (over -O too); else -O; else -l's; else SQUEUE_FORMAT, then
	// SQUEUE_FORMAT2 (-l, --start and -O set the variables aside).
	var f format
	defFormat := false // Slurm's own -l or default format: neither -o, -O, --start nor a variable's
	switch {
	case cliFormat || formatStr != "" && !start && !long && !cliLongFormat:
		f = parseFormat(formatStr)
	case start:
		f = parseFormat(squeueStartFormat)
	case longFormat != "" && (cliLongFormat || !long):
		var unknown []string
		f, unknown = parseLongFormat(longFormat, squeueLongNames)
		if len(unknown) > 0 {
			return c.errorf("Invalid job format specification: %s", unknown[0])
		}
	case long:
		f, defFormat = parseFormat(squeueLongFormat), true
	default:
		f, defFormat = parseFormat(squeueDefaultFormat), true
	}
	if defFormat && len(clusters) > 1 && noHeader && !steps {
		// Slurm's squeue (_print_job): with -h no CLUSTER: lines, so its
		// own format then starts with the cluster's name ("cluster:10 ").
		f.fields = append([]fmtField{{spec: "cluster", width: 10, suffix: " ", token: "cluster:10 "}}, f.fields...)
	}
	var stateFilter stateSet
	allStates := false
	if states != "" {
		set, err := parseJobStates("squeue", states)
		if err != nil {
			return err
		}
		stateFilter, allStates = set, set == nil
	} else if start {
		stateFilter = stateSet{loomv1.JobState_PENDING: true}
	}
	if start && sortSpec == "" {
		sortSpec = "S"
	}

	view := &squeueView{loc: c.loc}
	table := squeueFields(view)
	c.checkFormat(f, table.known, "job")
	q := &squeueQuery{users: newStringSet(users), parts: newStringSet(parts), names: newStringSet(names),
		accounts: newStringSet(accounts), qos: newStringSet(qos), nodes: nodes, sel: sel,
		states: stateFilter, anyState: allStates, anyPart: true}

	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Duration(iterate) * time.Second):
			}
		}
		view.now = c.env.nowIn(c.loc)
		var out string
		// Each cluster of -M's list in turn, its table after a "CLUSTER:
		// NAME" line, a blank line between two (Slurm's _multi_cluster).
		err := c.forEachCluster(clusters, func(i int) error {
			var one string
			var err error
			if steps {
				stepFormat := ""
				if formatSet {
					stepFormat = formatStr
				}
				one, err = c.squeueSteps(ctx, q, stepList, stepFormat, noHeader)
			} else {
				one, err = c.squeueOnce(ctx, q, f, table, view, perTask, sortSpec, noHeader)
			}
			if err != nil {
				return err
			}
			if clusterLine && !noHeader {
				if i > 0 {
					out += "\n"
				}
				one = c.clusterLine() + one
			}
			out += one
			return nil
		})
		if err != nil {
			return err
		}
		if (long || iterate > 0) && !noHeader { // as Slurm's print_date: not with -h
			out = view.now.Format(ctimeLayout) + "\n" + out
		}
		fmt.Fprint(c.stdout, out)
		if iterate == 0 {
			return nil
		}
		fmt.Fprintln(c.stdout)
	}
}

// checkHostsKnown refuses the first of hosts that no node of the cluster
// (or, with none chosen, of the project's clusters) is named, in squeue's
// words: "squeue: error: Invalid node name nosuch", exit 1.
func (c *cmd) checkHostsKnown(ctx context.Context, hosts []string) error {
	clusters := []string{c.clusterFilter()}
	if clusters[0] == "" {
		var err error
		if clusters, err = c.projectClusters(ctx); err != nil {
			return err
		}
	}
	known := map[string]bool{}
	for _, cl := range clusters {
		nodes, err := c.slurmNodes(ctx, cl)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			known[n.GetHostname()] = true
		}
	}
	for _, h := range hosts {
		if !known[h] {
			return c.errorf("Invalid node name %s", h)
		}
	}
	return nil
}

// nowIn is the current time in loc.
func (e Env) nowIn(loc *time.Location) time.Time {
	if e.Now != nil {
		return e.Now().In(loc)
	}
	return time.Now().In(loc)
}

// squeueQuery is squeue's filters.
type squeueQuery struct {
	users, parts, names, accounts, qos stringSet
	nodes                              map[string]bool
	sel                                *jobSelector
	states                             stateSet
	// anyState lifts the default filter (pending, running, completing).
	anyState bool
	// anyPart: parts matches a job pending in several partitions (-p
	// a,b) by any of them, as squeue -p (and sprio -p) list it under
	// each; without it the job's partition string must be one of parts,
	// as Slurm 22.05's scancel -p and sacct -r compare it (a job pending
	// in a,b is not b's).
	anyPart bool
}

// matchPart reports whether a job's partition (one, or a pending job's
// list) passes the partition filter. One partition is a look-up in the
// set; only a list (rare) needs the set's names.
func (q *squeueQuery) matchPart(part string) bool {
	if q.parts != nil && q.anyPart && slurmspec.IsPartitionList(part) {
		return slurmspec.AnyPartitionOf(part, q.parts.keys())
	}
	return q.parts.match(part)
}

func (q *squeueQuery) match(r jobRow) bool {
	j := r.job
	st := effectiveState(j)
	if q.states != nil {
		if !q.states.match(st) {
			return false
		}
	} else if !q.anyState {
		live := false
		for _, s := range jobStates {
			if s.state == st {
				live = s.pendingOrLive
			}
		}
		if !live {
			return false
		}
	}
	if !q.users.match(j.GetUser()) || !q.matchPart(j.GetPartition()) || !q.names.match(j.GetDisplayName()) ||
		!q.accounts.match(j.GetAccount()) || !q.qos.match(j.GetQos()) {
		return false
	}
	if q.nodes != nil {
		hit := false
		for _, n := range j.GetNodes() {
			hit = hit || q.nodes[n]
		}
		if !hit {
			return false
		}
	}
	return q.sel.matchRow(r)
}

// squeueOnce fetches, filters, sorts and renders the queue once.
func (c *cmd) squeueOnce(ctx context.Context, q *squeueQuery, f format, table fieldTable[jobRow],
	view *squeueView, perTask bool, sortSpec string, noHeader bool) (string, error) {
	req := &loomv1.ListJobsRequest{Users: q.users.keys(), Partitions: q.parts.keys(), Names: q.names.keys(), JobIds: q.sel.listIDs()}
	switch {
	case q.states != nil:
		req.States = q.states.list()
	case !q.anyState && q.sel == nil:
		// Jobs asked for by id are fetched whatever their state, to tell
		// an ended job (not listed, as Slurm) from an unknown id (an error).
		req.ActiveOnly = true
	}
	jobs, err := c.listJobs(ctx, req)
	if err != nil {
		return "", err
	}
	if jobs, err = c.withArrayTasks(ctx, jobs, req.ActiveOnly || len(req.States) > 0); err != nil {
		return "", err
	}
	var rows []jobRow
	known := false
	for _, r := range newArrayView(jobs).rows(jobs, perTask) {
		known = known || (q.sel != nil && q.sel.matchRow(r))
		if q.match(r) {
			rows = append(rows, r)
		}
	}
	// Like squeue, a lone unknown id is an error, but a known job that other
	// filters (-t, -u, -p, -n, the default states) leave out is just an
	// empty list: Slurm 22.05 lists an ended job only with -t.
	filtered := q.states != nil || len(req.Users)+len(req.Partitions)+len(req.Names) > 0
	if q.sel != nil && len(q.sel.jobs)+len(q.sel.tasks) == 1 && len(rows) == 0 && !filtered && !known {
		return "", &Error{Code: 1, Text: "slurm_load_jobs error: Invalid job id specified"}
	}
	if formatUses(f, "l", "L", "e") {
		view.limits = c.partitionLimits(ctx, jobs)
	}
	if formatUses(f, "C") || strings.Contains(sortSpec, "C") {
		view.nodes = c.exclusiveNodes(ctx, jobs)
	}
	if formatUses(f, "E") {
		if view.jobsByID, err = c.withDependencyTargets(ctx, jobs); err != nil {
			return "", err
		}
	}
	if err := sortJobRows(rows, sortSpec, "P,t,-p", view); err != nil {
		return "", c.errorf("%v", err)
	}
	var b strings.Builder
	table.write(&b, f, rows, noHeader)
	return b.String(), nil
}

// formatUses says whether the format has any of the letters.
func formatUses(f format, specs ...string) bool {
	for _, fl := range f.fields {
		for _, s := range specs {
			if fl.spec == s {
				return true
			}
		}
	}
	return false
}

// partitionLimits fetches the MaxTime of the partitions of the jobs'
// clusters (best effort: a cluster whose partitions cannot be read is left
// out, and its jobs show UNLIMITED).
func (c *cmd) partitionLimits(ctx context.Context, jobs []*loomv1.Job) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, j := range jobs {
		cl := j.GetCluster()
		if _, done := out[cl]; done || cl == "" || j.GetTimeLimitSeconds() > 0 {
			continue
		}
		out[cl] = map[string]int64{}
		parts, err := c.partitions(ctx, cl)
		if err != nil {
			continue
		}
		for _, p := range parts {
			secs, unlimited, err := ParseTimeLimit(p.GetMaxTime())
			if err != nil || unlimited || p.GetMaxTime() == "" {
				secs = -1
			}
			out[cl][p.GetName()] = secs
		}
	}
	return out
}

// sortJobRows sorts rows by a squeue -S spec ("P,t,-p": keys, '-' for
// descending), falling back to def, then by job id.
func sortJobRows(rows []jobRow, spec, def string, v *squeueView) error {
	if spec == "" {
		spec = def
	}
	sort.SliceStable(rows, func(a, b int) bool { return lessID(rows[a].id, rows[b].id) })
	keys := splitList(spec)
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		desc := false
		switch {
		case strings.HasPrefix(k, "-"):
			desc, k = true, k[1:]
		case strings.HasPrefix(k, "+"):
			k = k[1:]
		}
		cmp, ok := jobSortKeys(v)[k]
		if !ok {
			return fmt.Errorf("Invalid sort specification: %s", keys[i])
		}
		sort.SliceStable(rows, func(a, b int) bool {
			if desc {
				return cmp(rows[b].job, rows[a].job) < 0
			}
			return cmp(rows[a].job, rows[b].job) < 0
		})
	}
	return nil
}

// lessID orders job ids "9" < "10" < "10_2" < "10_10".
func lessID(a, b string) bool {
	ai, at, _ := strings.Cut(a, "_")
	bi, bt, _ := strings.Cut(b, "_")
	if x, y := numericID(ai), numericID(bi); x != y {
		return x < y
	}
	if x, y := numericID(strings.Trim(at, "[]")), numericID(strings.Trim(bt, "[]")); x != y {
		return x < y
	}
	return a < b
}

func tsSecs(t interface{ GetSeconds() int64 }) int64 {
	if t == nil {
		return 0
	}
	return t.GetSeconds()
}

// jobSortKeys are squeue's -S keys.
func jobSortKeys(v *squeueView) map[string]func(a, b *loomv1.Job) int {
	return map[string]func(a, b *loomv1.Job) int{
		"i": func(a, b *loomv1.Job) int { return cmp.Compare(numericID(a.GetJobId()), numericID(b.GetJobId())) },
		"A": func(a, b *loomv1.Job) int { return cmp.Compare(numericID(a.GetJobId()), numericID(b.GetJobId())) },
		"j": func(a, b *loomv1.Job) int { return cmp.Compare(a.GetDisplayName(), b.GetDisplayName()) },
		"u": func(a, b *loomv1.Job) int { return cmp.Compare(a.GetUser(), b.GetUser()) },
		"a": func(a, b *loomv1.Job) int { return cmp.Compare(a.GetAccount(), b.GetAccount()) },
		"q": func(a, b *loomv1.Job) int { return cmp.Compare(a.GetQos(), b.GetQos()) },
		"P": func(a, b *loomv1.Job) int { return cmp.Compare(a.GetPartition(), b.GetPartition()) },
		"t": func(a, b *loomv1.Job) int {
			return cmp.Compare(stateCode(effectiveState(a)), stateCode(effectiveState(b)))
		},
		"T": func(a, b *loomv1.Job) int {
			return cmp.Compare(stateLong(effectiveState(a)), stateLong(effectiveState(b)))
		},
		"p": func(a, b *loomv1.Job) int { return cmp.Compare(a.GetPriority(), b.GetPriority()) },
		"Q": func(a, b *loomv1.Job) int { return cmp.Compare(a.GetPriority(), b.GetPriority()) },
		"M": func(a, b *loomv1.Job) int { return cmp.Compare(jobElapsed(a, v.now), jobElapsed(b, v.now)) },
		"l": func(a, b *loomv1.Job) int { return cmp.Compare(v.timeLimit(a), v.timeLimit(b)) },
		"D": func(a, b *loomv1.Job) int { return cmp.Compare(int64(shownNodes(a)), int64(shownNodes(b))) },
		"C": func(a, b *loomv1.Job) int { return cmp.Compare(int64(v.cpus(a)), int64(v.cpus(b))) },
		"V": func(a, b *loomv1.Job) int { return cmp.Compare(tsSecs(a.GetSubmitTime()), tsSecs(b.GetSubmitTime())) },
		"S": func(a, b *loomv1.Job) int { return cmp.Compare(tsSecs(a.GetStartTime()), tsSecs(b.GetStartTime())) },
		"e": func(a, b *loomv1.Job) int { return cmp.Compare(tsSecs(a.GetEndTime()), tsSecs(b.GetEndTime())) },
		"N": func(a, b *loomv1.Job) int {
			return cmp.Compare(compressHosts(a.GetNodes()), compressHosts(b.GetNodes()))
		},
		"r": func(a, b *loomv1.Job) int { return cmp.Compare(jobReason(a), jobReason(b)) },
		"R": func(a, b *loomv1.Job) int { return cmp.Compare(jobReason(a), jobReason(b)) },
	}
}

const squeueUsage = `Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]
              [-n name] [-o format] [-O format] [-p partitions] [--qos qos]
              [--sort fields] [--start] [-t states] [-u user_name] [--usage]
              [-w nodes] [-ahjlrv] [--me]
`
