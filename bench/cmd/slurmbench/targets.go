package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/loom-ml/loom/bench/slurm"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// trivialScript is what every measured job runs, on both systems.
const trivialScript = "hostname"

// slurmTarget submits with sbatch (one process per submission, as a user
// does) and reads finished jobs from the jobcomp file, which slurmctld
// appends to as each job completes.
type slurmTarget struct {
	c *slurm.Cluster

	mu       sync.Mutex
	off      int64  // jobcomp bytes before the measured jobs
	partial  []byte // an incomplete last line
	finished int
	failed   []string
	perNode  map[string]int
}

func (t *slurmTarget) submit(ctx context.Context, i int) error {
	_, err := t.c.Sbatch(ctx, fmt.Sprintf("--job-name=bench-%d", i), "--wrap", trivialScript)
	return err
}

// mark makes the jobs finished so far (the warm-up) not count.
func (t *slurmTarget) mark() error {
	var size int64
	st, err := os.Stat(t.c.JobComp)
	switch {
	case err == nil:
		size = st.Size()
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("jobcomp file: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.off, t.partial, t.finished, t.failed, t.perNode = size, nil, 0, nil, map[string]int{}
	return nil
}

func (t *slurmTarget) progress(context.Context) (int, []string, time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.Open(t.c.JobComp)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil, time.Time{}, nil // no job has finished yet
	}
	if err != nil {
		return 0, nil, time.Time{}, fmt.Errorf("jobcomp file: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return 0, nil, time.Time{}, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	t.off += int64(len(b))
	b = append(t.partial, b...)
	end := bytes.LastIndexByte(b, '\n') + 1
	t.partial = append([]byte(nil), b[end:]...)
	recs, err := slurm.ParseJobComp(bytes.NewReader(b[:end]))
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	for _, r := range recs {
		t.finished++
		t.perNode[r.NodeList]++
		if r.State != "COMPLETED" {
			t.failed = append(t.failed, r.JobID+" "+r.State)
		}
	}
	// jobcomp's EndTime has whole seconds only: the caller's poll time is
	// the finishing time.
	return t.finished, t.failed, time.Time{}, nil
}

// loomTarget submits through the gateway's public gRPC API and polls
// ListJobs: the active jobs while any remain, then every job once to check
// the states and take the last end time the scheduler recorded.
type loomTarget struct {
	jobs    loomv1.JobServiceClient
	cluster string
	run     string // request id prefix, unique per run

	mu      sync.Mutex
	names   map[string]bool
	last    string         // the measured job with the highest id
	lastID  int64          // its id
	perNode map[string]int // measured jobs by the node they ran on, once all finished
}

func (t *loomTarget) submit(ctx context.Context, i int) error {
	j, err := t.jobs.SubmitJob(ctx, &loomv1.SubmitJobRequest{Parent: "projects/default",
		RequestId: fmt.Sprintf("%s-%d", t.run, i),
		Job: &loomv1.Job{Cluster: t.cluster, DisplayName: fmt.Sprintf("bench-%d", i),
			Script: trivialScript, NodeCount: 1}})
	if err != nil {
		return err
	}
	if j.GetName() == "" {
		return fmt.Errorf("SubmitJob answered a job without a name")
	}
	id, _ := strconv.ParseInt(j.GetJobId(), 10, 64)
	t.mu.Lock()
	t.names[j.GetName()] = true
	if id >= t.lastID {
		t.last, t.lastID = j.GetName(), id
	}
	t.mu.Unlock()
	return nil
}

// reset starts a new measured set (after the warm-up).
func (t *loomTarget) reset(run string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.run, t.names, t.last, t.lastID, t.perNode = run, map[string]bool{}, "", 0, nil
}

// listJobs reads every page of the cluster's jobs (active ones only, or all).
func (t *loomTarget) listJobs(ctx context.Context, activeOnly bool) ([]*loomv1.Job, error) {
	var jobs []*loomv1.Job
	err := paging.Each(func(token string) (string, error) {
		resp, err := t.jobs.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/default", Cluster: t.cluster,
			ActiveOnly: activeOnly, PageSize: paging.MaxSize, PageToken: token})
		jobs = append(jobs, resp.GetJobs()...)
		return resp.GetNextPageToken(), err
	})
	return jobs, err
}

func (t *loomTarget) progress(ctx context.Context) (int, []string, time.Time, error) {
	t.mu.Lock()
	names, last := t.names, t.last
	t.mu.Unlock()
	// Cheap first: jobs finish about in submission order, so while the last
	// one is not done, neither is the run. (Listing thousands of jobs at every
	// poll would load the system being measured.)
	if last != "" {
		j, err := t.jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: last})
		if err != nil {
			return 0, nil, time.Time{}, err
		}
		if !j.GetState().Terminal() {
			return 0, nil, time.Time{}, nil
		}
	}
	active, err := t.listJobs(ctx, true)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	n := 0
	for _, j := range active {
		if names[j.GetName()] && !j.GetState().Terminal() {
			n++
		}
	}
	if n > 0 {
		return len(names) - n, nil, time.Time{}, nil
	}
	all, err := t.listJobs(ctx, false)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	fin := 0
	var failed []string
	var lastEnd time.Time
	perNode := map[string]int{}
	for _, j := range all {
		if !names[j.GetName()] || !j.GetState().Terminal() {
			continue
		}
		fin++
		for _, n := range j.GetNodes() {
			node, _ := resname.SplitNode(n)
			perNode[node.Host]++
		}
		if j.GetState() != loomv1.JobState_COMPLETED {
			failed = append(failed, fmt.Sprintf("%s %v (%s)", j.GetJobId(), j.GetState(), j.GetStateReason()))
		}
		if e := j.GetEndTime().AsTime(); j.GetEndTime() != nil && e.After(lastEnd) {
			lastEnd = e
		}
	}
	if fin == len(names) {
		t.mu.Lock()
		t.perNode = perNode
		t.mu.Unlock()
	}
	return fin, failed, lastEnd, nil
}
