package jobstore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// jobRecord is a Job as stored: the resource in protobuf, the rest in JSON.
// With Delta, Job holds only the fields in which an array task differs from
// its array's template — not its name (the record's key), nor its job id
// when that is the name's last element — and Cleared the fields the
// template has and the task does not.
type jobRecord struct {
	Job      []byte   `json:"job"`
	Attempt  int32    `json:"attempt,omitempty"`
	ModelDir string   `json:"model_dir,omitempty"`
	Excluded []string `json:"excluded,omitempty"`
	Infra    int32    `json:"infra_restarts,omitempty"`
	// Unlaunched is JobRecord.UnlaunchedRequeues.
	Unlaunched int32 `json:"unlaunched_requeues,omitempty"`
	// Avoid is JobRecord.Avoid.
	Avoid string `json:"avoid,omitempty"`
	// Partitions is JobRecord.Partitions.
	Partitions string  `json:"partitions,omitempty"`
	Delta      bool    `json:"delta,omitempty"`
	Cleared    []int32 `json:"cleared,omitempty"`
}

// EncodeJob serialises a job record; an array task with a template (tmpl:
// its array's Template, domain.Job.Template; nil for other jobs) as its
// difference from it, so that the environment,
// script and spec an array's tasks share are stored once, in the array's
// record (EncodeArray).
func EncodeJob(j *JobRecord, tmpl *loomv1.Job) ([]byte, error) {
	rec := jobRecord{Attempt: j.Attempt, ModelDir: j.ModelDir, Excluded: j.Excluded, Infra: j.InfraRestarts,
		Unlaunched: j.UnlaunchedRequeues, Avoid: j.Avoid, Partitions: j.Partitions}
	msg := j.Job
	if t := tmpl; t != nil {
		var delta *loomv1.Job
		delta, rec.Cleared = diffJob(j.Job, t)
		delta.Name = ""
		if strings.HasSuffix(j.Name(), "/"+delta.GetJobId()) {
			delta.JobId = ""
		}
		msg, rec.Delta = delta, true
	}
	pb, err := proto.Marshal(msg)
	if err != nil {
		return nil, err
	}
	rec.Job = pb
	return json.Marshal(rec)
}

// DecodeJob parses what EncodeJob wrote for a job that is no array task
// with a template (DecodeTask reads every record).
func DecodeJob(b []byte) (*JobRecord, error) {
	return DecodeTask("", b, func(string) *loomv1.Job { return nil })
}

// DecodeTask parses what EncodeJob wrote under the key name; template gives
// the template of an array by name, for records written as a task's
// difference from it. A difference whose array has no template is an error
// (the array's record is written with its first tasks and deleted after the
// last: it cannot be missing).
func DecodeTask(name string, b []byte, template func(array string) *loomv1.Job) (*JobRecord, error) {
	out := new(JobRecord)
	if err := DecodeTaskInto(out, name, b, template); err != nil {
		return nil, err
	}
	return out, nil
}

// DecodeTaskInto is DecodeTask into *out (overwritten), for a caller whose record
// embeds a JobRecord: one allocation per record, not two.
func DecodeTaskInto(out *JobRecord, name string, b []byte, template func(array string) *loomv1.Job) error {
	var rec jobRecord
	if err := decodeJobRecord(b, &rec); err != nil {
		return err
	}
	job := &loomv1.Job{}
	// Merge into the new, empty message: the same message as Unmarshal,
	// without its Reset of every field first.
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(rec.Job, job); err != nil {
		return err
	}
	if rec.Delta {
		task, err := resname.SplitJob(name)
		if err != nil {
			return fmt.Errorf("array task %s: %w", name, err)
		}
		array := resname.Job{Project: task.Project, ID: job.GetArrayJobId()}.String()
		t := template(array)
		if t == nil || job.GetArrayJobId() == "" {
			return fmt.Errorf("array task %s: no template for array %q", name, array)
		}
		job = patchJob(t, job, rec.Cleared)
		job.Name = name
		if job.GetJobId() == t.GetJobId() {
			job.JobId = task.ID
		}
	}
	*out = JobRecord{Job: job, Attempt: rec.Attempt, ModelDir: rec.ModelDir, Excluded: rec.Excluded, InfraRestarts: rec.Infra,
		UnlaunchedRequeues: rec.Unlaunched, Avoid: rec.Avoid, Partitions: rec.Partitions}
	return nil
}

