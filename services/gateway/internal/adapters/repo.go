// Package adapters holds the gateway's Redis repository and its clients of the
// owning services' internal gRPC APIs.
package adapters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Redis keys, relative to the store's prefix ("gateway:").
const (
	// KeyOperations is a hash: operation name → loom.v1.Operation.
	KeyOperations = "operations"
	// KeyJobs is a hash: job name → the loom.v1.Job as accepted (PENDING).
	KeyJobs = "jobs"
	// KeyRequests is a hash: "<kind>:<request_id>" → the name of the
	// operation or job the first call with that request id made. Written by
	// earlier versions only (read as a fallback); requests are now strings
	// under KeyRequestPrefix that expire by themselves.
	KeyRequests = "requests"
	// KeyRequestPrefix + "<kind>:<request_id>" is a string: the name of the
	// operation or job the first call with that request id made. It
	// expires after RequestTTL.
	KeyRequestPrefix = "request:"
	// KeyHistory is a hash: job name → the loom.v1.Job as it ended (with
	// its runs), the accounting history sacct reads once the scheduler
	// pruned the job; kept for the job history window.
	KeyHistory = "history"
	// KeyHistorySteps is a hash: job name → its runs' job steps as it
	// ended (a loom.v1.ListJobStepsResponse; the job's Job.steps), apart
	// from the job so that listing jobs does not read them.
	KeyHistorySteps = "history-steps"
	// KeyJobIndexPrefix + project is a sorted set (an index: score 0,
	// read in order) of the project's accepted jobs that have not ended
	// (not in the history), each by its list key (paging.JobKey: the job
	// id zero-padded, then the name), so that a list reads the jobs of
	// its page, not every job accepted.
	KeyJobIndexPrefix = "jobs-index:"
	// KeyHistoryIndexPrefix + project indexes the project's history the
	// same way.
	KeyHistoryIndexPrefix = "history-index:"
	// KeyIndexesBuilt is set once the indexes hold every record written
	// before they were kept (EnsureJobIndexes).
	KeyIndexesBuilt = "job-indexes-built"
	// KeyJobSeq is the job id counter (INCR, INCRBY for an array's block;
	// the first job is 1).
	KeyJobSeq = "jobseq"
	// KeyJobProjects is a set of the projects that have job indexes, for
	// the history sweep; KeyJobProjectsBuilt is set once it holds those of
	// a store written before it was kept (EnsureJobProjects).
	KeyJobProjects      = "job-projects"
	KeyJobProjectsBuilt = "job-projects-built"
	// KeyJobSeqTimes is a sorted set of samples of the job id counter:
	// score the time (unix ms), member the counter then. Every job
	// accepted before a sample's time has an id at most its value, so the
	// history sweep reads the indexes no further than the ids of jobs old
	// enough to drop (SampleJobID, JobIDAt).
	KeyJobSeqTimes = "jobseq-times"
)

// Request kinds for idempotency keys.
const (
	RequestCreateCluster     = "create-cluster"
	RequestDeleteCluster     = "delete-cluster"
	RequestUpdateCluster     = "update-cluster"
	RequestCreateReservation = "create-reservation"
	RequestDeleteReservation = "delete-reservation"
	RequestSubmitJob         = "submit-job"
	// RequestExportModel's ids are scoped to the caller, the name and the
	// destination (app's exportRequestKey).
	RequestExportModel = "export-model"
	// RequestUploadModel's ids are scoped to the caller and the project
	// ("{principal}\x00{project}\x00{id}").
	RequestUploadModel = "upload-model"
	// The training creates' request records hold the resource as accepted
	// (proto bytes), not its name: a retry answers it even before the
	// training service has it (PutTrainingRequest).
	RequestCreateCustomJob = "create-custom-job"
	RequestCreateTuningJob = "create-tuning-job"
	RequestCreatePipeline  = "create-training-pipeline"
)

