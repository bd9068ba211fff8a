package main

// The policies compared. Values marked "assumed" are this simulator's
// assumptions, not measurements; the report prints every one.

// noAutomation: a person notices (paged), finds the bad node, swaps in a
// spare and restarts by hand; repairs wait for a ticket to be picked up.
func noAutomation(loom Policy) Policy {
	return Policy{
		Name:   "no automation",
		About:  "paged person restarts by hand; hourly synchronous checkpoints",
		Manual: true,
		// A hang shows only when the NCCL watchdog (PyTorch's default
		// 10 min) kills the job; then someone is paged.
		HangDetect: 10 * minute,
		Page:       30 * minute, // assumed mean response to a page
		ManualWork: 15 * minute, // assumed
		Diagnose:   60 * minute, // assumed: find the bad node among 2,048
		Restart:    5 * minute,  // as the Llama 3 conditions assume
		// Hourly synchronous checkpoints; a 405B model's state (~6.5 TB
		// with optimizer) written at ~2 TB/s with overheads: ~1 min.
		CkptInterval: 60 * minute,
		CkptStall:    60,
		Spares:       loom.Spares,
		RepairTime:   loom.RepairTime,
		RepairQueue:  8 * hour, // assumed: a ticket waits for the next shift
		SDCDetect:    loom.SDCDetect,
	}
}

// llama3Paper is the Llama 3 405B run's conditions as far as the paper
// gives them (automated restarts: only 3 of 466 interruptions needed
// significant manual intervention; the 16K-GPU job ran on a 24K-GPU
// cluster, so spare capacity was ample), with assumed values where it is
// silent (detection, restart, checkpointing).
func llama3Paper(loom Policy) Policy {
	return Policy{
		Name:           "Llama 3 405B conditions",
		About:          "the paper's automation, assumed timings",
		Detect:         2 * minute,  // assumed: automation notices a failed job
		HangDetect:     10 * minute, // NCCL watchdog (the paper's NCCLX cut hang diagnosis, not detection)
		Page:           30 * minute,
		Escalation:     3.0 / 466,
		EscalationWork: 2 * hour, // assumed
		Requeue:        0,
		Restart:        5 * minute,  // assumed: "we reduced job startup ... time"
		CkptInterval:   10 * minute, // assumed
		CkptStall:      5,           // assumed: "... and checkpointing time"
		Spares:         1024,        // 8K idle GPUs of the 24K cluster
		RepairTime:     loom.RepairTime,
		SDCDetect:      loom.SDCDetect,
	}
}

// Loom's own timings, from what Loom measured or is configured to do on
// this repository's stack (bench/REPORT.md; the report's ettrsim section
// prints each with its source). The training program's timings (its
// restart, its checkpoints) and the hardware's (repairs) are not Loom's
// and stay assumptions.
const (
	// measuredDetect is recoverybench's slowest detection, from an Xid's
	// injection to health taking the node out of HEALTHY (bench/REPORT.md,
	// "Recovery from a GPU off the bus": 10–27 ms over 5 rounds).
	measuredDetect = 0.027
	// xidPoll is how often the agent reads the GPUs' Xids (xidPoll in
	// services/agent/internal/app/node.go). recoverybench's injection
	// wakes the reader at once; a real Xid waits up to one poll, so Loom's
	// detection is taken as a whole poll plus the slowest measured path.
	// A crash of the job's process is reported at its exit, sooner.
	xidPoll = 1.0
	// measuredRequeue is recoverybench's slowest time from detection to
	// the job's next run's program running on both its nodes, as their
	// agents report it (running again less detection, per round: 175–205
	// ms, 2026-12-07, after the survivor's checkpoint signal was made
	// sure to reach a program not yet up): the survivors' checkpoint on
	// failure, the scheduler's requeue and placement and the agents' step
	// start on the local stack.
	measuredRequeue = 0.205
	// schedPassAtScale is schedcycle's slowest first scheduling pass at
	// 10,000 nodes and 100,000 pending jobs (bench/REPORT.md, "One
	// scheduling pass at scale": 395.2 ms): the placement of a requeued
	// job on a large, busy cluster costs at most about that.
	schedPassAtScale = 0.395
	// loomRequeue is the simulator's requeue: the measured path plus a
	// pass at scale is 0.47 s; it is rounded up to 1 s for the fan-out of
	// 2,048 StartSteps, which no benchmark measures.
	loomRequeue = 1.0
	// hangTimeout is the job's no-progress timeout (hang_timeout_seconds;
	// the scheduler's -hang-timeout is off by default: a job sets it) that
	// this policy assumes jobs set; progressInterval the agent's
	// -progress-interval default (a step's progress reaches the scheduler
	// up to 5 s late) and schedulerTick its DefaultTickInterval (hang
	// timeouts are checked once a tick). Docs: docs/health.md, "Hang
	// detection" and "Progress". A hang is found at most 2m6s after the
	// job's last step.
	hangTimeout      = 2 * minute
	progressInterval = 5.0
	schedulerTick    = 1.0
	// failureCkptWait is the scheduler's -failure-checkpoint-wait default
	// (domain.DefaultFailureCheckpointWait): how long the survivors of a
	// failed node get to write their checkpoint (a job without --signal;
	// one with it gets -checkpoint-grace, 2 min). Loom's assumed save
	// (CkptStall + CkptDurable, 20.5 s) fits in it; the agent reports the
	// checkpoint within 100 ms of it (SignalledProgressInterval).
	failureCkptWait = 30.0
)

