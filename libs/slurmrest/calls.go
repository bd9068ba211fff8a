package slurmrest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Ping is one controller's answer in GET ping.
type Ping struct {
	Hostname string `json:"hostname"`
	// Ping is "UP" when the controller answers, else "DOWN".
	Ping string `json:"ping"`
	// Mode is "primary" or "backup".
	Mode   string `json:"mode"`
	Status int    `json:"status"`
}

// meta is the reply's meta object: the Slurm release ("22.05.8").
type meta struct {
	Slurm struct {
		Release string `json:"release"`
	} `json:"Slurm"`
}

// Ping asks slurmrestd to ping the controllers (GET ping). It fails unless
// the primary controller is UP, so that it also checks the token. It
// returns every controller's answer and the Slurm release.
func (c *Client) Ping(ctx context.Context) (pings []Ping, release string, err error) {
	var r struct {
		Meta  meta   `json:"meta"`
		Pings []Ping `json:"pings"`
	}
	if err := c.do(ctx, "GET", "ping", nil, nil, &r); err != nil {
		return nil, "", err
	}
	for _, p := range r.Pings {
		if p.Mode == "primary" && p.Ping == "UP" {
			return r.Pings, r.Meta.Slurm.Release, nil
		}
	}
	return r.Pings, r.Meta.Slurm.Release, &Error{Endpoint: "GET /slurm/" + APIVersion + "/ping", Status: 200,
		Err: fmt.Errorf("no primary controller is UP (pings: %+v)", r.Pings)}
}

// JobSpec is a batch job to submit: the fields the built-in engine's jobs
// use. Zero values leave Slurm's defaults.
type JobSpec struct {
	// Script is the batch script; it must start with "#!" (as sbatch
	// requires: slurmrestd accepts it without and the job then fails).
	Script string
	// Name is the job name (-J).
	Name string
	// Partition (-p); empty: the default partition.
	Partition string
	// Nodes (-N), Tasks (-n) and CPUsPerTask (-c).
	Nodes, Tasks, CPUsPerTask int
	// GPUsPerNode (--gpus-per-node): sent as a plain count; slurmrestd
	// 22.05 takes "2" and makes a job with "gpu:2" fail (SLURM.md).
	GPUsPerNode int
	// MemoryPerNodeMB (--mem, in MB).
	MemoryPerNodeMB int64
	// TimeLimit (-t), rounded up to whole minutes; 0: the partition's.
	TimeLimit time.Duration
	// WorkingDir (-D) is required and absolute: without it the job runs
	// in slurmrestd's own directory.
	WorkingDir string
	// StandardOutput and StandardError (-o, -e): Slurm's patterns (%j…);
	// empty: slurm-%j.out in WorkingDir.
	StandardOutput, StandardError string
	// Environment is the job's whole environment; slurmrestd 22.05
	// refuses a job without one, so at least one variable is required.
	Environment map[string]string
	// Account (-A) and QOS (-q).
	Account, QOS string
	// Comment (--comment) is free text Slurm keeps with the job and
	// reports back (Job.Comment): the backend tags its jobs with it, to
	// find a job it submitted when its own record of the id was lost.
	Comment string
	// Dependency (-d, --dependency) is Slurm's dependency spec over
	// Slurm's job ids ("afterok:12:13", "singleton"), sent as given:
	// slurmctld judges it. An id Slurm does not know (never issued, or
	// purged) is taken as satisfied, so the caller must name only jobs
	// Slurm holds. At most MaxDependencyBytes, one line.
	Dependency string
	// Hold (-H, --hold) submits the job held (priority 0): it waits,
	// JobHeldUser when its owner submits it, until released (HoldJob).
	Hold bool
	// BeginTime (--begin), when not zero, is the earliest the job may
	// start: sent as the seconds from the moment it is sent ("now+N",
	// slurmctld's clock: slurmrestd reads a date in its own time zone and
	// takes no Unix time); one not in the future is not sent (eligible
	// now). At most MaxBeginAhead ahead.
	BeginTime time.Time
}