// Repo reads and writes the gateway's state in its Store.
type Repo struct {
	st *store.Store
	// drv writes every change (Apply); the gateway keeps no state in
	// memory, so after a write whose outcome is unknown it only runs
	// reload, the app's (its waiters read Redis again).
	drv    *store.Driver
	reload func(context.Context) error
}

// NewRepo returns a repository over st.
func NewRepo(st *store.Store) *Repo {
	r := &Repo{st: st}
	r.drv = store.NewDriver(st, func(ctx context.Context) error {
		if r.reload != nil {
			return r.reload(ctx)
		}
		return nil
	})
	return r
}

// OnReload sets what runs after a write whose outcome is unknown, to bring
// what the gateway holds in memory back in step with Redis. Call it before
// the first Apply.
func (r *Repo) OnReload(f func(context.Context) error) { r.reload = f }

// NextJobID returns a new job id, unique across gateway instances.
func (r *Repo) NextJobID(ctx context.Context) (int64, error) {
	return r.NextJobIDs(ctx, 1)
}

// NextJobIDs reserves n consecutive job ids (an array's block, INCRBY) and
// returns the first, unique across gateway instances.
func (r *Repo) NextJobIDs(ctx context.Context, n int) (int64, error) {
	if n < 1 {
		return 0, fmt.Errorf("next job ids: %w", errs.Invalid("n", "%d must be at least 1", n))
	}
	last, err := r.st.Client().IncrBy(ctx, r.st.Key(KeyJobSeq), int64(n)).Result()
	if err != nil {
		return 0, fmt.Errorf("next job ids: %w: %w", errs.Unavailable, err)
	}
	return last - int64(n) + 1, nil
}

// LastJobID returns the newest job id issued (0 before the first): every
// job id up to it was given to some job, and none after it yet.
func (r *Repo) LastJobID(ctx context.Context) (int64, error) {
	last, err := r.st.Client().Get(ctx, r.st.Key(KeyJobSeq)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("last job id: %w: %w", errs.Unavailable, err)
	}
	return last, nil
}

// replayOrIDs is ReplayOrJobIDs' one round trip: the name the request
// recorded (under its string key, else in the hash earlier versions wrote),
// or else INCRBY of the job id counter.
var replayOrIDs = redis.NewScript(`
local name = redis.call('GET', KEYS[1])
if not name then name = redis.call('HGET', KEYS[2], ARGV[1]) end
if name then return {name, 0} end
return {'', redis.call('INCRBY', KEYS[3], ARGV[2])}
`)

// ReplayOrJobIDs is, in one Redis round trip, Request(kind, requestID) and
// then, only when there is nothing to replay, NextJobIDs(n): it returns the
// name an earlier call with requestID made, or the first of n new
// consecutive job ids (requestID empty: always new ids).
func (r *Repo) ReplayOrJobIDs(ctx context.Context, kind, requestID string, n int) (replay string, first int64, err error) {
	if requestID == "" || n < 1 {
		first, err = r.NextJobIDs(ctx, n) // which also refuses n < 1
		return "", first, err
	}
	keys := []string{r.st.Key(RequestInboxID(kind, requestID)), r.st.Key(KeyRequests), r.st.Key(KeyJobSeq)}
	res, err := replayOrIDs.Run(ctx, r.st.Client(), keys, kind+":"+requestID, n).Slice()
	if err != nil {
		return "", 0, fmt.Errorf("request %s %s: %w: %w", kind, requestID, errs.Unavailable, err)
	}
	name, _ := res[0].(string)
	last, _ := res[1].(int64)
	if name != "" {
		return name, 0, nil
	}
	return "", last - int64(n) + 1, nil
}

// Operation returns the stored operation name; errs.NotFound when unknown.
func (r *Repo) Operation(ctx context.Context, name string) (*loomv1.Operation, error) {
	op := &loomv1.Operation{}
	if err := r.hget(ctx, KeyOperations, name, op); err != nil {
		return nil, fmt.Errorf("operation %s: %w", name, err)
	}
	return op, nil
}

