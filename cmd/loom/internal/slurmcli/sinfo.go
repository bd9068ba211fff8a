package slurmcli

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Slurm's sinfo formats.
const (
	sinfoDefaultFormat = "%9P %.5a %.10l %.6D %.6t %N"
	sinfoLongFormat    = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
	sinfoNodeFormat    = "%N %.6D %.9P %6t"
	// -N -l: Slurm's manual says "%.4c", but 22.05's sinfo -N -l prints
	// CPUS left-justified (checked against a real one): "%4c".
	sinfoNodeLongFormat    = "%N %.6D %.9P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
	sinfoSummarizeFormat   = "%9P %.5a %.10l %.16F %N" // as 22.05 prints it (checked against a real sinfo -s)
	sinfoReasonsFormat     = "%20E %9u %19H %N"
	sinfoReasonsLongFormat = "%20E %12U %19H %6t %N"
	minFieldSize           = 9
)

var sinfoOptions = []optDef{
	{long: []string{"all"}, short: 'a', arg: noArg},
	{long: []string{"dead"}, short: 'd', arg: noArg},
	{long: []string{"exact"}, short: 'e', arg: noArg},
	{long: []string{"federation"}, arg: noArg},
	{long: []string{"noheader"}, short: 'h', arg: noArg},
	{long: []string{"help"}, arg: noArg},
	{long: []string{"hide"}, arg: noArg},
	{long: []string{"iterate"}, short: 'i', arg: requiredArg},
	{long: []string{"local"}, arg: noArg},
	{long: []string{"long"}, short: 'l', arg: noArg},
	{long: []string{"clusters", "cluster"}, short: 'M', arg: requiredArg},
	{long: []string{"nodes"}, short: 'n', arg: requiredArg},
	{long: []string{"noconvert"}, arg: noArg},
	{long: []string{"Node"}, short: 'N', arg: noArg},
	{long: []string{"format"}, short: 'o', arg: requiredArg},
	{long: []string{"Format"}, short: 'O', arg: requiredArg},
	{long: []string{"partition"}, short: 'p', arg: requiredArg},
	{long: []string{"responding"}, short: 'r', arg: noArg},
	{long: []string{"list-reasons"}, short: 'R', arg: noArg},
	{long: []string{"summarize"}, short: 's', arg: noArg},
	{long: []string{"sort"}, short: 'S', arg: requiredArg},
	{long: []string{"states"}, short: 't', arg: requiredArg},
	{long: []string{"reservation"}, short: 'T', arg: noArg},
	{long: []string{"usage"}, arg: noArg},
	{long: []string{"verbose"}, short: 'v', arg: noArg},
	{long: []string{"version"}, short: 'V', arg: noArg},
}

// sinfoLongNames maps -O/--Format names to sinfo's format letters.
var sinfoLongNames = map[string]string{
	"available": "a", "nodeaiot": "F", "nodeai": "A", "cpus": "c", "cpusstate": "C",
	"disk": "d", "nodes": "D", "reason": "E", "features": "f", "features_act": "b",
	"groups": "g", "gres": "G", "oversubscribe": "h", "timestamp": "H", "time": "l",
	"defaulttime": "L", "memory": "m", "preemptmode": "M", "nodehost": "n", "nodelist": "N",
	"nodeaddr": "o", "cpusload": "O", "prioritytier": "p", "partition": "P", "root": "r",
	"partitionname": "R", "size": "s", "allocnodes": "S", "statecompact": "t", "statelong": "T",
	"user": "u", "userlong": "U", "version": "v", "cluster": "V", "weight": "w",
	"sockets": "X", "cores": "Y", "threads": "Z", "socketcorethread": "z", "freemem": "e",
	"maxcpuspernode": "B", "priorityjobfactor": "I",
}