// Limits on JobSpec that the client checks before sending.
const (
	// MaxScriptBytes is the largest script the client sends (Slurm's own
	// default max_script_size is 4 MB).
	MaxScriptBytes = 4 << 20
	// MaxNodes, MaxTasks and MaxCPUsPerTask bound the counts.
	MaxNodes       = 1 << 20
	MaxTasks       = 1 << 24
	MaxCPUsPerTask = 1 << 16
	// MaxGPUsPerNode bounds GPUsPerNode.
	MaxGPUsPerNode = 1024
	// MaxTimeLimit is Slurm's largest finite time limit (under INFINITE,
	// 0xfffffffe minutes), kept to one year here.
	MaxTimeLimit = 365 * 24 * time.Hour
	// MaxDependencyBytes bounds Dependency: slurmspec's 1,000 job
	// references of up to 10 digits and a delay each.
	MaxDependencyBytes = 64 << 10
	// MaxBeginAhead bounds how far ahead BeginTime may be: a century, as
	// Loom's own limits on times.
	MaxBeginAhead = 100 * 365 * 24 * time.Hour
)

// held is Slurm's ESLURM_JOB_HELD, "Job is in held state, pending
// scheduler release": slurmrestd 22.05 puts it in the errors of a
// successful held submission, beside the new job's id.
const held = 2042

// jobProperties is v0.0.38_job_properties, the fields this client sends.
type jobProperties struct {
	Name             string            `json:"name,omitempty"`
	Partition        string            `json:"partition,omitempty"`
	Nodes            int               `json:"nodes,omitempty"` // an int: [min,max] is silently ignored (SLURM.md)
	Tasks            int               `json:"tasks,omitempty"`
	CPUsPerTask      int               `json:"cpus_per_task,omitempty"`
	GPUsPerNode      string            `json:"gpus_per_node,omitempty"`
	MemoryPerNode    int64             `json:"memory_per_node,omitempty"`
	TimeLimit        int64             `json:"time_limit,omitempty"`
	CurrentDirectory string            `json:"current_working_directory"`
	StandardOutput   string            `json:"standard_output,omitempty"`
	StandardError    string            `json:"standard_error,omitempty"`
	Environment      map[string]string `json:"environment"`
	Account          string            `json:"account,omitempty"`
	QOS              string            `json:"qos,omitempty"`
	Comment          string            `json:"comment,omitempty"`
	Dependency       string            `json:"dependency,omitempty"`
	Hold             bool              `json:"hold,omitempty"`
	BeginTime        string            `json:"begin_time,omitempty"`
}

