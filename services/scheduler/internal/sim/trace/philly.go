package trace

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"time"
)

// PhillyGPUsPerNode is the node size assumed for the Philly trace, whose
// sample does not list machines (Philly's servers had 2, 4 or 8 GPUs).
const PhillyGPUsPerNode = 8

// maxPhillyGPUs is the most GPUs of a Philly cluster: MaxNodes nodes.
const maxPhillyGPUs = MaxNodes * PhillyGPUsPerNode

// phillyJob is one record of the Philly sample (philly_jobs_4gpu_sample.json).
type phillyJob struct {
	ID            string  `json:"id"`
	NumGPUs       int64   `json:"num_gpus"`
	Runtime       float64 `json:"runtime"` // minutes
	SubmittedTime string  `json:"submitted_time"`
	User          string  `json:"user"`
	VC            string  `json:"vc"`
	Attempts      []struct {
		Start string `json:"start_time"`
		End   string `json:"end_time"`
	} `json:"attempts"`
}

const phillyTime = "2006-01-02 15:04:05"

// LoadPhilly reads the Philly sample: jobs of at least 4 GPUs with their
// submit time, runtime (minutes, from the first attempt's start to the last
// attempt's end, so retries are in it) and attempts. The sample has no
// machine list: the cluster is PhillyGPUsPerNode-GPU nodes, as many as the
// peak number of GPUs the trace's own attempts held at once needs. A job of
// more GPUs than a node has is a gang of the fewest nodes that split it
// evenly. Accounts are the virtual cluster (vc) when present, else one
// account for all.
func LoadPhilly(path string, opts Options) (*Trace, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("philly trace: %w", err)
	}
	var recs []phillyJob
	if err := json.Unmarshal(raw, &recs); err != nil {
		return nil, fmt.Errorf("philly trace %s: %w", path, err)
	}
	t := &Trace{Name: "philly", Format: "philly", Resource: GPU}
	type span struct{ start, end, gpus int64 }
	spans := map[string][]span{}
	multi, named := 0, 0
	for i, r := range recs {
		if r.ID == "" {
			return nil, fmt.Errorf("philly trace %s: job %d has no id", path, i)
		}
		sub, err := time.Parse(phillyTime, r.SubmittedTime)
		if err != nil {
			return nil, fmt.Errorf("philly trace %s: job %s: submitted_time %q: want %q", path, r.ID, r.SubmittedTime, phillyTime)
		}
		if r.NumGPUs <= 0 || r.NumGPUs > maxPhillyGPUs || !(r.Runtime >= 0 && r.Runtime <= MaxSeconds/60) {
			return nil, fmt.Errorf("philly trace %s: job %s: num_gpus %d, runtime %v: want num_gpus 1..%d (%d nodes of %d) and runtime 0..%d minutes",
				path, r.ID, r.NumGPUs, r.Runtime, maxPhillyGPUs, MaxNodes, PhillyGPUsPerNode, MaxSeconds/60)
		}
		if len(r.Attempts) > 1 {
			multi++
		}
		for _, a := range r.Attempts {
			s, err1 := time.Parse(phillyTime, a.Start)
			e, err2 := time.Parse(phillyTime, a.End)
			if err1 != nil || err2 != nil || e.Before(s) {
				continue // a logging gap: the attempt does not count toward the peak
			}
			spans[r.ID] = append(spans[r.ID], span{s.Unix(), e.Unix(), r.NumGPUs})
		}
		j := Job{Name: r.ID, Submit: sub.Unix(), Runtime: int64(math.Round(r.Runtime * 60))}
		j.Nodes, j.PerNode = split(r.NumGPUs, PhillyGPUsPerNode)
		j.TimeLimit = timeLimit(j.Runtime, opts.TimeLimitFactor)
		j.Account = "philly"
		if r.VC != "" {
			j.Account, named = r.VC, named+1
		}
		j.User = j.Account
		if r.User != "" {
			j.User = r.User
		}
		t.Jobs = append(t.Jobs, j)
	}
	if _, err := finish(t, opts); err != nil {
		return nil, fmt.Errorf("philly trace %s: %w", path, err)
	}
	// The cluster: enough nodes for the most GPUs the kept jobs' attempts held at once.
	type edge struct{ at, d int64 }
	var edges []edge
	var biggest int64
	for _, j := range t.Jobs {
		biggest = max(biggest, j.Slots())
		for _, s := range spans[j.Name] {
			edges = append(edges, edge{s.start, s.gpus}, edge{s.end, -s.gpus})
		}
	}
	sort.Slice(edges, func(a, b int) bool {
		if edges[a].at != edges[b].at {
			return edges[a].at < edges[b].at
		}
		return edges[a].d < edges[b].d // ends before starts at the same second
	})
	var cur, peak int64
	for _, e := range edges {
		cur += e.d
		peak = max(peak, cur)
	}
	peak = max(peak, biggest)
	if peak > maxPhillyGPUs {
		return nil, fmt.Errorf("philly trace %s: its attempts held %d GPUs at once: the simulated cluster has at most %d (%d nodes of %d)",
			path, peak, maxPhillyGPUs, MaxNodes, PhillyGPUsPerNode)
	}
	n := int((peak + PhillyGPUsPerNode - 1) / PhillyGPUsPerNode)
	for i := range n {
		t.Nodes = append(t.Nodes, Node{Hostname: fmt.Sprintf("philly-%04d", i+1), Pool: "gpu", Slots: PhillyGPUsPerNode})
	}
	t.Notes = append(t.Notes,
		fmt.Sprintf("The sample lists no machines: %d nodes of %d GPUs (%d GPUs), enough for the %d GPUs the trace's own attempts held at their peak.",
			n, PhillyGPUsPerNode, n*PhillyGPUsPerNode, peak),
		fmt.Sprintf("Runtime is the trace's runtime field (first attempt's start to last attempt's end); %d jobs with several attempts run once, for that long.", multi),
		fmt.Sprintf("Jobs of more than %d GPUs are gangs of the fewest nodes that split them evenly.", PhillyGPUsPerNode),
		fmt.Sprintf("Time limits: runtime × %g, rounded up to a minute (the trace has none).", opts.TimeLimitFactor),
	)
	if named == 0 {
		t.Notes = append(t.Notes, "The sample names no users or virtual clusters: every job is in one account, so fairness is trivially 1.")
	}
	return t, nil
}