// nodeStates are Slurm's node state names per Loom's SlurmNode state, in
// sinfo's default order (the -t part of "#P,-t").
var nodeStates = []struct {
	state         loomv1.SlurmNode_State
	compact, long string
	rank          int
}{
	{loomv1.SlurmNode_DRAINING, "drng", "draining", 7},
	{loomv1.SlurmNode_DRAINED, "drain", "drained", 6},
	// Slurm 22.05's node_state_string(_compact) for a reboot asked for (the
	// REBOOT_REQUESTED flag) and one under way (REBOOT_ISSUED) on a node
	// without jobs; nodeStateNames gives a busy node's "mix@".
	{loomv1.SlurmNode_REBOOT_ISSUED, "boot^", "reboot^", 5},
	{loomv1.SlurmNode_REBOOT_REQUESTED, "boot", "reboot", 5},
	{loomv1.SlurmNode_MIXED, "mix", "mixed", 5},
	{loomv1.SlurmNode_ALLOCATED, "alloc", "allocated", 3},
	{loomv1.SlurmNode_IDLE, "idle", "idle", 2},
	{loomv1.SlurmNode_DOWN, "down", "down", 1},
	{loomv1.SlurmNode_STATE_UNSPECIFIED, "unk", "unknown", 0},
}

func nodeStateInfo(s loomv1.SlurmNode_State) (compact, long string, rank int) {
	for _, n := range nodeStates {
		if n.state == s {
			return n.compact, n.long, n.rank
		}
	}
	return "unk", "unknown", 0
}

// nodeStateNames are n's state as sinfo prints it, compact (%t) and long
// (%T): as nodeStateInfo, except that a reboot asked for on a node that
// still runs jobs shows as Slurm shows it, "mix@" / "mixed@" (or
// "alloc@" / "allocated@" when it is full), and a node not responding
// ends in "*" as in Slurm ("idle*", "mixed*").
func nodeStateNames(n *loomv1.SlurmNode) (compact, long string) {
	if n.GetState() == loomv1.SlurmNode_REBOOT_REQUESTED && (n.GetAllocGpus() > 0 || n.GetAllocCpus() > 0) {
		compact, long = "mix@", "mixed@"
		if (n.GetGpus() > 0 && n.GetAllocGpus() >= n.GetGpus()) || (n.GetGpus() == 0 && n.GetAllocCpus() >= n.GetCpus()) {
			compact, long = "alloc@", "allocated@"
		}
	} else {
		compact, long, _ = nodeStateInfo(n.GetState())
	}
	if n.GetNotResponding() {
		compact, long = compact+"*", long+"*"
	}
	return compact, long
}

// parseNodeStates parses sinfo -t: compact or long names, prefixes, "drain"
// for both drained and draining, "all".
func parseNodeStates(s string) (map[loomv1.SlurmNode_State]bool, error) {
	out := map[loomv1.SlurmNode_State]bool{}
	for _, item := range splitList(strings.ToLower(s)) {
		if item == "all" {
			return nil, nil
		}
		found := false
		if item == "drain" {
			out[loomv1.SlurmNode_DRAINED], out[loomv1.SlurmNode_DRAINING] = true, true
			continue
		}
		for _, n := range nodeStates {
			if strings.HasPrefix(n.compact, item) || strings.HasPrefix(n.long, item) {
				out[n.state] = true
				found = true
			}
		}
		if !found {
			var names []string
			for _, n := range nodeStates {
				names = append(names, n.long)
			}
			return nil, &Error{Code: 1, Text: fmt.Sprintf("sinfo: error: Bad state string: %q\nsinfo: error: valid states: %s", item, strings.Join(names, ","))}
		}
	}
	return out, nil
}

// sinfoRow is one line of sinfo: nodes of one partition (nil for nodes
// in none) that share the printed attributes.
type sinfoRow struct {
	part    *loomv1.Partition
	partIdx int
	nodes   []*loomv1.SlurmNode
	// partWidth is the computed width of %P / %R (0: as given).
	partWidth int
}

func (r sinfoRow) first() *loomv1.SlurmNode {
	if len(r.nodes) == 0 {
		return &loomv1.SlurmNode{}
	}
	return r.nodes[0]
}

func (r sinfoRow) hostnames() []string {
	names := make([]string, len(r.nodes))
	for i, n := range r.nodes {
		names[i] = n.GetHostname()
	}
	return names
}

