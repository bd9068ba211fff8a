package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/services/scheduler"
)

// simCommand is `loom sim`: the scheduler's real scheduling code replayed in
// virtual time against a workload trace, under each policy.
func (a *app) simCommand() *cobra.Command {
	var (
		cfg    scheduler.SimConfig
		policy string
	)
	cmd := &cobra.Command{
		Use:   "sim --trace FILE [--format alibaba|philly|swf] [--policy fifo|easy|loom|all]",
		Short: "Replay a workload trace through the scheduler in virtual time",
		Long: `Replay a real workload trace through Loom's scheduling code in virtual time
and compare policies: utilisation, mean and p95 wait, mean job completion
time, bounded slowdown and fairness across accounts.

Traces: the Alibaba GPU trace (a pod list, or its directory; the node list
beside it), the Philly sample (JSON) and SWF logs (.swf or .swf.gz); a
directory stands for the one trace it holds. Policies:
fifo (strict first come, first served), easy (FCFS with EASY backfill), loom
(the default multifactor policy with backfill), or all of them side by side.
Nothing is started: the command needs no running Loom.

A trace is replayed on a cluster Loom could run: at most 20,000 nodes of at
most 64 GPUs (or processors), times within a century. A record outside
that, or not a number (NaN, a value past 64 bits), or a line over 1 MiB, is
refused with its line and the reason.`,
		Example: `  loom sim --trace ../shared/data/traces/alibaba-gpu-v2023 --policy all
  loom sim --trace philly_jobs_4gpu_sample.json --format philly --policy easy -o json
  loom sim --trace NASA-iPSC-1993-3.1-cln.swf.gz --limit 5000`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("loom sim takes no arguments, got %q: give the trace with --trace", strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Trace == "" {
				return usagef("--trace is required: the path of a trace file")
			}
			if cfg.Format != "" && !slices.Contains(scheduler.SimFormats, cfg.Format) {
				return usagef("--format must be %s, got %q", strings.Join(scheduler.SimFormats, ", "), cfg.Format)
			}
			switch {
			case policy == "all":
				cfg.Policies = scheduler.SimPolicies
			case slices.Contains(scheduler.SimPolicies, policy):
				cfg.Policies = []string{policy}
			default:
				return usagef("--policy must be %s or all, got %q", strings.Join(scheduler.SimPolicies, ", "), policy)
			}
			if cfg.Limit < 0 {
				return usagef("--limit must not be negative, got %d", cfg.Limit)
			}
			if !(cfg.ArrivalScale > 0) || math.IsInf(cfg.ArrivalScale, 0) {
				return usagef("--arrival-scale must be positive, got %v", cfg.ArrivalScale)
			}
			if cfg.TimeLimitFactor != 0 && !(cfg.TimeLimitFactor >= 1) || math.IsInf(cfg.TimeLimitFactor, 0) {
				return usagef("--time-limit-factor must be at least 1, got %v", cfg.TimeLimitFactor)
			}
			if cfg.ProcsPerNode < 0 || cfg.ProcsPerNode > 64 {
				return usagef("--procs-per-node must be 1..64 (a simulated node's most), got %d", cfg.ProcsPerNode)
			}
			progress := cmd.ErrOrStderr()
			cfg.Progress = func(p string, done bool) {
				if !done {
					fmt.Fprintf(progress, "simulating %s...\n", p)
				}
			}
			rep, err := scheduler.Simulate(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			out := cmd.OutOrStdout()
			if a.output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.WriteTable(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Trace, "trace", "", "trace file (Alibaba pod list, Philly JSON, SWF log), or a directory holding one")
	f.StringVar(&cfg.Format, "format", "", "trace format: "+strings.Join(scheduler.SimFormats, ", ")+" (default: from the file name)")
	f.StringVar(&policy, "policy", "all", "policy: "+strings.Join(scheduler.SimPolicies, ", ")+" or all")
	f.IntVar(&cfg.Limit, "limit", 0, "replay only the first N jobs in submission order (0: all)")
	f.Float64Var(&cfg.ArrivalScale, "arrival-scale", 1, "divide submit times by this factor to raise the load")
	f.Float64Var(&cfg.TimeLimitFactor, "time-limit-factor", 0, "time limit as a multiple of the runtime where the trace gives none (default 1.5)")
	f.StringVar(&cfg.NodeList, "node-list", "", "Alibaba node list (default: openb_node_list_all_node.csv beside the pod list)")
	f.IntVar(&cfg.ProcsPerNode, "procs-per-node", 0, "processors per node of an SWF log without MaxNodes, 1..64 (default 8)")
	return cmd
}
