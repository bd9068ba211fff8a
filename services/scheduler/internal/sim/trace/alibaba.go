package trace

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// Alibaba file names in the trace's directory.
const (
	AlibabaPodList  = "openb_pod_list_default.csv"
	AlibabaNodeList = "openb_node_list_all_node.csv"
)

// LoadAlibaba reads the Alibaba GPU cluster trace (cluster-trace-gpu-v2023):
// path is a pod list or the directory that holds AlibabaPodList; the nodes
// come from opts.NodeList, else AlibabaNodeList beside the pod list.
//
// A pod is a one-node job: submitted at creation_time, running
// deletion_time - scheduled_time, asking num_gpu GPUs. A GPU-sharing pod
// (gpu_milli below 1000) is given one whole GPU. Pods never scheduled in the
// trace (no scheduled_time) were deleted while pending: they are cancelled at
// their deletion_time. The trace names no users; a pod's account (and user)
// is its QoS class.
func LoadAlibaba(path string, opts Options) (*Trace, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	pods := path
	if fi, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("alibaba trace: %w", err)
	} else if fi.IsDir() {
		pods = filepath.Join(path, AlibabaPodList)
	}
	nodesPath := opts.NodeList
	if nodesPath == "" {
		nodesPath = filepath.Join(filepath.Dir(pods), AlibabaNodeList)
	}
	t := &Trace{Name: "alibaba-gpu-v2023", Format: "alibaba", Resource: GPU}
	hosts := map[string]int{}
	var largest int64
	if err := readCSV(nodesPath, []string{"sn", "gpu", "model"}, func(r row) error {
		gpus, err := r.intIn("gpu", 0, MaxSlotsPerNode, "")
		if err != nil {
			return err
		}
		host, model := r.get("sn"), r.get("model")
		if host == "" {
			return errors.New("sn is empty")
		}
		if l, dup := hosts[host]; dup {
			return fmt.Errorf("sn %q is line %d's too", host, l)
		}
		if len(t.Nodes) == MaxNodes {
			return fmt.Errorf("more than %d nodes: the simulated cluster has at most %d", MaxNodes, MaxNodes)
		}
		hosts[host] = r.line
		largest = max(largest, gpus)
		pool := "cpu"
		if gpus > 0 {
			pool = strings.ToLower(model)
			if pool == "" || pool == "nan" {
				pool = "gpu"
			}
		}
		t.Nodes = append(t.Nodes, Node{Hostname: host, Pool: pool, Slots: int32(gpus), Model: model})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("alibaba node list: %w", err)
	}
	if len(t.Nodes) == 0 {
		return nil, fmt.Errorf("alibaba node list %s: no nodes", nodesPath)
	}
	var shared, cpuOnly, pending, failed int
	if err := readCSV(pods, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos", "pod_phase",
		"creation_time", "deletion_time", "scheduled_time"}, func(r row) error {
		var j Job
		j.Name = r.get("name")
		gpus, err := r.intIn("num_gpu", 0, MaxSlotsPerNode, "")
		if err != nil {
			return err
		}
		if gpus > largest {
			return fmt.Errorf("num_gpu %d is more than the largest node's %d GPUs (%s): the pod could never run", gpus, largest, nodesPath)
		}
		milli, err := r.intIn("gpu_milli", 0, 1000, "")
		if err != nil {
			return err
		}
		cpu, err := r.intIn("cpu_milli", 0, slurmspec.MaxCPUsPerTask*1000, "")
		if err != nil {
			return err
		}
		mem, err := r.intIn("memory_mib", 0, math.MaxInt32, "")
		if err != nil {
			return err
		}
		created, err := r.intIn("creation_time", 0, MaxSeconds, " seconds")
		if err != nil {
			return err
		}
		deleted, err := r.intIn("deletion_time", 0, MaxSeconds, " seconds")
		if err != nil {
			return err
		}
		if gpus == 1 && milli > 0 && milli < 1000 {
			shared++
		}
		if gpus == 0 {
			cpuOnly++
		}
		j.Nodes, j.PerNode = 1, int32(gpus)
		j.CPUsPerTask, j.MemMB = int32((cpu+999)/1000), mem
		j.Account = strings.ToLower(r.get("qos"))
		if j.Account == "" {
			j.Account = "default"
		}
		j.User = j.Account
		j.Submit = created
		if r.get("scheduled_time") == "" {
			pending++
			j.Cancelled, j.CancelAt = true, max(deleted, created)
			j.TimeLimit = timeLimit(j.CancelAt-created, opts.TimeLimitFactor)
		} else {
			sched, err := r.intIn("scheduled_time", 0, MaxSeconds, " seconds")
			if err != nil {
				return err
			}
			if deleted < sched {
				return fmt.Errorf("deletion_time %d is before scheduled_time %d", deleted, sched)
			}
			j.Runtime = deleted - sched
			j.TimeLimit = timeLimit(j.Runtime, opts.TimeLimitFactor)
		}
		if r.get("pod_phase") == "Failed" {
			failed++
			j.ExitCode = 1
		}
		t.Jobs = append(t.Jobs, j)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("alibaba pod list: %w", err)
	}
	t.Notes = append(t.Notes,
		fmt.Sprintf("%d GPU-sharing pods (gpu_milli < 1000) are given one whole GPU each.", shared),
		fmt.Sprintf("%d CPU-only pods ask no GPU.", cpuOnly),
		fmt.Sprintf("%d pods never scheduled in the trace are submitted and cancelled at their deletion_time.", pending),
		fmt.Sprintf("%d pods in phase Failed end with exit code 1.", failed),
		"The trace names no users: a pod's account is its QoS class (LS, BE, Burstable, Guaranteed).",
		fmt.Sprintf("Time limits: runtime × %g, rounded up to a minute (the trace has none).", opts.TimeLimitFactor),
	)
	if _, err := finish(t, opts); err != nil {
		return nil, fmt.Errorf("alibaba pod list: %w", err)
	}
	return t, nil
}