// counts are a row's nodes and CPUs as allocated/idle/other/total.
func (r sinfoRow) counts() (na, ni, no, nt, ca, ci, co, ct int) {
	for _, n := range r.nodes {
		nt++
		ct += int(n.GetCpus())
		switch n.GetState() {
		case loomv1.SlurmNode_DOWN, loomv1.SlurmNode_DRAINED, loomv1.SlurmNode_REBOOT_ISSUED, loomv1.SlurmNode_STATE_UNSPECIFIED:
			no++
			co += int(n.GetCpus())
		case loomv1.SlurmNode_IDLE:
			ni++
			ci += int(n.GetCpus())
		default:
			na++
			ca += int(n.GetAllocCpus())
			ci += int(n.GetCpus() - n.GetAllocCpus())
		}
	}
	return
}

func nodeGres(n *loomv1.SlurmNode) string {
	if n.GetGpus() == 0 {
		return "(null)"
	}
	if t := n.GetGpuType(); t != "" {
		return fmt.Sprintf("gpu:%s:%d", t, n.GetGpus())
	}
	return fmt.Sprintf("gpu:%d", n.GetGpus())
}

// partTimeLimit is sinfo's TIMELIMIT of a partition.
func partTimeLimit(p *loomv1.Partition) string {
	secs, unlimited, err := ParseTimeLimit(p.GetMaxTime())
	if p.GetMaxTime() == "" || unlimited || err != nil {
		return "infinite"
	}
	return formatSecs(secs, false)
}

// reasonSetter is who set n's reason and when (in loc), as sinfo -R and
// scontrol show node print them: an administrator's drain records both;
// Loom's own reasons (down, being removed) neither, "Unknown".
func reasonSetter(n *loomv1.SlurmNode, loc *time.Location) (user, at string) {
	user, at = n.GetReasonUser(), "Unknown"
	if user == "" {
		user = "Unknown"
	}
	if t := n.GetReasonTime(); t != nil {
		at = formatTimestamp(t.AsTime(), loc)
	}
	return user, at
}