// Validate checks s, naming each bad field and its limit.
func (s JobSpec) Validate() error {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	switch {
	case !strings.HasPrefix(s.Script, "#!"):
		bad("JobSpec.Script must start with #! (an interpreter line)")
	case len(s.Script) > MaxScriptBytes:
		bad("JobSpec.Script is %d bytes, at most %d", len(s.Script), MaxScriptBytes)
	}
	intIn := func(name string, v, max int) {
		if v < 0 || v > max {
			bad("JobSpec.%s must be 0..%d, got %d", name, max, v)
		}
	}
	intIn("Nodes", s.Nodes, MaxNodes)
	intIn("Tasks", s.Tasks, MaxTasks)
	intIn("CPUsPerTask", s.CPUsPerTask, MaxCPUsPerTask)
	intIn("GPUsPerNode", s.GPUsPerNode, MaxGPUsPerNode)
	if s.MemoryPerNodeMB < 0 {
		bad("JobSpec.MemoryPerNodeMB must be >= 0, got %d", s.MemoryPerNodeMB)
	}
	if s.TimeLimit < 0 || s.TimeLimit > MaxTimeLimit {
		bad("JobSpec.TimeLimit must be 0..%s, got %s", MaxTimeLimit, s.TimeLimit)
	}
	if !filepath.IsAbs(s.WorkingDir) {
		bad("JobSpec.WorkingDir %q must be an absolute path", s.WorkingDir)
	}
	if len(s.Dependency) > MaxDependencyBytes {
		bad("JobSpec.Dependency is %d bytes, at most %d", len(s.Dependency), MaxDependencyBytes)
	}
	if !s.BeginTime.IsZero() && (s.BeginTime.Before(time.Unix(0, 0)) || time.Until(s.BeginTime) > MaxBeginAhead) {
		bad("JobSpec.BeginTime %s must be after 1970 and at most %s ahead", s.BeginTime.UTC().Format(time.RFC3339), MaxBeginAhead)
	}
	if len(s.Environment) == 0 {
		bad("JobSpec.Environment must hold at least one variable (slurmrestd refuses a job without one)")
	}
	for k := range s.Environment {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			bad("JobSpec.Environment key %q must be non-empty, without '=' or NUL", k)
		}
	}
	for name, v := range map[string]string{"Name": s.Name, "Partition": s.Partition, "WorkingDir": s.WorkingDir,
		"StandardOutput": s.StandardOutput, "StandardError": s.StandardError, "Account": s.Account, "QOS": s.QOS,
		"Comment": s.Comment, "Dependency": s.Dependency} {
		if strings.ContainsAny(v, "\n\x00") {
			bad("JobSpec.%s must be one line without NUL", name)
		}
	}
	if len(probs) > 0 {
		return errors.New("slurmrest: bad job: " + strings.Join(probs, "; "))
	}
	return nil
}

// Submitted is what POST job/submit returns.
type Submitted struct {
	// JobID is the new job's id.
	JobID string
	// UserMessage is the job_submit plugin's message to the user, if any.
	UserMessage string
}

// SubmitJob submits a batch job (POST job/submit) after checking spec.
func (c *Client) SubmitJob(ctx context.Context, spec JobSpec) (Submitted, error) {
	if err := spec.Validate(); err != nil {
		return Submitted{}, err
	}
	p := jobProperties{
		Name: spec.Name, Partition: spec.Partition, Nodes: spec.Nodes, Tasks: spec.Tasks,
		CPUsPerTask: spec.CPUsPerTask, MemoryPerNode: spec.MemoryPerNodeMB,
		CurrentDirectory: spec.WorkingDir, StandardOutput: spec.StandardOutput, StandardError: spec.StandardError,
		Environment: spec.Environment, Account: spec.Account, QOS: spec.QOS, Comment: spec.Comment,
		Dependency: spec.Dependency, Hold: spec.Hold,
	}
	if wait := time.Until(spec.BeginTime); !spec.BeginTime.IsZero() && wait > 0 {
		p.BeginTime = "now+" + strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)
	}
	if spec.GPUsPerNode > 0 {
		p.GPUsPerNode = strconv.Itoa(spec.GPUsPerNode)
	}
	if spec.TimeLimit > 0 {
		p.TimeLimit = int64((spec.TimeLimit + time.Minute - 1) / time.Minute)
	}
	body := struct {
		Script string        `json:"script"`
		Job    jobProperties `json:"job"`
	}{spec.Script, p}
	var r struct {
		JobID   int64  `json:"job_id"`
		UserMsg string `json:"job_submit_user_msg"`
	}
	// A held job is taken with ESLURM_JOB_HELD among the errors.
	var accept func(SlurmError) bool
	if spec.Hold {
		accept = func(e SlurmError) bool { return e.number() == held }
	}
	if err := c.doAccepting(ctx, "POST", "job/submit", nil, body, &r, accept); err != nil {
		return Submitted{}, err
	}
	if r.JobID <= 0 {
		return Submitted{}, &Error{Endpoint: "POST /slurm/" + APIVersion + "/job/submit", Status: 200,
			Err: fmt.Errorf("reply has no job_id (got %d)", r.JobID)}
	}
	return Submitted{JobID: strconv.FormatInt(r.JobID, 10), UserMessage: r.UserMsg}, nil
}

