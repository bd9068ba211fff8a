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

// recordKeys are the hashes that hold the scheduler's records, in the
// order LoadRaw reads them: the arrays before the jobs, whose decoding
// needs their templates.
var recordKeys = []string{KeyClusters, KeyNodes, KeyRuns, KeyArrays, KeyUsage, KeyEnded, KeyAssocs, KeyStepRequests, KeyJobs}

// Raw is every stored record as stored: by hash key (KeyJobs, ...), then
// field, the encoded record; and the records LoadRaw decoded as it read
// them, which Decode takes where the stored bytes are still those it
// decoded (Apply replaces some).
type Raw struct {
	hashes map[string]map[string][]byte
	// pre are the pages of each hash as read, with their records decoded;
	// templates the array templates the job records were decoded with.
	pre       map[string][]*rawPage
	templates map[string]*loomv1.Job
}

// rawPage is one page of a hash as HSCAN returned it, and its records
// decoded (nil where decoding failed: Decode decodes those again, and
// reports the error).
type rawPage struct {
	fields  []string
	values  [][]byte
	decoded []any
}

// LoadRaw reads every record, and decodes them as it reads: a page of
// records is decoded while the next is read (the time Redis takes to serve
// a page was idle here before, and a restarted scheduler waits for both),
// by as many workers as there are processors. What it
// decodes depends only on the bytes read, not on timing: Decode returns the
// same records as a decode of every record after the read.
func (r *Repo) LoadRaw(ctx context.Context) (Raw, error) {
	raw := Raw{hashes: make(map[string]map[string][]byte, len(recordKeys)), pre: map[string][]*rawPage{}}
	type work struct {
		pg     *rawPage
		decode func(field string, b []byte) (any, error)
	}
	// Room for 256,000 records: at 100,000 jobs the reader never waits
	// for the decoders.
	queue := make(chan work, 256)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for w := range queue {
				w.pg.decoded = make([]any, len(w.pg.fields))
				for i, f := range w.pg.fields {
					if v, err := w.decode(f, w.pg.values[i]); err == nil {
						w.pg.decoded[i] = v
					}
				}
			}
		})
	}
	err := func() error {
		for _, key := range recordKeys {
			decode := raw.decoder(key)
			var pages []*rawPage
			n := 0
			err := r.st.HScanPages(ctx, key, loadChunk, func(fields []string, values [][]byte) error {
				pg := &rawPage{fields: fields, values: values}
				pages, n = append(pages, pg), n+len(fields)
				if decode != nil {
					queue <- work{pg, decode}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("load %s: %w", key, err)
			}
			m := make(map[string][]byte, n)
			for _, pg := range pages {
				for i, f := range pg.fields {
					m[f] = pg.values[i] // a field read twice: the later is the newer
				}
			}
			raw.hashes[key] = m
			if decode != nil {
				raw.pre[key] = pages
			}
			if key == KeyArrays {
				raw.decodeArrays()
			}
		}
		return nil
	}()
	close(queue)
	wg.Wait()
	if err != nil {
		return Raw{}, err
	}
	return raw, nil
}

// decodeArrays decodes the arrays as read, for the templates the job
// records that follow them are decoded with: in one page, after the whole
// hash (there are few, and every job waits for them).
func (raw *Raw) decodeArrays() {
	m := raw.hashes[KeyArrays]
	pg := &rawPage{fields: make([]string, 0, len(m)), values: make([][]byte, 0, len(m)), decoded: make([]any, 0, len(m))}
	raw.templates = map[string]*loomv1.Job{}
	for f, b := range m {
		a, err := DecodeArray(b)
		if err != nil {
			continue // Decode reports it
		}
		pg.fields, pg.values, pg.decoded = append(pg.fields, f), append(pg.values, b), append(pg.decoded, a)
		if a.Template != nil {
			raw.templates[a.Name] = a.Template
		}
	}
	raw.pre[KeyArrays] = []*rawPage{pg}
}

// decoder is how LoadRaw decodes the records of the hash key as it reads
// them (nil: it does not): as Decode does.
func (raw *Raw) decoder(key string) func(field string, b []byte) (any, error) {
	switch key {
	case KeyClusters:
		return decodeAny(decodeJSONRecord[domain.Cluster])
	case KeyNodes:
		return decodeAny(decodeJSONRecord[domain.Node])
	case KeyRuns:
		return decodeAny(decodeRun)
	case KeyUsage:
		return decodeAny(decodeJSONRecord[domain.Usage])
	case KeyEnded:
		return decodeAny(decodeJSONRecord[domain.Ended])
	case KeyAssocs:
		return decodeAny(decodeJSONRecord[domain.AssocLimit])
	case KeyJobs:
		templates := raw.templates // complete: the arrays are read first
		return decodeAny(func(name string, b []byte) (*domain.Job, error) {
			return DecodeTask(name, b, func(array string) *loomv1.Job { return templates[array] })
		})
	}
	return nil
}

// decodeAny makes a decoder of *T one of any, for LoadRaw's workers.
func decodeAny[T any](decode func(field string, b []byte) (*T, error)) func(field string, b []byte) (any, error) {
	return func(field string, b []byte) (any, error) {
		v, err := decode(field, b)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
}

// decodeJSONRecord decodes a record stored as the JSON of a T.
func decodeJSONRecord[T any](_ string, b []byte) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, err
	}
	return v, nil
}