// sinfoFields are sinfo's format letters; aggregate ones (counts, lists)
// describe the row's nodes together, the others one node.
func sinfoFields(cluster string, loc *time.Location) fieldTable[sinfoRow] {
	part := func(header string, f func(p *loomv1.Partition) string) fieldDef[sinfoRow] {
		return fieldDef[sinfoRow]{header: header, value: func(r sinfoRow) string {
			if r.part == nil {
				return "n/a"
			}
			return f(r.part)
		}}
	}
	// node is a field of the row's first node; a row without nodes (a
	// partition none of whose nodes is listed) shows none, as Slurm's
	// sinfo does: "0", "n/a", "0:0:0", ... (emptyNodeValues).
	node := func(header string, f func(n *loomv1.SlurmNode) string) fieldDef[sinfoRow] {
		return fieldDef[sinfoRow]{header: header, value: func(r sinfoRow) string { return f(r.first()) }}
	}
	reasonUser := func(n *loomv1.SlurmNode) string { u, _ := reasonSetter(n, loc); return u }
	reasonTime := func(n *loomv1.SlurmNode) string { _, at := reasonSetter(n, loc); return at }
	fields := map[string]fieldDef[sinfoRow]{
		"a": part("AVAIL", func(p *loomv1.Partition) string {
			if s := strings.ToLower(p.GetState()); s != "" {
				return s
			}
			return "up"
		}),
		"A": {header: "NODES(A/I)", value: func(r sinfoRow) string {
			na, ni, _, _, _, _, _, _ := r.counts()
			return fmt.Sprintf("%d/%d", na, ni)
		}},
		"b": node("ACTIVE_FEATURES", nodeFeatures),
		"B": part("MAX_CPUS_PER_NODE", func(*loomv1.Partition) string { return "UNLIMITED" }),
		"c": node("CPUS", func(n *loomv1.SlurmNode) string { return strconv.Itoa(int(n.GetCpus())) }),
		"C": {header: "CPUS(A/I/O/T)", value: func(r sinfoRow) string {
			_, _, _, _, ca, ci, co, ct := r.counts()
			return fmt.Sprintf("%d/%d/%d/%d", ca, ci, co, ct)
		}},
		"d": node("TMP_DISK", func(*loomv1.SlurmNode) string { return "0" }),
		"D": {header: "NODES", value: func(r sinfoRow) string { return strconv.Itoa(len(r.nodes)) }},
		"e": node("FREE_MEM", func(*loomv1.SlurmNode) string { return "N/A" }),
		"E": node("REASON", func(n *loomv1.SlurmNode) string {
			if n.GetReason() == "" {
				return "none"
			}
			return n.GetReason()
		}),
		"f": node("AVAIL_FEATURES", nodeFeatures),
		"F": {header: "NODES(A/I/O/T)", value: func(r sinfoRow) string {
			na, ni, no, nt, _, _, _, _ := r.counts()
			return fmt.Sprintf("%d/%d/%d/%d", na, ni, no, nt)
		}},
		"g": part("GROUPS", func(*loomv1.Partition) string { return "all" }),
		"G": node("GRES", nodeGres),
		"h": part("OVERSUBSCRIBE", func(*loomv1.Partition) string { return "NO" }),
		"H": node("TIMESTAMP", reasonTime),
		"I": part("PRIO_JOB_FACTOR", func(*loomv1.Partition) string { return "1" }),
		"l": part("TIMELIMIT", partTimeLimit),
		"L": part("DEFAULTTIME", func(*loomv1.Partition) string { return "n/a" }),
		"m": node("MEMORY", func(n *loomv1.SlurmNode) string { return strconv.FormatInt(n.GetMemoryMb(), 10) }),
		"M": part("PREEMPT_MODE", func(*loomv1.Partition) string { return "REQUEUE" }),
		"n": {header: "HOSTNAMES", value: func(r sinfoRow) string { return compressHosts(r.hostnames()) }},
		"N": {header: "NODELIST", value: func(r sinfoRow) string { return compressHosts(r.hostnames()) }},
		"o": {header: "NODE_ADDR", value: func(r sinfoRow) string { return compressHosts(r.hostnames()) }},
		"O": node("CPU_LOAD", func(*loomv1.SlurmNode) string { return "N/A" }),
		"p": part("PRIO_TIER", func(p *loomv1.Partition) string { return strconv.Itoa(int(p.GetPriorityTier())) }),
		"P": part("PARTITION", func(p *loomv1.Partition) string {
			if p.GetDefault() {
				return p.GetName() + "*"
			}
			return p.GetName()
		}),
		"r": part("ROOT", func(*loomv1.Partition) string { return "no" }),
		"R": part("PARTITION", func(p *loomv1.Partition) string { return p.GetName() }),
		"s": part("JOB_SIZE", func(*loomv1.Partition) string { return "1-infinite" }),
		"S": part("ALLOCNODES", func(*loomv1.Partition) string { return "all" }),
		"t": node("STATE", func(n *loomv1.SlurmNode) string { c, _ := nodeStateNames(n); return c }),
		"T": node("STATE", func(n *loomv1.SlurmNode) string { _, l := nodeStateNames(n); return l }),
		"u": node("USER", reasonUser),
		"U": node("USER", reasonUser),
		"v": node("VERSION", func(*loomv1.SlurmNode) string { return "22.05.8" }),
		"V": node("CLUSTER", func(*loomv1.SlurmNode) string { return shortName(cluster) }),
		"w": node("WEIGHT", func(*loomv1.SlurmNode) string { return "1" }),
		// The node line of the slurm.conf Loom renders gives CPUs= alone,
		// and for that Slurm counts each CPU a socket of one core of one
		// thread: S:C:T is CPUS:1:1 (scontrol show node's Sockets=CPUS
		// CoresPerSocket=1 ThreadsPerCore=1).
		"X": node("SOCKETS", func(n *loomv1.SlurmNode) string { return strconv.Itoa(int(max(n.GetCpus(), 1))) }),
		"Y": node("CORES", func(*loomv1.SlurmNode) string { return "1" }),
		"Z": node("THREADS", func(*loomv1.SlurmNode) string { return "1" }),
		"z": node("S:C:T", func(n *loomv1.SlurmNode) string { return fmt.Sprintf("%d:1:1", max(n.GetCpus(), 1)) }),
	}
	for spec, v := range emptyNodeValues {
		d := fields[spec]
		value := d.value
		d.value = func(r sinfoRow) string {
			if len(r.nodes) == 0 {
				return v
			}
			return value(r)
		}
		fields[spec] = d
	}
	return fieldTable[sinfoRow]{fields: fields}
}

