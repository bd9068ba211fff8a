package trace

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LoadSWF reads a log in the Standard Workload Format (v2.2) of the Parallel
// Workloads Archive, gzipped or not. Processors are the counted resource: the
// cluster has the header's MaxNodes nodes of MaxProcs/MaxNodes processors
// each, or, without MaxNodes, nodes of opts.ProcsPerNode processors adding up
// to MaxProcs. A job asks its allocated processors (field 5, else the
// requested ones, field 8) as a gang of whole nodes' shares, runs its run
// time (field 4) and has its requested time (field 9) as time limit, or
// runtime × opts.TimeLimitFactor when the log has none. The user (field 12)
// is the account. Jobs without a run time or processor count are left out.
func LoadSWF(path string, opts Options) (*Trace, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("swf trace: %w", err)
	}
	defer f.Close()
	var in io.Reader = f
	name := filepath.Base(path)
	if strings.HasSuffix(name, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("swf trace %s: %w", path, err)
		}
		defer gz.Close()
		in = gz
	}
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".gz"), ".swf")
	t := &Trace{Name: name, Format: "swf", Resource: CPU}
	head := map[string]int64{}
	var skipped, noLimit, failed int
	var biggest int64
	var want []int64 // each job's processors, split into a gang below
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), MaxLine)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if strings.HasPrefix(text, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(text[1:]), ":")
			if ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					head[strings.TrimSpace(k)] = n
				}
			}
			continue
		}
		fs := strings.Fields(text)
		if len(fs) < 18 {
			return nil, fmt.Errorf("swf trace %s line %d: %d fields, want 18", path, line, len(fs))
		}
		var v [18]int64
		for i := range 18 {
			n, err := number(fs[i])
			if err != nil {
				return nil, fmt.Errorf("swf trace %s line %d: field %d %v", path, line, i+1, err)
			}
			v[i] = n
		}
		// -1 is SWF's "unknown"; anything else below 0, or a time past a
		// century, is not a log's.
		for _, f := range []struct {
			i    int
			name string
			hi   int64
			unit string
		}{
			{1, "submit time", MaxSeconds, " seconds, or -1"},
			{3, "run time", MaxSeconds, " seconds, or -1"},
			{4, "allocated processors", math.MaxInt64, ", or -1"},
			{7, "requested processors", math.MaxInt64, ", or -1"},
			{8, "requested time", MaxSeconds, " seconds, or -1"},
		} {
			if n := v[f.i]; n != -1 {
				if err := inRange(fmt.Sprintf("field %d (%s)", f.i+1, f.name), n, 0, f.hi, f.unit); err != nil {
					return nil, fmt.Errorf("swf trace %s line %d: %w", path, line, err)
				}
			}
		}
		procs := v[4]
		if procs <= 0 {
			procs = v[7]
		}
		runtime := v[3]
		if procs <= 0 || runtime < 0 || v[1] < 0 {
			skipped++
			continue
		}
		biggest = max(biggest, procs)
		j := Job{Name: strconv.FormatInt(v[0], 10), Submit: v[1], Runtime: runtime, CPUsPerTask: 1}
		want = append(want, procs) // split below, once the node size is known
		if v[8] > 0 {
			j.TimeLimit = v[8]
		} else {
			noLimit++
			j.TimeLimit = timeLimit(runtime, opts.TimeLimitFactor)
		}
		if v[10] == 0 {
			failed++
			j.ExitCode = 1
		}
		j.Account = "unknown"
		if v[11] >= 0 {
			j.Account = "user-" + strconv.FormatInt(v[11], 10)
		}
		j.User = j.Account
		t.Jobs = append(t.Jobs, j)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("swf trace %s line %d: longer than %d bytes: not an SWF record", path, line+1, MaxLine)
		}
		return nil, fmt.Errorf("swf trace %s line %d: %w", path, line+1, err)
	}
	procs, nodes := head["MaxProcs"], head["MaxNodes"]
	if procs <= 0 {
		procs = biggest
		t.Notes = append(t.Notes, fmt.Sprintf("The header gives no MaxProcs: the cluster has %d processors, the largest job's.", procs))
	}
	if procs <= 0 {
		return nil, fmt.Errorf("swf trace %s: no jobs and no MaxProcs header", path)
	}
	per := int64(opts.ProcsPerNode)
	if nodes > 0 {
		if nodes > MaxNodes {
			return nil, fmt.Errorf("swf trace %s: header MaxNodes %d: the simulated cluster has at most %d nodes", path, nodes, MaxNodes)
		}
		per = max(procs/nodes, 1)
		if per > MaxSlotsPerNode {
			return nil, fmt.Errorf("swf trace %s: header MaxProcs %d over MaxNodes %d is %d processors a node: a simulated node has at most %d", path, procs, nodes, per, MaxSlotsPerNode)
		}
		t.Notes = append(t.Notes, fmt.Sprintf("Cluster: MaxNodes %d nodes of MaxProcs/MaxNodes = %d processors each; processors are scheduled as each node's counted slots.", nodes, per))
	} else {
		nodes = (procs + per - 1) / per
		if nodes > MaxNodes {
			return nil, fmt.Errorf("swf trace %s: %d processors (MaxProcs, else the largest job's) make %d nodes of %d: the simulated cluster has at most %d nodes (--procs-per-node up to %d makes fewer)",
				path, procs, nodes, per, MaxNodes, MaxSlotsPerNode)
		}
		t.Notes = append(t.Notes, fmt.Sprintf("The header gives no MaxNodes: %d nodes of %d processors (MaxProcs %d); processors are scheduled as each node's counted slots.", nodes, per, procs))
	}
	left := procs
	for i := range nodes {
		n := per
		if head["MaxNodes"] == 0 {
			n = min(per, left) // the last node takes what is left
			left -= n
		}
		t.Nodes = append(t.Nodes, Node{Hostname: fmt.Sprintf("node-%05d", i+1), Pool: "proc", Slots: int32(n)})
	}
	total := t.Capacity()
	kept := t.Jobs[:0]
	tooBig := 0
	for i, j := range t.Jobs {
		if want[i] > total {
			tooBig++
			continue
		}
		j.Nodes, j.PerNode = split(want[i], per)
		if int64(j.Nodes) > int64(len(t.Nodes)) {
			tooBig++
			continue
		}
		kept = append(kept, j)
	}
	t.Jobs = kept
	if skipped > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d records without a run time or processor count are left out.", skipped))
	}
	if tooBig > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d jobs larger than the cluster are left out.", tooBig))
	}
	if noLimit > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d jobs have no requested time: their time limit is runtime × %g, rounded up to a minute.", noLimit, opts.TimeLimitFactor))
	}
	if failed > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d jobs with status 0 (failed) end with exit code 1.", failed))
	}
	t.Notes = append(t.Notes, "The user (field 12) is the account; partitions and queues (fields 15, 16) are not modelled: one partition holds every node.")
	if _, err := finish(t, opts); err != nil {
		return nil, fmt.Errorf("swf trace %s: %w", path, err)
	}
	return t, nil
}
