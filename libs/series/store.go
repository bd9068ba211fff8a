package series

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/errs"
)

// Store keeps jobs' series in Redis, under a service's key prefix. Per job
// (the key's {job} part is a Redis Cluster hash tag, so one job's keys
// share a slot and one script updates them together):
//
//	{prefix}metrics:{job}:index   hash: metric -> its summary (append.lua: with whether its steps never went back)
//	{prefix}metrics:{job}:s:NAME  string: the metric's points, 24 bytes each, in arrival order
//	{prefix}metrics:{job}:seen    hash: source -> the last sequence number appended
//	{prefix}metrics:{job}:runs    hash: attempt -> "endMs node..." (who may write; guard.go)
//	{prefix}metrics:{job}:held    list: batches held until their run's placement is known
//	{prefix}metrics:{job}:heldsize string: the held batches' bytes
//	{prefix}metrics:{job}:heldids hash: the held batches' ids (Write.ID) -> 1, so that a record is held once
//	{prefix}metrics:{job}:swept   string, expiring: the series were swept (no late write recreates them)
//	{prefix}metrics-project:{project}  hash: job -> its points kept, and "total" their sum
//
// An Append is one Lua script: all of it or none of it is applied, and a
// (source, sequence) already applied (a redelivered record: source its
// topic partition, sequence its offset) is passed over, so redelivery never
// duplicates points. A Store is safe for concurrent use; appends to one job
// are expected from one writer at a time (one consumer owns a partition).
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	lim    Limits
}

// NewStore returns a store under prefix (a service's store prefix, for
// example "training:") with limits lim (zero fields: DefaultLimits).
func NewStore(rdb redis.UniversalClient, prefix string, lim Limits) *Store {
	return &Store{rdb: rdb, prefix: prefix, lim: lim.fill()}
}

// Limits are the store's limits.
func (s *Store) Limits() Limits { return s.lim }

func (s *Store) key(job, part string) string {
	return s.prefix + "metrics:{" + job + "}:" + part
}

// Source identifies where a batch came from, for redelivery: a batch whose
// Seq is not above the last Seq applied from its Name is passed over. An
// empty Name is never deduplicated.
type Source struct {
	Name string
	Seq  int64
}

// Result says what an Append kept.
type Result struct {
	// Duplicate: the source's sequence was applied before; nothing changed.
	Duplicate bool
	// Swept: the job's series were deleted by retention (Sweep) and its
	// expiry marker stands; nothing changed (a late batch never starts a
	// partial series).
	Swept bool
	// Appended points; Dropped points (series full, or a new series past
	// the job's limit, or the project's budget spent).
	Appended, Dropped int64
	// OverBudget is how many of Dropped were dropped because the job's
	// project keeps Limits.ProjectPoints already.
	OverBudget int64
}

// The scripts, each after decode.lua (their shared decoders).
var (
	//go:embed decode.lua
	decodeLua string
	//go:embed append.lua
	appendLua string
	//go:embed read.lua
	readLua string

	appendScript = redis.NewScript(decodeLua + "\n" + appendLua)
	readScript   = redis.NewScript(decodeLua + "\n" + readLua)
)

// exact reports whether a step bound (nil: none) compares exactly with any
// step as a Lua number (a double) in read.lua: strictly within ±2^53,
// rounding keeps every order relation with it (a step of 2^53+1 rounds to
// 2^53 itself).
func exact(b *int64) bool { return b == nil || (*b > -1<<53 && *b < 1<<53) }