// emptyNodeValues are the node fields of a row without nodes, as Slurm
// 22.05's sinfo prints them (sinfo -p EMPTY -o '%c|%t|...', checked);
// the others print as for a node with nothing set.
var emptyNodeValues = map[string]string{
	"c": "0", "d": "0", "e": "0", "m": "0", "O": "0.00", "t": "n/a", "T": "n/a",
	"v": "N/A", "w": "0", "X": "0", "Y": "0", "Z": "0", "z": "0:0:0",
}

func nodeFeatures(n *loomv1.SlurmNode) string {
	if len(n.GetFeatures()) == 0 {
		return "(null)"
	}
	return strings.Join(n.GetFeatures(), ",")
}

// aggregateSpecs are the sinfo letters that describe a row's nodes
// together; the others split rows.
var aggregateSpecs = map[string]bool{"A": true, "C": true, "D": true, "F": true, "N": true, "n": true, "o": true}

// sinfo is the sinfo command.
func (c *cmd) sinfo(ctx context.Context, args []string) error {
	p := &optParser{prog: "sinfo", defs: sinfoOptions}
	opts, rest, err := p.parse(args)
	if err != nil {
		return usage("sinfo", err)
	}
	if len(rest) > 0 {
		return &Error{Code: 1, Text: "sinfo: error: Unrecognized option: " + rest[0] + "\n" + strings.TrimRight(sinfoUsage, "\n")}
	}
	var formatStr, longFormat string
	nodeMode, long, noHeader, summarize, reasons, dead, responding := false, false, false, false, false, false, false
	clusterLine := false  // -M: "CLUSTER: NAME" before the table
	var clusters []string // -M's list, walked one by one
	var parts stringSet
	var stateFilter map[loomv1.SlurmNode_State]bool
	var hostFilter map[string]bool
	iterate := 0
	formatOpt := false
	if v := c.env.Environ["SINFO_FORMAT"]; v != "" {
		formatStr = v
	}
	for _, o := range opts {
		switch o.key {
		case "help", "usage":
			fmt.Fprint(c.stdout, sinfoUsage)
			return nil
		case "version":
			return c.printVersion()
		case "dead":
			dead = true
		case "responding":
			responding = true
		case "noheader":
			noHeader = true
		case "iterate":
			n, err := strconv.Atoi(o.value)
			if err != nil || n <= 0 {
				return c.errorf("--iterate=%s", o.value)
			}
			iterate = n
		case "long":
			long = true
		case "clusters":
			if clusters, err = c.clusterList(o.value); err != nil {
				return err
			}
			clusterLine = true
		case "nodes":
			hosts, err := hostlist.Expand(o.value)
			if err != nil {
				return c.errorf("Invalid node name specification: %s", o.value)
			}
			hostFilter = map[string]bool{}
			for _, h := range hosts {
				hostFilter[h] = true
			}
		case "Node":
			nodeMode = true
		case "format":
			formatStr, longFormat, formatOpt = o.value, "", true
		case "Format":
			longFormat, formatStr, formatOpt = o.value, "", true
		case "partition":
			parts = newStringSet(splitList(o.value))
		case "list-reasons":
			reasons = true
		case "summarize":
			summarize = true
		case "states":
			if stateFilter, err = parseNodeStates(o.value); err != nil {
				return err
			}
		case "reservation":
			return c.errorf("reservations (-T) are not tracked by Loom")
		case "sort":
			// accepted: Loom keeps Slurm's default order
		}
	}
	if long && formatOpt {
		return &Error{Code: 1, Text: "sinfo: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry."}
	}
	if !formatOpt && (nodeMode || summarize || reasons) {
		// As Slurm's sinfo, -N, -s and -R print their own format over
		// SINFO_FORMAT's (-l alone keeps it).
		formatStr = ""
	}
	// Default formats size %P (and, node-oriented, %N) to their longest value.
	autoPart, autoNode := false, false
	var f format
	switch {
	case longFormat != "":
		var unknown []string
		f, unknown = parseLongFormat(longFormat, sinfoLongNames)
		if len(unknown) > 0 {
			return c.errorf("Invalid node format specification: %s", unknown[0])
		}
	case formatStr != "":
		f = parseFormat(formatStr)
	case summarize:
		f, autoPart = parseFormat(sinfoSummarizeFormat), true
	case nodeMode:
		f, autoPart, autoNode = parseFormat(sinfoNodeFormat), true, true
		if long {
			f = parseFormat(sinfoNodeLongFormat)
		}
	case reasons:
		f = parseFormat(sinfoReasonsFormat)
		if long {
			f = parseFormat(sinfoReasonsLongFormat)
		}
	default:
		f, autoPart = parseFormat(sinfoDefaultFormat), true
		if long {
			f = parseFormat(sinfoLongFormat)
		}
	}
	if reasons && stateFilter == nil {
		stateFilter = map[loomv1.SlurmNode_State]bool{loomv1.SlurmNode_DOWN: true, loomv1.SlurmNode_DRAINED: true, loomv1.SlurmNode_DRAINING: true,
			loomv1.SlurmNode_REBOOT_REQUESTED: true, loomv1.SlurmNode_REBOOT_ISSUED: true}
	}
	if len(clusters) > 1 && noHeader && !formatOpt {
		// Slurm's sinfo: with -h no CLUSTER: lines, so a default format
		// starts with the cluster's name (8 wide) instead.
		f.fields = append([]fmtField{{spec: "V", width: 8, token: "%8V"}}, f.fields...)
	}
	c.checkFormat(f, sinfoFields("", c.loc).known, "node")

	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Duration(iterate) * time.Second):
			}
		}
		var b strings.Builder
		if (long || iterate > 0) && !noHeader { // as Slurm's print_date: not with -h
			b.WriteString(c.env.nowIn(c.loc).Format(ctimeLayout) + "\n")
		}
		// Each cluster of -M's list in turn, its table after a "CLUSTER:
		// NAME" line, a blank line between two (Slurm's _multi_cluster).
		err := c.forEachCluster(clusters, func(i int) error {
			if clusterLine && !noHeader {
				if i > 0 {
					b.WriteString("\n")
				}
				b.WriteString(c.clusterLine())
			}
			return c.sinfoTable(ctx, &b, f, sinfoView{parts: parts, stateFilter: stateFilter, hostFilter: hostFilter,
				dead: dead, responding: responding, reasons: reasons, nodeMode: nodeMode, autoPart: autoPart,
				autoNode: autoNode, noHeader: noHeader})
		})
		if err != nil {
			return err
		}
		fmt.Fprint(c.stdout, b.String())
		if iterate == 0 {
			return nil
		}
		fmt.Fprintln(c.stdout)
	}
}

