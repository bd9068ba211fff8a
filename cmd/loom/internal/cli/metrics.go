package cli

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
)

// sparkWidth is how many points a sparkline draws; sparkSeries how many
// series of a list get one (each costs a read).
const (
	sparkWidth  = 40
	sparkSeries = 20
)

func (a *app) metricsCommand() *cobra.Command {
	var metric string
	var points int32
	var from, to int64
	cmd := &cobra.Command{
		Use:   "metrics JOB [--metric M] [--points N] [--from STEP] [--to STEP]",
		Short: "Show a job's training metrics (hypertune lines and TensorBoard scalars)",
		Long: `Show the metric series a job reported: without --metric, every series with its
count, first and last values, min and max, and a sparkline; with --metric, that
series' points, downsampled to --points keeping each bucket's extremes.

JOB is a job id (in --project), a job name (projects/P/jobs/ID), a CustomJob name
(projects/P/locations/L/customJobs/ID) or a trial
(projects/P/locations/L/hyperparameterTuningJobs/ID/trials/T). See docs/metrics.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if metric == "" {
				// They shape one series' read: the list would drop them unsaid.
				for _, f := range []string{"points", "from", "to"} {
					if cmd.Flags().Changed(f) {
						return usagef("--%s reads one series: name it with --metric (loom metrics %s lists them)", f, args[0])
					}
				}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			cl := trainingv1.NewMetricsServiceClient(c)
			parent := args[0]
			if !strings.HasPrefix(parent, "projects/") {
				parent = a.jobName(parent)
			}
			out := cmd.OutOrStdout()
			if metric == "" {
				ctx, cancel := a.call(cmd.Context())
				defer cancel()
				resp, err := cl.ListMetrics(ctx, &trainingv1.ListMetricsRequest{Parent: parent})
				if err != nil {
					return a.explain("list the metrics of "+parent, err)
				}
				if a.output == "json" {
					return writeJSON(out, resp)
				}
				if len(resp.GetSeries()) == 0 {
					fmt.Fprintf(out, "%s has reported no metrics yet (hypertune lines in $CLOUD_ML_HP_METRIC_FILE or TensorBoard scalars in $AIP_TENSORBOARD_LOG_DIR).\n", parent)
					return nil
				}
				tw := newTable(out)
				row(tw, "METRIC", "POINTS", "FIRST", "LAST", "MIN", "MAX", "CURVE")
				for i, s := range resp.GetSeries() {
					curve := ""
					if i < sparkSeries {
						rctx, rcancel := a.call(cmd.Context())
						r, err := cl.ReadMetrics(rctx, &trainingv1.ReadMetricsRequest{Parent: parent, Metric: s.GetMetric(), Points: sparkWidth})
						rcancel()
						if err == nil {
							curve = sparkline(r.GetPoints())
						}
					}
					row(tw, s.GetMetric(), strconv.FormatInt(s.GetCount(), 10), num(s.GetFirst()), num(s.GetLast()),
						num(s.GetMin()), num(s.GetMax()), curve)
				}
				return tw.Flush()
			}
			req := &trainingv1.ReadMetricsRequest{Parent: parent, Metric: metric, Points: points}
			if cmd.Flags().Changed("from") {
				req.From = &from
			}
			if cmd.Flags().Changed("to") {
				req.To = &to
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := cl.ReadMetrics(ctx, req)
			if err != nil {
				return a.explain("read metric "+metric+" of "+parent, err)
			}
			if a.output == "json" {
				return writeJSON(out, resp)
			}
			return renderPoints(out, resp)
		},
	}
	f := cmd.Flags()
	f.StringVar(&metric, "metric", "", "the series to read (default: list every series)")
	f.Int32Var(&points, "points", 0, "the most points shown, downsampled keeping extremes (default 1000, at most 10000)")
	f.Int64Var(&from, "from", 0, "the first step read (inclusive)")
	f.Int64Var(&to, "to", 0, "the last step read (inclusive)")
	return cmd
}

// renderPoints prints a read: a header with its sparkline, then a table.
func renderPoints(w io.Writer, r *trainingv1.ReadMetricsResponse) error {
	fmt.Fprintf(w, "%s: %d points", r.GetMetric(), r.GetTotal())
	if n := len(r.GetPoints()); int64(n) < r.GetTotal() {
		fmt.Fprintf(w, " (%d shown, downsampled keeping extremes)", n)
	}
	fmt.Fprintf(w, "  %s\n", sparkline(r.GetPoints()))
	tw := newTable(w)
	row(tw, "STEP", "VALUE", "TIME")
	for _, p := range r.GetPoints() {
		t := ""
		if p.GetTime() != nil {
			t = p.GetTime().AsTime().UTC().Format(time.RFC3339)
		}
		row(tw, strconv.FormatInt(p.GetStep(), 10), num(p.GetValue()), t)
	}
	return tw.Flush()
}

// num formats a metric value: shortest form, at most 6 significant digits.
func num(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// sparkline draws points as block characters, at most sparkWidth of them
// (every k-th point when there are more), scaled between their min and max.
func sparkline(pts []*trainingv1.Point) string {
	if len(pts) == 0 {
		return ""
	}
	const bars = "▁▂▃▄▅▆▇█"
	blocks := []rune(bars)
	step := max(1, (len(pts)+sparkWidth-1)/sparkWidth)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		if v := p.GetValue(); !math.IsInf(v, 0) && !math.IsNaN(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	var b strings.Builder
	for i := 0; i < len(pts); i += step {
		v := pts[i].GetValue()
		k := 0
		switch {
		case math.IsNaN(v) || math.IsInf(v, -1) || hi <= lo:
		case math.IsInf(v, 1):
			k = len(blocks) - 1
		default:
			k = int((v - lo) / (hi - lo) * float64(len(blocks)-1))
		}
		b.WriteRune(blocks[max(0, min(k, len(blocks)-1))])
	}
	return b.String()
}