// OperationAsStored is Operation with the bytes Redis holds for it, which
// ExpectOperation takes to make a write conditional on the operation being
// still the one read.
func (r *Repo) OperationAsStored(ctx context.Context, name string) (*loomv1.Operation, []byte, error) {
	op := &loomv1.Operation{}
	b, err := r.hgetAsStored(ctx, KeyOperations, name, op)
	if err != nil {
		return nil, nil, fmt.Errorf("operation %s: %w", name, err)
	}
	return op, b, nil
}

// ExpectOperation makes tx apply only while the operation name is stored
// as stored (the bytes OperationAsStored returned): Apply then fails with
// an error wrapping store.ErrConflict, writing nothing, when another write
// changed it in between.
func ExpectOperation(tx *store.Tx, name string, stored []byte) {
	tx.IfHField(KeyOperations, name, stored)
}

// OperationScanChunk is how many fields one HSCAN of the operations hash
// asks Redis for: ScanOperations reads the hash in steps of about this many,
// never in one HGETALL.
const OperationScanChunk = 500

// ScanOperations returns, in ascending name order, the first limit
// operations whose name starts with prefix, sorts after after, and passes
// keep (nil keeps all). It reads the operations hash in HSCAN steps of
// OperationScanChunk and holds at most limit operations at a time, so its
// memory is bounded by the page however many operations there are.
func (r *Repo) ScanOperations(ctx context.Context, prefix, after string, limit int, keep func(*loomv1.Operation) bool) ([]*loomv1.Operation, error) {
	if limit < 1 {
		return nil, nil
	}
	var (
		best   []*loomv1.Operation // ascending by name, at most limit
		cursor uint64
	)
	match := globEscape(prefix) + "*"
	for {
		kv, next, err := r.st.Client().HScan(ctx, r.st.Key(KeyOperations), cursor, match, OperationScanChunk).Result()
		if err != nil {
			return nil, fmt.Errorf("list operations: %w: %w", errs.Unavailable, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			name := kv[i]
			if name <= after || !strings.HasPrefix(name, prefix) {
				continue
			}
			if len(best) == limit && name >= best[limit-1].GetName() {
				continue
			}
			op := &loomv1.Operation{}
			if err := proto.Unmarshal([]byte(kv[i+1]), op); err != nil {
				return nil, fmt.Errorf("decode operation %s: %w", name, err)
			}
			if keep != nil && !keep(op) {
				continue
			}
			// HSCAN may return a field twice: keep names unique.
			at, found := slices.BinarySearchFunc(best, name, func(o *loomv1.Operation, n string) int { return strings.Compare(o.GetName(), n) })
			if found {
				continue
			}
			best = slices.Insert(best, at, op)
			if len(best) > limit {
				best = best[:limit]
			}
		}
		if next == 0 {
			return best, nil
		}
		cursor = next
	}
}

// globEscape quotes Redis glob's special characters in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\^`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// AcceptedJob returns the job name as the gateway accepted it; errs.NotFound when unknown.
func (r *Repo) AcceptedJob(ctx context.Context, name string) (*loomv1.Job, error) {
	j := &loomv1.Job{}
	if err := r.hget(ctx, KeyJobs, name, j); err != nil {
		return nil, fmt.Errorf("job %s: %w", name, err)
	}
	return j, nil
}

// RequestTTL is how long a request id is remembered: a retry within it
// returns the first call's result. It is the store's inbox TTL, which makes
// two racing calls apply once: past it, a retry is a new request.
const RequestTTL = store.InboxTTL

// Request returns the resource name the first call with (kind, requestID)
// made; errs.NotFound when there was none (or it expired).
func (r *Repo) Request(ctx context.Context, kind, requestID string) (string, error) {
	b, err := r.st.Get(ctx, KeyRequestPrefix+kind+":"+requestID)
	if errors.Is(err, store.ErrNotFound) {
		b, err = r.st.HGet(ctx, KeyRequests, kind+":"+requestID) // written before requests expired
	}
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("request %s %s: %w", kind, requestID, errs.NotFound)
	}
	if err != nil {
		return "", fmt.Errorf("request %s %s: %w: %w", kind, requestID, errs.Unavailable, err)
	}
	return string(b), nil
}