// Job is a job as slurmrestd reports it (v0.0.38_job_response_properties),
// the fields the backend reads. Times are Unix seconds (0: not yet).
type Job struct {
	JobID     int64  `json:"job_id"`
	Name      string `json:"name"`
	UserName  string `json:"user_name"`
	Account   string `json:"account"`
	QOS       string `json:"qos"`
	Partition string `json:"partition"`
	// State is Slurm's job_state ("PENDING", "RUNNING", "COMPLETING", …);
	// LoomState maps it.
	State            string `json:"job_state"`
	StateReason      string `json:"state_reason"`
	StateDescription string `json:"state_description"`
	// Nodes is the allocated node list ("node[1-2]"); NodeCount its size.
	Nodes     string `json:"nodes"`
	NodeCount int    `json:"node_count"`
	CPUs      int    `json:"cpus"`
	Tasks     int    `json:"tasks"`
	// TimeLimitMinutes is 0 when the job has none of its own.
	TimeLimitMinutes int64 `json:"time_limit"`
	SubmitTime       int64 `json:"submit_time"`
	StartTime        int64 `json:"start_time"`
	EndTime          int64 `json:"end_time"`
	// ExitCode is the batch script's wait status as Slurm keeps it: exit
	// code << 8, or the signal number (a job exiting 3 reports 768).
	ExitCode        int      `json:"exit_code"`
	WorkingDir      string   `json:"current_working_directory"`
	StandardOutput  string   `json:"standard_output"`
	StandardError   string   `json:"standard_error"`
	TRESRequested   string   `json:"tres_req_str"`
	TRESAllocated   string   `json:"tres_alloc_str"`
	TRESPerNode     string   `json:"tres_per_node"`
	MemoryPerNodeMB int64    `json:"memory_per_node"`
	ArrayJobID      int64    `json:"array_job_id"`
	BatchHost       string   `json:"batch_host"`
	ArrayTaskString string   `json:"array_task_string"`
	Requeue         bool     `json:"requeue"`
	RestartCount    int      `json:"restart_cnt"`
	DerivedExitCode int      `json:"derived_exit_code"`
	Flags           []string `json:"flags"`
	// Comment is the job's --comment (JobSpec.Comment).
	Comment string `json:"comment"`
	// Priority is 0 while the job is held.
	Priority int64 `json:"priority"`
}

// GetJob returns one job (GET job/{id}); an unknown id gives an error
// wrapping ErrNotFound.
func (c *Client) GetJob(ctx context.Context, id string) (Job, error) {
	path, err := jobPath(id)
	if err != nil {
		return Job{}, err
	}
	var r struct {
		Jobs []Job `json:"jobs"`
	}
	if err := c.do(ctx, "GET", path, nil, nil, &r); err != nil {
		return Job{}, err
	}
	for _, j := range r.Jobs {
		if strconv.FormatInt(j.JobID, 10) == id {
			return j, nil
		}
	}
	return Job{}, &Error{Endpoint: "GET /slurm/" + APIVersion + "/" + path, Status: 200,
		Err: fmt.Errorf("%w: the reply holds %d jobs, none with id %s", ErrNotFound, len(r.Jobs), id)}
}

// ListJobs returns every job slurmctld still holds (GET jobs): pending,
// running and recently finished (MinJobAge).
func (c *Client) ListJobs(ctx context.Context) ([]Job, error) {
	var r struct {
		Jobs []Job `json:"jobs"`
	}
	if err := c.do(ctx, "GET", "jobs", nil, nil, &r); err != nil {
		return nil, err
	}
	return r.Jobs, nil
}

// Signals are the names slurmrestd 22.05 accepts for CancelJob
// (v0.0.38_signal).
var Signals = []string{"HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT",
	"STOP", "TSTP", "TTIN", "TTOU"}