// Append adds b's points to job's series. b is checked first (Limits.Check):
// bad input is InvalidArgument and nothing is applied.
func (s *Store) Append(ctx context.Context, job string, src Source, b Batch) (Result, error) {
	if err := validJob(job); err != nil {
		return Result{}, err
	}
	if err := s.lim.Check(b); err != nil {
		return Result{}, err
	}
	names := make([]string, 0, len(b))
	for name, pts := range b {
		if len(pts) > 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return Result{}, nil
	}
	sort.Strings(names)
	used, err := s.ProjectPoints(ctx, projectOf(job))
	if err != nil {
		return Result{}, err
	}
	keys := make([]string, 0, 4+len(names))
	keys = append(keys, s.key(job, "index"), s.key(job, "seen"), s.key(job, "swept"), s.key(job, "points"))
	args := make([]any, 0, 6+10*len(names))
	args = append(args, src.Name, src.Seq, s.lim.Points, s.lim.Series, s.lim.JobPoints, max(s.lim.ProjectPoints-used, 0))
	var blob []byte
	for _, name := range names {
		pts := b[name]
		keys = append(keys, s.key(job, "s:"+name))
		start := len(blob)
		for _, p := range pts {
			blob = appendPoint(blob, p)
		}
		sm := summarise(pts)
		ordered := 0
		if slices.IsSortedFunc(pts, func(a, b Point) int { return cmp.Compare(a.Step, b.Step) }) {
			ordered = 1
		}
		args = append(args, name, blob[start:], len(pts),
			num(float64(sm.FirstStep)), num(sm.First), num(float64(sm.LastStep)), num(sm.Last), num(sm.Min), num(sm.Max), ordered)
	}
	res, err := appendScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return Result{}, fmt.Errorf("metrics of %s: %w", job, err)
	}
	if len(res) != 5 {
		return Result{}, fmt.Errorf("metrics of %s: the script answered %v", job, res)
	}
	r := Result{Duplicate: res[0] == 1, Swept: res[0] == 2, Appended: res[1], Dropped: res[2], OverBudget: res[4]}
	// Every append syncs, a duplicate's and one that kept nothing too: the
	// redelivery of a record whose sync a crash cut off heals the count,
	// and so does the job's next append.
	if !r.Swept {
		if err := s.syncProject(ctx, job, res[3]); err != nil {
			return r, err
		}
	}
	return r, nil
}

// validJob checks a job id: not empty, no braces (they would break the
// keys' hash tag).
func validJob(job string) error {
	if job == "" || strings.ContainsAny(job, "{}") {
		return errs.Invalid("job", "%q is not a job id", job)
	}
	return nil
}

// num formats a float for the script: shortest round-tripping form, with
// infinities as Lua's tonumber reads them.
func num(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// List returns job's series' summaries, by name (none: an empty list).
func (s *Store) List(ctx context.Context, job string) ([]Summary, error) {
	m, err := s.rdb.HGetAll(ctx, s.key(job, "index")).Result()
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", job, err)
	}
	out := make([]Summary, 0, len(m))
	for name, v := range m {
		sm, err := parseSummary(v)
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %s: %w", job, name, err)
		}
		sm.Metric = name
		out = append(out, sm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Metric < out[j].Metric })
	return out, nil
}

// parseSummary parses the index's "count firstStep first lastStep last min
// max dropped [ordered]" (append.lua; ordered is read.lua's).
func parseSummary(v string) (Summary, error) {
	f := strings.Fields(v)
	if len(f) != 8 && len(f) != 9 {
		return Summary{}, fmt.Errorf("summary %q: want 8 or 9 fields", v)
	}
	var x [8]float64
	for i, s := range f[:8] {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return Summary{}, fmt.Errorf("summary %q: %w", v, err)
		}
		x[i] = n
	}
	return Summary{Count: int64(x[0]), FirstStep: int64(x[1]), First: x[2], LastStep: int64(x[3]), Last: x[4],
		Min: x[5], Max: x[6], Dropped: int64(x[7])}, nil
}

// ErrNoSeries is a read of a metric the job has no series of.
var ErrNoSeries = errors.New("no such metric")

// Query is what a Read asks for.
type Query struct {
	// Range bounds the steps.
	Range Range
	// Points is the most points returned (DefaultReadPoints when 0; at
	// most MaxReadPoints).
	Points int
}

