package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/termtext"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Hardware resilience on the command line: the node operations (loom nodes
// inject-fault, report-faulty, drain, resume, quarantine, reboot, reimage,
// replace), health checks and node states (loom health scan, results,
// nodes) and goodput (loom jobs goodput, loom clusters goodput).

func (a *app) healthClient() (loomv1.HealthServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewHealthServiceClient(c), nil
}

func (a *app) goodputClient() (loomv1.GoodputServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewGoodputServiceClient(c), nil
}

// maxHosts is the most hosts one command names, as the gateway's limit
// (MaxHosts) on a request's: past it the command stops before building
// the names ("gpu-[000000-999999]" would otherwise take minutes).
const maxHosts = 4096

// expandHosts expands the NODE arguments (hostnames or hostlists,
// "gpu-[0001-0004]") into hostnames, in order, without duplicates; at most
// maxHosts names written, duplicates counted.
func expandHosts(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	named := 0
	for _, a := range args {
		names, err := hostlist.ExpandMax(a, maxHosts-named)
		if errors.Is(err, hostlist.ErrTooMany) {
			return nil, usagef("more than %d nodes named: act on at most %d at a time", maxHosts, maxHosts)
		}
		if err != nil {
			return nil, usagef("%v", err)
		}
		named += len(names)
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	if len(out) == 0 {
		return nil, usagef("name at least one node (gpu-0001, or a hostlist gpu-[0001-0004])")
	}
	return out, nil
}

// nodesCluster is the cluster the nodes hosts are in: --cluster when given,
// else the one cluster of the project that has them all (asked of the
// gateway), so that `loom nodes drain gpu-0001` needs no flag when the name
// is unambiguous.
//
// With --cluster and several hosts it still checks that the cluster has
// every one before anything is done: the command acts node by node, and a
// typo in the third name must not leave the first two drained and the
// rest not. (One host is left to the gateway, whose answer names the
// cluster when it is the cluster that does not exist.)
func (a *app) nodesCluster(cmd *cobra.Command, flag string, hosts []string) (string, error) {
	parent := a.clusterName("-")
	if flag != "" {
		if len(hosts) <= 1 {
			return a.clusterName(flag), nil
		}
		parent = a.clusterName(flag)
	}
	cl, err := a.nodes()
	if err != nil {
		return "", err
	}
	in := map[string][]string{} // hostname → clusters
	err = paging.Each(func(token string) (string, error) {
		ctx, cancel := a.call(cmd.Context())
		defer cancel()
		page, err := cl.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: parent, PageSize: paging.MaxSize, PageToken: token})
		for _, n := range page.GetNodes() {
			in[n.GetHostname()] = append(in[n.GetHostname()], n.GetCluster())
		}
		return page.GetNextPageToken(), err
	})
	if err != nil {
		return "", a.explain("find the cluster of "+strings.Join(hosts, ","), err)
	}
	cluster := ""
	for _, h := range hosts {
		cs := in[h]
		switch {
		case len(cs) == 0 && flag != "":
			return "", fmt.Errorf("node %s is not in cluster %s (see `loom nodes list --cluster %s`); nothing was done", h, flag, flag)
		case len(cs) == 0:
			return "", fmt.Errorf("node %s is in no cluster of project %s (see `loom nodes list`); name its cluster with --cluster", h, a.project)
		case len(cs) > 1:
			short := make([]string, len(cs))
			for i, c := range cs {
				short[i] = shortName(c)
			}
			return "", fmt.Errorf("node %s is in clusters %s: say which with --cluster", h, strings.Join(short, ", "))
		case cluster != "" && cs[0] != cluster:
			return "", fmt.Errorf("nodes %s are in more than one cluster (%s, %s): act on one cluster at a time with --cluster",
				strings.Join(hosts, ","), shortName(cluster), shortName(cs[0]))
		}
		cluster = cs[0]
	}
	return cluster, nil
}

// nodeHealthCommands are `loom nodes`' operations on node health.
func (a *app) nodeHealthCommands() []*cobra.Command {
	cmds := []*cobra.Command{a.nodesInjectFaultCommand(), a.nodesReportFaultyCommand()}
	for _, op := range []struct {
		verb   string
		action loomv1.RemediationAction
		short  string
	}{
		{"drain", loomv1.RemediationAction_ACTION_DRAIN, "Take nodes out as Slurm's drain does: no new jobs; the running ones go on to their end"},
		{"resume", loomv1.RemediationAction_ACTION_RESUME, "Put drained or quarantined nodes back into service"},
		{"quarantine", loomv1.RemediationAction_ACTION_QUARANTINE, "Take nodes out until an operator resumes them (no automatic repair)"},
		{"reboot", loomv1.RemediationAction_ACTION_REBOOT, "Drain nodes and reboot them"},
		{"reimage", loomv1.RemediationAction_ACTION_REIMAGE, "Drain nodes and reimage them (their disks are wiped)"},
		{"replace", loomv1.RemediationAction_ACTION_REPLACE, "Drain nodes and replace them with new machines"},
	} {
		cmds = append(cmds, a.nodesRemediateCommand(op.verb, op.action, op.short))
	}
	return cmds
}

