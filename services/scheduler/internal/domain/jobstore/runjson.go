package jobstore

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/loom-ml/loom/libs/acct"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// DecodeRun parses a stored run record (json.Marshal of a RunRecord, or of
// domain.Run, which embeds one and adds no exported field) into *r, which
// it overwrites. A restarted scheduler decodes tens of thousands of them
// before its first pass, and encoding/json took two and a half times as
// long as this (BenchmarkDecodeRun: it validates the whole input, then
// decodes it by reflection, matching every key case-insensitively): records exactly as json.Marshal writes them —
// keys in the order of the fields, strings without escapes, integers as
// integers — take a direct parse; anything else (escapes, spaces, another
// key order or spelling, a repeated key, an unknown field, out-of-range
// numbers) is left to json.Unmarshal, so a record means what encoding/json
// says it means (TestDecodeRunAsJSON, FuzzDecodeRun). The stored form is
// unchanged: any release reads what this one writes, and the reverse.
func DecodeRun(b []byte, r *RunRecord) error {
	*r = RunRecord{}
	if decodeRunDirect(b, r) {
		return nil
	}
	*r = RunRecord{}
	return json.Unmarshal(b, r)
}

// decodeRunDirect is DecodeRun's direct parse into a zero *r: it reports
// false, r partly set, for a record not in json.Marshal's own form.
func decodeRunDirect(b []byte, r *RunRecord) bool {
	p := recordParser{b: b}
	return p.run(r) && len(p.b) == 0
}

// obj reads an object's fields, each optional, in the order json.Marshal
// writes them (a struct's field order). A field whose key is not the next
// one expected, or that repeats, leaves the parse short of the closing
// brace: the record falls back to encoding/json.
type obj struct {
	p     *recordParser
	first bool
}

// open consumes the object's opening brace.
func (p *recordParser) open() (obj, bool) {
	return obj{p: p, first: true}, p.lit("{")
}

// key consumes the key k (and the comma before it, after the first field)
// when it comes next.
func (o *obj) key(k string) bool {
	b := o.p.b
	if !o.first && !o.p.lit(",") {
		return false
	}
	if !o.p.lit(`"`) || !o.p.lit(k) || !o.p.lit(`":`) {
		o.p.b = b
		return false
	}
	o.first = false
	return true
}

// close consumes the object's closing brace.
func (o *obj) close() bool { return o.p.lit("}") }

// null consumes a null (what json.Marshal writes for a nil slice, map or
// pointer, and what encoding/json decodes to one).
func (p *recordParser) null() bool { return p.lit("null") }

// string reads a string as json.Marshal writes one without escapes.
func (p *recordParser) string(s *string) bool {
	if !p.lit(`"`) {
		return false
	}
	b, ok := p.str()
	*s = string(b)
	return ok
}

// bool reads true or false.
func (p *recordParser) bool(v *bool) bool {
	if p.lit("true") {
		*v = true
		return true
	}
	return p.lit("false")
}

// integer consumes an integer as json.Marshal writes one (an optional
// minus, no leading zeros, no fraction or exponent) within [lo, hi]: what
// encoding/json decodes into an integer field of that range.
func (p *recordParser) integer(lo, hi int64) (int64, bool) {
	i := 0
	neg := len(p.b) > 0 && p.b[0] == '-'
	if neg {
		i = 1
	}
	start := i
	var v uint64
	for i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9' {
		if i-start == 19 {
			return 0, false // past any int64
		}
		v = v*10 + uint64(p.b[i]-'0')
		i++
	}
	if i == start || (p.b[start] == '0' && i-start > 1) {
		return 0, false
	}
	if i < len(p.b) && (p.b[i] == '.' || p.b[i] == 'e' || p.b[i] == 'E') {
		return 0, false
	}
	var n int64
	switch {
	case !neg && v <= uint64(hi):
		n = int64(v)
	case neg && lo < 0 && v <= uint64(-(lo+1))+1:
		n = -int64(v-1) - 1
	default:
		return 0, false
	}
	p.b = p.b[i:]
	return n, true
}

func (p *recordParser) i32(v *int32) bool {
	n, ok := p.int32()
	*v = n
	return ok
}