// Read returns metric's points within q.Range, ordered by step, downsampled
// to q.Points (Downsample), and how many there are before downsampling. A
// metric the job has no series of is errs.NotFound.
func (s *Store) Read(ctx context.Context, job, metric string, q Query) (pts []Point, total int, err error) {
	if err := ValidName("metric", metric, s.lim.Name); err != nil {
		return nil, 0, err
	}
	if q.Points < 0 || q.Points > MaxReadPoints {
		return nil, 0, errs.Invalid("points", "%d is out of range: 1..%d (0: %d)", q.Points, MaxReadPoints, DefaultReadPoints)
	}
	if q.Points == 0 {
		q.Points = DefaultReadPoints
	}
	if q.Range.From != nil && q.Range.To != nil && *q.Range.From > *q.Range.To {
		return nil, 0, errs.Invalid("from", "%d is after to (%d)", *q.Range.From, *q.Range.To)
	}
	b, ranged, err := s.readRecords(ctx, job, metric, q.Range)
	if errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("metric %q of job %s: %w: list the job's metrics to see which it has", metric, job, errs.NotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("metrics of %s: %w", job, err)
	}
	recs := decodeRecs(b)
	if !ranged {
		sortByStep(recs, rec.stepOf)
		recs = filter(q.Range, recs, rec.stepOf)
	}
	kept := downsample(recs, q.Points, rec.valueOf)
	pts = make([]Point, len(kept))
	for i, r := range kept {
		pts[i] = r.point()
	}
	return pts, len(recs), nil
}

// readRecords reads metric's records: those within r alone, in step order
// (ranged), when r bounds the steps and the series' steps never went back
// (read.lua finds them); else every record, in the order stored.
// redis.Nil: no such series.
func (s *Store) readRecords(ctx context.Context, job, metric string, r Range) (b []byte, ranged bool, err error) {
	key := s.key(job, "s:"+metric)
	if (r.From == nil && r.To == nil) || !exact(r.From) || !exact(r.To) {
		b, err = s.rdb.Get(ctx, key).Bytes()
		return b, false, err
	}
	var from, to string
	if r.From != nil {
		from = strconv.FormatInt(*r.From, 10)
	}
	if r.To != nil {
		to = strconv.FormatInt(*r.To, 10)
	}
	at, err := readScript.Run(ctx, s.rdb, []string{s.key(job, "index"), key}, metric, from, to).Int64Slice()
	if err != nil {
		return nil, false, err
	}
	if len(at) != 3 {
		return nil, false, fmt.Errorf("the read script answered %v", at)
	}
	if at[0] != 1 {
		b, err = s.rdb.Get(ctx, key).Bytes()
		return b, false, err
	}
	if at[2] <= at[1] {
		return nil, true, nil
	}
	// Appends since only add bytes after these: the records read are the
	// range's as of the script.
	b, err = s.rdb.GetRange(ctx, key, at[1], at[2]-1).Bytes()
	if len(b)%recordLen != 0 {
		return nil, false, fmt.Errorf("read %d bytes of records", len(b))
	}
	return b, true, err
}

// Delete removes every series of job, with its placement and held
// batches (guard.go); not its swept marker. The job's points leave its
// project's count.
func (s *Store) Delete(ctx context.Context, job string) error { return s.delete(ctx, job, false) }

// delete is Delete; swept (Sweep's delete, under the job's swept marker)
// also leaves the project a tombstone for Limits.Late, so that the sync of
// an append that ran before the marker, arriving after the delete, does
// not count points that are gone (projectSyncScript).
func (s *Store) delete(ctx context.Context, job string, swept bool) error {
	names, err := s.rdb.HKeys(ctx, s.key(job, "index")).Result()
	if err != nil {
		return fmt.Errorf("metrics of %s: %w", job, err)
	}
	keys := []string{s.key(job, "index"), s.key(job, "seen"), s.key(job, "points"), s.key(job, "runs"), s.key(job, "held"), s.key(job, "heldsize"), s.key(job, "heldids")}
	for _, n := range names {
		keys = append(keys, s.key(job, "s:"+n))
	}
	if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("metrics of %s: %w", job, err)
	}
	// After the delete: a crash between the two leaves the project counting
	// points no longer kept until the delete is redone (Sweep redoes it).
	return s.dropFromProject(ctx, job, swept)
}