func (a *app) nodesRemediateCommand(verb string, action loomv1.RemediationAction, short string) *cobra.Command {
	var cluster, reason string
	use := verb + " NODE... [--cluster C] --reason TEXT"
	if action == loomv1.RemediationAction_ACTION_RESUME {
		use = verb + " NODE... [--cluster C] [--reason TEXT]"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

NODE is a hostname or a hostlist (gpu-[0001-0004]). The health service
carries it out; follow it with "loom health nodes CLUSTER". Needs a cluster
administrator. The reason is shown in "loom health nodes" and "sinfo -R"` + map[bool]string{true: " (optional for resume).", false: "."}[verb == "resume"],
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s needs the nodes: e.g. `%s gpu-0001 --reason \"bad GPU\"`", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			hosts, err := expandHosts(args)
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" && action != loomv1.RemediationAction_ACTION_RESUME {
				return usagef("%s needs --reason: say why, e.g. --reason \"Xid 79 on GPU 3\" (it is shown in loom health nodes and sinfo -R)", cmd.CommandPath())
			}
			full, err := a.nodesCluster(cmd, cluster, hosts)
			if err != nil {
				return err
			}
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			resp := &loomv1.ListNodeHealthResponse{}
			for _, h := range hosts {
				ctx, cancel := a.call(cmd.Context())
				nh, err := hs.UpdateNodeRemediation(ctx, &loomv1.UpdateNodeRemediationRequest{Cluster: full, Hostname: h, Action: action, Reason: reason})
				cancel()
				if err != nil {
					return a.notFoundHint(a.explain(verb+" node "+h, err), err, "loom nodes list --cluster "+a.shortIn(full))
				}
				resp.Nodes = append(resp.Nodes, nh)
				if a.output != "json" {
					// The health service applies it asynchronously: the state
					// answered is the one the request found, not its outcome.
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s requested (it was %s).\n", h, verb, remediationState(nh.GetState()))
				}
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Follow it with `loom health nodes %s`.\n", a.shortIn(full))
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the nodes' cluster (default: the one cluster that has them)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (shown in loom health nodes and sinfo -R)")
	return cmd
}

func (a *app) nodesReportFaultyCommand() *cobra.Command {
	var cluster, reason string
	cmd := &cobra.Command{
		Use:   "report-faulty NODE... [--cluster C] --reason TEXT",
		Short: "Report nodes as faulty: they are drained and repaired as if a check had failed",
		Long: `Report nodes as faulty by hand (Vertex's reportFaultyNodes): the health
service drains them, requeues their jobs and repairs them as it would after a
failed check. NODE is a hostname or a hostlist (gpu-[0001-0004]). Needs a
cluster administrator.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s needs the nodes: e.g. `%s gpu-0001 --reason \"NCCL hangs\"`", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			hosts, err := expandHosts(args)
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return usagef("%s needs --reason: say why, e.g. --reason \"NCCL hangs on this node\"", cmd.CommandPath())
			}
			full, err := a.nodesCluster(cmd, cluster, hosts)
			if err != nil {
				return err
			}
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := hs.ReportFaultyNodes(ctx, &loomv1.ReportFaultyNodesRequest{Cluster: full, Hostnames: hosts, Reason: reason})
			if err != nil {
				return a.notFoundHint(a.explain("report faulty nodes", err), err, "loom nodes list --cluster "+a.shortIn(full))
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Reported %s faulty (%s). Follow the repair with `loom health nodes %s`.\n",
				hostlist.Compress(resp.GetHostnames()), reason, a.shortIn(full))
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the nodes' cluster (default: the one cluster that has them)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (shown in loom health nodes and sinfo -R)")
	return cmd
}

// faultKinds are inject-fault's --kind values.
var faultKinds = []struct {
	name string
	kind loomv1.FaultKind
	help string
}{
	{"xid", loomv1.FaultKind_FAULT_XID, "an Xid event (--xid N; --xid alone implies it)"},
	{"ecc-sbe", loomv1.FaultKind_FAULT_ECC_SBE, "single-bit ECC errors at a rising rate (--rate per minute)"},
	{"dbe", loomv1.FaultKind_FAULT_ECC_DBE, "a double-bit ECC error (--count, default 1)"},
	{"remap-failure", loomv1.FaultKind_FAULT_ROW_REMAP_FAILURE, "a row-remapping failure"},
	{"thermal", loomv1.FaultKind_FAULT_THERMAL, "thermal runaway: temperature climbs (--rate °C/s, default 0.25), clocks throttle"},
	{"slow", loomv1.FaultKind_FAULT_SLOW_GPU, "a slow GPU (--factor, default 2)"},
	{"off-bus", loomv1.FaultKind_FAULT_FALLEN_OFF_BUS, "the GPU falls off the bus (Xid 79)"},
	{"nvlink", loomv1.FaultKind_FAULT_NVLINK, "NVLink CRC errors (--rate per minute)"},
	{"disk-full", loomv1.FaultKind_FAULT_DISK_FULL, "the node's disk fills up (node-wide)"},
	{"hung-job", loomv1.FaultKind_FAULT_HUNG_JOB, "the node's job processes stop making progress (node-wide)"},
	{"no-heartbeat", loomv1.FaultKind_FAULT_NO_HEARTBEAT, "the agent stops heartbeating (--seconds, 0: until cleared; node-wide)"},
	{"clear", loomv1.FaultKind_FAULT_CLEAR, "clear the injected faults (of --gpu, or all)"},
}

// faultKindNames lists --kind's values.
func faultKindNames() string {
	names := make([]string, len(faultKinds))
	for i, k := range faultKinds {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

func (a *app) nodesInjectFaultCommand() *cobra.Command {
	var cluster, kind string
	var gpu, xid, count int32
	var rate, factor, seconds float64
	var help strings.Builder
	for _, k := range faultKinds {
		fmt.Fprintf(&help, "  %-14s %s\n", k.name, k.help)
	}
	cmd := &cobra.Command{
		Use:   "inject-fault NODE [--cluster C] [--gpu N] (--xid N | --kind KIND [--rate R | --factor F | --seconds S | --count N])",
		Short: "Inject a fault into a node's simulated GPUs, disk or agent",
		Long: `Inject a fault into a node whose GPUs are simulated (an agent with no GPU
driver, or -gpu-mode simulated), to see Loom detect and repair it. Nodes with
real GPUs are refused. Needs a cluster administrator.

  loom nodes inject-fault gpu-0001 --gpu 3 --xid 79
  loom nodes inject-fault gpu-0001 --kind ecc-sbe --rate 50
  loom nodes inject-fault gpu-0001 --gpu 0 --kind thermal --rate 2
  loom nodes inject-fault gpu-0001 --kind no-heartbeat --seconds 30
  loom nodes inject-fault gpu-0001 --kind clear

--gpu is the GPU's index; without it the fault is on every GPU (node-wide
kinds take no --gpu). Kinds:
` + help.String(),
		Args: exactArgs(1, "the node, e.g. `loom nodes inject-fault gpu-0001 --gpu 3 --xid 79`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			fault, err := faultFromFlags(cmd, kind, gpu, xid, count, rate, factor, seconds)
			if err != nil {
				return err
			}
			host := args[0]
			full, err := a.nodesCluster(cmd, cluster, []string{host})
			if err != nil {
				return err
			}
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := hs.InjectFault(ctx, &loomv1.InjectFaultRequest{Cluster: full, Hostname: host, Fault: fault})
			if err != nil {
				return a.notFoundHint(a.explain("inject a fault into "+host, err), err, "loom nodes list --cluster "+a.shortIn(full))
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Injected %s into %s of %s. Watch Loom react with `loom health nodes %s`.\n",
				describeFault(resp.GetFault()), gpuWhere(resp.GetFault()), host, a.shortIn(full))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cluster, "cluster", "", "the node's cluster (default: the one cluster that has it)")
	f.StringVar(&kind, "kind", "", "what to inject: "+faultKindNames())
	f.Int32Var(&gpu, "gpu", -1, "the GPU's index (default: every GPU)")
	f.Int32Var(&xid, "xid", 0, "the Xid code, 1 to 999 (kind xid)")
	f.Float64Var(&rate, "rate", 0, "errors per minute (kinds ecc-sbe, nvlink); °C per second (kind thermal)")
	f.Float64Var(&factor, "factor", 0, "how many times slower (kind slow; default 2)")
	f.Float64Var(&seconds, "seconds", 0, "how long the agent stays silent (kind no-heartbeat; 0: until cleared)")
	f.Int32Var(&count, "count", 0, "how many double-bit errors (kind dbe; default 1)")
	return cmd
}

// faultFromFlags builds the Fault inject-fault's flags describe: a kind
// (--xid alone means kind xid) and the one value flag that kind takes.
func faultFromFlags(cmd *cobra.Command, kind string, gpu, xid, count int32, rate, factor, seconds float64) (*loomv1.Fault, error) {
	if kind == "" && cmd.Flags().Changed("xid") {
		kind = "xid"
	}
	if kind == "" {
		return nil, usagef("say what to inject: --xid N, or --kind KIND (%s)", faultKindNames())
	}
	i := slices.IndexFunc(faultKinds, func(k struct {
		name string
		kind loomv1.FaultKind
		help string
	}) bool {
		return k.name == kind || (kind == "ecc-dbe" && k.name == "dbe")
	})
	if i < 0 {
		return nil, usagef("--kind %q is not a fault kind: %s", kind, faultKindNames())
	}
	f := &loomv1.Fault{Kind: faultKinds[i].kind, Gpu: gpu}
	// Each value flag belongs to its kinds; another kind's is a mistake.
	takes := map[string][]loomv1.FaultKind{
		"xid":     {loomv1.FaultKind_FAULT_XID},
		"rate":    {loomv1.FaultKind_FAULT_ECC_SBE, loomv1.FaultKind_FAULT_NVLINK, loomv1.FaultKind_FAULT_THERMAL},
		"factor":  {loomv1.FaultKind_FAULT_SLOW_GPU},
		"seconds": {loomv1.FaultKind_FAULT_NO_HEARTBEAT},
		"count":   {loomv1.FaultKind_FAULT_ECC_DBE},
	}
	for flag, kinds := range takes {
		if cmd.Flags().Changed(flag) && !slices.Contains(kinds, f.Kind) {
			return nil, usagef("--%s does not apply to --kind %s", flag, faultKinds[i].name)
		}
	}
	switch f.Kind {
	case loomv1.FaultKind_FAULT_XID:
		if xid < 1 || xid > 999 {
			return nil, usagef("--xid must be an Xid code from 1 to 999 (e.g. 79: fallen off the bus; 48: double-bit ECC), got %d", xid)
		}
		f.Xid = xid
	case loomv1.FaultKind_FAULT_ECC_SBE:
		if !cmd.Flags().Changed("rate") {
			return nil, usagef("--kind ecc-sbe needs --rate: single-bit errors per minute, e.g. --rate 50")
		}
		f.Value = rate
	case loomv1.FaultKind_FAULT_NVLINK, loomv1.FaultKind_FAULT_THERMAL:
		f.Value = rate
	case loomv1.FaultKind_FAULT_SLOW_GPU:
		f.Value = factor
	case loomv1.FaultKind_FAULT_NO_HEARTBEAT:
		f.Value = seconds
	case loomv1.FaultKind_FAULT_ECC_DBE:
		f.Value = float64(count)
	}
	// The gateway checks every bound; the mistakes a flag makes easy are
	// said here in the flags' words.
	for flag, kinds := range takes {
		if !slices.Contains(kinds, f.Kind) || !cmd.Flags().Changed(flag) {
			continue
		}
		v, _ := strconv.ParseFloat(cmd.Flags().Lookup(flag).Value.String(), 64)
		switch {
		case v <= 0 && f.Kind == loomv1.FaultKind_FAULT_ECC_SBE:
			return nil, usagef("--%s must be above 0 for --kind %s, got %v", flag, faultKinds[i].name, v)
		case v < 0:
			return nil, usagef("--%s must not be negative (0: the default) for --kind %s, got %v", flag, faultKinds[i].name, v)
		}
	}
	if gpu != -1 && slices.Contains([]loomv1.FaultKind{loomv1.FaultKind_FAULT_DISK_FULL, loomv1.FaultKind_FAULT_HUNG_JOB, loomv1.FaultKind_FAULT_NO_HEARTBEAT}, f.Kind) {
		return nil, usagef("--kind %s is about the whole node: drop --gpu", faultKinds[i].name)
	}
	if gpu < -1 {
		return nil, usagef("--gpu must be a GPU index (0, 1, ...), got %d", gpu)
	}
	return f, nil
}

// describeFault says what a fault is, for people: "Xid 79", "single-bit
// ECC errors at 50/min".
func describeFault(f *loomv1.Fault) string {
	v := strconv.FormatFloat(f.GetValue(), 'g', -1, 64)
	switch f.GetKind() {
	case loomv1.FaultKind_FAULT_XID:
		return fmt.Sprintf("Xid %d", f.GetXid())
	case loomv1.FaultKind_FAULT_ECC_SBE:
		return "single-bit ECC errors at " + v + "/min"
	case loomv1.FaultKind_FAULT_ECC_DBE:
		return "a double-bit ECC error"
	case loomv1.FaultKind_FAULT_ROW_REMAP_FAILURE:
		return "a row-remapping failure"
	case loomv1.FaultKind_FAULT_THERMAL:
		if f.GetValue() == 0 {
			v = "0.25"
		}
		return "thermal runaway (+" + v + " °C/s)"
	case loomv1.FaultKind_FAULT_SLOW_GPU:
		if f.GetValue() == 0 {
			v = "2"
		}
		return "a slowdown by " + v + "x"
	case loomv1.FaultKind_FAULT_FALLEN_OFF_BUS:
		return "a fall off the bus"
	case loomv1.FaultKind_FAULT_NVLINK:
		return "NVLink errors"
	case loomv1.FaultKind_FAULT_DISK_FULL:
		return "a full disk"
	case loomv1.FaultKind_FAULT_HUNG_JOB:
		return "a hung job"
	case loomv1.FaultKind_FAULT_NO_HEARTBEAT:
		if f.GetValue() == 0 {
			return "silence (no heartbeats until cleared)"
		}
		return "silence (no heartbeats for " + v + "s)"
	case loomv1.FaultKind_FAULT_CLEAR:
		return "a clear of the injected faults"
	}
	return f.GetKind().String()
}

// gpuWhere says which GPUs a fault is on.
func gpuWhere(f *loomv1.Fault) string {
	switch f.GetKind() {
	case loomv1.FaultKind_FAULT_DISK_FULL, loomv1.FaultKind_FAULT_HUNG_JOB, loomv1.FaultKind_FAULT_NO_HEARTBEAT:
		return "the node"
	}
	if f.GetGpu() < 0 {
		return "every GPU"
	}
	return fmt.Sprintf("GPU %d", f.GetGpu())
}

// ---- loom health ----

func (a *app) healthCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Run health checks and see each node's health and repairs",
		Long: `Hardware health: checks run on demand (scan), the scans health still keeps
(scans), their stored results (results), each node's state in health's
remediation (nodes), what health decided about them over time (events), and
the policy health applies (policy). See docs/health.md.

  loom health scan demo --checks gpu_diag,disk --level 2 --wait
  loom health scans demo
  loom health results demo --node gpu-0001
  loom health nodes demo
  loom health events demo gpu-0001
  loom health policy demo`,
	}
	cmd.AddCommand(a.healthScanCommand(), a.healthScansCommand(), a.healthResultsCommand(), a.healthNodesCommand(), a.healthEventsCommand(), a.healthPolicyCommand())
	return cmd
}

func (a *app) healthScanCommand() *cobra.Command {
	var nodes, checks string
	var params []string
	var level int32
	var allowBusy, wait bool
	var timeout, waitTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "scan CLUSTER [--nodes HOSTLIST] [--checks a,b] [--level N] [--param KEY=VALUE]... [--allow-busy] [--wait]",
		Short: "Run health checks on a cluster's nodes now",
		Long: `Run health checks now on a cluster's nodes (all, or --nodes gpu-[0001-0004]).
Checks: gpu_diag (--level 1 to 3), allreduce, allreduce_pair, disk, speed, or
a site check's name; default gpu_diag level 1 and disk. Nodes busy with jobs
are skipped (their result says CHECK_SKIPPED) unless --allow-busy. With
--wait, shows the results as they come, then a table. Needs a cluster
administrator.

--param KEY=VALUE (repeatable) goes to every check of the scan; each reads
the keys it knows (a site check gets LOOM_CHECK_PARAM_<KEY>). Built-in:
gpu_diag stress (level 3, e.g. 10s), memory_mib, dcgmi=off; disk paths,
min_free_gb, max_used_percent, warn_used_percent; speed products,
min_throughput; allreduce sizes (e.g. 1M,8M), iters, min_busbw_gbps.

  loom health scan demo --checks gpu_diag --level 3 --param stress=30s --timeout 5m
  loom health scan demo --checks disk --param paths=/,/scratch --param min_free_gb=50`,
		Args: exactArgs(1, "the cluster, e.g. `loom health scan demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &loomv1.ScanNodesRequest{Cluster: a.clusterName(args[0]), Level: level, AllowBusy: allowBusy}
			if nodes != "" {
				req.Hostnames = []string{nodes}
			}
			for _, c := range strings.Split(checks, ",") {
				// Each check once, as health runs it: --wait counts a result
				// per node and check.
				if c = strings.TrimSpace(c); c != "" && !slices.Contains(req.Checks, c) {
					req.Checks = append(req.Checks, c)
				}
			}
			if level < 0 || level > 3 {
				return usagef("--level must be 1, 2 or 3 (gpu_diag's depth), got %d", level)
			}
			for _, kv := range params {
				k, v, ok := strings.Cut(kv, "=")
				if k = strings.TrimSpace(k); !ok || k == "" {
					return usagef("--param wants KEY=VALUE, e.g. --param stress=10s, got %q", kv)
				}
				if _, dup := req.Params[k]; dup {
					return usagef("--param %s given twice", k)
				}
				if req.Params == nil {
					req.Params = map[string]string{}
				}
				req.Params[k] = v
			}
			if timeout > 0 {
				req.Timeout = durationpb.New(timeout)
			}
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			resp, err := hs.ScanNodes(ctx, req)
			cancel()
			if err != nil {
				return a.notFoundHint(a.explain("scan "+args[0], err), err, "loom clusters list")
			}
			out := a.progressOut(cmd)
			wanted := req.GetChecks()
			if len(wanted) == 0 {
				wanted = []string{"gpu_diag", "disk"}
			}
			fmt.Fprintf(out, "Scan %s: %s on %d %s (%s).\n", resp.GetScanId(), strings.Join(wanted, ","), len(resp.GetHostnames()),
				plural(len(resp.GetHostnames()), "node", "nodes"), hostlist.Compress(resp.GetHostnames()))
			if !wait {
				if a.output == "json" {
					return writeJSON(cmd.OutOrStdout(), resp)
				}
				fmt.Fprintf(out, "See its results with `loom health results %s --scan %s`.\n", a.shortIn(req.GetCluster()), resp.GetScanId())
				return nil
			}
			results, err := a.waitScan(cmd, hs, req.GetCluster(), resp, len(wanted), waitTimeout)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), &loomv1.ListHealthResultsResponse{Results: results})
			}
			if err := renderHealthResults(cmd.OutOrStdout(), results, a.now(), false); err != nil {
				return err
			}
			return scanVerdict(a.shortIn(req.GetCluster()), results)
		},
	}
	f := cmd.Flags()
	f.StringVar(&nodes, "nodes", "", "only these nodes: a hostlist, e.g. gpu-[0001-0004] (default: every node)")
	f.StringVar(&checks, "checks", "", "checks to run, comma-separated (default: gpu_diag,disk)")
	f.Int32Var(&level, "level", 0, "gpu_diag's level: 1 (quick) to 3 (long) (default 1)")
	f.StringArrayVar(&params, "param", nil, "KEY=VALUE passed to every check of the scan (repeatable), e.g. stress=10s, min_free_gb=50")
	f.BoolVar(&allowBusy, "allow-busy", false, "check nodes that are running jobs too")
	f.DurationVar(&timeout, "timeout", 0, "kill a check that runs longer (default: the health service's)")
	f.BoolVar(&wait, "wait", false, "wait for the results and show them")
	f.DurationVar(&waitTimeout, "wait-timeout", 10*time.Minute, "with --wait, how long to wait for every result")
	return cmd
}