// CancelJob is DELETE job/{id}. With signal "" it cancels the job as
// scancel does (Slurm sends KILL; the job ends CANCELLED). With a signal
// name from Signals (with or without "SIG") it only sends that signal, as
// scancel -s does: the job goes on if it survives it, and one that dies of
// it ends FAILED, not CANCELLED. An unknown id wraps ErrNotFound.
func (c *Client) CancelJob(ctx context.Context, id, signal string) error {
	path, err := jobPath(id)
	if err != nil {
		return err
	}
	var q url.Values
	if signal != "" {
		name := strings.TrimPrefix(strings.ToUpper(signal), "SIG")
		ok := false
		for _, s := range Signals {
			ok = ok || s == name
		}
		if !ok {
			return fmt.Errorf("slurmrest: signal %q must be one of %s (or empty: cancel)", signal, strings.Join(Signals, ", "))
		}
		q = url.Values{"signal": {name}}
	}
	return c.do(ctx, "DELETE", path, q, nil, nil)
}

// HoldJob holds (hold true) or releases a pending job (POST job/{id},
// {"hold": …}), as scontrol hold and release do: Slurm sets its priority
// to 0, or back. Whose hold it is is the caller's: an operator's (root's)
// is an admin hold (JobHeldAdmin), which only an operator may release; a
// user's own is JobHeldUser. An unknown id wraps ErrNotFound.
func (c *Client) HoldJob(ctx context.Context, id string, hold bool) error {
	path, err := jobPath(id)
	if err != nil {
		return err
	}
	return c.do(ctx, "POST", path, nil, struct {
		Hold bool `json:"hold"`
	}{hold}, nil)
}

// Node is a node as slurmrestd reports it (v0.0.38_node).
type Node struct {
	Name     string `json:"name"`
	Hostname string `json:"hostname"`
	Address  string `json:"address"`
	// State is Slurm's base state in lower case ("idle", "mixed",
	// "allocated", "down", …); StateFlags the rest ("DRAIN", …).
	State      string   `json:"state"`
	StateFlags []string `json:"state_flags"`
	Reason     string   `json:"reason"`
	CPUs       int      `json:"cpus"`
	AllocCPUs  int      `json:"alloc_cpus"`
	IdleCPUs   int      `json:"idle_cpus"`
	// RealMemoryMB and AllocMemoryMB are in MB.
	RealMemoryMB  int64    `json:"real_memory"`
	AllocMemoryMB int64    `json:"alloc_memory"`
	Gres          string   `json:"gres"`
	GresUsed      string   `json:"gres_used"`
	Partitions    []string `json:"partitions"`
	TRES          string   `json:"tres"`
}

// ListNodes returns every node (GET nodes).
func (c *Client) ListNodes(ctx context.Context) ([]Node, error) {
	var r struct {
		Nodes []Node `json:"nodes"`
	}
	if err := c.do(ctx, "GET", "nodes", nil, nil, &r); err != nil {
		return nil, err
	}
	return r.Nodes, nil
}

// Partition is a partition as slurmrestd reports it (v0.0.38_partition).
type Partition struct {
	Name string `json:"name"`
	// Nodes is the node list ("node[1-2]").
	Nodes string `json:"nodes"`
	// State is "UP", "DOWN", "DRAIN" or "INACTIVE".
	State      string   `json:"state"`
	Flags      []string `json:"flags"`
	TotalCPUs  int      `json:"total_cpus"`
	TotalNodes int      `json:"total_nodes"`
	// MaxTimeLimitMinutes is -1 for INFINITE.
	MaxTimeLimitMinutes int64  `json:"max_time_limit"`
	TRES                string `json:"tres"`
}

// Default reports whether this is the default partition.
func (p Partition) Default() bool {
	for _, f := range p.Flags {
		if f == "default" {
			return true
		}
	}
	return false
}

// ListPartitions returns every partition (GET partitions).
func (c *Client) ListPartitions(ctx context.Context) ([]Partition, error) {
	var r struct {
		Partitions []Partition `json:"partitions"`
	}
	if err := c.do(ctx, "GET", "partitions", nil, nil, &r); err != nil {
		return nil, err
	}
	return r.Partitions, nil
}