// decodeRun decodes a run record (jobstore.DecodeRun: json.Marshal's own
// form of it directly, anything else by encoding/json).
func decodeRun(_ string, b []byte) (*domain.Run, error) {
	v := new(domain.Run)
	if err := jobstore.DecodeRun(b, &v.RunRecord); err != nil {
		return nil, err
	}
	return v, nil
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
			m, ok := raw.hashes[o.Key]
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

// Decode decodes every record of raw: those LoadRaw decoded from the bytes
// raw still holds as they are, the others (written by Apply, or that
// failed) now.
func (raw Raw) Decode() (*Records, error) {
	recs, _, err := raw.decode()
	return recs, err
}

// decode is Decode, and how many records it decoded itself.
func (raw Raw) decode() (*Records, int, error) {
	var recs Records
	fresh := 0
	var err error
	if err := decodeKind(raw, KeyClusters, &recs.Clusters, &fresh, decodeJSONRecord[domain.Cluster]); err != nil {
		return nil, 0, err
	}
	if err := decodeKind(raw, KeyNodes, &recs.Nodes, &fresh, decodeJSONRecord[domain.Node]); err != nil {
		return nil, 0, err
	}
	if err := decodeKind(raw, KeyRuns, &recs.Runs, &fresh, decodeRun); err != nil {
		return nil, 0, err
	}
	if err := decodeKind(raw, KeyArrays, &recs.Arrays, &fresh, func(_ string, b []byte) (*domain.Array, error) { return DecodeArray(b) }); err != nil {
		return nil, 0, err
	}
	templates := map[string]*loomv1.Job{}
	for _, a := range recs.Arrays {
		if a.Template != nil {
			templates[a.Name] = a.Template
		}
	}
	if err := decodeKind(raw, KeyUsage, &recs.Usage, &fresh, decodeJSONRecord[domain.Usage]); err != nil {
		return nil, 0, err
	}
	if err := decodeKind(raw, KeyEnded, &recs.Ended, &fresh, decodeJSONRecord[domain.Ended]); err != nil {
		return nil, 0, err
	}
	if err := decodeKind(raw, KeyAssocs, &recs.Assocs, &fresh, decodeJSONRecord[domain.AssocLimit]); err != nil {
		return nil, 0, err
	}
	recs.StepRequests = maps.Clone(raw.hashes[KeyStepRequests])
	if !maps.Equal(templates, raw.templates) {
		// An array changed since the job records were decoded (Apply):
		// decode them all again, against the templates as they are now.
		raw.pre = maps.Clone(raw.pre)
		delete(raw.pre, KeyJobs)
	}
	template := func(array string) *loomv1.Job { return templates[array] } // read only while decoding
	err = decodeKind(raw, KeyJobs, &recs.Jobs, &fresh, func(name string, b []byte) (*domain.Job, error) {
		return DecodeTask(name, b, template)
	})
	if err != nil {
		return nil, 0, err
	}
	return &recs, fresh, nil
}

// decodeKind decodes the records of the hash key into *out, in no
// particular order: those LoadRaw decoded from the bytes raw holds taken as
// they are, the rest with decode (added to *fresh). Its errors name the
// record.
func decodeKind[T any](raw Raw, key string, out *[]*T, fresh *int, decode func(field string, b []byte) (*T, error)) error {
	m := raw.hashes[key]
	vs := make([]*T, 0, len(m))
	var taken map[string]bool // the fields taken, once some are not
	for pass := 0; pass < 2 && len(vs) < len(m); pass++ {
		if pass == 1 {
			vs, taken = vs[:0], make(map[string]bool, len(vs))
		}
		for _, pg := range raw.pre[key] {
			for i, f := range pg.fields {
				v, ok := pg.decoded[i].(*T)
				if !ok || !sameBytes(m[f], pg.values[i]) {
					continue
				}
				vs = append(vs, v)
				if taken != nil {
					taken[f] = true
				}
			}
		}
	}
	if len(vs) < len(m) {
		what := key // as the errors have named records
		switch key {
		case KeyJobs:
			what = "job"
		case KeyArrays:
			what = "array"
		}
		rest := make(map[string][]byte, len(m)-len(vs))
		for f, b := range m {
			if !taken[f] {
				rest[f] = b
			}
		}
		more, err := decodeAll(rest, func(field string, b []byte) (*T, error) {
			v, err := decode(field, b)
			if err != nil {
				return nil, fmt.Errorf("load %s %s: %w", what, field, err)
			}
			return v, nil
		})
		if err != nil {
			return err
		}
		vs = append(vs, more...)
		*fresh += len(more)
	}
	*out = vs
	return nil
}

// sameBytes reports whether a and b are the same bytes in memory (not only
// equal): the value LoadRaw read and decoded, not one Apply put there.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
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
