// Package adapters keeps the scheduler's records in Redis through libs/store:
// one hash per record kind under the service's prefix, each field a record.
//
//	scheduler:clusters  cluster name → JSON Cluster (with its partitions and node sets)
//	scheduler:nodes     node name    → JSON Node
//	scheduler:jobs      job name     → JSON {job: protobuf Job, attempt, model_dir, excluded};
//	                                   an array task's job holds only what differs from its array's template
//	scheduler:runs      job#attempt  → JSON Run
//	scheduler:arrays    array name   → JSON {name, cluster, job_id, limit, index_spec, template: protobuf Job}
//	scheduler:usage     cluster|account[|user] → JSON Usage (decayed fair-share usage)
//	scheduler:ended     job name     → JSON Ended (final state of a job retention pruned)
//
// The leader lease (lease.go) lives beside them: scheduler:leader and its
// fencing keys.
package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/store"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// Hash keys, relative to the store's prefix.
const (
	KeyClusters = "clusters"
	KeyNodes    = "nodes"
	KeyJobs     = "jobs"
	KeyRuns     = "runs"
	KeyArrays   = "arrays"
	KeyUsage    = "usage"
	KeyEnded    = "ended"
)

// Repo reads and writes the scheduler's records.
type Repo struct {
	st *store.Store
}

// NewRepo returns a repository over st.
func NewRepo(st *store.Store) *Repo { return &Repo{st: st} }

// Records is everything stored.
type Records struct {
	Clusters []*domain.Cluster
	Nodes    []*domain.Node
	Jobs     []*domain.Job
	Runs     []*domain.Run
	Arrays   []*domain.Array
	Usage    []*domain.Usage
	Ended    []*domain.Ended
}

// Load reads every record.
func (r *Repo) Load(ctx context.Context) (*Records, error) {
	var recs Records
	if err := loadJSON(ctx, r.st, KeyClusters, &recs.Clusters); err != nil {
		return nil, err
	}
	if err := loadJSON(ctx, r.st, KeyNodes, &recs.Nodes); err != nil {
		return nil, err
	}
	if err := loadJSON(ctx, r.st, KeyRuns, &recs.Runs); err != nil {
		return nil, err
	}
	rawArrays, err := r.st.HGetAll(ctx, KeyArrays)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", KeyArrays, err)
	}
	templates := map[string]*loomv1.Job{}
	for name, b := range rawArrays {
		a, err := DecodeArray(b)
		if err != nil {
			return nil, fmt.Errorf("load array %s: %w", name, err)
		}
		recs.Arrays = append(recs.Arrays, a)
		if a.Template != nil {
			templates[a.Name] = a.Template
		}
	}
	if err := loadJSON(ctx, r.st, KeyUsage, &recs.Usage); err != nil {
		return nil, err
	}
	if err := loadJSON(ctx, r.st, KeyEnded, &recs.Ended); err != nil {
		return nil, err
	}
	raw, err := r.st.HGetAll(ctx, KeyJobs)
	if err != nil {
		return nil, fmt.Errorf("load jobs: %w", err)
	}
	for name, b := range raw {
		j, err := DecodeTask(name, b, func(array string) *loomv1.Job { return templates[array] })
		if err != nil {
			return nil, fmt.Errorf("load job %s: %w", name, err)
		}
		recs.Jobs = append(recs.Jobs, j)
	}
	return &recs, nil
}

func loadJSON[T any](ctx context.Context, st *store.Store, key string, out *[]*T) error {
	raw, err := st.HGetAll(ctx, key)
	if err != nil {
		return fmt.Errorf("load %s: %w", key, err)
	}
	for field, b := range raw {
		v := new(T)
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("load %s %s: %w", key, field, err)
		}
		*out = append(*out, v)
	}
	return nil
}

