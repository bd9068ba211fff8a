package checks

import (
	"context"
	"fmt"
	"strconv"
	"time"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// speed is the speed check: a fixed workload (params["products"] 64×64
// matrix products, default 200, each checked against the reference) timed
// on the node. metrics["throughput"] is what health compares with the
// fleet's median to find stragglers:
//   - on the simulated device, 100 × the slowest GPU's ThroughputFactor
//     (percent of nominal: a GPU made slow by FAULT_SLOW_GPU, or lost, pulls
//     the node down, as it would a synchronous training step), so that
//     simulated nodes sharing one machine's CPUs compare by their GPUs;
//   - elsewhere, the workload's measured GFLOP/s × the slowest GPU's factor.
//
// params["min_throughput"] (default none) fails a node below it outright.
func (r *Runner) speed(ctx context.Context, cmd *eventsv1.RunHealthCheck) verdict {
	products, err := strconv.Atoi(param(cmd, "products", "200"))
	if err != nil || products < 1 || products > 1_000_000 {
		return checkError("params.products: want 1 to 1000000, got %q", param(cmd, "products", ""))
	}
	var minTP float64
	if s := param(cmd, "min_throughput", ""); s != "" {
		if minTP, err = strconv.ParseFloat(s, 64); err != nil {
			return checkError("params.min_throughput: want a number, got %q", s)
		}
	}
	a, b := matrix(5), matrix(6)
	ref := matmulRef(a, b)
	t0 := time.Now()
	for k := range products {
		if ctx.Err() != nil {
			return checkError("speed: %v", ctx.Err())
		}
		if _, ok := compare(matmul(a, b), ref); !ok {
			return fail(-1, "the workload's product %d came out wrong", k)
		}
	}
	el := max(time.Since(t0).Seconds(), 1e-9)
	gflops := float64(products) * 2 * matN * matN * matN / el / 1e9
	v := pass("")
	v.metrics = map[string]float64{"cpu_gflops": gflops, "workload_seconds": el}
	factor, slowest, gpus := 1.0, -1, 0
	if dev := r.cfg.Device; dev != nil {
		for _, info := range dev.Info() {
			f := dev.ThroughputFactor(info.Index)
			v.metrics[fmt.Sprintf("gpu_factor:%d", info.Index)] = f
			if gpus == 0 || f < factor {
				factor, slowest = f, info.Index
			}
			gpus++
		}
	}
	tp := gflops * factor
	unit := "GFLOP/s"
	if d := r.cfg.Device; d != nil && d.Simulated() && gpus > 0 {
		tp, unit = 100*factor, "% of nominal"
	}
	v.metrics["throughput"] = tp
	v.metrics["min_gpu_factor"] = factor
	v.summary = fmt.Sprintf("throughput %.2f (%s)", tp, unit)
	if gpus > 0 && factor < 1 {
		v.summary += fmt.Sprintf("; slowest GPU %d at %.2f× nominal", slowest, factor)
		v.gpu = int32(slowest)
	}
	if minTP > 0 && tp < minTP {
		f := fail(slowest, "throughput %.2f (%s) under the minimum %.2f", tp, unit, minTP)
		f.metrics = v.metrics
		return f
	}
	return v
}