// waitScan polls the scan's results until every node has one per check
// (perNode), showing progress, or until limit passes (an error saying how
// many came and how to see the rest).
func (a *app) waitScan(cmd *cobra.Command, hs loomv1.HealthServiceClient, cluster string, scan *loomv1.ScanNodesResponse, perNode int, limit time.Duration) ([]*loomv1.HealthCheckResult, error) {
	want := len(scan.GetHostnames()) * perNode
	view := &progressView{w: a.progressOut(cmd), tty: a.tty(a.progressOut(cmd)), indent: "  "}
	defer view.finish()
	deadline := time.Now().Add(limit)
	for {
		// Health's own account of the scan first (then its results, so
		// that a scan done has them all): done is exact, the bisection of
		// a failed ring included. Until health has taken the scan up
		// (NotFound), or from a gateway without GetHealthScan, the results
		// are counted against a check per node instead.
		ctx, cancel := a.call(cmd.Context())
		sc, serr := hs.GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: cluster, ScanId: scan.GetScanId()})
		cancel()
		results, err := collect(a, cmd, 0, func(ctx context.Context, token string, size int32) ([]*loomv1.HealthCheckResult, string, error) {
			page, err := hs.ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: cluster, ScanId: scan.GetScanId(), PageToken: token, PageSize: size})
			return page.GetResults(), page.GetNextPageToken(), err
		})
		if err != nil {
			return nil, a.explain("read the results of scan "+scan.GetScanId(), err)
		}
		msg, finished := countedProgress(results, want)
		if serr == nil {
			msg, finished = answered(sc), sc.GetDone()
			if n := sc.GetFailed(); n > 0 {
				msg += fmt.Sprintf(" (%d failed)", n)
			}
		}
		view.show(&loomv1.Operation{Metadata: &loomv1.OperationMetadata{Progress: msg}})
		if finished {
			sortResults(results)
			return results, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("scan %s: %s after %s; see the rest later with `loom health results %s --scan %s`",
				scan.GetScanId(), msg, limit, a.shortIn(cluster), scan.GetScanId())
		}
		select {
		case <-cmd.Context().Done():
			return nil, cmd.Context().Err()
		case <-time.After(a.pollInterval):
		}
	}
}

