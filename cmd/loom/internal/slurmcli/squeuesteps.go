package slurmcli

import (
	"context"
	"strconv"
	"strings"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// squeueStepsFormat is Slurm 22.05's default squeue --steps format.
const squeueStepsFormat = "%.15i %.8j %.9P %.8u %.9M %N"

// stepRow is one line of squeue --steps: a numbered step of a running
// job, or its batch step (step nil).
type stepRow struct {
	job  *loomv1.Job
	step *loomv1.JobStep
}

func (r stepRow) id() string {
	if r.step == nil {
		return r.job.GetJobId() + ".batch"
	}
	return r.job.GetJobId() + "." + strconv.Itoa(int(r.step.GetStepId()))
}

// squeueStepFields are squeue's step fields (Slurm's --steps letters).
func squeueStepFields(now time.Time, loc *time.Location) fieldTable[stepRow] {
	elapsed := func(r stepRow) string {
		if r.step == nil {
			return formatSecs(jobElapsed(r.job, now), true)
		}
		start := r.step.GetStartTime().AsTime()
		return formatSecs(int64(max(now.Sub(start), 0)/time.Second), true)
	}
	nodes := func(r stepRow) string {
		if r.step == nil {
			return r.job.GetBatchHost()
		}
		return compressHosts(r.step.GetNodes())
	}
	return fieldTable[stepRow]{fields: map[string]fieldDef[stepRow]{
		"i": {header: "STEPID", value: stepRow.id},
		"j": {header: "NAME", value: func(r stepRow) string {
			if r.step == nil {
				return "batch"
			}
			return stepName(r.step)
		}},
		"P": {header: "PARTITION", value: func(r stepRow) string { return r.job.GetPartition() }},
		"u": {header: "USER", value: func(r stepRow) string { return r.job.GetUser() }},
		"M": {header: "TIME", nocut: true, value: elapsed},
		"N": {header: "NODELIST", nocut: true, value: nodes},
		"A": {header: "NTASKS", value: func(r stepRow) string {
			if r.step == nil {
				return "1"
			}
			return strconv.Itoa(int(r.step.GetNumTasks()))
		}},
		"S": {header: "START_TIME", nocut: true, value: func(r stepRow) string {
			if r.step == nil {
				return formatTimestamp(r.job.GetStartTime().AsTime(), loc)
			}
			return formatTimestamp(r.step.GetStartTime().AsTime(), loc)
		}},
	}}
}

// squeueSteps is squeue --steps[=LIST]: the running steps of the running
// jobs the filters keep (their batch steps too), or of the steps listed.
func (c *cmd) squeueSteps(ctx context.Context, q *squeueQuery, list, formatStr string, noHeader bool) (string, error) {
	want := map[string]bool{}
	for _, s := range splitList(list) {
		want[s] = true
	}
	jobs, err := c.listJobs(ctx, &loomv1.ListJobsRequest{Users: q.users.keys(), Partitions: q.parts.keys(),
		Names: q.names.keys(), States: []loomv1.JobState{loomv1.JobState_RUNNING}})
	if err != nil {
		return "", err
	}
	var rows []stepRow
	for _, r := range newArrayView(jobs).rows(jobs, true) {
		if !q.match(r) || r.job.GetState() != loomv1.JobState_RUNNING {
			continue
		}
		steps, err := c.jobSteps(ctx, r.job.GetName(), 0)
		if err != nil {
			return "", err
		}
		for _, s := range steps {
			if s.GetState() == loomv1.JobState_RUNNING {
				rows = append(rows, stepRow{job: r.job, step: s})
			}
		}
		if r.job.GetScript() != "" || r.job.GetBatchHost() != "" && len(r.job.GetCommand()) == 0 {
			rows = append(rows, stepRow{job: r.job})
		}
	}
	if len(want) > 0 {
		kept := rows[:0]
		for _, r := range rows {
			if want[r.id()] {
				kept = append(kept, r)
			}
		}
		rows = kept
	}
	if formatStr == "" {
		formatStr = squeueStepsFormat
	}
	f := parseFormat(formatStr)
	table := squeueStepFields(c.env.nowIn(c.loc), c.loc)
	c.checkFormat(f, table.known, "step")
	var b strings.Builder
	table.write(&b, f, rows, noHeader)
	return b.String(), nil
}
