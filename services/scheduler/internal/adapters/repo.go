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
//	scheduler:ended     job name     → JSON Ended (final state and goodput of a job retention pruned)
//	scheduler:assocs    project|account|user → JSON AssocLimit (an association's MaxJobs and shares, from AssociationChanged; with no user, an account's parent and shares, from AccountChanged)
//	scheduler:step-requests job#attempt.step → protobuf CreateJobStep (the request of a job step that waits for resources)
//
// The leader lease (lease.go) lives beside them: scheduler:leader and its
// fencing keys.
package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"sync"

	"github.com/loom-ml/loom/libs/store"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/jobstore"
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
	// KeyAssocs: domain.AssocLimitKey → JSON AssocLimit (an association's MaxJobs and shares, or an account's parent and shares).
	KeyAssocs = "assocs"
	// KeyStepRequests: domain.StepRequestKey → protobuf CreateJobStep (a waiting job step's request).
	KeyStepRequests = "step-requests"
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
	Assocs   []*domain.AssocLimit
	// StepRequests are the waiting job steps' requests, by key.
	StepRequests map[string][]byte
}

// loadChunk is how many fields one read of a hash takes (store.HScanAll):
// reading 100,000 jobs in one HGETALL would hold Redis, and every write of
// every service that shares it, for about 90 ms; by 1,000 the longest hold
// is about 5 ms (BenchmarkRestartFromRedis's redis-longest-ms). The reads
// are not atomic, which Load can afford: a leader
// loads after taking the lease, when no one else writes, and a follower's
// reads may lag anyway.
const loadChunk = 1000

// Load reads every record.
func (r *Repo) Load(ctx context.Context) (*Records, error) {
	raw, err := r.LoadRaw(ctx)
	if err != nil {
		return nil, err
	}
	return raw.Decode()
}

// recordKeys are the hashes that hold the scheduler's records.
var recordKeys = []string{KeyClusters, KeyNodes, KeyRuns, KeyArrays, KeyUsage, KeyEnded, KeyAssocs, KeyStepRequests, KeyJobs}

// Raw is every stored record as stored: by hash key (KeyJobs, ...), then
// field, the encoded record.
type Raw map[string]map[string][]byte

// LoadRaw reads every record without decoding it.
func (r *Repo) LoadRaw(ctx context.Context) (Raw, error) {
	raw := make(Raw, len(recordKeys))
	for _, key := range recordKeys {
		m, err := r.st.HScanAll(ctx, key, loadChunk)
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", key, err)
		}
		raw[key] = m
	}
	return raw, nil
}

// Apply makes the writes of the logged transactions es part of raw, in
// order: raw becomes what the store held after the last of them. It
// returns ErrReload, changing nothing, when one of them overflowed (its
// writes are not in the log) or wrote a record hash other than field by
// field.
func (raw Raw) Apply(es []store.LogEntry) error {
	for _, e := range es {
		if e.Overflowed {
			return fmt.Errorf("change %s: %w", e.ID, ErrReload)
		}
	}
	for _, e := range es {
		for _, o := range e.Ops {
			if isRecordKey(o.Key) && o.Op != "HSET" && o.Op != "HDEL" {
				return fmt.Errorf("change %s: %s of %s, which holds records field by field: %w", e.ID, o.Op, o.Key, ErrReload)
			}
		}
	}
	for _, e := range es {
		for _, o := range e.Ops {
			m, ok := raw[o.Key]
			if !ok {
				continue // not a record: the fence, the version
			}
			if o.Op == "HSET" {
				m[o.Field] = o.Value
			} else {
				delete(m, o.Field)
			}
		}
	}
	return nil
}

