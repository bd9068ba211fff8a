package slurmcli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Slurm's sprio formats (all factors weighted, no association or TRES).
const (
	sprioDefaultFormat = "%.15i %9r %.10Y %.10S %.10A %.10F %.10J %.10P %.10Q"
	sprioLongFormat    = "%.15i %9r %.8u %.10Y %.10S %.10A %.10F %.10J %.10P %.10Q %.11N"
)

var sprioOptions = []optDef{
	{long: []string{"clusters", "cluster"}, short: 'M', arg: requiredArg},
	{long: []string{"noheader"}, short: 'h', arg: noArg},
	{long: []string{"help"}, arg: noArg},
	{long: []string{"jobs"}, short: 'j', arg: optionalArg},
	{long: []string{"long"}, short: 'l', arg: noArg},
	{long: []string{"norm"}, short: 'n', arg: noArg},
	{long: []string{"format"}, short: 'o', arg: requiredArg},
	{long: []string{"partition"}, short: 'p', arg: requiredArg},
	{long: []string{"sort"}, short: 'S', arg: requiredArg},
	{long: []string{"user"}, short: 'u', arg: requiredArg},
	{long: []string{"usage"}, arg: noArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
	{long: []string{"weights"}, short: 'w', arg: noArg},
}

// sprioFields are sprio's format letters.
func sprioFields() fieldTable[jobRow] {
	factor := func(header string, f func(p *loomv1.PriorityFactors) int64) fieldDef[jobRow] {
		return fieldDef[jobRow]{header: header, value: func(r jobRow) string {
			return strconv.FormatInt(f(r.job.GetPriorityFactors()), 10)
		}}
	}
	return fieldTable[jobRow]{fields: map[string]fieldDef[jobRow]{
		"i": {header: "JOBID", value: func(r jobRow) string { return r.id }},
		"r": {header: "PARTITION", value: func(r jobRow) string { return r.job.GetPartition() }},
		"u": {header: "USER", value: func(r jobRow) string { return r.job.GetUser() }},
		"Y": {header: "PRIORITY", value: func(r jobRow) string { return strconv.FormatInt(r.job.GetPriority(), 10) }},
		"S": {header: "SITE", value: func(jobRow) string { return "0" }},
		"A": factor("AGE", (*loomv1.PriorityFactors).GetAge),
		"F": factor("FAIRSHARE", (*loomv1.PriorityFactors).GetFairshare),
		"J": factor("JOBSIZE", (*loomv1.PriorityFactors).GetJobSize),
		"P": factor("PARTITION", (*loomv1.PriorityFactors).GetPartition),
		"Q": factor("QOS", (*loomv1.PriorityFactors).GetQos),
		"N": factor("NICE", (*loomv1.PriorityFactors).GetNice),
		"c": {header: "CLUSTER", value: func(r jobRow) string { return shortName(r.job.GetCluster()) }},
	}}
}

// sprio is the sprio command: the priority factors of pending jobs.
func (c *cmd) sprio(ctx context.Context, args []string) error {
	p := &optParser{prog: "sprio", defs: sprioOptions}
	opts, rest, err := p.parse(args)
	if err != nil {
		return usage("sprio", err)
	}
	formatStr := c.env.Environ["SPRIO_FORMAT"]
	var sel *jobSelector
	var users, parts []string
	long, noHeader, jobsFlag := false, false, false
	for _, o := range opts {
		switch o.key {
		case "help", "usage":
			fmt.Fprint(c.stdout, sprioUsage)
			return nil
		case "version":
			return c.printVersion()
		case "clusters":
			if c.env.Cluster, err = c.oneCluster(o.value); err != nil {
				return err
			}
		case "noheader":
			noHeader = true
		case "jobs":
			jobsFlag = true
			if o.hasValue {
				if sel, err = parseJobSelector("sprio", o.value); err != nil {
					return err
				}
			}
		case "long":
			long = true
		case "norm":
			return c.errorf("normalized factors (-n) are not reported by Loom; use sprio without -n")
		case "format":
			formatStr = o.value
		case "partition":
			parts = splitList(o.value)
		case "user":
			users = splitList(o.value)
		case "weights":
			return c.errorf("the priority weights (-w) are the scheduler's configuration; see the cluster's scheduler settings")
		}
	}
	if len(rest) > 0 {
		if jobsFlag && sel == nil {
			if sel, err = parseJobSelector("sprio", rest[0]); err != nil {
				return err
			}
			rest = rest[1:]
		}
		if len(rest) > 0 {
			return c.errorf("Unrecognized option: %s", rest[0])
		}
	}
	users = c.filterUsers(users)
	if formatStr == "" {
		formatStr = sprioDefaultFormat
		if long {
			formatStr = sprioLongFormat
		} else if len(users) > 0 {
			formatStr = "%.15i %9r %.8u %.10Y %.10S %.10A %.10F %.10J %.10P %.10Q"
		}
	}
	f := parseFormat(formatStr)
	table := sprioFields()
	c.checkFormat(f, table.known, "job")
	jobs, err := c.listJobs(ctx, &loomv1.ListJobsRequest{States: []loomv1.JobState{loomv1.JobState_PENDING}, Users: users, Partitions: parts})
	if err != nil {
		return err
	}
	if jobs, err = c.withArrayTasks(ctx, jobs, true); err != nil {
		return err
	}
	q := &squeueQuery{users: newStringSet(users), parts: newStringSet(parts), sel: sel,
		states: stateSet{loomv1.JobState_PENDING: true}, anyPart: true}
	var rows []jobRow
	for _, r := range newArrayView(jobs).rows(jobs, true) {
		if q.match(r) {
			rows = append(rows, r)
		}
	}
	sort.SliceStable(rows, func(a, b int) bool { return lessID(rows[a].id, rows[b].id) })
	if sel != nil && len(rows) == 0 {
		fmt.Fprintln(c.stdout, "Unable to find jobs matching user/id(s) specified")
		return nil
	}
	var b strings.Builder
	table.write(&b, f, rows, noHeader)
	fmt.Fprint(c.stdout, b.String())
	return nil
}

const sprioUsage = `Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]
         [--usage] [-h] [-l] [-M cluster]
`