// scanVerdict is nil when no check failed, else an error counting the
// failures and saying where health's reaction shows.
func scanVerdict(cluster string, results []*loomv1.HealthCheckResult) error {
	failed := 0
	for _, r := range results {
		if r.GetOutcome() == loomv1.CheckOutcome_CHECK_FAIL {
			failed++
		}
	}
	if failed == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d checks failed; `loom health nodes %s` shows what health does about them", failed, len(results), cluster)
}

// sortResults orders results by node, then check.
func sortResults(rs []*loomv1.HealthCheckResult) {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].GetHostname() != rs[j].GetHostname() {
			return rs[i].GetHostname() < rs[j].GetHostname()
		}
		return rs[i].GetCheck() < rs[j].GetCheck()
	})
}

func (a *app) healthResultsCommand() *cobra.Command {
	var node, check, scan string
	var limit int
	cmd := &cobra.Command{
		Use:   "results CLUSTER [--node N] [--check C] [--scan ID] [--limit N]",
		Short: "List stored health check results, newest first",
		Long: `List stored health check results, newest first: NODE, CHECK (with its
level), OUTCOME (PASS, WARN, FAIL, SKIPPED, ERROR: the check itself could
not run), SUMMARY, TRIGGER (scan, schedule, prolog, epilog, confirm, hang),
AGE, and VALID (how long the result stands: each check has its window).`,
		Args: exactArgs(1, "the cluster, e.g. `loom health results demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			cluster := a.clusterName(args[0])
			results, err := collect(a, cmd, limit, func(ctx context.Context, token string, size int32) ([]*loomv1.HealthCheckResult, string, error) {
				page, err := hs.ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: cluster, Hostname: node, Check: check, ScanId: scan,
					PageToken: token, PageSize: size})
				return page.GetResults(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.notFoundHint(a.explain("list health results of "+args[0], err), err, "loom clusters list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), &loomv1.ListHealthResultsResponse{Results: results})
			}
			if scan != "" {
				// How far the scan got, while health still keeps it (an
				// hour): without it the table cannot say whether more
				// results are coming.
				ctx, cancel := a.call(cmd.Context())
				sc, err := hs.GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: cluster, ScanId: scan})
				cancel()
				if err == nil {
					fmt.Fprintln(cmd.OutOrStdout(), scanLine(sc, a.now()))
				}
			}
			if len(results) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No health results. Run checks with `loom health scan %s`.\n", args[0])
				return nil
			}
			return renderHealthResults(cmd.OutOrStdout(), results, a.now(), true)
		},
	}
	f := cmd.Flags()
	f.StringVar(&node, "node", "", "only this node's results")
	f.StringVar(&check, "check", "", "only this check's results (gpu_diag, allreduce, disk, speed, ...)")
	f.StringVar(&scan, "scan", "", "only this scan's results (the id loom health scan printed)")
	f.IntVar(&limit, "limit", 100, "show at most this many (0: all)")
	return cmd
}