// Decode decodes every record of raw.
func (raw Raw) Decode() (*Records, error) {
	var recs Records
	if err := decodeJSON(raw, KeyClusters, &recs.Clusters); err != nil {
		return nil, err
	}
	if err := decodeJSON(raw, KeyNodes, &recs.Nodes); err != nil {
		return nil, err
	}
	runs, err := decodeAll(raw[KeyRuns], func(key string, b []byte) (*domain.Run, error) {
		r := new(domain.Run)
		if err := jobstore.DecodeRun(b, &r.RunRecord); err != nil {
			return nil, fmt.Errorf("load %s %s: %w", KeyRuns, key, err)
		}
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	recs.Runs = runs
	templates := map[string]*loomv1.Job{}
	for name, b := range raw[KeyArrays] {
		a, err := DecodeArray(b)
		if err != nil {
			return nil, fmt.Errorf("load array %s: %w", name, err)
		}
		recs.Arrays = append(recs.Arrays, a)
		if a.Template != nil {
			templates[a.Name] = a.Template
		}
	}
	if err := decodeJSON(raw, KeyUsage, &recs.Usage); err != nil {
		return nil, err
	}
	if err := decodeJSON(raw, KeyEnded, &recs.Ended); err != nil {
		return nil, err
	}
	if err := decodeJSON(raw, KeyAssocs, &recs.Assocs); err != nil {
		return nil, err
	}
	recs.StepRequests = maps.Clone(raw[KeyStepRequests])
	template := func(array string) *loomv1.Job { return templates[array] } // read only while decoding
	recs.Jobs, err = decodeAll(raw[KeyJobs], func(name string, b []byte) (*domain.Job, error) {
		j, err := DecodeTask(name, b, template)
		if err != nil {
			return nil, fmt.Errorf("load job %s: %w", name, err)
		}
		return j, nil
	})
	if err != nil {
		return nil, err
	}
	return &recs, nil
}

func decodeJSON[T any](raw Raw, key string, out *[]*T) error {
	vs, err := decodeAll(raw[key], func(field string, b []byte) (*T, error) {
		v := new(T)
		if err := json.Unmarshal(b, v); err != nil {
			return nil, fmt.Errorf("load %s %s: %w", key, field, err)
		}
		return v, nil
	})
	if err != nil {
		return err
	}
	*out = append(*out, vs...)
	return nil
}

// parallelDecodeMin is the fewest records decodeAll spreads over the
// processors: below it, starting goroutines costs more than it saves.
const parallelDecodeMin = 2048

// decodeAll decodes every field of raw with decode, in no particular order
// (a hash has none), spread over the processors when there are many: a
// restarted scheduler decodes its 100,000 job records before it can make
// its first decision, and each decode is independent of the others. decode
// must be safe to call concurrently. On failure it returns an error of one
// of the fields that failed.
func decodeAll[T any](raw map[string][]byte, decode func(field string, b []byte) (T, error)) ([]T, error) {
	fields := make([]string, 0, len(raw))
	values := make([][]byte, 0, len(raw))
	for f, b := range raw {
		fields, values = append(fields, f), append(values, b)
	}
	out := make([]T, len(fields))
	workers := 1
	if len(fields) >= parallelDecodeMin {
		workers = min(runtime.GOMAXPROCS(0), len(fields)/(parallelDecodeMin/2))
	}
	chunk := (len(fields) + workers - 1) / max(workers, 1)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*chunk, min((w+1)*chunk, len(fields))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				v, err := decode(fields[i], values[i])
				if err != nil {
					errs[w] = err
					return
				}
				out[i] = v
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
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
	for key, v := range c.Assocs {
		if err := putJSON(tx, KeyAssocs, key, v); err != nil {
			return err
		}
	}
	for key, b := range c.StepRequests {
		if b == nil {
			tx.HDel(KeyStepRequests, key)
		} else {
			tx.HSet(KeyStepRequests, key, b)
		}
	}
	for name, j := range c.AllJobs() {
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
	for _, key := range p.StepRequests {
		tx.HDel(KeyStepRequests, key)
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

// EncodeJob serialises a job record (jobstore.EncodeJob, against the
// template of the array the job is a task of).
func EncodeJob(j *domain.Job) ([]byte, error) { return jobstore.EncodeJob(&j.JobRecord, j.Template()) }

// DecodeJob parses what EncodeJob wrote for a job that is no array task
// with a template (jobstore.DecodeJob).
func DecodeJob(b []byte) (*domain.Job, error) {
	rec, err := jobstore.DecodeJob(b)
	if err != nil {
		return nil, err
	}
	return &domain.Job{JobRecord: *rec}, nil
}

// DecodeTask parses what EncodeJob wrote under the key name
// (jobstore.DecodeTask).
func DecodeTask(name string, b []byte, template func(array string) *loomv1.Job) (*domain.Job, error) {
	j := new(domain.Job)
	if err := jobstore.DecodeTaskInto(&j.JobRecord, name, b, template); err != nil {
		return nil, err
	}
	return j, nil
}

// EncodeArray serialises an array record (jobstore.EncodeArray).
func EncodeArray(a *domain.Array) ([]byte, error) { return jobstore.EncodeArray(a) }

// DecodeArray parses what EncodeArray wrote (jobstore.DecodeArray).
func DecodeArray(b []byte) (*domain.Array, error) { return jobstore.DecodeArray(b) }
