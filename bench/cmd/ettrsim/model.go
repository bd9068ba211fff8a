package main

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"strconv"
	"strings"
)

// interruptionsCSV is Table 5 of the Llama 3 paper ("The Llama 3 Herd of
// Models", arXiv:2407.21783, §3.3.4): the 419 unexpected interruptions of
// the 405B pre-training in a 54-day snapshot, by root cause.
//
//go:embed testdata/llama3_405b_interruptions.csv
var interruptionsCSV string

// Repair actions, in order of escalation (the health service's
// RemediationAction REBOOT, REIMAGE, REPLACE).
const (
	reboot = iota
	reimage
	replace
	nActions
)

var actionNames = [nActions]string{"reboot", "reimage", "replace"}

// Component is one root cause of Table 5 with how its failures behave.
// The behaviour shares are this simulator's assumptions (the paper gives
// only counts); report.go prints them.
type Component struct {
	Name, Category string
	// Count is the paper's number of interruptions; Printed its share as
	// printed (the printed shares add up to 94.9%, not 100%: the first
	// row, 148 "Faulty GPU" at 30.1%, does not match 148/419 = 35.3%).
	Count   int
	Printed float64
	// Repair is the share of failures after which the node must be taken
	// out and repaired; the others are fixed by restarting the job.
	Repair float64
	// Warn is the share that gives warning before it stops the job (a
	// rising correctable-error rate, throttling, a degrading link): a
	// checkpoint-aware drain saves the work before the node goes.
	Warn float64
	// Hang is the share that hangs the job rather than crash it: found by
	// a no-progress timeout, not at once.
	Hang float64
	// Actions is how repairs split between reboot, reimage and replace
	// (the action that finally fixed the node).
	Actions [nActions]float64
	// SDC: the failure corrupts results silently; it is found late (the
	// policy's SDCDetect) and training rolls back to a checkpoint from
	// before it.
	SDC bool
}

// behaviour holds the assumed shares by component name.
var behaviour = map[string]Component{
	"Faulty GPU":                     {Repair: 1, Warn: 0.1, Hang: 0.1, Actions: [3]float64{0.5, 0.1, 0.4}},
	"GPU HBM3 Memory":                {Repair: 1, Warn: 0.3, Actions: [3]float64{0.6, 0, 0.4}},
	"Software Bug":                   {Repair: 0, Hang: 0.2},
	"Network Switch/Cable":           {Repair: 1, Warn: 0.2, Hang: 0.5, Actions: [3]float64{0, 0, 1}},
	"Host Maintenance":               {Repair: 1, Warn: 0.5, Actions: [3]float64{0.7, 0.3, 0}},
	"GPU SRAM Memory":                {Repair: 1, Warn: 0.2, Actions: [3]float64{0.5, 0, 0.5}},
	"GPU System Processor":           {Repair: 1, Hang: 0.3, Actions: [3]float64{0.8, 0.1, 0.1}},
	"NIC":                            {Repair: 1, Warn: 0.2, Hang: 0.3, Actions: [3]float64{0.3, 0, 0.7}},
	"NCCL Watchdog Timeouts":         {Repair: 0.3, Hang: 1, Actions: [3]float64{0.5, 0, 0.5}},
	"Silent Data Corruption":         {Repair: 1, SDC: true, Actions: [3]float64{0, 0, 1}},
	"GPU Thermal Interface + Sensor": {Repair: 1, Warn: 0.8, Actions: [3]float64{0.3, 0, 0.7}},
	"SSD":                            {Repair: 1, Warn: 0.3, Actions: [3]float64{0, 0.2, 0.8}},
	"Power Supply":                   {Repair: 1, Warn: 0.1, Actions: [3]float64{0.2, 0, 0.8}},
	"Server Chassis":                 {Repair: 1, Warn: 0.1, Actions: [3]float64{0.2, 0, 0.8}},
	"IO Expansion Board":             {Repair: 1, Warn: 0.1, Actions: [3]float64{0.2, 0, 0.8}},
	"Dependency":                     {Repair: 0, Hang: 0.2},
	"CPU":                            {Repair: 1, Warn: 0.1, Actions: [3]float64{0.2, 0, 0.8}},
	"System Memory":                  {Repair: 1, Warn: 0.3, Actions: [3]float64{0.2, 0, 0.8}},
}