func (p *recordParser) i64(v *int64) bool {
	n, ok := p.integer(-1<<63, 1<<63-1)
	*v = n
	return ok
}

func (p *recordParser) int(v *int) bool {
	n, ok := p.integer(minInt, maxInt)
	*v = int(n)
	return ok
}

const (
	maxInt = int64(^uint(0) >> 1)
	minInt = -maxInt - 1
)

func (p *recordParser) duration(v *time.Duration) bool {
	n, ok := p.integer(-1<<63, 1<<63-1)
	*v = time.Duration(n)
	return ok
}

func (p *recordParser) jobState(v *loomv1.JobState) bool {
	n, ok := p.integer(-1<<31, 1<<31-1)
	*v = loomv1.JobState(n)
	return ok
}

func (p *recordParser) stepState(v *eventsv1.StepState) bool {
	n, ok := p.integer(-1<<31, 1<<31-1)
	*v = eventsv1.StepState(n)
	return ok
}

// float64 reads a number in JSON's grammar, as encoding/json does
// (strconv.ParseFloat of the literal).
func (p *recordParser) float64(v *float64) bool {
	i := 0
	if i < len(p.b) && p.b[i] == '-' {
		i++
	}
	digits := func() bool {
		s := i
		for i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9' {
			i++
		}
		return i > s
	}
	switch {
	case i < len(p.b) && p.b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(p.b) && p.b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(p.b) && (p.b[i] == 'e' || p.b[i] == 'E') {
		i++
		if i < len(p.b) && (p.b[i] == '+' || p.b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	f, err := strconv.ParseFloat(string(p.b[:i]), 64)
	if err != nil {
		return false
	}
	*v, p.b = f, p.b[i:]
	return true
}

// time reads a time as time.Time's UnmarshalJSON does (the same call
// encoding/json makes), from a string without escapes.
func (p *recordParser) time(t *time.Time) bool {
	b := p.b
	if !p.lit(`"`) {
		return false
	}
	s, ok := p.str()
	if !ok {
		return false
	}
	return t.UnmarshalJSON(b[:len(s)+2]) == nil
}

// i32Ptr reads null (nil) or an int32.
func (p *recordParser) i32Ptr(v **int32) bool {
	if p.null() {
		return true
	}
	n := new(int32)
	*v = n
	return p.i32(n)
}

// list reads null (nil) or an array, each element by elem: as encoding/json
// decodes into a slice, [] is an empty slice, not nil.
func list[T any](p *recordParser, v *[]T, elem func(*T) bool) bool {
	if p.null() {
		return true
	}
	if !p.lit("[") {
		return false
	}
	*v = []T{}
	if p.lit("]") {
		return true
	}
	for {
		var x T
		if !elem(&x) {
			return false
		}
		*v = append(*v, x)
		if !p.lit(",") {
			return p.lit("]")
		}
	}
}

// dict reads null (nil) or an object with string keys, each value by elem:
// {} is an empty map, not nil, and a repeated key keeps its last value, as
// encoding/json decodes into a map.
func dict[T any](p *recordParser, v *map[string]T, elem func(*T) bool) bool {
	if p.null() {
		return true
	}
	if !p.lit("{") {
		return false
	}
	*v = map[string]T{}
	if p.lit("}") {
		return true
	}
	for {
		var k string
		var x T
		if !p.string(&k) || !p.lit(":") || !elem(&x) {
			return false
		}
		(*v)[k] = x
		if !p.lit(",") {
			return p.lit("}")
		}
	}
}

func (p *recordParser) strings(v *[]string) bool { return list(p, v, p.string) }

func (p *recordParser) i32s(v *[]int32) bool { return list(p, v, p.i32) }

// run reads a RunRecord's fields.
func (p *recordParser) run(r *RunRecord) bool {
	o, ok := p.open()
	if !ok {
		return false
	}
	if o.key("job") && !p.string(&r.Job) ||
		o.key("cluster") && !p.string(&r.Cluster) ||
		o.key("attempt") && !p.i32(&r.Attempt) ||
		o.key("nodes") && !p.strings(&r.Nodes) ||
		o.key("hostnames") && !p.strings(&r.Hostnames) ||
		o.key("gpus") && !dict(p, &r.GPUs, p.i32s) ||
		o.key("cpus") && !p.i32s(&r.CPUs) ||
		o.key("tasks") && !p.i32s(&r.Tasks) ||
		o.key("mem_mb") && !p.i64(&r.MemMB) ||
		o.key("exclusive") && !p.bool(&r.Exclusive) ||
		o.key("exclusive_user") && !p.bool(&r.ExclusiveUser) ||
		o.key("steps") && !dict(p, &r.Steps, p.step) ||
		o.key("released") && !p.bool(&r.Released) ||
		o.key("partition") && !p.string(&r.Partition) ||
		o.key("user") && !p.string(&r.User) ||
		o.key("account") && !p.string(&r.Account) ||
		o.key("qos") && !p.string(&r.QOS) ||
		o.key("start") && !p.time(&r.Start) ||
		o.key("end") && !p.time(&r.End) ||
		o.key("outcome") && !p.jobState(&r.Outcome) ||
		o.key("exit_code") && !p.i32(&r.ExitCode) ||
		o.key("exit_signal") && !p.i32Ptr(&r.ExitSignal) ||
		o.key("reason") && !p.string(&r.Reason) ||
		o.key("signaled") && !p.bool(&r.Signaled) ||
		o.key("preempt_by") && !p.string(&r.PreemptBy) ||
		o.key("preempt_at") && !p.time(&r.PreemptAt) ||
		o.key("job_steps") && !list(p, &r.JobSteps, p.jobStep) ||
		o.key("next_step_id") && !p.i32(&r.NextStepID) ||
		o.key("steps_dropped") && !p.i32(&r.StepsDropped) ||
		o.key("derived_exit") && !p.i32Ptr(&r.DerivedExit) ||
		o.key("fence_until") && !p.time(&r.FenceUntil) ||
		o.key("progress") && !p.progress(&r.Progress) ||
		o.key("checkpoint_by") && !p.time(&r.CheckpointBy) ||
		o.key("checkpoint_from") && !p.i64(&r.CheckpointFrom) ||
		o.key("checkpoint_asked") && !p.time(&r.CheckpointAsked) ||
		o.key("checkpoint_node") && !p.string(&r.CheckpointNode) ||
		o.key("checkpoint_reason") && !p.string(&r.CheckpointReason) ||
		o.key("survivors_by") && !p.time(&r.SurvivorsBy) ||
		o.key("survivors_from") && !p.i64(&r.SurvivorsFrom) ||
		o.key("survivors_reason") && !p.string(&r.SurvivorsReason) ||
		o.key("survivors_of_crash") && !p.bool(&r.SurvivorsOfCrash) ||
		o.key("failed_node") && !p.string(&r.FailedNode) ||
		o.key("stops_sent") && !p.time(&r.StopsSent) {
		return false
	}
	return o.close()
}

// step reads a Step's fields.
func (p *recordParser) step(s *Step) bool {
	o, ok := p.open()
	if !ok {
		return false
	}
	if o.key("state") && !p.stepState(&s.State) ||
		o.key("exit_code") && !p.i32(&s.ExitCode) ||
		o.key("exit_signal") && !p.i32Ptr(&s.ExitSignal) ||
		o.key("message") && !p.string(&s.Message) ||
		o.key("abandoned") && !p.bool(&s.Abandoned) ||
		o.key("idle") && !p.bool(&s.Idle) ||
		o.key("fence_until") && !p.time(&s.FenceUntil) ||
		o.key("usage") && !p.usagePtr(&s.Usage) ||
		o.key("usage_at") && !p.time(&s.UsageAt) {
		return false
	}
	return o.close()
}

// jobStep reads a JobStep's fields.
func (p *recordParser) jobStep(s *JobStep) bool {
	o, ok := p.open()
	if !ok {
		return false
	}
	if o.key("id") && !p.i32(&s.ID) ||
		o.key("request_id") && !p.string(&s.RequestID) ||
		o.key("command") && !p.strings(&s.Command) ||
		o.key("nodes") && !p.strings(&s.Nodes) ||
		o.key("hostnames") && !p.strings(&s.Hostnames) ||
		o.key("tasks") && !p.i32s(&s.Tasks) ||
		o.key("output_dir") && !p.string(&s.OutputDir) ||
		o.key("kill_on_bad_exit") && !p.bool(&s.KillOnBadExit) ||
		o.key("parts") && !list(p, &s.Parts, p.stepPart) ||
		o.key("exit_codes") && !p.i32s(&s.ExitCodes) ||
		o.key("exit_signals") && !p.i32s(&s.ExitSignals) ||
		o.key("state") && !p.jobState(&s.State) ||
		o.key("reason") && !p.string(&s.Reason) ||
		o.key("stopping") && !p.bool(&s.Stopping) ||
		o.key("cancelled") && !p.bool(&s.Cancelled) ||
		o.key("start") && !p.time(&s.Start) ||
		o.key("end") && !p.time(&s.End) ||
		o.key("gpus") && !list(p, &s.GPUs, p.i32s) ||
		o.key("cpus") && !p.i32s(&s.CPUs) ||
		o.key("overlap") && !p.bool(&s.Overlap) ||
		o.key("gpu_request") && !p.i32(&s.GPURequest) ||
		o.key("gpus_per_task") && !p.i32(&s.GPUsPerTask) ||
		o.key("cpus_per_gpu") && !p.i32(&s.CPUsPerGPU) ||
		o.key("cpus_per_task") && !p.i32(&s.CPUsPerTask) ||
		o.key("gpu_bind_none") && !p.bool(&s.GPUBindNone) ||
		o.key("gpus_per_node") && !p.i32(&s.GPUsPerNode) ||
		o.key("allocation_cpus") && !p.bool(&s.AllocationCPUs) ||
		o.key("cancelled_by") && !p.string(&s.CancelledBy) ||
		o.key("distribution") && !p.string(&s.Distribution) {
		return false
	}
	return o.close()
}

// stepPart reads a StepPart's fields.
func (p *recordParser) stepPart(s *StepPart) bool {
	o, ok := p.open()
	if !ok {
		return false
	}
	if o.key("state") && !p.stepState(&s.State) ||
		o.key("message") && !p.string(&s.Message) ||
		o.key("usage") && !list(p, &s.Usage, p.usage) {
		return false
	}
	return o.close()
}

// progress reads a Progress's fields.
func (p *recordParser) progress(g *Progress) bool {
	o, ok := p.open()
	if !ok {
		return false
	}
	if o.key("step") && !p.i64(&g.Step) ||
		o.key("checkpoint_step") && !p.i64(&g.CheckpointStep) ||
		o.key("checkpoint_time") && !p.time(&g.CheckpointTime) ||
		o.key("output_bytes") && !p.i64(&g.OutputBytes) ||
		o.key("checkpointing") && !p.duration(&g.Checkpointing) ||
		o.key("last") && !p.time(&g.Last) ||
		o.key("kept_at") && !p.time(&g.KeptAt) ||
		o.key("checkpoint_kept_at") && !p.time(&g.CheckpointKeptAt) {
		return false
	}
	return o.close()
}

// usagePtr reads null (nil) or an acct.Usage.
func (p *recordParser) usagePtr(u **acct.Usage) bool {
	if p.null() {
		return true
	}
	*u = new(acct.Usage)
	return p.usage(*u)
}

// usage reads an acct.Usage's fields.
func (p *recordParser) usage(u *acct.Usage) bool {
	o, ok := p.open()
	if !ok {
		return false
	}
	if o.key("user_cpu") && !p.duration(&u.UserCPU) ||
		o.key("system_cpu") && !p.duration(&u.SystemCPU) ||
		o.key("max_rss") && !p.i64(&u.MaxRSS) ||
		o.key("rss") && !p.i64(&u.RSS) ||
		o.key("max_vmsize") && !p.i64(&u.MaxVMSize) ||
		o.key("read") && !p.i64(&u.Read) ||
		o.key("write") && !p.i64(&u.Write) ||
		o.key("time") && !p.time(&u.Time) ||
		o.key("gpus") && !p.int(&u.GPUs) ||
		o.key("gpu_util") && !p.float64(&u.GPUUtil) ||
		o.key("gpu_samples") && !p.int(&u.GPUSamples) ||
		o.key("max_gpu_mem") && !p.i64(&u.MaxGPUMem) {
		return false
	}
	return o.close()
}
