package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/termtext"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Names: short ids ("demo", "7") are expanded with the project; full names
// ("projects/p/clusters/demo") are kept as they are.

// fullName is s when it is a full name, else the name mk makes of id s.
func fullName(s string, mk func(id string) fmt.Stringer) string {
	if strings.HasPrefix(s, "projects/") {
		return s
	}
	return mk(s).String()
}

// shortName is the last segment of a resource name.
func shortName(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}

// shortIn is name's short id for a command the CLI tells the user to run,
// with " --project P" when name is in a project other than the one a bare
// command uses (LOOM_PROJECT, else the default): after `--project pa`, a
// hint of `loom health nodes ca` alone asked the default project, which
// answered that ca is not found.
func (a *app) shortIn(name string) string {
	id := shortName(name)
	rest, ok := strings.CutPrefix(name, "projects/")
	if !ok {
		return id
	}
	p, _, _ := strings.Cut(rest, "/")
	if p == "" || p == cmp.Or(a.getenv("LOOM_PROJECT"), DefaultProject) {
		return id
	}
	return id + " --project " + p
}

func (a *app) clusterName(s string) string {
	return fullName(s, func(id string) fmt.Stringer { return resname.Cluster{Project: a.project, ID: id} })
}

func (a *app) jobName(s string) string {
	return fullName(s, func(id string) fmt.Stringer { return resname.Job{Project: a.project, ID: id} })
}

func (a *app) modelName(s string) string {
	return fullName(s, func(id string) fmt.Stringer { return resname.Model{Project: a.project, ID: id} })
}

func (a *app) parent() string { return resname.Project{ID: a.project}.String() }

// writeJSON writes m as protojson, indented, followed by a newline.
// protojson varies its spacing on purpose; re-indenting makes the output
// stable for people and scripts that diff it.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	if b, err = withEmptyLists(m, b); err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