func (a *app) healthScansCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "scans CLUSTER [--limit N]",
		Short: "List the cluster's health scans, newest first, with how far each got",
		Long: `List the health scans health still keeps (an hour after each one's start),
newest first: SCAN (the id to give "loom health results --scan"), TRIGGER
(scan: a person; schedule), LEVEL (gpu_diag's), AGE (since it started), STATE (running or
done), ANSWERED (checks answered of those sent), the answers by outcome, and
the NODES checked. A scan's results stay after it is gone from this list:
"loom health results CLUSTER".`,
		Args: exactArgs(1, "the cluster, e.g. `loom health scans demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			cluster := a.clusterName(args[0])
			scans, err := collect(a, cmd, limit, func(ctx context.Context, token string, size int32) ([]*loomv1.HealthScan, string, error) {
				page, err := hs.ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: cluster, PageToken: token, PageSize: size})
				return page.GetScans(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.notFoundHint(a.explain("list health scans of "+args[0], err), err, "loom clusters list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), &loomv1.ListHealthScansResponse{Scans: scans})
			}
			if len(scans) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No health scans in the last hour. Start one with `loom health scan %s`; earlier results: `loom health results %s`.\n", args[0], args[0])
				return nil
			}
			return renderHealthScans(cmd.OutOrStdout(), scans, a.now())
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many (0: all)")
	return cmd
}

func renderHealthScans(w io.Writer, scans []*loomv1.HealthScan, now time.Time) error {
	tw := newTable(w)
	row(tw, "SCAN", "TRIGGER", "LEVEL", "AGE", "STATE", "ANSWERED", "PASS", "WARN", "FAIL", "SKIPPED", "ERROR", "NODES")
	for _, sc := range scans {
		level, state := "-", "running"
		if sc.GetLevel() > 0 {
			level = strconv.Itoa(int(sc.GetLevel()))
		}
		if sc.GetDone() {
			state = "done"
		}
		row(tw, cellText(sc.GetScanId(), 64), sc.GetTrigger(), level, age(sc.GetStartTime(), now), state,
			fmt.Sprintf("%d/%d", sc.GetAnswered(), sc.GetChecks()), count(sc.GetPassed()), count(sc.GetWarned()),
			count(sc.GetFailed()), count(sc.GetSkipped()), count(sc.GetErrored()), cellText(hostlist.Compress(sc.GetHostnames()), 60))
	}
	return tw.Flush()
}

// count is a table's count: "-" for none, so that the ones stand out.
func count(n int32) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(int(n))
}

// countedProgress is a scan's progress without health's account of it:
// its results counted against want, a check per node, in answered's words
// (the first lines of a scan, before health takes it up, come from here).
func countedProgress(results []*loomv1.HealthCheckResult, want int) (msg string, finished bool) {
	done := map[string]bool{}
	failed := 0
	for _, r := range results {
		done[r.GetHostname()+"\x00"+r.GetCheck()] = true
		if r.GetOutcome() == loomv1.CheckOutcome_CHECK_FAIL {
			failed++
		}
	}
	msg = fmt.Sprintf("%d of %d %s answered", min(len(done), want), want, plural(want, "check", "checks"))
	if failed > 0 {
		msg += fmt.Sprintf(" (%d failed)", failed)
	}
	return msg, len(done) >= want && want > 0 || want == 0
}

// answered is "3 of 4 checks answered".
func answered(sc *loomv1.HealthScan) string {
	return fmt.Sprintf("%d of %d %s answered", sc.GetAnswered(), sc.GetChecks(), plural(int(sc.GetChecks()), "check", "checks"))
}

// scanLine says how far a scan got: "Scan s1 (scan, level 1, 2m ago) is
// running: 3 of 4 checks answered (2 PASS, 1 FAIL)."
func scanLine(sc *loomv1.HealthScan, now time.Time) string {
	what := sc.GetTrigger()
	if sc.GetLevel() > 0 {
		what += fmt.Sprintf(", level %d", sc.GetLevel())
	}
	state := "is running"
	if sc.GetDone() {
		state = "is done"
	}
	var parts []string
	for _, c := range []struct {
		n    int32
		name string
	}{{sc.GetPassed(), "PASS"}, {sc.GetWarned(), "WARN"}, {sc.GetFailed(), "FAIL"}, {sc.GetSkipped(), "SKIPPED"}, {sc.GetErrored(), "ERROR"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.name))
		}
	}
	line := fmt.Sprintf("Scan %s (%s, %s ago) %s: %s", sc.GetScanId(), what, age(sc.GetStartTime(), now), state, answered(sc))
	if len(parts) > 0 {
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	return line + "."
}

// outcome is a check outcome's short name: PASS, WARN, FAIL, SKIPPED, ERROR.
func outcome(o loomv1.CheckOutcome) string {
	if o == loomv1.CheckOutcome_CHECK_OUTCOME_UNSPECIFIED {
		return "-"
	}
	return strings.TrimPrefix(o.String(), "CHECK_")
}

// checkColumn is a check's name with gpu_diag's level, "gpu_diag/2".
func checkColumn(r *loomv1.HealthCheckResult) string {
	if r.GetLevel() > 0 {
		return fmt.Sprintf("%s/%d", r.GetCheck(), r.GetLevel())
	}
	return r.GetCheck()
}

// validFor is how much longer a result stands: "23h", "expired"; "-" for
// one that never stood (skipped, errored: no verdict on the node).
func validFor(r *loomv1.HealthCheckResult, now time.Time) string {
	switch r.GetOutcome() {
	case loomv1.CheckOutcome_CHECK_PASS, loomv1.CheckOutcome_CHECK_WARN, loomv1.CheckOutcome_CHECK_FAIL:
	default:
		return "-"
	}
	if r.GetValidUntil() == nil {
		return "-"
	}
	d := r.GetValidUntil().AsTime().Sub(now)
	if d <= 0 {
		return "expired"
	}
	return humanDuration(d)
}