// RequestInboxID is the inbox id that makes (kind, requestID) apply once,
// even when two gateways race on it. It is also the request record's key
// (KeyRequestPrefix + kind:id), which Apply sets to expire.
func RequestInboxID(kind, requestID string) string {
	if requestID == "" {
		return ""
	}
	return KeyRequestPrefix + kind + ":" + requestID
}

// PutOperation adds op to tx.
func PutOperation(tx *store.Tx, op *loomv1.Operation) error {
	b, err := proto.Marshal(op)
	if err != nil {
		return fmt.Errorf("encode operation %s: %w", op.GetName(), err)
	}
	tx.HSet(KeyOperations, op.GetName(), b)
	return nil
}

// PutJob adds the accepted job to tx, without its script and environment:
// the scheduler has them (the SubmitJob command carries the job whole), and
// the record, kept for the history window, is for naming the job (and an
// array's tasks) until the scheduler lists it. It is indexed under its
// project (KeyJobIndexPrefix) until it ends (PutHistory).
func PutJob(tx *store.Tx, j *loomv1.Job) error {
	if j.GetScript() != "" || len(j.GetEnv()) > 0 {
		j = proto.CloneOf(j)
		j.Script, j.Env = "", nil
	}
	b, err := proto.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode job %s: %w", j.GetName(), err)
	}
	tx.HSet(KeyJobs, j.GetName(), b)
	if p := jobProject(j.GetName()); p != "" {
		tx.ZAdd(KeyJobIndexPrefix+p, paging.JobKey(j))
		tx.SAdd(KeyJobProjects, p)
	}
	return nil
}

// jobProject is the project of the job named name ("" when it is no job's
// name).
func jobProject(name string) string {
	j, err := resname.SplitJob(name)
	if err != nil {
		return ""
	}
	return j.Project
}

// IndexedName is the job name of an index member (paging.JobKey's form).
func IndexedName(member string) string {
	_, name, _ := strings.Cut(member, " ")
	return name
}

// IndexedJobs reads, in list order, the jobs of project's accepted index
// (history false: those not ended) or history index whose keys lie in
// (after, upto] ("" upto: no bound), at most limit index entries: the jobs
// (a record gone meanwhile is left out), the last key read, and whether
// the index may hold more in the range (it gave limit entries).
func (r *Repo) IndexedJobs(ctx context.Context, project string, history bool, after, upto string, limit int64) ([]*loomv1.Job, string, bool, error) {
	return r.IndexedJobsIn(ctx, project, history, false, after, upto, limit)
}

// IndexedJobsIn is IndexedJobs in either order: desc reads the index
// backwards, the entries before after ("": from the last) down to upto
// ("": to the first), the newest first.
func (r *Repo) IndexedJobsIn(ctx context.Context, project string, history, desc bool, after, upto string, limit int64) ([]*loomv1.Job, string, bool, error) {
	entries, err := r.indexedRange(ctx, project, history, desc, after, upto, limit)
	if err != nil || len(entries) == 0 {
		return nil, "", false, err
	}
	out := make([]*loomv1.Job, 0, len(entries))
	for _, e := range entries {
		if e.Job != nil {
			out = append(out, e.Job)
		}
	}
	return out, entries[len(entries)-1].Key, int64(len(entries)) == limit, nil
}

// Indexed is an index entry as IndexedRange reads it: its key, the record
// (Raw; nil when gone) and its job (nil when gone or Damaged: the record
// does not decode).
type Indexed struct {
	Key     string
	Raw     []byte
	Job     *loomv1.Job
	Damaged bool
}

