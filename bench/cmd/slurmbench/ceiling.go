package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// jobCost is what the benchmark's job costs by itself on this machine,
// outside either system: the CPU time (user + system) of one run of the job
// script, and of one exec of /bin/true, each run alone, one after another.
// Both systems' jobs pay it, and it bounds what any system can complete
// when its jobs share the machine's cores with it.
type jobCost struct {
	Script, Exec time.Duration
	Runs         int
}

// probeJobCost measures jobCost over runs runs of each. It counts the CPU
// time of this process's waited-for children (RUSAGE_CHILDREN), so it must
// run while this process has no other children.
func probeJobCost(dir string, runs int) (jobCost, error) {
	c := jobCost{Runs: runs}
	script := filepath.Join(dir, "probe-job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"+trivialScript+"\n"), 0o755); err != nil {
		return c, fmt.Errorf("job cost probe: %w", err)
	}
	var err error
	if c.Script, err = childCPU(script, runs); err != nil {
		return c, err
	}
	if c.Exec, err = childCPU("/bin/true", runs); err != nil {
		return c, err
	}
	return c, nil
}

// childCPU runs path runs times, one after another, and returns the CPU
// time of one run: the children's total over runs.
func childCPU(path string, runs int) (time.Duration, error) {
	before, err := childrenCPU()
	if err != nil {
		return 0, err
	}
	for i := 0; i < runs; i++ {
		if err := exec.Command(path).Run(); err != nil {
			return 0, fmt.Errorf("job cost probe: %s: %w", path, err)
		}
	}
	after, err := childrenCPU()
	if err != nil {
		return 0, err
	}
	return (after - before) / time.Duration(runs), nil
}

func childrenCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0, fmt.Errorf("job cost probe: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// ceiling is what the jobs' own CPU leaves the systems in a round (see
// renderCeiling): rates in jobs per second, CPU in milliseconds per job.
type ceiling struct {
	Cores int
	// Bound is the most trivial jobs per second the cores could run, the
	// job alone costing jobCost.Script.
	Bound float64
	// Need is targetRatio × Slurm's accepted rate; NeedPct is Need as a
	// percentage of Bound.
	Need, NeedPct float64
	// LoomJobs and LoomCtl are Loom's jobs' and control plane's CPU per job
	// in the round; Budget what the control plane may use at Need
	// (cores ÷ Need − LoomJobs; below zero: nothing).
	LoomJobs, LoomCtl, Budget float64
	// SlurmCtl is Slurm's daemons', sbatch's and the benchmark's CPU per job.
	SlurmCtl float64
}

// loomJobsCPU is the name of the Loom jobs' CPU in result.CPU.
const loomJobsCPU = "their jobs (sh + hostname)"

// ceilingOf computes the ceiling of round r from cost and the rate
// slurmAccepted (jobs per second).
func ceilingOf(cores int, cost jobCost, slurmAccepted float64, r round) ceiling {
	c := ceiling{Cores: cores}
	perJob := func(d time.Duration, n int) float64 { // milliseconds
		if n == 0 {
			return 0
		}
		return float64(d) / float64(time.Millisecond) / float64(n)
	}
	for _, u := range r.L.CPU {
		if u.Name == loomJobsCPU {
			c.LoomJobs += perJob(u.CPU, r.L.N)
		} else {
			c.LoomCtl += perJob(u.CPU, r.L.N)
		}
	}
	for _, u := range r.S.CPU {
		c.SlurmCtl += perJob(u.CPU, r.S.N)
	}
	if cost.Script > 0 {
		c.Bound = float64(cores) / cost.Script.Seconds()
	}
	c.Need = targetRatio * slurmAccepted
	if c.Bound > 0 {
		c.NeedPct = 100 * c.Need / c.Bound
	}
	if c.Need > 0 {
		c.Budget = max(1000*float64(cores)/c.Need-c.LoomJobs, 0)
	}
	return c
}