// sinfoView is what sinfo prints of each cluster: its options.
type sinfoView struct {
	parts                        stringSet
	stateFilter                  map[loomv1.SlurmNode_State]bool
	hostFilter                   map[string]bool
	dead, responding, reasons    bool
	nodeMode, autoPart, autoNode bool
	noHeader                     bool
}

// sinfoTable writes sinfo's table of the command's cluster (-M's, else
// LOOM_CLUSTER's, else the project's only one) to b.
func (c *cmd) sinfoTable(ctx context.Context, b *strings.Builder, f format, v sinfoView) error {
	cluster, err := c.clusterName(ctx)
	if err != nil {
		return err
	}
	table := sinfoFields(cluster, c.loc)
	partitions, nodes, err := c.slurmView(ctx, cluster)
	if err != nil {
		return err
	}
	// -d keeps only the dead nodes (DOWN, or not responding: "idle*"),
	// -r only the others, as Slurm's sinfo.
	isDead := func(n *loomv1.SlurmNode) bool {
		return n.GetState() == loomv1.SlurmNode_DOWN || n.GetNotResponding()
	}
	filter := func(n *loomv1.SlurmNode) bool {
		return (v.stateFilter == nil || v.stateFilter[n.GetState()]) && (v.hostFilter == nil || v.hostFilter[n.GetHostname()]) &&
			(!v.dead || isDead(n)) && (!v.responding || !isDead(n))
	}
	var rows []sinfoRow
	if v.reasons {
		rows = reasonRows(nodes, filter, f, table)
	} else {
		rows = sinfoRows(partitions, nodes, v.parts, filter, v.nodeMode, f, table)
	}
	// Default formats size %P (and, node-oriented, %N) to their longest
	// value, each cluster's table its own (Slurm's sinfo sizes each).
	f.fields = slices.Clone(f.fields)
	if v.autoPart {
		w := minFieldSize
		for _, r := range rows {
			if r.part != nil {
				n := len(r.part.GetName())
				if r.part.GetDefault() {
					n++
				}
				w = max(w, n)
			}
		}
		for i := range f.fields {
			if f.fields[i].spec == "P" || f.fields[i].spec == "R" {
				f.fields[i].width = w
			}
		}
	}
	if v.autoNode {
		w := minFieldSize
		for _, r := range rows {
			w = max(w, len(compressHosts(r.hostnames())))
		}
		for i := range f.fields {
			if f.fields[i].spec == "N" {
				f.fields[i].width = w
			}
		}
	}
	table.write(b, f, rows, v.noHeader)
	return nil
}

