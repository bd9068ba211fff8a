package checks

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// disk is the disk space check: every filesystem (params["paths"], comma
// separated; default the node's work directory) must keep at least
// params["min_free_gb"] (default 5) free and be at most
// params["max_used_percent"] (default 95) full; past
// params["warn_used_percent"] (default 90) it warns.
func (r *Runner) disk(ctx context.Context, cmd *eventsv1.RunHealthCheck) verdict {
	var paths []string
	for _, p := range strings.Split(param(cmd, "paths", r.cfg.WorkDir), ",") {
		if p = strings.TrimSpace(p); p != "" {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		paths = []string{"/"}
	}
	num := func(k, def string) (float64, error) {
		f, err := strconv.ParseFloat(param(cmd, k, def), 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("params.%s: want a number >= 0, got %q", k, param(cmd, k, def))
		}
		return f, nil
	}
	minFree, err1 := num("min_free_gb", "5")
	maxUsed, err2 := num("max_used_percent", "95")
	warnUsed, err3 := num("warn_used_percent", "90")
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return checkError("%v", err)
		}
	}
	var disks []*loomv1.DiskSample
	if r.cfg.Disks != nil {
		disks = r.cfg.Disks(paths...)
	} else {
		for _, p := range paths {
			var st syscall.Statfs_t
			if err := syscall.Statfs(p, &st); err != nil {
				return checkError("statfs %s: %v", p, err)
			}
			total := st.Blocks * uint64(st.Bsize)
			free := st.Bavail * uint64(st.Bsize)
			disks = append(disks, &loomv1.DiskSample{Mount: p, TotalBytes: total, UsedBytes: total - free})
		}
	}
	if len(disks) == 0 {
		return checkError("no filesystem readings for %s", strings.Join(paths, ", "))
	}
	v := pass("")
	v.metrics = map[string]float64{}
	var worst []string
	var warns []string
	for _, d := range disks {
		total, used := float64(d.GetTotalBytes()), float64(d.GetUsedBytes())
		freeGB := (total - used) / 1e9
		pct := 0.0
		if total > 0 {
			pct = 100 * used / total
		}
		v.metrics["free_gb:"+d.GetMount()] = freeGB
		v.metrics["used_percent:"+d.GetMount()] = pct
		if mf, ok := v.metrics["min_free_gb"]; !ok || freeGB < mf {
			v.metrics["min_free_gb"] = freeGB
		}
		v.metrics["max_used_percent"] = max(v.metrics["max_used_percent"], pct)
		switch {
		case freeGB < minFree || pct > maxUsed:
			worst = append(worst, fmt.Sprintf("%s %.1f%% used, %.2f GB free", d.GetMount(), pct, freeGB))
		case pct > warnUsed:
			warns = append(warns, fmt.Sprintf("%s %.1f%% used", d.GetMount(), pct))
		}
	}
	switch {
	case len(worst) > 0:
		f := fail(-1, "disk full: %s (need %.1f GB free, at most %.0f%% used)", strings.Join(worst, "; "), minFree, maxUsed)
		f.metrics = v.metrics
		return f
	case len(warns) > 0:
		v.outcome = loomv1.CheckOutcome_CHECK_WARN
		v.summary = "disk filling: " + strings.Join(warns, "; ")
	default:
		fs := "filesystems"
		if len(disks) == 1 {
			fs = "filesystem"
		}
		v.summary = fmt.Sprintf("%d %s: at least %.1f GB free, at most %.1f%% used", len(disks), fs, v.metrics["min_free_gb"], v.metrics["max_used_percent"])
	}
	return v
}
