package slurmcli

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// seffVersion is the version of Slurm's contributed seff script this
// command follows (contribs/seff).
const seffVersion = "2.1"

const seffUsage = `Usage: seff [Options] <Jobid>
       Options:
       -h    Help menu
       -v    Version
       -d    Debug mode: display raw Slurm data
`

// seff is Slurm's contributed seff: a finished job's CPU and memory
// efficiency from its accounting (job accounting: docs/slurm.md), as the
// script prints it, from the same figures sacct shows.
func (c *cmd) seff(ctx context.Context, args []string) error {
	debug := false
	var rest []string
	for i, a := range args {
		switch a {
		case "--":
			rest = append(rest, args[i+1:]...)
		case "--version":
			// As every Slurm command Loom provides answers it.
			return c.printVersion()
		case "--help":
			fmt.Fprint(c.stdout, seffUsage)
			return &Error{Code: 1}
		}
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			rest = append(rest, a)
			continue
		}
		// Perl's getopts('hvdf:'): bundled letters, f takes a value.
		for k := 1; k < len(a); k++ {
			switch a[k] {
			case 'v':
				fmt.Fprintf(c.stdout, "seff Version %s\n", seffVersion)
				return &Error{Code: 1}
			case 'h':
				fmt.Fprint(c.stdout, seffUsage)
				return &Error{Code: 1}
			case 'd':
				debug = true
			case 'f':
				k = len(a) // its value is the rest of the word (or ignored)
			default:
				fmt.Fprintf(c.stderr, "Unknown option: %c\n", a[k])
			}
		}
	}
	if len(rest) != 1 {
		fmt.Fprint(c.stdout, seffUsage)
		return &Error{Code: 1}
	}
	id := rest[0]
	jobs, err := c.listJobs(ctx, &loomv1.ListJobsRequest{})
	if err == nil {
		jobs, err = c.withArrayTasks(ctx, jobs, false)
	}
	if err != nil {
		return err
	}
	j := jobsByID(jobs)[id]
	if j == nil {
		fmt.Fprint(c.stderr, "Job not found.\n")
		return &Error{Code: 2}
	}
	st := effectiveState(j)
	state := stateLong(st)
	ncpus, nnodes := max(jobCPUs(j), 1), max(jobNodeCount(j), 1)
	row := sacctRow{job: j, id: id}
	walltime := row.elapsed(c.env.nowIn(c.loc))

	// The steps: the batch script's and every srun step's of the current
	// run. CPU time sums over them; the memory used is the step whose
	// tasks' peaks add up to the most (Slurm's tres_usage_in_tot), with
	// its highest and average task.
	steps := []*usageStat{sacctRow{job: j, step: "batch"}.usage()}
	var lookups stepLookups
	for _, r := range c.stepRows(ctx, j, nil, id, &lookups) {
		steps = append(steps, r.usage())
	}
	var cpu time.Duration
	var mem, maxmem, avemem int64 // KiB
	for _, s := range steps {
		if s == nil {
			continue
		}
		cpu += s.user + s.system
		if tot := s.rss.total >> 10; tot > mem {
			mem, maxmem, avemem = tot, s.rss.max>>10, s.rss.ave()>>10
		}
	}
	cput := int64((cpu + time.Second/2) / time.Second)
	reqmem := j.GetMemMb() << 10 * int64(nnodes)        // KiB, all nodes
	exit, _ := exitParts(j.GetExitCode(), j.ExitSignal) // killed by a signal: no exit status
	arrayID := ""
	if j.GetArrayJobId() != "" {
		arrayID = fmt.Sprintf("%s_%d", j.GetArrayJobId(), j.GetArrayTaskId())
	}
	cluster := shortName(j.GetCluster())
	var b strings.Builder
	if debug {
		fmt.Fprintf(&b, "Slurm data: JobID ArrayJobID User Group State Clustername Ncpus Nnodes Ntasks Reqmem PerNode Cput Walltime Mem ExitStatus\n")
		fmt.Fprintf(&b, "Slurm data: %s %s %s %s %s %s %d %d %d %d %d %d %d %d\n\n", j.GetJobId(), arrayID, j.GetUser(), j.GetUser(),
			state, cluster, ncpus, nnodes, reqmem, 1, cput, walltime, mem, exit)
	}
	fmt.Fprintf(&b, "Job ID: %s\n", j.GetJobId())
	if arrayID != "" {
		fmt.Fprintf(&b, "Array Job ID: %s\n", arrayID)
	}
	fmt.Fprintf(&b, "Cluster: %s\n", cluster)
	fmt.Fprintf(&b, "User/Group: %s/%s\n", j.GetUser(), j.GetUser())
	if st == loomv1.JobState_PENDING || st == loomv1.JobState_RUNNING {
		fmt.Fprintf(&b, "State: %s\n", state)
	} else {
		fmt.Fprintf(&b, "State: %s (exit code %d)\n", state, exit)
	}
	if ncpus == 1 {
		fmt.Fprintf(&b, "Cores: %d\n", ncpus)
	} else {
		fmt.Fprintf(&b, "Nodes: %d\n", nnodes)
		fmt.Fprintf(&b, "Cores per node: %d\n", ncpus/nnodes)
	}
	if st == loomv1.JobState_PENDING {
		b.WriteString("Efficiency not available for jobs in the PENDING state.\n")
		fmt.Fprint(c.stdout, b.String())
		return nil
	}
	core := walltime * int64(ncpus)
	eff := 0.0
	if core != 0 {
		eff = float64(cput) / float64(core) * 100
	}
	// The script's time2str is sacct's [D-]HH:MM:SS: formatDuration.
	fmt.Fprintf(&b, "CPU Utilized: %s\n", formatDuration(cput))
	fmt.Fprintf(&b, "CPU Efficiency: %.2f%% of %s core-walltime\n", eff, formatDuration(core))
	fmt.Fprintf(&b, "Job Wall-clock time: %s\n", formatDuration(walltime))
	fmt.Fprintf(&b, "Memory Utilized: %s\n", seffKB(float64(mem)))
	memEff := 0.0
	if reqmem != 0 {
		memEff = float64(mem) / float64(reqmem) * 100
	}
	fmt.Fprintf(&b, "Memory Efficiency: %.2f%% of %s (%s/node)\n", memEff, seffKB(float64(reqmem)), seffKB(float64(reqmem)/float64(nnodes)))
	if maxmem != 0 && maxmem > avemem {
		// As the script prints it: the ratio, as a percentage.
		fmt.Fprintf(&b, "The task which had the largest memory consumption differs by %.02f%% from the average task max memory consumption\n",
			float64(maxmem)/float64(avemem)*100)
	}
	if st == loomv1.JobState_RUNNING {
		b.WriteString("WARNING: Efficiency statistics can only be obtained after the job has ended as seff tool is based on the accounting database data.\n")
	}
	fmt.Fprint(c.stdout, b.String())
	return nil
}

// seffKB is the script's kbytes2str: "1.50 GB" from KiB.
func seffKB(kb float64) string {
	if kb == 0 {
		return "0.00 MB"
	}
	exp := int(math.Log(kb) / math.Log(1024))
	units := []string{"K", "M", "G", "T", "P", "E"}
	unit := ""
	if exp >= 0 && exp < len(units) {
		unit = units[exp]
	}
	return fmt.Sprintf("%.2f %sB", kb/math.Pow(1024, float64(exp)), unit)
}