// slurmView fetches a cluster's partitions and nodes, every page of each.
func (c *cmd) slurmView(ctx context.Context, cluster string) ([]*loomv1.Partition, []*loomv1.SlurmNode, error) {
	parts, err := c.partitions(ctx, cluster)
	if err != nil {
		return nil, nil, c.rpcError("slurm_load_partitions", err)
	}
	nodes, err := c.slurmNodes(ctx, cluster)
	if err != nil {
		return nil, nil, err
	}
	return parts, nodes, nil
}

// slurmNodes fetches every page of a cluster's Slurm nodes.
func (c *cmd) slurmNodes(ctx context.Context, cluster string) ([]*loomv1.SlurmNode, error) {
	var nodes []*loomv1.SlurmNode
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		resp, err := c.slurmClient().ListSlurmNodes(cctx, &loomv1.ListSlurmNodesRequest{Cluster: cluster, PageToken: token})
		nodes = append(nodes, resp.GetNodes()...)
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		return nil, c.rpcError("slurm_load_node", err)
	}
	return nodes, nil
}

// partitions fetches every page of a cluster's partitions.
func (c *cmd) partitions(ctx context.Context, cluster string) ([]*loomv1.Partition, error) {
	var parts []*loomv1.Partition
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		resp, err := c.slurmClient().ListPartitions(cctx, &loomv1.ListPartitionsRequest{Cluster: cluster, PageToken: token})
		parts = append(parts, resp.GetPartitions()...)
		return resp.GetNextPageToken(), err
	})
	return parts, err
}

// groupKey renders a one-node row's non-aggregate fields: nodes with the
// same key share a line.
func groupKey(f format, table fieldTable[sinfoRow], r sinfoRow) string {
	var b strings.Builder
	for _, fl := range f.fields {
		if aggregateSpecs[fl.spec] {
			continue
		}
		if d, ok := table.fields[fl.spec]; ok {
			b.WriteString(d.value(r))
		}
		b.WriteByte(0)
	}
	return b.String()
}

func findSpec(f format, specs ...string) (int, bool) {
	for i, fl := range f.fields {
		for _, s := range specs {
			if fl.spec == s {
				return i, true
			}
		}
	}
	return 0, false
}