// diffJob returns the fields of j that differ from t's (a new message
// sharing their values with j: marshal it, do not keep it), and the numbers
// of the fields t has and j has not.
func diffJob(j, t *loomv1.Job) (*loomv1.Job, []int32) {
	delta := &loomv1.Job{}
	jm, tm, dm := j.ProtoReflect(), t.ProtoReflect(), delta.ProtoReflect()
	var cleared []int32
	fields := jm.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch jh, th := jm.Has(fd), tm.Has(fd); {
		case !jh && th:
			cleared = append(cleared, int32(fd.Number()))
		case jh && (!th || !jm.Get(fd).Equal(tm.Get(fd))):
			dm.Set(fd, jm.Get(fd))
		}
	}
	return delta, cleared
}

// patchJob is diffJob undone: a copy of t without the cleared fields and
// with delta's, sharing t's environment map (Array.Template).
func patchJob(t, delta *loomv1.Job, cleared []int32) *loomv1.Job {
	out := proto.Clone(t).(*loomv1.Job)
	out.Env = t.Env
	om := out.ProtoReflect()
	fields := om.Descriptor().Fields()
	for _, n := range cleared {
		if fd := fields.ByNumber(protoreflect.FieldNumber(n)); fd != nil {
			om.Clear(fd)
		}
	}
	delta.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		om.Set(fd, v)
		return true
	})
	return out
}

// arrayRecord is an Array as stored: its task ids as an index spec (its
// tasks' names follow from them: task k is job A+k), its template in
// protobuf. Records written before templates hold Indexes and Tasks instead.
type arrayRecord struct {
	Name      string   `json:"name"`
	Cluster   string   `json:"cluster"`
	JobID     string   `json:"job_id"`
	Limit     int32    `json:"limit,omitempty"`
	IndexSpec string   `json:"index_spec,omitempty"`
	Template  []byte   `json:"template,omitempty"`
	Indexes   []int32  `json:"indexes,omitempty"`
	Tasks     []string `json:"tasks,omitempty"`
}

// EncodeArray serialises an array record, with its template: the parts its
// tasks share, stored once.
func EncodeArray(a *Array) ([]byte, error) {
	rec := arrayRecord{Name: a.Name, Cluster: a.Cluster, JobID: a.JobID, Limit: a.Limit}
	if a.Template != nil {
		pb, err := proto.Marshal(a.Template)
		if err != nil {
			return nil, err
		}
		rec.Template = pb
	}
	if slices.Equal(a.Tasks, taskNames(a.Name, a.JobID, len(a.Indexes))) {
		idx := make([]int, len(a.Indexes))
		for i, x := range a.Indexes {
			idx[i] = int(x)
		}
		rec.IndexSpec = slurmspec.FormatIndexes(idx)
	} else {
		rec.Indexes, rec.Tasks = a.Indexes, a.Tasks
	}
	return json.Marshal(rec)
}

// DecodeArray parses what EncodeArray wrote (or an array record from before
// templates: plain JSON of its fields).
func DecodeArray(b []byte) (*Array, error) {
	var rec arrayRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	a := &Array{Name: rec.Name, Cluster: rec.Cluster, JobID: rec.JobID, Limit: rec.Limit, Indexes: rec.Indexes, Tasks: rec.Tasks}
	if rec.IndexSpec != "" {
		spec, err := slurmspec.ParseArray(rec.IndexSpec, slurmspec.MaxArraySizeCeiling) // accepted when submitted
		if err != nil {
			return nil, fmt.Errorf("index spec %q: %w", rec.IndexSpec, err)
		}
		for _, x := range spec.Indexes() {
			a.Indexes = append(a.Indexes, int32(x))
		}
		a.Tasks = taskNames(a.Name, a.JobID, len(a.Indexes))
	}
	if rec.Template != nil {
		a.Template = &loomv1.Job{}
		if err := proto.Unmarshal(rec.Template, a.Template); err != nil {
			return nil, fmt.Errorf("template: %w", err)
		}
	}
	return a, nil
}

// taskNames are the names of an array's n tasks: job ids A+k beside the
// array's name (nil when A is not a number).
func taskNames(array, jobID string, n int) []string {
	first, err := strconv.ParseInt(jobID, 10, 64)
	if err != nil {
		return nil
	}
	a, err := resname.SplitJob(array)
	if err != nil {
		return nil
	}
	out := make([]string, n)
	for k := range out {
		out[k] = resname.JobOf(a.Project, first+int64(k)).String()
	}
	return out
}