// Write adds the records of c to tx: a set for each new version, a delete for
// each nil.
func Write(tx *store.Tx, c *domain.Change) error {
	for name, v := range c.Clusters {
		if err := putJSON(tx, KeyClusters, name, v); err != nil {
			return err
		}
	}
	for name, v := range c.Nodes {
		if err := putJSON(tx, KeyNodes, name, v); err != nil {
			return err
		}
	}
	for key, v := range c.Runs {
		if err := putJSON(tx, KeyRuns, key, v); err != nil {
			return err
		}
	}
	for name, a := range c.Arrays {
		if a == nil {
			tx.HDel(KeyArrays, name)
			continue
		}
		b, err := EncodeArray(a)
		if err != nil {
			return fmt.Errorf("encode array %s: %w", name, err)
		}
		tx.HSet(KeyArrays, name, b)
	}
	for key, v := range c.Usage {
		if err := putJSON(tx, KeyUsage, key, v); err != nil {
			return err
		}
	}
	for name, j := range c.Jobs {
		if j == nil {
			tx.HDel(KeyJobs, name)
			continue
		}
		b, err := EncodeJob(j)
		if err != nil {
			return fmt.Errorf("encode job %s: %w", name, err)
		}
		tx.HSet(KeyJobs, name, b)
	}
	return nil
}

// WritePruned adds what retention pruned to tx: the jobs, runs and arrays
// deleted, the compact records added and expired, all in one Apply so that
// a crash leaves the whole prune or none of it.
func WritePruned(tx *store.Tx, p *domain.Pruned) error {
	for _, name := range p.Jobs {
		tx.HDel(KeyJobs, name)
	}
	for _, key := range p.Runs {
		tx.HDel(KeyRuns, key)
	}
	for _, name := range p.Arrays {
		tx.HDel(KeyArrays, name)
	}
	for _, name := range p.Expired {
		tx.HDel(KeyEnded, name)
	}
	for _, e := range p.Ended {
		if err := putJSON(tx, KeyEnded, e.Name, e); err != nil {
			return err
		}
	}
	return nil
}

func putJSON[T any](tx *store.Tx, key, field string, v *T) error {
	if v == nil {
		tx.HDel(key, field)
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", key, field, err)
	}
	tx.HSet(key, field, b)
	return nil
}

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
	Delta    bool     `json:"delta,omitempty"`
	Cleared  []int32  `json:"cleared,omitempty"`
}

// EncodeJob serialises a job record; an array task with a template (see
// domain.Job.Template) as its difference from it, so that the environment,
// script and spec an array's tasks share are stored once, in the array's
// record (EncodeArray).
func EncodeJob(j *domain.Job) ([]byte, error) {
	rec := jobRecord{Attempt: j.Attempt, ModelDir: j.ModelDir, Excluded: j.Excluded}
	msg := j.Job
	if t := j.Template(); t != nil {
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
func DecodeJob(b []byte) (*domain.Job, error) {
	return DecodeTask("", b, func(string) *loomv1.Job { return nil })
}

// DecodeTask parses what EncodeJob wrote under the key name; template gives
// the template of an array by name, for records written as a task's
// difference from it. A difference whose array has no template is an error
// (the array's record is written with its first tasks and deleted after the
// last: it cannot be missing).
func DecodeTask(name string, b []byte, template func(array string) *loomv1.Job) (*domain.Job, error) {
	var rec jobRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	job := &loomv1.Job{}
	if err := proto.Unmarshal(rec.Job, job); err != nil {
		return nil, err
	}
	if rec.Delta {
		task, err := resname.SplitJob(name)
		if err != nil {
			return nil, fmt.Errorf("array task %s: %w", name, err)
		}
		array := resname.Job{Project: task.Project, ID: job.GetArrayJobId()}.String()
		t := template(array)
		if t == nil || job.GetArrayJobId() == "" {
			return nil, fmt.Errorf("array task %s: no template for array %q", name, array)
		}
		job = patchJob(t, job, rec.Cleared)
		job.Name = name
		if job.GetJobId() == t.GetJobId() {
			job.JobId = task.ID
		}
	}
	return &domain.Job{Job: job, Attempt: rec.Attempt, ModelDir: rec.ModelDir, Excluded: rec.Excluded}, nil
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
// with delta's, sharing t's environment map (domain.Array.Template).
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
func EncodeArray(a *domain.Array) ([]byte, error) {
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
func DecodeArray(b []byte) (*domain.Array, error) {
	var rec arrayRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	a := &domain.Array{Name: rec.Name, Cluster: rec.Cluster, JobID: rec.JobID, Limit: rec.Limit, Indexes: rec.Indexes, Tasks: rec.Tasks}
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