// withEmptyLists adds to b, m's protojson, each empty top-level list of a
// List response as [] (protojson leaves empty lists out): an empty project
// answers {"clusters": []}, so that `jq '.clusters[]'` prints nothing
// rather than failing on null, as gcloud's JSON gives [] for none.
func withEmptyLists(m proto.Message, b []byte) ([]byte, error) {
	r := m.ProtoReflect()
	d := r.Descriptor()
	if !strings.HasPrefix(string(d.Name()), "List") || !strings.HasSuffix(string(d.Name()), "Response") {
		return b, nil
	}
	var empty []string
	fs := d.Fields()
	for i := range fs.Len() {
		if f := fs.Get(i); f.IsList() && r.Get(f).List().Len() == 0 {
			empty = append(empty, f.JSONName())
		}
	}
	if len(empty) == 0 {
		return b, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	for _, name := range empty {
		obj[name] = json.RawMessage("[]")
	}
	return json.Marshal(obj)
}

// writeJSONLine writes m as one line of protojson (for streams).
func writeJSONLine(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

// newTable is the one table writer of the loom commands: what is written
// to it is rows of tab-terminated cells, each line's last cell not
// terminated, laid out on Flush as text/tabwriter lays them (a column's
// block is the run of lines that have a cell in it; two spaces between
// columns), except that a cell's width is the columns it takes on a
// terminal (termtext.Width), not its runes: a CJK or emoji display name
// is two columns a character, and tabwriter's count misaligned every
// column after it.
func newTable(w io.Writer) *table { return &table{w: w} }

// table is newTable's writer; it keeps everything until Flush.
type table struct {
	w   io.Writer
	buf bytes.Buffer
}

// Write buffers p; it never fails.
func (t *table) Write(p []byte) (int, error) { return t.buf.Write(p) }

// tablePadding is the space between a column's widest cell and the next.
const tablePadding = 2

// Flush writes the buffered rows laid out, and forgets them.
func (t *table) Flush() error {
	text := t.buf.String()
	t.buf.Reset()
	if text == "" {
		return nil
	}
	lines := strings.Split(text, "\n")
	partial := lines[len(lines)-1] // after the last newline: written without one
	lines = lines[:len(lines)-1]
	cells := make([][]string, len(lines))
	for i, l := range lines {
		cells[i] = strings.Split(l, "\t")
	}
	widths := make([][]int, len(lines)) // widths[i][j]: the width column j has on line i
	layoutColumns(cells, widths, 0, 0, len(lines))
	var out strings.Builder
	for i, row := range cells {
		for j, c := range row {
			out.WriteString(c)
			if j < len(row)-1 {
				out.WriteString(strings.Repeat(" ", max(widths[i][j]-termtext.Width(c), 0)))
			}
		}
		out.WriteByte('\n')
	}
	out.WriteString(partial)
	_, err := io.WriteString(t.w, out.String())
	return err
}

// layoutColumns sets the width of column col, and recursively of the
// columns after it, on lines [from, to): each run of consecutive lines
// with a terminated cell in col is one block, as wide as its widest cell
// plus tablePadding (text/tabwriter's column blocks).
func layoutColumns(cells [][]string, widths [][]int, col, from, to int) {
	for i := from; i < to; {
		if col >= len(cells[i])-1 {
			i++
			continue
		}
		end, w := i, 0
		for ; end < to && col < len(cells[end])-1; end++ {
			w = max(w, termtext.Width(cells[end][col])+tablePadding)
		}
		for k := i; k < end; k++ {
			widths[k] = append(widths[k], w)
		}
		layoutColumns(cells, widths, col+1, i, end)
		i = end
	}
}

// row writes one row of a table, an empty cell as "-". Every cell is
// shown first: what a table prints comes from services and,
// through them, from other callers (an audit record's resource is the name
// a stranger sent; an ingress message's the publisher's), and one escape
// sequence there (OSC 52, a screen clear, a bidi override) would act on the
// reader's terminal; a tab or line break would break the columns.
func row(tw io.Writer, cols ...string) {
	for i, c := range cols {
		if c == "" {
			cols[i] = "-"
			continue
		}
		cols[i] = shown(c)
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
}

// age humanises how long ago t was: "45s", "12m", "5h", "3d"; "-" for none.
func age(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil || (t.Seconds == 0 && t.Nanos == 0) {
		return "-"
	}
	return humanDuration(now.Sub(t.AsTime()))
}

// sizeMiB is a size in MiB, one decimal: "93.6 MiB"; sizeGiB in GiB.
func sizeMiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func sizeGiB(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// humanDuration rounds d to its largest unit: "0s", "45s", "12m", "5h", "3d".
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// ago is age with " ago", for sentences and heartbeats.
func ago(t *timestamppb.Timestamp, now time.Time) string {
	s := age(t, now)
	if s == "-" {
		return s
	}
	return s + " ago"
}

// jobRuntime is how long a job ran (or has been running).
func jobRuntime(j *loomv1.Job, now time.Time) string {
	if j.GetStartTime() == nil {
		return "-"
	}
	end := now
	if j.GetEndTime() != nil {
		end = j.GetEndTime().AsTime()
	}
	d := end.Sub(j.GetStartTime().AsTime())
	if d < time.Minute {
		return elapsed(d)
	}
	return humanDuration(d)
}

func clusterState(c *loomv1.Cluster) string {
	return strings.TrimPrefix(c.GetStatus().GetState().String(), "STATE_")
}

func nodeState(n *loomv1.Node) string {
	return strings.TrimPrefix(n.GetState().String(), "STATE_")
}

// maxStateCell is the widest STATE cell of `loom jobs list`, in terminal
// columns: a state with a short reason whole ("PENDING (Resources)",
// "PENDING (DependencyNeverSatisfied)"), a failure message cut.
const maxStateCell = 48

// jobState is the state with its reason, e.g. "PENDING (Resources)".
func jobState(j *loomv1.Job) string {
	s := strings.TrimPrefix(j.GetState().String(), "JOB_STATE_")
	if j.GetStateReason() != "" {
		s += " (" + j.GetStateReason() + ")"
	}
	return s
}

func clusterGPUs(c *loomv1.Cluster) int {
	n := 0
	for _, p := range c.GetCompute().GetNodePools() {
		n += int(p.GetNodeCount()) * int(p.GetAcceleratorCount())
	}
	return n
}

func renderClusters(w io.Writer, cs []*loomv1.Cluster, now time.Time) error {
	tw := newTable(w)
	row(tw, "NAME", "STATE", "NODES", "POOLS", "AGE")
	for _, c := range cs {
		st := c.GetStatus()
		row(tw, shortName(c.GetName()), clusterStateLong(c),
			fmt.Sprintf("%d/%d", st.GetReadyNodes(), st.GetTotalNodes()),
			poolsColumn(c), age(c.GetCreateTime(), now))
	}
	return tw.Flush()
}

// clusterStateLong is the state with a true Degraded condition's reason,
// e.g. "RUNNING (Degraded: NodesFailing)".
func clusterStateLong(c *loomv1.Cluster) string {
	s := clusterState(c)
	for _, cond := range c.GetStatus().GetConditions() {
		if cond.GetType() == "Degraded" && cond.GetStatus() == "True" {
			if cond.GetReason() != "" {
				return s + " (Degraded: " + cond.GetReason() + ")"
			}
			return s + " (Degraded)"
		}
	}
	return s
}

// poolsColumn lists a cluster's node pools with their node counts,
// "a3u:4,spot:2".
func poolsColumn(c *loomv1.Cluster) string {
	parts := make([]string, 0, len(c.GetCompute().GetNodePools()))
	for _, p := range c.GetCompute().GetNodePools() {
		parts = append(parts, fmt.Sprintf("%s:%d", p.GetId(), p.GetNodeCount()))
	}
	return strings.Join(parts, ",")
}

func renderCluster(w io.Writer, c *loomv1.Cluster, now time.Time) error {
	tw := newTable(w)
	st := c.GetStatus()
	fmt.Fprintf(tw, "Name:\t%s\n", c.GetName())
	if c.GetDisplayName() != "" {
		fmt.Fprintf(tw, "Display name:\t%s\n", c.GetDisplayName())
	}
	fmt.Fprintf(tw, "State:\t%s\n", clusterStateLong(c))
	if st.GetMessage() != "" {
		fmt.Fprintf(tw, "Message:\t%s\n", st.GetMessage())
	}
	fmt.Fprintf(tw, "Nodes:\t%d of %d ready\n", st.GetReadyNodes(), st.GetTotalNodes())
	if home := homeDir(c); home != "" {
		fmt.Fprintf(tw, "Home:\t%s\n", home)
	}
	if st.GetLoginNode() != "" {
		fmt.Fprintf(tw, "Login node:\t%s\n", st.GetLoginNode())
	}
	if len(c.GetLabels()) > 0 {
		fmt.Fprintf(tw, "Labels:\t%s\n", labels(c.GetLabels()))
	}
	fmt.Fprintf(tw, "Created:\t%s\n", ago(c.GetCreateTime(), now))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Node pools:")
	tw = newTable(w)
	row(tw, "  ID", "MACHINE TYPE", "NODES", "ACCELERATOR", "GPUS/NODE")
	for _, p := range c.GetCompute().GetNodePools() {
		row(tw, "  "+p.GetId(), p.GetMachineType(), strconv.Itoa(int(p.GetNodeCount())),
			p.GetAcceleratorType(), strconv.Itoa(int(p.GetAcceleratorCount())))
	}
	return tw.Flush()
}

// homeDir is where the cluster's shared home is on every node.
func homeDir(c *loomv1.Cluster) string {
	if h := c.GetStatus().GetHomeDir(); h != "" {
		return h
	}
	return c.GetStatus().GetSharedDir()
}

func labels(m map[string]string) string { return keyValues(m, ",") }

// keyValues renders m as "k1=v1<sep>k2=v2", sorted by key.
func keyValues(m map[string]string, sep string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, sep)
}

// nodeReasonWidth bounds the health reason in loom nodes list's
// REASON/NEXT cell (free text an operator typed); -o json and loom health
// nodes have it whole.
const nodeReasonWidth = 50

// renderNodes writes loom nodes list's table; health gives a node's HEALTH
// state and the reason health gave for it, which REASON/NEXT shows after
// the provisioner's own reason and next action (reasonNext). withProject
// (every project's nodes) puts each node's project first, as every
// project's audit and ingress lists do: two projects' clusters may share
// an id, and CLUSTER alone would not tell their nodes apart.
func renderNodes(w io.Writer, ns []*loomv1.Node, health func(*loomv1.Node) (state, reason string), withProject bool) error {
	tw := newTable(w)
	head := []string{"NODE", "CLUSTER", "POOL", "STATE", "HEALTH", "GPUS", "ZONE", "CAPACITY", "REASON/NEXT"}
	if withProject {
		head = append([]string{"PROJECT"}, head...)
	}
	row(tw, head...)
	for _, n := range ns {
		state, why := health(n)
		reason := reasonNext(n)
		if why = cellText(why, nodeReasonWidth); why != "" {
			if reason != "" {
				reason += "; "
			}
			reason += why
		}
		cols := []string{n.GetHostname(), shortName(n.GetCluster()), nodePool(n), nodeState(n), state,
			strconv.Itoa(int(n.GetGpus())), n.GetZone(), capacityType(n.GetCapacityType()), reason}
		if withProject {
			c, _ := resname.SplitCluster(n.GetCluster())
			cols = append([]string{c.Project}, cols...)
		}
		row(tw, cols...)
	}
	return tw.Flush()
}

// nodePool is the node's pool, or "(login)" for a login node.
func nodePool(n *loomv1.Node) string {
	if n.GetNodePool() == "" && n.GetRole() == "login" {
		return "(login)"
	}
	return n.GetNodePool()
}

// capacityType is a capacity type's name, "-" when unset.
func capacityType(t loomv1.CapacitySource_Type) string {
	if t == loomv1.CapacitySource_TYPE_UNSPECIFIED {
		return "-"
	}
	return t.String()
}

// reasonNext says why a node is not READY and what Loom does next about
// it, "boot timeout → retry launch in 4s (attempt 3 of 5)".
func reasonNext(n *loomv1.Node) string {
	switch {
	case n.GetReason() != "" && n.GetNextAction() != "":
		return n.GetReason() + " → " + n.GetNextAction()
	case n.GetNextAction() != "":
		return "→ " + n.GetNextAction()
	}
	return n.GetReason()
}

func renderJobs(w io.Writer, js []*loomv1.Job, now time.Time) error {
	tw := newTable(w)
	row(tw, "ID", "NAME", "CLUSTER", "STATE", "NODES", "AGE", "RUNTIME", "EXIT")
	for _, j := range js {
		// The state's reason can be a whole failure message: cut, as every
		// free-text cell (jobs get and -o json have it whole).
		row(tw, jobLabel(j), cellText(j.GetDisplayName(), 40), shortName(j.GetCluster()), cellText(jobState(j), maxStateCell),
			strconv.Itoa(int(j.GetNodeCount())), age(j.GetSubmitTime(), now), jobRuntime(j, now), jobExit(j))
	}
	return tw.Flush()
}

// jobExit is the EXIT cell of `loom jobs list`: "-" for a job that has not
// ended or ended without ever running (cancelled while pending: there is
// no exit to show), "signal 15" for one whose program or batch script a
// signal killed (a cancel, the time limit: the job's own exit code stays 0,
// as Slurm's, so "0" alone would claim a clean exit), else its exit code.
// `loom jobs get` says the same at length (jobExitDetail).
func jobExit(j *loomv1.Job) string {
	if !j.GetState().Terminal() || jobNeverRan(j) {
		return "-"
	}
	if sig := jobExitSignal(j); sig > 0 {
		return fmt.Sprintf("signal %d", sig)
	}
	return strconv.Itoa(int(j.GetExitCode()))
}

// jobNeverRan is whether a terminal job ended without a run: no attempt
// started (cancelled, or ended by a dependency, while pending). A record
// without runs but with a start time (from the history store, from before
// runs were kept) did run.
func jobNeverRan(j *loomv1.Job) bool {
	return len(j.GetRuns()) == 0 && j.GetStartTime() == nil
}

// jobExitSignal is the signal that ended the job, 0 when none is known:
// its program's own (Job.exit_signal), else, where its exit code is 0,
// its last run's batch script's (killed by a cancel or its time limit, as
// sacct's JOBID.batch row 0:15 says).
func jobExitSignal(j *loomv1.Job) int32 {
	if sig := j.GetExitSignal(); sig > 0 {
		return sig
	}
	if runs := j.GetRuns(); len(runs) > 0 && j.GetExitCode() == 0 {
		return runs[len(runs)-1].GetBatchExitSignal()
	}
	return 0
}

// jobExitDetail is the "Exit code:" line of `loom jobs get`: what jobExit
// shows in the list, spelled out.
func jobExitDetail(j *loomv1.Job) string {
	if jobNeverRan(j) {
		return "- (it never ran)"
	}
	exit := strconv.Itoa(int(j.GetExitCode()))
	switch sig := jobExitSignal(j); {
	case sig == 0:
	case j.GetExitSignal() > 0:
		exit += fmt.Sprintf(" (killed by signal %d)", sig)
	default:
		// Its script was killed (by the cancel, the time limit): how,
		// as sacct's JOBID.batch row says it (0:15).
		exit += fmt.Sprintf(" (its script killed by signal %d)", sig)
	}
	return exit
}

func jobID(j *loomv1.Job) string {
	if j.GetJobId() != "" {
		return j.GetJobId()
	}
	return shortName(j.GetName())
}

// jobLabel is the id a Slurm user knows a job by: "2_5" for task 5 of
// array job 2 (as squeue and sacct show it; every jobs command takes it),
// else its job id.
func jobLabel(j *loomv1.Job) string {
	if a := j.GetArrayJobId(); a != "" {
		return fmt.Sprintf("%s_%d", a, j.GetArrayTaskId())
	}
	return jobID(j)
}

func renderJob(w io.Writer, j *loomv1.Job, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", j.GetName())
	if l := jobLabel(j); l != jobID(j) {
		fmt.Fprintf(tw, "Job ID:\t%s (array task %s)\n", jobID(j), l)
	} else {
		fmt.Fprintf(tw, "Job ID:\t%s\n", jobID(j))
	}
	if j.GetDisplayName() != "" {
		fmt.Fprintf(tw, "Display name:\t%s\n", j.GetDisplayName())
	}
	fmt.Fprintf(tw, "Cluster:\t%s\n", j.GetCluster())
	if p := j.GetPartition(); p != "" {
		fmt.Fprintf(tw, "Partition:\t%s\n", p)
	}
	fmt.Fprintf(tw, "State:\t%s\n", jobState(j))
	if by := j.GetCancelledBy(); by != "" && j.GetState() == loomv1.JobState_CANCELLED {
		fmt.Fprintf(tw, "Cancelled by:\t%s\n", by)
	}
	if j.GetState().Terminal() {
		fmt.Fprintf(tw, "Exit code:\t%s\n", jobExitDetail(j))
	}
	nodes := strconv.Itoa(int(j.GetNodeCount()))
	if len(j.GetNodes()) > 0 {
		nodes += " (" + strings.Join(j.GetNodes(), ", ") + ")"
	}
	fmt.Fprintf(tw, "Nodes:\t%s\n", nodes)
	fmt.Fprintf(tw, "GPUs per node:\t%d\n", j.GetGpusPerNode())
	if len(j.GetCommand()) > 0 {
		fmt.Fprintf(tw, "Command:\t%s\n", shellJoin(j.GetCommand()))
	}
	if j.GetScript() != "" {
		n := strings.Count(strings.TrimRight(j.GetScript(), "\n"), "\n") + 1
		fmt.Fprintf(tw, "Script:\t%d %s\n", n, plural(n, "line", "lines"))
	}
	if m := j.GetModelOutput().GetModelId(); m != "" {
		fmt.Fprintf(tw, "Model output:\t%s\n", m)
	}
	if j.GetOutputPath() != "" {
		fmt.Fprintf(tw, "Output:\t%s\n", j.GetOutputPath())
	}
	fmt.Fprintf(tw, "Submitted:\t%s\n", ago(j.GetSubmitTime(), now))
	if j.GetStartTime() != nil {
		fmt.Fprintf(tw, "Started:\t%s\n", ago(j.GetStartTime(), now))
		fmt.Fprintf(tw, "Runtime:\t%s\n", jobRuntime(j, now))
	}
	if j.GetEndTime() != nil {
		fmt.Fprintf(tw, "Ended:\t%s\n", ago(j.GetEndTime(), now))
	}
	if runs := j.GetRuns(); len(runs) > 0 && runs[len(runs)-1].GetBatchUsage() != nil {
		// What its script (or its command on the first node) used; its
		// srun steps' figures are sacct's.
		u := runs[len(runs)-1].GetBatchUsage()
		cpu := u.GetUserCpu().AsDuration() + u.GetSystemCpu().AsDuration()
		gpus := ""
		if n := u.GetGpus(); n > 0 {
			gpus = fmt.Sprintf(", %d %s at %.0f%% (peak %s)", n, plural(int(n), "GPU", "GPUs"), u.GetGpuUtilPercent(),
				sizeGiB(u.GetMaxGpuMemoryBytes()))
		}
		fmt.Fprintf(tw, "Used:\t%s CPU, %s peak memory%s (its script; loom slurm sacct -j %s has its steps)\n",
			cpu.Round(time.Millisecond), sizeMiB(u.GetMaxRssBytes()), gpus, j.GetJobId())
	}
	if sec := j.GetTimeLimitSeconds(); sec > 0 {
		fmt.Fprintf(tw, "Time limit:\t%s\n", time.Duration(sec)*time.Second)
	}
	if j.GetRestartCount() > 0 {
		fmt.Fprintf(tw, "Restarts:\t%d\n", j.GetRestartCount())
	}
	if ex := j.GetExcludedNodes(); len(ex) > 0 {
		fmt.Fprintf(tw, "Kept off:\t%s (a run failed there; until repaired)\n", hostlist.Compress(ex))
	}
	// The job's own resilience settings, when it has any: what decides
	// whether the next failure ends it.
	if n := j.GetMaxRetries(); n > 0 {
		fmt.Fprintf(tw, "Retries:\t%d of %d used (its program's failures)\n", j.GetUserFailures(), n)
	}
	switch sec := j.GetHangTimeoutSeconds(); {
	case sec == slurmspec.HangTimeoutOff:
		fmt.Fprintf(tw, "Hang timeout:\toff\n")
	case sec > 0:
		fmt.Fprintf(tw, "Hang timeout:\t%s\n", time.Duration(sec)*time.Second)
	}
	switch d := j.GetCheckpointDir(); {
	case d == "":
	case filepath.IsAbs(d):
		fmt.Fprintf(tw, "Checkpoints:\t%s\n", d)
	default:
		fmt.Fprintf(tw, "Checkpoints:\t%s (under the cluster's shared dir)\n", d)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A job that ran more than once says why each run ended (a failed node,
	// an Xid, a preemption): what a user asks after a restart.
	if len(j.GetRuns()) < 2 {
		return nil
	}
	fmt.Fprintln(w, "\nRuns:")
	tw = newTable(w)
	row(tw, "  ATTEMPT", "STATE", "NODES", "STARTED", "RUNTIME", "REASON")
	for _, r := range j.GetRuns() {
		runtime := "-"
		if r.GetStartTime() != nil {
			end := now
			if r.GetEndTime() != nil {
				end = r.GetEndTime().AsTime()
			}
			runtime = elapsed(end.Sub(r.GetStartTime().AsTime()))
		}
		row(tw, "  "+strconv.Itoa(int(r.GetAttempt())), r.GetState().String(), hostlist.Compress(r.GetNodes()),
			ago(r.GetStartTime(), now), runtime, r.GetReason())
	}
	return tw.Flush()
}

// shellJoin quotes argv the way a shell would need it, for display.
func shellJoin(argv []string) string {
	parts := make([]string, len(argv))
	for i, s := range argv {
		if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			parts[i] = s
		} else {
			parts[i] = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return strings.Join(parts, " ")
}

func renderVersions(w io.Writer, vs []*loomv1.ModelVersion, now time.Time) error {
	tw := newTable(w)
	row(tw, "VERSION", "ARTIFACT", "SOURCE JOB", "CREATED")
	for _, v := range vs {
		row(tw, strconv.FormatInt(v.GetVersion(), 10), shown(v.GetArtifactUri()), shown(shortName(v.GetSourceJob())), ago(v.GetCreateTime(), now))
	}
	return tw.Flush()
}

// renderVersion shows a stored version (the registry's ModelVersion), named
// as the model API answers and `loom models get` prints it
// (modelAPIName).
func renderVersion(w io.Writer, v *loomv1.ModelVersion, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", modelAPIName(v.GetName()))
	fmt.Fprintf(tw, "Version:\t%d\n", v.GetVersion())
	fmt.Fprintf(tw, "Artifact:\t%s\n", v.GetArtifactUri())
	fmt.Fprintf(tw, "Source job:\t%s\n", v.GetSourceJob())
	fmt.Fprintf(tw, "Created:\t%s\n", ago(v.GetCreateTime(), now))
	return tw.Flush()
}

// modelAPIName is a stored version's name, "projects/{p}/models/{m}/versions/{n}"
// (libs/resname), as the model API answers it: "projects/{p}/locations/global/models/{m}@{n}"
// (docs/registry.md, "Names"; location global for a name without one, as
// `loom models get` is answered). Another name is returned as it is.
func modelAPIName(name string) string {
	v, err := resname.SplitModelVersion(name)
	if err != nil {
		return name
	}
	return v.APIName("global")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// collect gathers a list's items page by page (AIP-158), each call bounded
// by the CLI's call timeout: every page, or the first limit items when
// limit > 0 (fetch is then asked for at most what is still wanted). fetch
// asks for the page at token of at most size items (0: the server's
// default) and returns its items and the next token. A negative limit (a
// --limit flag's) is a usage error, for every list alike.
func collect[T any](a *app, cmd *cobra.Command, limit int, fetch func(ctx context.Context, token string, size int32) ([]T, string, error)) ([]T, error) {
	if limit < 0 {
		return nil, usagef("--limit must not be negative, got %d; 0 lists them all", limit)
	}
	var out []T
	err := paging.Each(func(token string) (string, error) {
		ctx, cancel := a.call(cmd.Context())
		defer cancel()
		var size int32
		if limit > 0 {
			size = int32(min(limit-len(out), paging.MaxSize))
		}
		items, next, err := fetch(ctx, token, size)
		out = append(out, items...)
		if limit > 0 && len(out) >= limit {
			out = out[:limit]
			return "", err
		}
		return next, err
	})
	return out, err
}

// maxShown bounds one text a command prints whole (a get's field, a
// progress line): far above any field's limit, so nothing a service keeps
// is cut.
const maxShown = 64 << 10

// shown is a service's text (a training resource's, a model's) as the
// commands print it, on one line and safe for a terminal: a line break or
// tab is a space (it would break a row), and every other control
// character, invalid UTF-8 and what else libs/termtext refuses (an escape
// such as OSC 52, which writes a viewer's clipboard; a bidi override) is
// U+FFFD, so that the reader sees something was there. Validation refuses
// them in what a user writes; this covers what it cannot: records stored
// before it did, the services' messages, and a program's args (any text
// but NUL).
func shown(s string) string { return termtext.Clean(lineBreaks.Replace(s), maxShown) }

// lineBreaks turns a text's line breaks and tabs into spaces (shown).
var lineBreaks = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ")

// cell is s as a table's cell: shown, cut to n characters (cellText).
func cell(s string, n int) string { return cellText(shown(s), n) }

// maxQuoted is the most columns of a refused value that a message quotes
// (quotedCut).
const maxQuoted = 40

// quotedCut is s quoted for a message about it, cut to n columns
// (cellText) and, when cut, followed by its length: a refused value is
// never echoed whole, however long.
func quotedCut(s string, n int) string {
	c := cellText(s, n)
	if c == shown(s) {
		return strconv.Quote(c)
	}
	return fmt.Sprintf("%q (%d characters)", c, utf8.RuneCountInString(s))
}