// defaultLoom is Loom's policy (overridable by flags): detection and
// requeue as Loom measured them, hang detection as it is configured,
// automatic drain and requeue onto health-checked spare nodes, automatic
// repair, checkpoint-aware drain of faults that warn, checkpoint on a
// node's failure (the survivors save before they are stopped). The training
// program's restart and checkpoints are assumed (frequent asynchronous
// checkpoints), as are the repairs' durations.
func defaultLoom() Policy {
	return Policy{
		Name:  "Loom",
		About: "measured detection and requeue, drain + requeue onto spares, auto repair, checkpoint-aware drain, checkpoint on a node's failure, async checkpoints",
		// An Xid reaches health and the scheduler within a poll and the
		// measured bus path; a process exit sooner.
		Detect:     xidPoll + measuredDetect,
		HangDetect: hangTimeout + progressInterval + schedulerTick,
		// Escalations to a person: as many as the Llama 3 run needed.
		Page:           30 * minute,
		Escalation:     3.0 / 466,
		EscalationWork: 2 * hour,
		Requeue:        loomRequeue,
		// Assumed (the program's): start-up on a spare that is already up,
		// health-checked and has the image: process start, NCCL init,
		// checkpoint load.
		Restart: 2 * minute,
		// Assumed (the program's): frequent asynchronous checkpoints, a
		// short stall to snapshot to host memory, safe once copied out (to
		// a peer or storage) 20 s later.
		CkptInterval: 2 * minute,
		CkptStall:    0.5,
		CkptDurable:  20,
		Spares:       32,
		// Assumed (the hardware's): a real reboot, reimage, replacement.
		RepairTime: [nActions]float64{10 * minute, 45 * minute, 4 * hour},
		Drain:      true,
		// The scheduler's checkpoint on failure (on by default,
		// failureCkptWait): the survivors of a failed node save.
		FailureCkpt: true,
		SDCDetect:   30 * minute, // assumed, the same for every policy
	}
}

// whatItTakes names the variation that reaches the 98% target: the
// training program's side (its restart and checkpoints) and a shorter hang
// timeout, which a job sets; Loom's measured timings unchanged.
const whatItTakes = "what 98% takes: restart 45 s, checkpoint every 1 min (stall 0.1 s, safe 10 s later), hang timeout 1 min"

// Why rows are what-ifs (Policy.WhatIf).
const (
	whatIfNoPerson  = "assumes every failure is handled without a person; no system has shown that"
	whatIfFailCkpt  = "Loom checkpoints on a node's failure only: a hung or crashed program is stopped without a signal"
	whatIfFastTrain = "assumes a training program that restarts in 45 s and checkpoints every minute; none was measured here"
)

// variations of Loom's policy, one setting changed each (the what-ifs
// last: what reaching 98% needs).
func variations(loom Policy) []Policy {
	v := func(name, whatIf string, f func(*Policy)) Policy {
		p := loom
		p.Name, p.About, p.WhatIf = "Loom, "+name, "", whatIf
		f(&p)
		return p
	}
	fast := func(p *Policy) {
		p.Restart, p.HangDetect = 45, minute+progressInterval+schedulerTick
		p.CkptInterval, p.CkptStall, p.CkptDurable = minute, 0.1, 10
	}
	return []Policy{
		v("no spare nodes", "", func(p *Policy) { p.Spares = 0 }),
		v("slow detection (5 min, hangs 30 min)", "", func(p *Policy) { p.Detect, p.HangDetect = 5*minute, 30*minute }),
		v("checkpoint every 30 min", "", func(p *Policy) { p.CkptInterval = 30 * minute }),
		v("no checkpoint-aware drain", "", func(p *Policy) { p.Drain = false }),
		v("no checkpoint on failure", "", func(p *Policy) { p.FailureCkpt = false }),
		v("restart 5 min (as Llama 3 assumed)", "", func(p *Policy) { p.Restart = 5 * minute }),
		v("with the Llama 3 program's timings (restart 5 min, synchronous checkpoint every 10 min, 5 s stall)", "", func(p *Policy) {
			p.Restart, p.CkptInterval, p.CkptStall, p.CkptDurable = 5*minute, 10*minute, 5, 0
		}),
		v("manual repairs (8 h ticket queue), 8 spares", "", func(p *Policy) { p.RepairQueue, p.Spares = 8*hour, 8 }),
		v("no escalations to a person", whatIfNoPerson, func(p *Policy) { p.Escalation = 0 }),
		v("checkpoint on every failure (hangs, program crashes)", whatIfFailCkpt, func(p *Policy) { p.FailureCkptAll = true }),
		v(whatItTakes, whatIfFastTrain, fast),
		v(whatItTakes+", and checkpoint on every failure", whatIfFastTrain+"; "+whatIfFailCkpt, func(p *Policy) {
			fast(p)
			p.FailureCkptAll = true
		}),
	}
}