// row is one CSV record with its header.
type row struct {
	line int
	col  map[string]int
	rec  []string
}

func (r row) get(name string) string {
	i, ok := r.col[name]
	if !ok || i >= len(r.rec) {
		return ""
	}
	return strings.TrimSpace(r.rec[i])
}

// intIn returns the column's number, refusing one outside [lo, hi].
func (r row) intIn(name string, lo, hi int64, unit string) (int64, error) {
	s := r.get(name)
	if s == "" {
		return 0, fmt.Errorf("%s is empty", name)
	}
	n, err := number(s)
	if err != nil {
		return 0, fmt.Errorf("%s %w", name, err)
	}
	return n, inRange(name, n, lo, hi, unit)
}

// readCSV calls each for every record of a CSV file with a header row that
// has at least the columns need.
func readCSV(path string, need []string, each func(row) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	lines := &lineLimit{r: bufio.NewReader(f)}
	r := csv.NewReader(lines)
	r.FieldsPerRecord = -1
	head, err := r.Read()
	if errors.Is(err, errLineTooLong) {
		return fmt.Errorf("%s line %d: %w", path, lines.line, err)
	}
	if err != nil {
		return fmt.Errorf("%s: header: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, n := range need {
		if _, ok := col[n]; !ok {
			return fmt.Errorf("%s: no %s column (have %s)", path, n, strings.Join(head, ","))
		}
	}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, errLineTooLong) {
			return fmt.Errorf("%s line %d: %w", path, lines.line, err)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := each(row{line: line, col: col, rec: rec}); err != nil {
			return fmt.Errorf("%s line %d: %w", path, line, err)
		}
	}
}

var errLineTooLong = fmt.Errorf("longer than %d bytes: not a trace record", MaxLine)

// lineLimit reads a file and fails on a line longer than MaxLine, so that
// a CSV reader never holds more than that of one record's line; line is
// the number of the line being read.
type lineLimit struct {
	r    *bufio.Reader
	line int
	cur  int // bytes of the current line so far
}

func (l *lineLimit) Read(p []byte) (int, error) {
	if l.line == 0 {
		l.line = 1
	}
	n, err := l.r.Read(p)
	for i, b := range p[:n] {
		if b == '\n' {
			l.line++
			l.cur = 0
			continue
		}
		if l.cur++; l.cur > MaxLine {
			return i, errLineTooLong
		}
	}
	return n, err
}
