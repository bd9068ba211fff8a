package domain

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/healthcheck"
	"github.com/loom-ml/loom/libs/hostlist"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Bounds of the health requests (HealthService's writes), each refusal
// naming the field and the limit.
const (
	// MaxScanChecks bounds how many checks one scan names.
	MaxScanChecks = 16
	// MaxCheckNameBytes bounds a check's name (a site check's file name).
	MaxCheckNameBytes = healthcheck.MaxNameBytes
	// MaxScanLevel is gpu_diag's deepest level.
	MaxScanLevel = 3
	// MaxScanTimeout bounds a scan's per-check timeout.
	MaxScanTimeout = time.Hour
	// MaxXid is the largest Xid code (NVIDIA's catalog stops well below).
	MaxXid = 999
	// MaxFaultValue bounds an injected fault's value (a rate, a factor, a
	// count or seconds).
	MaxFaultValue = 1e6
	// MaxSlowFactor bounds FAULT_SLOW_GPU's factor.
	MaxSlowFactor = 1000
	// MaxThermalRise bounds FAULT_THERMAL's °C per second (from idle to
	// throttling in about 6 s).
	MaxThermalRise = 10
	// MaxNoHeartbeatSeconds bounds FAULT_NO_HEARTBEAT's seconds (a day; 0
	// means until cleared).
	MaxNoHeartbeatSeconds = 86400
	// MaxScanIDBytes bounds a scan id filter.
	MaxScanIDBytes = 128
	// MaxScanParams bounds how many parameters one scan passes its checks.
	MaxScanParams = 16
	// MaxScanParamKeyBytes bounds a parameter's name (a site check gets it
	// as the variable LOOM_CHECK_PARAM_<NAME>).
	MaxScanParamKeyBytes = 64
	// MaxScanParamValueBytes bounds a parameter's value.
	MaxScanParamValueBytes = 256
)

// CheckCluster adds to v a violation of field when name is not a cluster
// name "projects/{p}/clusters/{c}".
func CheckCluster(v *errs.Validator, field, name string) {
	if _, err := resname.ParseCluster(name); err != nil {
		v.Add(field, "%v", err)
	}
}

// CheckHostname adds to v a violation of field when h is not a node hostname.
func CheckHostname(v *errs.Validator, field, h string) {
	v.Check(resname.ValidID(h), field, "%s is not a node hostname", clip(h))
}

// ExpandHostnames expands the hostlist expressions of field (each entry one
// expression, "gpu-[0001-0004]") into hostnames, in order, without
// duplicates. The entries together may name at most MaxHosts hosts,
// duplicates counted: expansion stops at that budget, so that one request
// repeating "n[0000-4095]" cannot make the gateway build millions of
// names. Each problem is added to v naming its entry.
func ExpandHostnames(v *errs.Validator, field string, exprs []string) []string {
	if len(exprs) > MaxHosts {
		v.Add(field, "%d entries, more than the limit of %d", len(exprs), MaxHosts)
		return nil
	}
	var out []string
	seen := map[string]bool{}
	named := 0
	for i, e := range exprs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if len(e) > MaxSpecBytes {
			v.Add(f, "%d bytes, longer than the limit of %d", len(e), MaxSpecBytes)
			continue
		}
		names, err := hostlist.ExpandMax(e, MaxHosts-named)
		if errors.Is(err, hostlist.ErrTooMany) {
			v.Add(f, "names more than the limit of %d nodes (with the entries before it, duplicates counted)", MaxHosts)
			return nil
		}
		if err != nil {
			v.Add(f, "%v", err)
			continue
		}
		if len(names) == 0 {
			v.Add(f, "empty: name a node (gpu-0001) or a hostlist (gpu-[0001-0004])")
			continue
		}
		named += len(names)
		for _, n := range names {
			if !resname.ValidID(n) {
				v.Add(f, "%s is not a node hostname", clip(n))
				break
			}
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// ValidateScanNodes checks a ScanNodesRequest (every problem at once) and
// returns its hostnames expanded (empty: every node) and its checks
// without duplicates.
func ValidateScanNodes(req *loomv1.ScanNodesRequest) (hosts, checks []string, err error) {
	var v errs.Validator
	CheckCluster(&v, "cluster", req.GetCluster())
	hosts = ExpandHostnames(&v, "hostnames", req.GetHostnames())
	if n := len(req.GetChecks()); n > MaxScanChecks {
		v.Add("checks", "%d checks, more than the limit of %d", n, MaxScanChecks)
	} else {
		for i, c := range req.GetChecks() {
			f := fmt.Sprintf("checks[%d]", i)
			switch {
			case len(c) > MaxCheckNameBytes:
				v.Add(f, "%d bytes, longer than the limit of %d", len(c), MaxCheckNameBytes)
			case !healthcheck.ValidName(c):
				v.Add(f, "%s is not a check name: gpu_diag, allreduce, allreduce_pair, disk, speed, or a site check's file name", clip(c))
			case !slices.Contains(checks, c):
				checks = append(checks, c)
			}
		}
	}
	if l := req.GetLevel(); l < 0 || l > MaxScanLevel {
		v.Add("level", "%d is not a gpu_diag level: 1 to %d (0: the default, 1)", l, MaxScanLevel)
	}
	if t := req.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			v.Add("timeout", "%v", err)
		} else if d := t.AsDuration(); d < time.Second || d > MaxScanTimeout {
			v.Add("timeout", "%s is outside 1s to %s", d, MaxScanTimeout)
		}
	}
	checkScanParams(&v, req.GetParams())
	return hosts, checks, v.Err()
}

// checkScanParams checks a scan's params: at most MaxScanParams; each name
// 1 to MaxScanParamKeyBytes of [a-z0-9_]; each value at most
// MaxScanParamValueBytes of UTF-8 without control characters, and for a
// built-in check's parameter, a value that check takes (empty, or only
// spaces, is the check's default, as the agent reads it).
func checkScanParams(v *errs.Validator, params map[string]string) {
	if len(params) > MaxScanParams {
		v.Add("params", "%d parameters, more than the limit of %d", len(params), MaxScanParams)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		val := params[k]
		f := "params[" + clipKey(k) + "]"
		if !healthcheck.ValidParamKey(k, MaxScanParamKeyBytes) {
			v.Add(f, "%s is not a parameter name: 1 to %d of a-z, 0-9 and _ (a site check gets it as LOOM_CHECK_PARAM_<NAME>)",
				clip(k), MaxScanParamKeyBytes)
			continue
		}
		if !utf8.ValidString(val) {
			v.Add(f, "%s is not valid UTF-8", clip(val))
			continue
		}
		if !checkText(v, f, val, MaxScanParamValueBytes) {
			continue
		}
		if why := healthcheck.CheckParam(k, val); why != "" {
			v.Add(f, "%s: %s", clip(val), why)
		}
	}
}

// ValidateReportFaultyNodes checks a ReportFaultyNodesRequest and returns
// its hostnames expanded. A reason is required: it is what sinfo -R shows.
func ValidateReportFaultyNodes(req *loomv1.ReportFaultyNodesRequest) ([]string, error) {
	var v errs.Validator
	CheckCluster(&v, "cluster", req.GetCluster())
	hosts := ExpandHostnames(&v, "hostnames", req.GetHostnames())
	if len(req.GetHostnames()) == 0 {
		v.Add("hostnames", "required: the nodes that are faulty (gpu-0001, or a hostlist gpu-[0001-0004])")
	}
	checkReason(&v, req.GetReason(), true)
	return hosts, v.Err()
}

// remediationActions are the actions an operator may ask for, in the
// order the refusal lists them.
var remediationActions = []loomv1.RemediationAction{
	loomv1.RemediationAction_ACTION_DRAIN, loomv1.RemediationAction_ACTION_RESUME, loomv1.RemediationAction_ACTION_QUARANTINE,
	loomv1.RemediationAction_ACTION_REBOOT, loomv1.RemediationAction_ACTION_REIMAGE, loomv1.RemediationAction_ACTION_REPLACE,
}

// ValidateUpdateNodeRemediation checks an UpdateNodeRemediationRequest: a
// node, an action an operator may ask for, and a reason for every action
// but ACTION_RESUME (as Slurm wants one to drain).
func ValidateUpdateNodeRemediation(req *loomv1.UpdateNodeRemediationRequest) error {
	var v errs.Validator
	CheckCluster(&v, "cluster", req.GetCluster())
	v.Check(resname.ValidID(req.GetHostname()), "hostname", "%s is not a node hostname", clip(req.GetHostname()))
	a := req.GetAction()
	if !slices.Contains(remediationActions, a) {
		v.Add("action", "%s is not one of %v", a, remediationActions)
	}
	checkReason(&v, req.GetReason(), a != loomv1.RemediationAction_ACTION_RESUME)
	return v.Err()
}

// checkReason bounds a reason and, when required, wants one.
func checkReason(v *errs.Validator, reason string, required bool) {
	checkText(v, "reason", reason, MaxReasonBytes)
	if required && strings.TrimSpace(reason) == "" {
		v.Add("reason", "required: say why (it is shown in loom health nodes and sinfo -R), e.g. \"bad GPU 3\"")
	}
}

// nodeWideFaults are the kinds that are about the node, not one GPU: their
// gpu must be -1.
var nodeWideFaults = []loomv1.FaultKind{
	loomv1.FaultKind_FAULT_DISK_FULL, loomv1.FaultKind_FAULT_HUNG_JOB, loomv1.FaultKind_FAULT_NO_HEARTBEAT,
}

// ValidateInjectFault checks an InjectFaultRequest for a node with gpus
// GPUs: a known kind; gpu -1 (every GPU, or none for node-wide kinds) or
// an index below gpus; xid 1 to MaxXid for FAULT_XID and 0 otherwise; a
// finite value, 0 to MaxFaultValue, within the kind's own bounds.
func ValidateInjectFault(req *loomv1.InjectFaultRequest, gpus int32) error {
	var v errs.Validator
	CheckCluster(&v, "cluster", req.GetCluster())
	v.Check(resname.ValidID(req.GetHostname()), "hostname", "%s is not a node hostname", clip(req.GetHostname()))
	f := req.GetFault()
	if f == nil {
		v.Add("fault", "required: the fault to inject (kind, gpu, xid, value)")
		return v.Err()
	}
	kind := f.GetKind()
	if _, known := loomv1.FaultKind_name[int32(kind)]; !known || kind == loomv1.FaultKind_FAULT_KIND_UNSPECIFIED {
		v.Add("fault.kind", "%d is not a fault kind: FAULT_XID, FAULT_ECC_SBE, FAULT_ECC_DBE, FAULT_ROW_REMAP_FAILURE, FAULT_THERMAL, "+
			"FAULT_SLOW_GPU, FAULT_FALLEN_OFF_BUS, FAULT_NVLINK, FAULT_DISK_FULL, FAULT_HUNG_JOB, FAULT_NO_HEARTBEAT or FAULT_CLEAR", int32(kind))
		return v.Err()
	}
	nodeWide := slices.Contains(nodeWideFaults, kind)
	switch g := f.GetGpu(); {
	case nodeWide && g != -1:
		v.Add("fault.gpu", "%d: %s is about the whole node; send -1", g, kind)
	case g < -1:
		v.Add("fault.gpu", "%d is not a GPU index: 0 to %d, or -1 for every GPU", g, gpus-1)
	case !nodeWide && gpus <= 0 && kind != loomv1.FaultKind_FAULT_CLEAR:
		v.Add("fault.gpu", "the node has no GPUs for %s", kind)
	case g >= gpus && g >= 0:
		v.Add("fault.gpu", "%d is not below the node's GPU count, %d", g, gpus)
	}
	if kind == loomv1.FaultKind_FAULT_XID {
		if x := f.GetXid(); x < 1 || x > MaxXid {
			v.Add("fault.xid", "%d is outside 1 to %d", x, MaxXid)
		}
	} else if f.GetXid() != 0 {
		v.Add("fault.xid", "%d: only FAULT_XID takes an Xid", f.GetXid())
	}
	val := f.GetValue()
	switch {
	case math.IsNaN(val) || math.IsInf(val, 0):
		v.Add("fault.value", "%v is not a finite number", val)
	case val < 0 || val > MaxFaultValue:
		v.Add("fault.value", "%v is outside 0 to %g", val, float64(MaxFaultValue))
	case kind == loomv1.FaultKind_FAULT_ECC_SBE && val == 0:
		v.Add("fault.value", "required for FAULT_ECC_SBE: single-bit errors per minute, above 0")
	case kind == loomv1.FaultKind_FAULT_SLOW_GPU && val != 0 && (val <= 1 || val > MaxSlowFactor):
		v.Add("fault.value", "%v: FAULT_SLOW_GPU's factor is above 1 and at most %d (0: the default, 2)", val, MaxSlowFactor)
	case kind == loomv1.FaultKind_FAULT_THERMAL && val > MaxThermalRise:
		v.Add("fault.value", "%v: FAULT_THERMAL's rise is at most %d °C per second (0: the default, 0.25)", val, MaxThermalRise)
	case kind == loomv1.FaultKind_FAULT_NO_HEARTBEAT && val > MaxNoHeartbeatSeconds:
		v.Add("fault.value", "%v seconds, more than the limit of %d (0: until cleared)", val, MaxNoHeartbeatSeconds)
	case kind == loomv1.FaultKind_FAULT_ECC_DBE && val != 0 && val != math.Trunc(val):
		v.Add("fault.value", "%v: FAULT_ECC_DBE's value is a count of errors", val)
	}
	return v.Err()
}

// ValidateGetHealthScan checks a GetHealthScanRequest's names.
func ValidateGetHealthScan(req *loomv1.GetHealthScanRequest) error {
	var v errs.Validator
	CheckCluster(&v, "cluster", req.GetCluster())
	v.Check(req.GetScanId() != "", "scan_id", "required: the id `loom health scan` printed")
	checkText(&v, "scan_id", req.GetScanId(), MaxScanIDBytes)
	return v.Err()
}

// ValidateListHealthScans checks a ListHealthScansRequest's cluster and
// page size.
func ValidateListHealthScans(req *loomv1.ListHealthScansRequest) error {
	var v errs.Validator
	CheckCluster(&v, "cluster", req.GetCluster())
	paging.CheckSize(&v, req.GetPageSize())
	return v.Err()
}

// ValidateListHealthResults checks a ListHealthResultsRequest's filters.
func ValidateListHealthResults(req *loomv1.ListHealthResultsRequest) error {
	var v errs.Validator
	CheckCluster(&v, "cluster", req.GetCluster())
	if h := req.GetHostname(); h != "" {
		v.Check(resname.ValidID(h), "hostname", "%s is not a node hostname", clip(h))
	}
	if c := req.GetCheck(); c != "" {
		v.Check(healthcheck.ValidName(c), "check", "%s is not a check name", clip(c))
	}
	checkText(&v, "scan_id", req.GetScanId(), MaxScanIDBytes)
	paging.CheckSize(&v, req.GetPageSize())
	return v.Err()
}