// IndexedRange is IndexedJobs' read: the index entries in (after, upto],
// at most limit, each with its record.
func (r *Repo) IndexedRange(ctx context.Context, project string, history bool, after, upto string, limit int64) ([]Indexed, error) {
	return r.indexedRange(ctx, project, history, false, after, upto, limit)
}

func (r *Repo) indexedRange(ctx context.Context, project string, history, desc bool, after, upto string, limit int64) ([]Indexed, error) {
	index, hash := KeyJobIndexPrefix+project, KeyJobs
	if history {
		index, hash = KeyHistoryIndexPrefix+project, KeyHistory
	}
	read := r.st.ZRangeByLex
	if desc {
		read = r.st.ZRevRangeByLex
	}
	keys, err := read(ctx, index, after, upto, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", index, errs.Unavailable, err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = IndexedName(k)
	}
	vals, err := r.st.HMGet(ctx, hash, names)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", hash, errs.Unavailable, err)
	}
	out := make([]Indexed, len(keys))
	for i, b := range vals {
		out[i] = Indexed{Key: keys[i], Raw: b}
		if b == nil {
			continue
		}
		j := &loomv1.Job{}
		if err := proto.Unmarshal(b, j); err != nil {
			// A damaged record is left out of lists as a gone one is: one
			// bad record must not fail every list and sweep of its range.
			out[i].Damaged = true
			continue
		}
		out[i].Job = j
	}
	return out, nil
}

// JobProjects returns the projects that have job indexes (KeyJobProjects).
func (r *Repo) JobProjects(ctx context.Context) ([]string, error) {
	ps, err := r.st.SMembers(ctx, KeyJobProjects)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", KeyJobProjects, errs.Unavailable, err)
	}
	return ps, nil
}

// EnsureJobProjects fills KeyJobProjects, once, with the projects whose
// indexes a store written before it was kept holds (a SCAN of their keys).
// Idempotent.
func (r *Repo) EnsureJobProjects(ctx context.Context) error {
	if _, err := r.st.Get(ctx, KeyJobProjectsBuilt); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("job projects: %w", err)
	}
	tx := &store.Tx{}
	for _, prefix := range []string{KeyJobIndexPrefix, KeyHistoryIndexPrefix} {
		iter := r.st.Client().Scan(ctx, 0, r.st.Key(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if p := strings.TrimPrefix(iter.Val(), r.st.Key(prefix)); p != "" {
				tx.SAdd(KeyJobProjects, p)
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("job projects: %w: %w", errs.Unavailable, err)
		}
	}
	tx.Set(KeyJobProjectsBuilt, []byte("1"))
	if _, err := r.st.Apply(ctx, "", tx); err != nil {
		return fmt.Errorf("job projects: %w", err)
	}
	return nil
}

// SampleJobID records the job id counter as of now (KeyJobSeqTimes), and
// forgets samples older than keep.
func (r *Repo) SampleJobID(ctx context.Context, now time.Time, keep time.Duration) error {
	last, err := r.LastJobID(ctx)
	if err != nil {
		return err
	}
	key := r.st.Key(KeyJobSeqTimes)
	_, err = r.st.Client().TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMilli()), Member: strconv.FormatInt(last, 10)})
		p.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now.Add(-keep).UnixMilli(), 10))
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w: %w", KeyJobSeqTimes, errs.Unavailable, err)
	}
	return nil
}

// JobIDAt returns the job id counter as a sample at or after t found it,
// the earliest such: every job accepted before t has an id at most it.
// false when no sample was taken since t.
func (r *Repo) JobIDAt(ctx context.Context, t time.Time) (int64, bool, error) {
	m, err := r.st.Client().ZRangeArgs(ctx, redis.ZRangeArgs{Key: r.st.Key(KeyJobSeqTimes), ByScore: true,
		Start: strconv.FormatInt(t.UnixMilli(), 10), Stop: "+inf", Count: 1}).Result()
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w: %w", KeyJobSeqTimes, errs.Unavailable, err)
	}
	if len(m) == 0 {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(m[0], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: member %q: %w", KeyJobSeqTimes, m[0], err)
	}
	return v, true, nil
}