// cellText is free text as a table cell: its first line (a summary's
// detail follows on the next ones; -o json has it all), control characters
// as spaces (no value can break or spoof a row), at most n terminal columns
// (termtext.Width) with "…"
// marking a cut. Every free-text column goes through it.
func cellText(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = shown(s)
	if termtext.Width(s) <= n {
		return s
	}
	// n columns on a terminal, the cut's "…" included: a wide character
	// (CJK) takes two.
	var b strings.Builder
	w := 0
	for _, r := range s {
		rw := termtext.Width(string(r))
		if w+rw > n-1 {
			break
		}
		b.WriteRune(r)
		w += rw
	}
	return b.String() + "…"
}

func renderHealthResults(w io.Writer, rs []*loomv1.HealthCheckResult, now time.Time, full bool) error {
	tw := newTable(w)
	if full {
		row(tw, "NODE", "CHECK", "OUTCOME", "SUMMARY", "TRIGGER", "SCAN", "AGE", "VALID")
	} else {
		row(tw, "NODE", "CHECK", "OUTCOME", "SUMMARY", "TOOK")
	}
	for _, r := range rs {
		if full {
			row(tw, r.GetHostname(), checkColumn(r), outcome(r.GetOutcome()), cellText(r.GetSummary(), 60), r.GetTrigger(),
				r.GetScanId(), age(r.GetEndTime(), now), validFor(r, now))
			continue
		}
		took := "-"
		if r.GetStartTime() != nil && r.GetEndTime() != nil {
			took = elapsed(r.GetEndTime().AsTime().Sub(r.GetStartTime().AsTime()))
		}
		row(tw, r.GetHostname(), checkColumn(r), outcome(r.GetOutcome()), cellText(r.GetSummary(), 60), took)
	}
	return tw.Flush()
}

func (a *app) healthNodesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "nodes CLUSTER [NODE...]",
		Short: "Show each node's health: state, reason, who set it, what happens next",
		Long: `Show each node's health as the health service sees it: STATE (HEALTHY,
SUSPECT, DRAINING, REBOOTING, REIMAGING, REPLACING, QUARANTINED, UNREACHABLE, DOWN),
REASON, SET BY (loom-health or the operator), SINCE, NEXT (the action health
takes next), GPUS (count, and how many fell off the bus), TEMP (the hottest
GPU), ECC (volatile single-/double-bit errors over all GPUs), XID (each GPU's
last Xid) and HEARTBEAT. NODE (hostnames or hostlists, gpu-[0001-0004]) keeps
only those; for one node, each GPU's readings follow: temperature, power,
utilisation, memory, SM clock, ECC, remapped rows, retired pages, NVLink and
PCIe errors, its last Xid and whether it fell off the bus.
Override with loom nodes drain|resume|quarantine|reboot|reimage|replace.`,
		Args: clusterArg("give the cluster, e.g. `loom health nodes demo` (and nodes to show only those)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			cluster := a.clusterName(args[0])
			nodes, err := collect(a, cmd, 0, func(ctx context.Context, token string, size int32) ([]*loomv1.NodeHealth, string, error) {
				page, err := hs.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cluster, Hostnames: args[1:],
					PageToken: token, PageSize: size})
				return page.GetNodes(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.notFoundHint(a.explain("list node health of "+args[0], err), err, "loom clusters list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), &loomv1.ListNodeHealthResponse{Nodes: nodes})
			}
			if len(nodes) == 0 {
				if len(args) > 1 {
					fmt.Fprintf(cmd.OutOrStdout(), "No node of %s in %s has reported to health; `loom health nodes %s` lists those that have.\n",
						strings.Join(args[1:], " "), args[0], args[0])
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "No nodes reported to health in %s yet.\n", args[0])
				return nil
			}
			if err := renderNodeHealth(cmd.OutOrStdout(), nodes, a.now()); err != nil {
				return err
			}
			if len(nodes) == 1 && len(args) > 1 {
				return renderGPUs(cmd.OutOrStdout(), nodes[0])
			}
			return nil
		},
	}
}

// clusterArg takes a cluster and then any nodes: without one, the usage
// error says what to give (hint).
func clusterArg(hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usagef("%s", hint)
		}
		return nil
	}
}