// sinfoRows builds partition-oriented rows (nodes grouped per partition by
// their printed attributes, partitions in configuration order, states
// descending) or, with nodeMode, one row per node and partition.
func sinfoRows(partitions []*loomv1.Partition, nodes []*loomv1.SlurmNode, parts stringSet,
	keep func(*loomv1.SlurmNode) bool, nodeMode bool, f format, table fieldTable[sinfoRow]) []sinfoRow {
	byHost := map[string]*loomv1.SlurmNode{}
	for _, n := range nodes {
		byHost[n.GetHostname()] = n
	}
	var rows []sinfoRow
	inSome := map[string]bool{}
	for pi, p := range partitions {
		var members []*loomv1.SlurmNode
		if len(p.GetNodes()) > 0 {
			for _, h := range p.GetNodes() {
				if n, ok := byHost[h]; ok {
					members = append(members, n)
				} else {
					members = append(members, &loomv1.SlurmNode{Hostname: h, State: loomv1.SlurmNode_DOWN, Reason: "unknown to the scheduler"})
				}
			}
		} else {
			for _, n := range nodes {
				for _, pn := range n.GetPartitions() {
					if pn == p.GetName() {
						members = append(members, n)
					}
				}
			}
		}
		for _, n := range members {
			inSome[n.GetHostname()] = true
		}
		if !parts.match(p.GetName()) {
			continue
		}
		var kept []*loomv1.SlurmNode
		for _, n := range members {
			if keep(n) {
				kept = append(kept, n)
			}
		}
		if nodeMode {
			for _, n := range kept {
				rows = append(rows, sinfoRow{part: p, partIdx: pi, nodes: []*loomv1.SlurmNode{n}})
			}
			continue
		}
		if len(kept) == 0 {
			// As Slurm's sinfo: a partition none of whose nodes is left
			// (none in it, or -n, -t, -d, -r filtered them all out) is
			// still a row, "0 n/a" with an empty NODELIST.
			rows = append(rows, sinfoRow{part: p, partIdx: pi})
			continue
		}
		rows = append(rows, groupNodes(p, pi, kept, f, table)...)
	}
	if parts == nil {
		// Nodes in no partition.
		var orphans []*loomv1.SlurmNode
		for _, n := range nodes {
			if !inSome[n.GetHostname()] && keep(n) {
				orphans = append(orphans, n)
			}
		}
		if nodeMode {
			for _, n := range orphans {
				rows = append(rows, sinfoRow{partIdx: len(partitions), nodes: []*loomv1.SlurmNode{n}})
			}
		} else if len(orphans) > 0 {
			rows = append(rows, groupNodes(nil, len(partitions), orphans, f, table)...)
		}
	}
	if nodeMode {
		sort.SliceStable(rows, func(a, b int) bool {
			return naturalLess(rows[a].first().GetHostname(), rows[b].first().GetHostname())
		})
	}
	return rows
}

// groupNodes splits one partition's nodes into rows by groupKey, ordered
// by state (Slurm's "-t") and then first appearance.
func groupNodes(p *loomv1.Partition, pi int, nodes []*loomv1.SlurmNode, f format, table fieldTable[sinfoRow]) []sinfoRow {
	var rows []sinfoRow
	index := map[string]int{}
	for _, n := range nodes {
		k := groupKey(f, table, sinfoRow{part: p, nodes: []*loomv1.SlurmNode{n}})
		if i, ok := index[k]; ok {
			rows[i].nodes = append(rows[i].nodes, n)
			continue
		}
		index[k] = len(rows)
		rows = append(rows, sinfoRow{part: p, partIdx: pi, nodes: []*loomv1.SlurmNode{n}})
	}
	if _, ok := findSpec(f, "t", "T"); ok {
		sort.SliceStable(rows, func(a, b int) bool {
			_, _, ra := nodeStateInfo(rows[a].first().GetState())
			_, _, rb := nodeStateInfo(rows[b].first().GetState())
			return ra > rb
		})
	}
	return rows
}

// reasonRows are sinfo -R's rows: unavailable nodes grouped by reason.
func reasonRows(nodes []*loomv1.SlurmNode, keep func(*loomv1.SlurmNode) bool, f format, table fieldTable[sinfoRow]) []sinfoRow {
	var kept []*loomv1.SlurmNode
	for _, n := range nodes {
		if keep(n) {
			kept = append(kept, n)
		}
	}
	return groupNodes(nil, 0, kept, f, table)
}

// naturalLess orders host names with their numbers as numbers
// ("gpu-2" < "gpu-10").
func naturalLess(a, b string) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		if isDigitByte(a[i]) && isDigitByte(b[i]) {
			x, y := leadingNumber(a[i:]), leadingNumber(b[i:])
			if x != y {
				return x < y
			}
		}
		return a[i] < b[i]
	}
	return len(a) < len(b)
}

func isDigitByte(c byte) bool { return c >= '0' && c <= '9' }

func leadingNumber(s string) int64 {
	var n int64
	for i := 0; i < len(s) && isDigitByte(s[i]) && i < 18; i++ {
		n = n*10 + int64(s[i]-'0')
	}
	return n
}

const sinfoUsage = `Usage: sinfo [-adelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]
             [-S fields] [-o format] [-O Format] [--federation] [--local]
             [--noconvert] [--clusters names]
`