// EnsureJobIndexes builds the job indexes (KeyJobIndexPrefix,
// KeyHistoryIndexPrefix) from the records of a store written before they
// were kept, once: read a chunk at a time (HSCAN), written in small
// batches. Idempotent: gateways that start together may both build them.
// Gateways of the release before must all be stopped first: they write
// records without index entries (docs: upgrading).
func (r *Repo) EnsureJobIndexes(ctx context.Context) error {
	if _, err := r.st.Get(ctx, KeyIndexesBuilt); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("job indexes: %w", err)
	}
	hist, err := r.st.HScanAll(ctx, KeyHistory, 1000)
	if err != nil {
		return fmt.Errorf("job indexes: %w", err)
	}
	accepted, err := r.st.HScanAll(ctx, KeyJobs, 1000)
	if err != nil {
		return fmt.Errorf("job indexes: %w", err)
	}
	tx := &store.Tx{}
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := r.st.Apply(ctx, "", tx)
		tx, n = &store.Tx{}, 0
		return err
	}
	for _, m := range []struct {
		raw     map[string][]byte
		history bool
	}{{hist, true}, {accepted, false}} {
		for name, b := range m.raw {
			p := jobProject(name)
			if p == "" || (!m.history && hist[name] != nil) {
				continue
			}
			j := &loomv1.Job{}
			if err := proto.Unmarshal(b, j); err != nil {
				continue // not indexed: a damaged record is read by name only
			}
			if m.history {
				tx.ZAdd(KeyHistoryIndexPrefix+p, paging.JobKey(j))
			} else {
				tx.ZAdd(KeyJobIndexPrefix+p, paging.JobKey(j))
			}
			tx.SAdd(KeyJobProjects, p)
			if n++; n == 1000 {
				if err := flush(); err != nil {
					return fmt.Errorf("job indexes: %w", err)
				}
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("job indexes: %w", err)
	}
	// A job that ended while the records were read was added back to the
	// accepted index after its history write took it out: one more look,
	// now that the additions are in (a job ending from here on is taken
	// out after them).
	projects := map[string]bool{}
	for name := range accepted {
		if p := jobProject(name); p != "" {
			projects[p] = true
		}
	}
	for p := range projects {
		for after := ""; ; {
			keys, err := r.st.ZRangeByLex(ctx, KeyJobIndexPrefix+p, after, "", 1000)
			if err != nil || len(keys) == 0 {
				if err != nil {
					return fmt.Errorf("job indexes: %w", err)
				}
				break
			}
			names := make([]string, len(keys))
			for i, k := range keys {
				names[i] = IndexedName(k)
			}
			vals, err := r.st.HMGet(ctx, KeyHistory, names)
			if err != nil {
				return fmt.Errorf("job indexes: %w", err)
			}
			for i, v := range vals {
				if v != nil {
					tx.ZRem(KeyJobIndexPrefix+p, keys[i])
					n++
				}
			}
			if err := flush(); err != nil {
				return fmt.Errorf("job indexes: %w", err)
			}
			after = keys[len(keys)-1]
		}
	}
	tx.Set(KeyIndexesBuilt, []byte("1"))
	n++
	if err := flush(); err != nil {
		return fmt.Errorf("job indexes: %w", err)
	}
	return nil
}

// PutRequest records in tx that (kind, requestID) made the resource name,
// with the request's fingerprint (domain.RequestFingerprint; "" for
// none); nothing when requestID is empty. Apply with RequestInboxID(kind,
// requestID) makes the record expire after RequestTTL.
func PutRequest(tx *store.Tx, kind, requestID, name, fingerprint string) {
	if requestID != "" {
		v := name
		if fingerprint != "" {
			v += "\n" + fingerprint
		}
		tx.Set(RequestInboxID(kind, requestID), []byte(v))
	}
}

// SplitRequest splits a request record PutRequest wrote (as Request and
// ReplayOrJobIDs return it) into the resource's name and the request's
// fingerprint ("" in a record written before fingerprints were kept).
func SplitRequest(rec string) (name, fingerprint string) {
	name, fingerprint, _ = strings.Cut(rec, "\n")
	return name, fingerprint
}

// PutTrainingRequest records in tx that (kind, requestID) made the training
// resource m (a CustomJob, HyperparameterTuningJob or TrainingPipeline, as
// accepted), with the request's fingerprint (domain.RequestFingerprint; ""
// for none); nothing when requestID is empty. ReplayOrJobIDs then returns
// the record, which SplitTrainingRequest splits. Apply with
// RequestInboxID(kind, requestID) makes the record expire after RequestTTL.
func PutTrainingRequest(tx *store.Tx, kind, requestID string, m proto.Message, fingerprint string) error {
	if requestID == "" {
		return nil
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode request %s %s: %w", kind, requestID, err)
	}
	if fingerprint != "" {
		b = append([]byte(trainingRequestMark+fingerprint+"\n"), b...)
	}
	tx.Set(RequestInboxID(kind, requestID), b)
	return nil
}

// trainingRequestMark starts a training request record that holds a
// fingerprint. No protobuf encoding starts with a 0 byte (field number 0
// is invalid), so a record written before fingerprints were kept (the
// resource's bytes alone) is told from it.
const trainingRequestMark = "\x00fp:"

// SplitTrainingRequest splits a record PutTrainingRequest wrote into the
// accepted resource's encoding and the request's fingerprint ("" in a
// record written before fingerprints were kept).
func SplitTrainingRequest(rec []byte) (resource []byte, fingerprint string) {
	rest, ok := bytes.CutPrefix(rec, []byte(trainingRequestMark))
	if !ok {
		return rec, ""
	}
	fp, resource, ok := bytes.Cut(rest, []byte("\n"))
	if !ok {
		return rec, ""
	}
	return resource, string(fp)
}

// Apply writes tx atomically through the store's driver; with a non-empty
// inboxID only once. When the inbox id is a request's (RequestInboxID), the
// request record it wrote is then set to expire after RequestTTL; should the
// process die in between, the history sweep (ExpireRequests) gives it its TTL
// later. An error is Unavailable, except a condition of tx that no longer
// held (store.ErrConflict, Aborted; nothing written); one whose outcome is
// unknown also wraps store.ErrOutcomeUnknown (the request may have been
// accepted: a retry with its request id says).
func (r *Repo) Apply(ctx context.Context, inboxID string, tx *store.Tx) (bool, error) {
	applied, err := r.drv.Apply(ctx, inboxID, tx, nil)
	if store.OutcomeUnknown(err) {
		return false, fmt.Errorf("store: %w: %w", errs.Unavailable, err)
	}
	if errors.Is(err, store.ErrConflict) {
		// A condition of tx (ExpectOperation) no longer held: the caller
		// reads again and decides again.
		return false, fmt.Errorf("store: %w", err)
	}
	if err != nil {
		// The store refused the write (a wrong type, a failed check): no
		// retry passes, so the cause is kept out of the chain (%v), and a
		// consumer counts it toward dead-lettering (bus.Unavailable). A
		// write without an answer is ErrOutcomeUnknown, above.
		return false, fmt.Errorf("store: %w: %v", errs.Unavailable, err)
	}
	if applied && strings.HasPrefix(inboxID, KeyRequestPrefix) {
		// Best effort: a failure leaves the record for the sweep to expire.
		_ = r.st.Client().Expire(ctx, r.st.Key(inboxID), RequestTTL).Err()
	}
	return applied, nil
}

// ExpireRequests gives request records left without a TTL (the process
// died between their Apply and its EXPIRE) the full RequestTTL, scanning in
// small batches; it returns how many it fixed.
func (r *Repo) ExpireRequests(ctx context.Context) (int, error) {
	rdb := r.st.Client()
	fixed := 0
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, r.st.Key(KeyRequestPrefix)+"*", 500).Result()
		if err != nil {
			return fixed, fmt.Errorf("scan request records: %w", err)
		}
		for _, k := range keys {
			ttl, err := rdb.TTL(ctx, k).Result()
			if err != nil {
				return fixed, fmt.Errorf("ttl of %s: %w", k, err)
			}
			if ttl == -1 { // no expiry set
				if err := rdb.Expire(ctx, k, RequestTTL).Err(); err != nil {
					return fixed, fmt.Errorf("expire %s: %w", k, err)
				}
				fixed++
			}
		}
		if cursor = next; cursor == 0 {
			return fixed, nil
		}
	}
}