func (a *app) healthEventsCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "events CLUSTER [NODE...] [--limit N]",
		Short: "Show what health decided about nodes over time, newest first",
		Long: `Show what health decided about a cluster's nodes, newest first: each verdict
that took a node out, each step of its repair, each return to service: TIME,
NODE, STATE, REASON, SET BY (loom-health or the operator) and ACTION (the
repair under way or to come). A repair takes seconds on local nodes; this is
where it stays visible, with the nodes since replaced. NODE (hostnames or
hostlists) keeps only those. Health keeps the last 1000 events per cluster.`,
		Args: clusterArg("give the cluster, e.g. `loom health events demo` (and nodes to show only theirs)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			cluster := a.clusterName(args[0])
			events, err := collect(a, cmd, limit, func(ctx context.Context, token string, size int32) ([]*loomv1.NodeHealthEvent, string, error) {
				page, err := hs.ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: cluster, Hostnames: args[1:],
					PageToken: token, PageSize: size})
				return page.GetEvents(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.notFoundHint(a.explain("list node health events of "+args[0], err), err, "loom clusters list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), &loomv1.ListNodeHealthEventsResponse{Events: events})
			}
			if len(events) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No health events in %s: no node has been taken out or repaired.\n", args[0])
				return nil
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "TIME", "NODE", "STATE", "REASON", "SET BY", "ACTION")
			for _, e := range events {
				when := "-"
				if e.GetTime() != nil {
					when = e.GetTime().AsTime().UTC().Format(time.RFC3339)
				}
				row(tw, when, e.GetHostname(), remediationState(e.GetState()), cellText(e.GetReason(), 120), e.GetSetBy(),
					remediationAction(e.GetAction()))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many (0: all)")
	return cmd
}

func (a *app) healthPolicyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "policy CLUSTER",
		Short: "Show the policy health applies to a cluster's nodes",
		Long: `Show the policy health applies to a cluster's nodes, as the health service
runs it (its flags, defaults filled in): whether it repairs (on, dry-run, off),
how many nodes it repairs at once and how many it is repairing now, the lemon
rule, the heartbeat rules, the telemetry thresholds, its timeouts, the
scheduled scans and each check's validity and timeout. Change it with the
health service's flags (docs/health.md); override single nodes with
loom nodes drain|resume|quarantine|reboot|reimage|replace.`,
		Args: exactArgs(1, "the cluster, e.g. `loom health policy demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			hs, err := a.healthClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			p, err := hs.GetHealthPolicy(ctx, &loomv1.GetHealthPolicyRequest{Cluster: a.clusterName(args[0])})
			if err != nil {
				return a.notFoundHint(a.explain("health policy of "+args[0], err), err, "loom clusters list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			return renderHealthPolicy(cmd.OutOrStdout(), p)
		},
	}
}

// renderHealthPolicy writes a policy as an aligned list, then its checks as
// a table.
func renderHealthPolicy(w io.Writer, p *loomv1.HealthPolicy) error {
	d := func(x *durationpb.Duration) string { return wholeDuration(x.AsDuration()) }
	tw := newTable(w)
	fmt.Fprintf(tw, "Cluster:\t%s\n", p.GetCluster())
	fmt.Fprintf(tw, "Remediation:\t%s\n", p.GetRemediation())
	fmt.Fprintf(tw, "In repair:\t%d of at most %d (%g of %d nodes, at least 1)\n", p.GetRemediatingNodes(), p.GetMaxRemediatingNodes(),
		p.GetMaxRemediating(), p.GetNodes())
	fmt.Fprintf(tw, "Quarantine (lemon):\t%d failures within %s\n", p.GetLemonFailures(), d(p.GetLemonWindow()))
	fmt.Fprintf(tw, "Heartbeat timeout:\t%s\n", d(p.GetHeartbeatTimeout()))
	if ms := p.GetMassSilence(); ms > 1 {
		fmt.Fprintf(tw, "Mass silence:\toff\n")
	} else {
		fmt.Fprintf(tw, "Mass silence:\t%g of the nodes silent together are unreachable, not failed\n", ms)
	}
	th := p.GetThresholds()
	fmt.Fprintf(tw, "Single-bit ECC:\t%g a minute\n", th.GetSbePerMinute())
	fmt.Fprintf(tw, "NVLink errors:\t%g a minute\n", th.GetNvlinkPerMinute())
	fmt.Fprintf(tw, "GPU temperature:\t%g °C\n", th.GetGpuTemperatureMaxC())
	fmt.Fprintf(tw, "Disk:\t%g%% full: reimage; %g%%: warning\n", 100*th.GetDiskFull(), 100*th.GetDiskWarn())
	fmt.Fprintf(tw, "Drain timeout:\t%s\n", d(p.GetDrainTimeout()))
	fmt.Fprintf(tw, "Confirm timeout:\t%s\n", d(p.GetConfirmTimeout()))
	fmt.Fprintf(tw, "Repair timeout:\t%s\n", d(p.GetRepairTimeout()))
	if iv := p.GetScanInterval().AsDuration(); iv > 0 {
		checks := slices.Clone(p.GetScanChecks())
		for i, c := range checks {
			if c == "gpu_diag" {
				checks[i] = fmt.Sprintf("gpu_diag (level %d)", p.GetScanLevel())
			}
		}
		fmt.Fprintf(tw, "Scheduled scans:\tevery %s: %s\n", wholeDuration(iv), strings.Join(checks, ", "))
	} else {
		fmt.Fprintf(tw, "Scheduled scans:\tnone\n")
	}
	fmt.Fprintf(tw, "Check grace:\t%s past a check's timeout, then unanswered\n", d(p.GetCheckGrace()))
	fmt.Fprintf(tw, "Straggler ratio:\t%g of the median speed\n", p.GetStragglerRatio())
	sizes := p.GetAllreduceSizes()
	if sizes == "" {
		sizes = "256K,1M,4M (the agent's)"
	}
	fmt.Fprintf(tw, "All-reduce sizes:\t%s\n", sizes)
	if bw := p.GetAllreduceMinBusbwGbps(); len(bw) > 0 {
		var by []string
		for _, k := range slices.Sorted(maps.Keys(bw)) {
			if k != "*" {
				by = append(by, fmt.Sprintf("%s %g", k, bw[k]))
			}
		}
		if v, ok := bw["*"]; ok {
			by = append(by, fmt.Sprintf("other types %g", v))
		}
		fmt.Fprintf(tw, "All-reduce minimum:\t%s GB/s bus bandwidth\n", strings.Join(by, "; "))
	} else {
		fmt.Fprintf(tw, "All-reduce minimum:\tnone (a ring fails only when it breaks or sums wrong)\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "CHECK\tVALID FOR\tTIMEOUT")
	for _, c := range p.GetChecks() {
		timeout := d(c.GetTimeout())
		if c.GetCheck() == "gpu_diag" {
			timeout += " a level"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.GetCheck(), d(c.GetValidity()), timeout)
	}
	fmt.Fprintf(tw, "(a site's)\t%s\t%s\n", d(p.GetDefaultCheckValidity()), d(p.GetDefaultCheckTimeout()))
	return tw.Flush()
}

// wholeDuration is d as Go writes it without its trailing zero units:
// "24h", "10m", "1m30s", "15s".
func wholeDuration(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// remediationState is a state's short name: HEALTHY, DRAINING, ...
func remediationState(s loomv1.RemediationState) string {
	if s == loomv1.RemediationState_REMEDIATION_STATE_UNSPECIFIED {
		return "UNKNOWN"
	}
	return strings.TrimPrefix(s.String(), "NODE_")
}

// remediationAction is an action's short name: REBOOT, DRAIN, ...; "-" for none.
func remediationAction(act loomv1.RemediationAction) string {
	if act == loomv1.RemediationAction_REMEDIATION_ACTION_UNSPECIFIED || act == loomv1.RemediationAction_ACTION_NONE {
		return "-"
	}
	return strings.TrimPrefix(act.String(), "ACTION_")
}

// nodeHealthState is a NodeHealth's state with its markers: "(dry-run)" when
// health only says what it would do.
func nodeHealthState(n *loomv1.NodeHealth) string {
	s := remediationState(n.GetState())
	if n.GetDryRun() {
		s += " (dry-run)"
	}
	return s
}

// gpuSummary is "8" or "8 (1 lost)"; temp the hottest GPU, "71C"; ecc
// "sbe/dbe" summed over the GPUs.
func gpuSummary(n *loomv1.NodeHealth) (gpus, temp, ecc string) {
	if len(n.GetGpus()) == 0 {
		return "-", "-", "-"
	}
	lost := 0
	hot := math.Inf(-1)
	var sbe, dbe uint64
	for _, g := range n.GetGpus() {
		if g.GetLost() {
			lost++
			continue
		}
		hot = max(hot, g.GetTemperatureC())
		sbe += g.GetEccSbeVolatile()
		dbe += g.GetEccDbeVolatile()
	}
	gpus = strconv.Itoa(len(n.GetGpus()))
	if lost > 0 {
		gpus += fmt.Sprintf(" (%d lost)", lost)
	}
	if n.GetSimulated() {
		gpus += " sim"
	}
	temp = "-"
	if !math.IsInf(hot, -1) {
		temp = fmt.Sprintf("%.0fC", hot)
	}
	return gpus, temp, fmt.Sprintf("%d/%d", sbe, dbe)
}

func renderNodeHealth(w io.Writer, ns []*loomv1.NodeHealth, now time.Time) error {
	tw := newTable(w)
	row(tw, "NODE", "STATE", "REASON", "SET BY", "SINCE", "NEXT", "GPUS", "TEMP", "ECC SBE/DBE", "XID", "HEARTBEAT")
	for _, n := range ns {
		gpus, temp, ecc := gpuSummary(n)
		row(tw, n.GetHostname(), nodeHealthState(n), cellText(n.GetReason(), 50), n.GetSetBy(), age(n.GetStateTime(), now),
			remediationAction(n.GetNextAction()), gpus, temp, ecc, lastXids(n), ago(n.GetLastHeartbeat(), now))
	}
	return tw.Flush()
}

// renderGPUs prints one node's GPUs, a row each, as its last telemetry had
// them (dcgm-exporter's fields; docs/health.md, "Telemetry").
func renderGPUs(w io.Writer, n *loomv1.NodeHealth) error {
	if len(n.GetGpus()) == 0 {
		_, err := fmt.Fprintln(w, "\nNo GPU telemetry from this node yet.")
		return err
	}
	fmt.Fprintln(w, "\nGPUs:")
	tw := newTable(w)
	row(tw, "  GPU", "TEMP", "POWER", "UTIL", "MEMORY", "SM CLOCK", "ECC SBE/DBE (AGG)", "REMAPPED C/U", "RETIRED", "NVLINK CRC/REPLAY", "PCIE REPLAY", "XID", "STATE")
	for _, g := range n.GetGpus() {
		if g.GetLost() {
			row(tw, fmt.Sprintf("  %d", g.GetIndex()), "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", xidCell(g.GetLastXid()), "fell off the bus")
			continue
		}
		state := "ok"
		switch {
		case g.GetRemapFailure():
			state = "row remap failed"
		case g.GetRemapPending():
			state = "remap pending (reset)"
		case g.GetThrottleReasons() != 0:
			state = fmt.Sprintf("throttled (0x%x)", g.GetThrottleReasons())
		}
		row(tw, fmt.Sprintf("  %d", g.GetIndex()), fmt.Sprintf("%.0fC", g.GetTemperatureC()), fmt.Sprintf("%.0fW", g.GetPowerW()),
			fmt.Sprintf("%.0f%%", g.GetGpuUtilPercent()),
			fmt.Sprintf("%d/%d MiB", g.GetMemoryUsedBytes()>>20, g.GetMemoryTotalBytes()>>20),
			fmt.Sprintf("%d MHz", g.GetSmClockMhz()),
			fmt.Sprintf("%d/%d (%d/%d)", g.GetEccSbeVolatile(), g.GetEccDbeVolatile(), g.GetEccSbeAggregate(), g.GetEccDbeAggregate()),
			fmt.Sprintf("%d/%d", g.GetRemappedCorrectable(), g.GetRemappedUncorrectable()),
			strconv.Itoa(int(g.GetRetiredPagesSbe()+g.GetRetiredPagesDbe())),
			fmt.Sprintf("%d/%d", g.GetNvlinkCrcErrors(), g.GetNvlinkReplayErrors()),
			strconv.FormatUint(g.GetPcieReplay(), 10), xidCell(g.GetLastXid()), state)
	}
	return tw.Flush()
}

// xidCell is an Xid, "-" for none.
func xidCell(x int32) string {
	if x == 0 {
		return "-"
	}
	return strconv.Itoa(int(x))
}

// lastXids is each GPU's last Xid, "79@GPU0,13@GPU3", "-" when none saw
// one: the Xid health classified (its reason) may have been followed by
// others on other GPUs.
func lastXids(n *loomv1.NodeHealth) string {
	var parts []string
	for _, g := range n.GetGpus() {
		if x := g.GetLastXid(); x != 0 {
			parts = append(parts, fmt.Sprintf("%d@GPU%d", x, g.GetIndex()))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// ---- goodput ----

func (a *app) jobsGoodputCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "goodput ID",
		Short: "Show how much of a job's time was productive training",
		Long: `Show a job's goodput: its wall time from submission, the productive part,
and where the rest went: recomputation (work lost since the last checkpoint
of a failed attempt), restarts (from a failure to running again), queueing,
checkpointing (the time saves took, as the program reports it; loom train
does). A finished job's figures stay available for 30 days after its end.`,
		Args: exactArgs(1, "the job id, e.g. `loom jobs goodput 7`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			gc, err := a.goodputClient()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			g, err := gc.GetJobGoodput(ctx, &loomv1.GetJobGoodputRequest{Name: a.jobName(args[0])})
			if err != nil {
				return a.notFoundHint(a.explain("goodput of job "+args[0], err), err, "loom jobs list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), g)
			}
			return renderGoodput(cmd.OutOrStdout(), g, false)
		},
	}
}

func (a *app) clustersGoodputCommand() *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "goodput NAME [--since 168h]",
		Short: "Show how much of a cluster's job time was productive training",
		Long: `Show a cluster's goodput over its jobs in a window (default: the last 7
days): wall time, productive time, time lost to recomputation, restarts,
queueing and checkpointing, and goodput (productive / wall).

The window takes every job not ended before its start, each counted whole
(all of its wall time, even the part before the window). Finished jobs count
for 30 days after their end, so a --since longer than 720h misses some.`,
		Args: exactArgs(1, "the cluster, e.g. `loom clusters goodput demo`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			gc, err := a.goodputClient()
			if err != nil {
				return err
			}
			req := &loomv1.GetClusterGoodputRequest{Name: a.clusterName(args[0])}
			if since < 0 {
				return usagef("--since must be a positive duration such as 24h, got %s", since)
			}
			if since > 0 {
				req.Since = timestamppb.New(a.now().Add(-since))
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			g, err := gc.GetClusterGoodput(ctx, req)
			if err != nil {
				return a.notFoundHint(a.explain("goodput of cluster "+args[0], err), err, "loom clusters list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), g)
			}
			return renderGoodput(cmd.OutOrStdout(), g, true)
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "the window: jobs of the last DURATION (default: the scheduler's, 7 days)")
	return cmd
}

// share is d as a duration and a percentage of wall: "1h30m (12.5%)".
func share(d, wall *durationpb.Duration) string {
	// elapsed, not whole seconds: a short job's 120 ms lost to a restart
	// would read "0s (0.4%)".
	s := elapsed(d.AsDuration())
	if w := wall.AsDuration(); w > 0 {
		s += fmt.Sprintf(" (%.1f%%)", 100*float64(d.AsDuration())/float64(w))
	}
	return s
}

func renderGoodput(w io.Writer, g *loomv1.Goodput, cluster bool) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", g.GetName())
	if cluster {
		fmt.Fprintf(tw, "Jobs:\t%d\n", g.GetJobs())
	}
	fmt.Fprintf(tw, "Wall:\t%s\n", elapsed(g.GetWall().AsDuration()))
	fmt.Fprintf(tw, "Productive:\t%s\n", share(g.GetProductive(), g.GetWall()))
	fmt.Fprintf(tw, "Lost to recompute:\t%s\n", share(g.GetLostRecompute(), g.GetWall()))
	fmt.Fprintf(tw, "Lost to restarts:\t%s\n", share(g.GetLostRestart(), g.GetWall()))
	fmt.Fprintf(tw, "Lost to queueing:\t%s\n", share(g.GetLostQueueing(), g.GetWall()))
	fmt.Fprintf(tw, "Lost to checkpointing:\t%s\n", share(g.GetLostCheckpointing(), g.GetWall()))
	fmt.Fprintf(tw, "Failures:\t%d\n", g.GetFailures())
	fmt.Fprintf(tw, "Restarts:\t%d\n", g.GetRestarts())
	if g.GetWall().AsDuration() <= 0 {
		// Nothing ran yet: a ratio of nothing, not a goodput of 0%.
		fmt.Fprintf(tw, "Goodput:\t- (no run time yet)\n")
	} else {
		fmt.Fprintf(tw, "Goodput:\t%.1f%%\n", 100*g.GetGoodput())
	}
	return tw.Flush()
}