// parseMix reads the interruptions table and attaches each component's
// assumed behaviour; a component the table names and behaviour does not is
// an error (so a new row cannot be silently mis-modelled).
func parseMix(text string) ([]Component, error) {
	rows, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("interruptions table: %w", err)
	}
	if len(rows) < 2 || strings.Join(rows[0], ",") != "component,category,interruptions,share_as_printed" {
		return nil, fmt.Errorf("interruptions table: unexpected header %q", rows[0])
	}
	var mix []Component
	for _, r := range rows[1:] {
		n, err := strconv.Atoi(r[2])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("interruptions table: %s: count %q", r[0], r[2])
		}
		share, err := strconv.ParseFloat(strings.TrimSuffix(r[3], "%"), 64)
		if err != nil {
			return nil, fmt.Errorf("interruptions table: %s: share %q", r[0], r[3])
		}
		c, ok := behaviour[r[0]]
		if !ok {
			return nil, fmt.Errorf("interruptions table: no behaviour assumed for %q", r[0])
		}
		c.Name, c.Category, c.Count, c.Printed = r[0], r[1], n, share/100
		mix = append(mix, c)
	}
	return mix, nil
}

// Policy is how failures are handled: by people, by Meta's automation as
// the Llama 3 paper describes it, or by Loom. Durations are in seconds.
type Policy struct {
	Name, About string
	// WhatIf, when set, says why the row is a what-if: a mechanism Loom
	// does not implement (FailureCkptAll), or timings nothing here measured.
	// The report marks such rows, so that no one reads them as Loom's.
	WhatIf string
	// Manual: a person handles every interruption (paged, finds the bad
	// node, restarts by hand); nothing is automatic.
	Manual bool
	// Detect is the time from a crash to the restart starting (automation);
	// HangDetect the time to notice a hang (a no-progress timeout, or an
	// NCCL watchdog that then kills the job).
	Detect, HangDetect float64
	// Page is the mean time for a person to respond to a page
	// (exponentially distributed); ManualWork the time they take to
	// restart by hand; Diagnose the time to find the bad node by hand.
	Page, ManualWork, Diagnose float64
	// Escalation is the share of interruptions the automation cannot
	// handle (the Llama 3 run needed significant manual intervention 3
	// times in 466); each costs a page and EscalationWork.
	Escalation, EscalationWork float64
	// Requeue is the time to put the job onto a spare node once one is
	// free (automation; by hand it is part of ManualWork).
	Requeue float64
	// Restart is the job's start-up: processes, NCCL, loading the
	// checkpoint.
	Restart float64
	// Checkpoints: every CkptInterval seconds of running, training stalls
	// CkptStall seconds to take one, which is safe (can be resumed from)
	// CkptDurable seconds later (0: synchronous, safe when the stall ends).
	CkptInterval, CkptStall, CkptDurable float64
	// Spares is the number of healthy idle nodes the job can be moved to.
	Spares int
	// RepairTime by action; RepairQueue is added before each repair (a
	// ticket waiting for a person; 0 when repairs are automatic).
	RepairTime  [nActions]float64
	RepairQueue float64
	// Drain: on a fault that gives warning, checkpoint first (the job's
	// signal), then move the job (Loom's checkpoint-aware drain).
	Drain bool
	// SDCDetect is how long silent data corruption goes unnoticed.
	SDCDetect float64
	// FailureCkpt: when a node fails under the job (a failure that needs a
	// repair, not a hang), the surviving ranks save the state training had
	// reached before they are stopped, taking CkptStall + CkptDurable after
	// detection: no training is lost. Loom does this (the scheduler's
	// checkpoint on failure: the survivors get the job's --signal and are
	// stopped at their new checkpoint); that the program can save then
	// (the built-in trainer does; a sharded model needs redundant copies,
	// as ByteRobust and Gemini keep) is the program's side, assumed as its
	// restart and checkpoints are.
	FailureCkpt bool
	// FailureCkptAll: FailureCkpt for every failure that stops the job,
	// hangs and the program's own crashes too. Loom stops those without a
	// signal; a policy with it is a what-if.
	FailureCkptAll bool
}

// Scenario is the run being simulated: the job, the failure mix and rate.
type Scenario struct {
	Nodes, GPUsPerNode int
	Days               float64
	// Unexpected interruptions in Days (Poisson), drawn from Mix by count;
	// Planned ones (maintenance, announced: checkpoint first, then restart).
	Unexpected, Planned float64
	Mix                 []Component
	// RepairShare, when >= 0, replaces every component's Repair share.
	RepairShare float64
}

const (
	minute = 60.0
	hour   = 3600.0
	day    = 86400.0
)