// PutHistory adds the job as it ended to tx, its job steps (Job.steps)
// apart.
func PutHistory(tx *store.Tx, j *loomv1.Job) error {
	steps := j.GetSteps()
	if len(steps) > 0 || j.GetScript() != "" || len(j.GetEnv()) > 0 {
		j = proto.CloneOf(j)
		j.Steps = nil
		// An ended job's script and environment are for no one to run
		// again, and are most of its bytes: an array's 1,001 tasks carried
		// a 60 KB script each into 30 days of history (Slurm keeps a batch
		// script only while the job is in the controller).
		j.Script, j.Env = "", nil
	}
	b, err := proto.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode job %s: %w", j.GetName(), err)
	}
	tx.HSet(KeyHistory, j.GetName(), b)
	if p := jobProject(j.GetName()); p != "" {
		// Ended: listed from the history now, no longer as accepted.
		key := paging.JobKey(j)
		tx.ZAdd(KeyHistoryIndexPrefix+p, key)
		tx.ZRem(KeyJobIndexPrefix+p, key)
		tx.SAdd(KeyJobProjects, p)
	}
	if len(steps) > 0 {
		sb, err := proto.Marshal(&loomv1.ListJobStepsResponse{Steps: steps})
		if err != nil {
			return fmt.Errorf("encode the steps of job %s: %w", j.GetName(), err)
		}
		tx.HSet(KeyHistorySteps, j.GetName(), sb)
	}
	return nil
}

