package classify

import (
	"fmt"

	"github.com/loom-ml/loom/libs/healthcheck"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Throttle-reason bits of NVML's clocks-event reasons that mean heat
// (nvmlClocksEventReason*): software and hardware thermal slowdown, and the
// hardware slowdown the board asserts when it overheats or draws too much.
const (
	ThrottleHWSlowdown        uint64 = 0x8
	ThrottleSWThermalSlowdown uint64 = 0x20
	ThrottleHWThermalSlowdown uint64 = 0x40
	throttleThermal                  = ThrottleHWSlowdown | ThrottleSWThermalSlowdown | ThrottleHWThermalSlowdown
)

// Thresholds are the telemetry limits past which a node needs a repair.
type Thresholds struct {
	// SBEPerMinute: single-bit ECC errors per minute (volatile count's
	// growth between two samples) at or above this → reset the GPU after a
	// checkpoint. A few corrected errors are normal; a rising rate
	// precedes a double-bit error.
	SBEPerMinute float64
	// NVLinkPerMinute: NVLink CRC plus replay errors per minute at or above
	// this → reset the GPU after a checkpoint.
	NVLinkPerMinute float64
	// TemperatureC: at or above this, or with a thermal throttle reason set,
	// the GPU throttles: reboot after a checkpoint (escalated if it recurs).
	TemperatureC float64
	// DiskFull: a filesystem this full (used/total, 0..1) or more → reimage
	// after a checkpoint (the local provider's reimage empties the node's
	// directory). DiskWarn is recorded only.
	DiskFull float64
	DiskWarn float64
}

// DefaultThresholds are the limits health uses unless configured otherwise.
func DefaultThresholds() Thresholds {
	return Thresholds{SBEPerMinute: 10, NVLinkPerMinute: 10, TemperatureC: 90, DiskFull: 0.97, DiskWarn: 0.90}
}

// MaxXidGPUs bounds the GPUs whose last_xid is judged and kept per node
// (indexes 0 to MaxXidGPUs-1; the scheduler's most GPUs on a node): a
// sample naming more cannot grow health's stored state.
const MaxXidGPUs = 64

// LastXids returns the sample's last_xid per GPU (zeros included, so that a
// GPU is known), for the GPUs with an index below MaxXidGPUs; nil for a nil
// sample. It is what Telemetry's judged compares with.
func LastXids(s *eventsv1.GpuTelemetry) map[int32]int32 {
	if s == nil {
		return nil
	}
	out := map[int32]int32{}
	for _, g := range s.GetGpus() {
		if i := g.GetIndex(); i >= 0 && i < MaxXidGPUs {
			out[i] = g.GetLastXid()
		}
	}
	return out
}

// Telemetry classifies a node's sample cur against its previous sample prev
// (nil when there is none: rates are then not judged) and against judged,
// each GPU's last_xid as last judged (LastXids of an earlier sample, kept
// durably by the domain so that it outlives health's restarts; nil when
// there is none: Xid changes are then not judged). It
// returns the verdicts that act, worst first within each GPU; an empty slice
// means the node looks fine. Counters that went down (a reset, a new boot)
// are read as starting again from zero.
//
// A GPU's last_xid (DCGM_FI_DEV_XID_ERRORS) that is non-zero and differs
// from judged's gives the verdict Xid gives for it, the one the XidObserved
// event path gives: an Xid raised while the agent was down, or missed by
// its event set, is seen in the next sample. Only a change is judged, never
// the value alone, so that a node is not failed again for an Xid it was
// repaired for; an Xid that does not take the node out (RESTART_APP, IGNORE)
// is left to the event path, so that a late sample does not restart a job a
// second time.
func (t Thresholds) Telemetry(prev, cur *eventsv1.GpuTelemetry, judged map[int32]int32) []Verdict {
	var out []Verdict
	before := map[int32]*loomv1.GpuSample{}
	minutes := 0.0
	if prev != nil && prev.GetTime() != nil && cur.GetTime() != nil {
		if d := cur.GetTime().AsTime().Sub(prev.GetTime().AsTime()); d > 0 {
			minutes = d.Minutes()
			for _, g := range prev.GetGpus() {
				before[g.GetIndex()] = g
			}
		}
	}
	if want, have := int(cur.GetOfferedGpus()), len(cur.GetGpus()); want > 0 && have < want {
		// A GPU gone from the bus altogether (before the driver loaded, or
		// after a reset that failed) is not listed at all, so no GPU's
		// sample says it is lost: the count does. It is fixed as a GPU
		// fallen off the bus is, and the scheduler must not place jobs on
		// GPUs that are not there meanwhile.
		lost := Xid(-1, 79)
		out = append(out, Verdict{Severity: lost.Severity, Action: lost.Action, Urgent: lost.Urgent, GPU: -1,
			Reason: fmt.Sprintf("GPU count: the driver lists %d of the node's %d GPUs", have, want)})
	}
	for _, g := range cur.GetGpus() {
		gpu := g.GetIndex()
		if g.GetLost() {
			v := Xid(gpu, 79)
			v.Reason = fmt.Sprintf("Xid 79: GPU has fallen off the bus (GPU %d lost)", gpu)
			out = append(out, v)
			continue
		}
		if x, ok := judged[gpu]; ok && g.GetLastXid() != 0 && g.GetLastXid() != x {
			if v := Xid(gpu, g.GetLastXid()); v.Drains() {
				out = append(out, v)
			}
		}
		p := before[gpu]
		if n := g.GetEccDbeVolatile(); n > 0 && (p == nil || n > p.GetEccDbeVolatile()) {
			out = append(out, Verdict{Severity: SeverityCritical, Action: loomv1.RemediationAction_ACTION_RESET_GPU, Urgent: true,
				Reason: fmt.Sprintf("ECC: %d double-bit errors on GPU %d", n, gpu), GPU: gpu})
		}
		if g.GetRemapFailure() {
			out = append(out, Verdict{Severity: SeverityCritical, Action: loomv1.RemediationAction_ACTION_REPLACE, CheckpointFirst: true,
				Reason: fmt.Sprintf("row remapping failure on GPU %d", gpu), GPU: gpu})
		} else if g.GetRemapPending() {
			out = append(out, Verdict{Severity: SeverityWarning, Action: loomv1.RemediationAction_ACTION_RESET_GPU, CheckpointFirst: true,
				Reason: fmt.Sprintf("row remapping pending on GPU %d", gpu), GPU: gpu})
		}
		if p != nil && minutes > 0 {
			if r := rate(p.GetEccSbeVolatile(), g.GetEccSbeVolatile(), minutes); t.SBEPerMinute > 0 && r >= t.SBEPerMinute {
				out = append(out, Verdict{Severity: SeverityWarning, Action: loomv1.RemediationAction_ACTION_RESET_GPU, CheckpointFirst: true,
					Reason: fmt.Sprintf("ECC: single-bit errors at %.0f/min on GPU %d", r, gpu), GPU: gpu})
			}
			nv := rate(p.GetNvlinkCrcErrors(), g.GetNvlinkCrcErrors(), minutes) + rate(p.GetNvlinkReplayErrors(), g.GetNvlinkReplayErrors(), minutes)
			if t.NVLinkPerMinute > 0 && nv >= t.NVLinkPerMinute {
				out = append(out, Verdict{Severity: SeverityWarning, Action: loomv1.RemediationAction_ACTION_RESET_GPU, CheckpointFirst: true,
					Reason: fmt.Sprintf("NVLink: %.0f errors/min on GPU %d", nv, gpu), GPU: gpu})
			}
		}
		hot := t.TemperatureC > 0 && g.GetTemperatureC() >= t.TemperatureC
		if hot || g.GetThrottleReasons()&throttleThermal != 0 {
			out = append(out, Verdict{Severity: SeverityWarning, Action: loomv1.RemediationAction_ACTION_REBOOT, CheckpointFirst: true,
				Reason: fmt.Sprintf("thermal: GPU %d throttling at %.0fC", gpu, g.GetTemperatureC()), GPU: gpu})
		}
	}
	for _, d := range cur.GetDisks() {
		if d.GetTotalBytes() == 0 {
			continue
		}
		used := float64(d.GetUsedBytes()) / float64(d.GetTotalBytes())
		switch {
		case t.DiskFull > 0 && used >= t.DiskFull:
			out = append(out, Verdict{Severity: SeverityCritical, Action: loomv1.RemediationAction_ACTION_REIMAGE, CheckpointFirst: true,
				Reason: fmt.Sprintf("disk full: %s %.0f%% used", d.GetMount(), used*100), GPU: -1})
		case t.DiskWarn > 0 && used >= t.DiskWarn:
			out = append(out, Verdict{Severity: SeverityWarning, Action: loomv1.RemediationAction_ACTION_NONE,
				Reason: fmt.Sprintf("disk nearly full: %s %.0f%% used", d.GetMount(), used*100), GPU: -1})
		}
	}
	return out
}

// rate is a counter's growth per minute; a counter that went down started
// again from zero.
func rate(before, after uint64, minutes float64) float64 {
	if after < before {
		return float64(after) / minutes
	}
	return float64(after-before) / minutes
}

// Worst returns the verdict that calls for the most: urgent before not,
// then the heavier action, then the first given. ok is false when none acts.
func Worst(vs []Verdict) (Verdict, bool) {
	var best Verdict
	found := false
	for _, v := range vs {
		if !v.Acts() {
			continue
		}
		if !found || worse(v, best) {
			best, found = v, true
		}
	}
	return best, found
}

func worse(a, b Verdict) bool {
	if a.Urgent != b.Urgent {
		return a.Urgent
	}
	return Rank(a.Action) > Rank(b.Action)
}

// Rank orders repairs by how much they do: none < restart the job < reset
// the GPU < reboot < reimage < replace. The remediation ladder climbs it.
func Rank(a loomv1.RemediationAction) int {
	switch a {
	case loomv1.RemediationAction_ACTION_RESTART_JOB:
		return 1
	case loomv1.RemediationAction_ACTION_RESET_GPU:
		return 2
	case loomv1.RemediationAction_ACTION_REBOOT:
		return 3
	case loomv1.RemediationAction_ACTION_REIMAGE:
		return 4
	case loomv1.RemediationAction_ACTION_REPLACE:
		return 5
	}
	return 0
}

// Check triggers whose failures Slurm names in a node's drain reason
// (HealthCheckResult.trigger, as the agent's prolog.go sets them).
const (
	TriggerProlog = "prolog"
	TriggerEpilog = "epilog"
)

// Drain-reason prefixes of a node that failed a prolog or epilog check, as
// slurmctld writes them ("Prolog error", "Epilog error"), so that `sinfo -R`
// reads as a Slurm admin expects.
const (
	PrologErrorPrefix = "Prolog error: "
	EpilogErrorPrefix = "Epilog error: "
)

// CheckFailed classifies a check that failed (CHECK_FAIL) on a node. Checks
// run on idle nodes, or ask for a checkpoint first when a job holds it: a
// failed check is not urgent. A failed disk check calls for a reimage (it
// empties the node's directory); a failed gpu_diag for what its failures'
// DCGM error ids ask for (diagAction: a replacement for a failed row
// remap, as the telemetry's verdict; a GPU reset for a double-bit error or
// a pending remap); any other for a reboot first, escalated if the failure
// comes back. The reason names the check and its summary
// ("check gpu_diag failed: ..."); a prolog's or epilog's failure is
// prefixed as Slurm drains a node for one ("Prolog error: check gpu_diag
// failed: ...").
func CheckFailed(r *loomv1.HealthCheckResult) Verdict {
	action := loomv1.RemediationAction_ACTION_REBOOT
	switch r.GetCheck() {
	case "disk":
		action = loomv1.RemediationAction_ACTION_REIMAGE
	case "gpu_diag":
		action = diagAction(r.GetDetail())
	}
	reason := "check " + r.GetCheck() + " failed"
	if s := r.GetSummary(); s != "" {
		reason += ": " + s
	}
	switch r.GetTrigger() {
	case TriggerProlog:
		reason = PrologErrorPrefix + reason
	case TriggerEpilog:
		reason = EpilogErrorPrefix + reason
	}
	gpu := r.GetGpu()
	return Verdict{Severity: SeverityCritical, Action: action, CheckpointFirst: true, Reason: reason, GPU: gpu}
}

// diagAction is the repair a gpu_diag report (detail: `dcgmi diag -j`'s
// JSON, whether dcgmi or Loom's own tests wrote it) asks for: the heaviest
// its failures' DCGM error ids ask for, a reboot for any other id, and a
// reboot for a detail that is not such a report.
func diagAction(detail string) loomv1.RemediationAction {
	action := loomv1.RemediationAction_ACTION_REBOOT
	rep, err := healthcheck.ParseDiag([]byte(detail))
	if err != nil {
		return action
	}
	ids := rep.FailedErrorIDs()
	if len(ids) == 0 {
		return action
	}
	action = loomv1.RemediationAction_REMEDIATION_ACTION_UNSPECIFIED
	for _, id := range ids {
		a := loomv1.RemediationAction_ACTION_REBOOT
		switch id {
		case healthcheck.DCGMRowRemapFailure, healthcheck.DCGMUncorrectableRemap:
			a = loomv1.RemediationAction_ACTION_REPLACE
		case healthcheck.DCGMVolatileDBE, healthcheck.DCGMPendingRetirements, healthcheck.DCGMDBEPendingRetirement,
			healthcheck.DCGMPendingRowRemap:
			a = loomv1.RemediationAction_ACTION_RESET_GPU
		}
		if Rank(a) > Rank(action) {
			action = a
		}
	}
	return action
}