// HistorySteps returns the job steps the history keeps of an ended job (none
// when it keeps none).
func (r *Repo) HistorySteps(ctx context.Context, name string) ([]*loomv1.JobStep, error) {
	var resp loomv1.ListJobStepsResponse
	if err := r.hget(ctx, KeyHistorySteps, name, &resp); err != nil {
		if errors.Is(err, errs.NotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("history steps of %s: %w", name, err)
	}
	return resp.GetSteps(), nil
}

// HistoryJob returns the ended job from the history; errs.NotFound when it
// has none.
func (r *Repo) HistoryJob(ctx context.Context, name string) (*loomv1.Job, error) {
	j := &loomv1.Job{}
	if err := r.hget(ctx, KeyHistory, name, j); err != nil {
		return nil, fmt.Errorf("history job %s: %w", name, err)
	}
	return j, nil
}

// InHistory returns which of names the history holds.
func (r *Repo) InHistory(ctx context.Context, names []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(names) == 0 {
		return out, nil
	}
	vals, err := r.st.Client().HMGet(ctx, r.st.Key(KeyHistory), names...).Result()
	if err != nil {
		return nil, fmt.Errorf("history: %w: %w", errs.Unavailable, err)
	}
	for i, v := range vals {
		if v != nil {
			out[names[i]] = true
		}
	}
	return out, nil
}

func (r *Repo) hget(ctx context.Context, key, field string, m proto.Message) error {
	_, err := r.hgetAsStored(ctx, key, field, m)
	return err
}

// hgetAsStored is hget that also returns the field's bytes as stored, for
// a write conditioned on them (store.Tx.IfHField).
func (r *Repo) hgetAsStored(ctx context.Context, key, field string, m proto.Message) ([]byte, error) {
	b, err := r.st.HGet(ctx, key, field)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errs.NotFound
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errs.Unavailable, err)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return b, nil
}
