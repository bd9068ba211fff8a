package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/loom-ml/loom/libs/store"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
)

// The change log: every write of a leader under the lease also appends its
// writes to the stream KeyChanges (store.Tx.Log), so that a follower keeps
// its memory current by applying the writes since it last looked, a few
// records, instead of reading and decoding all of them again (about 1.3 s
// and 250 Redis commands at 100,000 jobs), and a follower that takes over
// is ready to decide at once.
const (
	KeyChanges = "changes"
	// ChangesMaxLen is about how many writes the log keeps: a follower
	// looks every 2 s or so (-follower-refresh), and a leader writes at
	// most a few hundred times a second (one change per batch of events).
	// One that falls further behind reloads.
	ChangesMaxLen = 1024
	// ChangesMaxBytes bounds one logged write: most are a few kilobytes (a
	// handful of job and run records); a larger one (a burst's first pass
	// over thousands of jobs) is logged as overflowed, and followers reload
	// when they meet it. With ChangesMaxLen it bounds the log's memory in
	// Redis to about 128 MiB (MAXLEN ~ keeps up to a stream node more), and
	// keeps it far smaller in practice.
	ChangesMaxBytes = 128 << 10
	// changesPage is how many entries one read of the log takes.
	changesPage = 256
)

// ErrReload says the change log cannot bring memory up to date (the
// follower fell behind the log's trimming, a write overflowed the log or
// cannot be read, or the store was written without the log: by a
// scheduler of an earlier release): read every record afresh.
var ErrReload = errors.New("the change log does not hold every write since the last read; reload")

// LogChanges makes tx, a write that leaves the store at version (Fence),
// append its writes to the change log, tagged with version.
func LogChanges(tx *store.Tx, version string) {
	tx.Log(KeyChanges, ChangesMaxLen, ChangesMaxBytes, version)
}

// ForceReload makes tx, a write that leaves the store at version, append
// an entry that holds none of its writes to the change log: a follower
// that meets it reloads. A new leader writes it when the log did not hold
// every write before its term (a leader of an earlier release wrote).
func ForceReload(tx *store.Tx, version string) { tx.Log(KeyChanges, ChangesMaxLen, 1, version) }

// LogTail returns the change log's position now (store.LogStart when it is
// empty) and the store's version, read together: read them before loading
// every record, then ReadChanges from the position. complete reports
// whether the log holds the store's last write: its last entry is tagged
// with the store's version (or both are empty).
func (r *Repo) LogTail(ctx context.Context) (pos, version string, complete bool, err error) {
	e, v, err := r.st.LogTail(ctx, KeyChanges, KeyVersion)
	if errors.Is(err, store.ErrLogUnreadable) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("change log: %w", err)
	}
	return e.ID, string(v), e.Tag == string(v), nil
}

// ReadChanges returns every logged write after the position after, oldest
// first, and the store's version, read with the last of them; or an error
// wrapping ErrReload when the log no longer holds them all or one of them
// cannot be applied (overflowed, unreadable). The caller checks the
// version against the last entry's tag (LoggedVersion): a write that was
// not logged (a leader of an earlier release) leaves them apart.
func (r *Repo) ReadChanges(ctx context.Context, after string) ([]store.LogEntry, string, error) {
	var out []store.LogEntry
	for {
		es, v, err := r.st.ReadLog(ctx, KeyChanges, after, changesPage, KeyVersion)
		if errors.Is(err, store.ErrLogTrimmed) || errors.Is(err, store.ErrLogUnreadable) {
			return nil, "", fmt.Errorf("change log after %s: %w: %w", after, ErrReload, err)
		}
		if err != nil {
			return nil, "", fmt.Errorf("change log: %w", err)
		}
		for _, e := range es {
			if e.Overflowed {
				return nil, "", fmt.Errorf("change log entry %s: %w", e.ID, ErrReload)
			}
		}
		out = append(out, es...)
		if len(es) < changesPage {
			return out, string(v), nil
		}
		after = es[len(es)-1].ID
	}
}

// LoggedVersion returns the store's version after the last of es (its
// tag), or since when es is empty.
func LoggedVersion(es []store.LogEntry, since string) string {
	if len(es) == 0 {
		return since
	}
	return es[len(es)-1].Tag
}

// DecodeUpdate decodes the records the logged writes es left, the last
// write of each record winning, as the follower's update (nil: deleted).
// template gives the template of an array the writes do not touch (the
// follower's memory's), for the array tasks among them.
func DecodeUpdate(es []store.LogEntry, template func(array string) *loomv1.Job) (*domain.Update, error) {
	last := map[string]map[string][]byte{}
	for _, e := range es {
		if e.Overflowed {
			return nil, fmt.Errorf("change log entry %s: %w", e.ID, ErrReload)
		}
		for _, o := range e.Ops {
			if !isRecordKey(o.Key) {
				continue // the fence, the version
			}
			if o.Op != "HSET" && o.Op != "HDEL" {
				return nil, fmt.Errorf("change log entry %s: %s of %s, which holds records field by field: %w", e.ID, o.Op, o.Key, ErrReload)
			}
			m := last[o.Key]
			if m == nil {
				m = map[string][]byte{}
				last[o.Key] = m
			}
			m[o.Field] = o.Value // nil for HDEL
		}
	}
	u := &domain.Update{}
	if err := decodeFields(last[KeyClusters], KeyClusters, &u.Clusters); err != nil {
		return nil, err
	}
	if err := decodeFields(last[KeyNodes], KeyNodes, &u.Nodes); err != nil {
		return nil, err
	}
	if err := decodeFields(last[KeyRuns], KeyRuns, &u.Runs); err != nil {
		return nil, err
	}
	if err := decodeFields(last[KeyUsage], KeyUsage, &u.Usage); err != nil {
		return nil, err
	}
	if err := decodeFields(last[KeyAssocs], KeyAssocs, &u.Assocs); err != nil {
		return nil, err
	}
	if err := decodeFields(last[KeyEnded], KeyEnded, &u.Ended); err != nil {
		return nil, err
	}
	if fs := last[KeyStepRequests]; len(fs) > 0 {
		u.StepRequests = fs // raw: nil for a deleted one
	}
	if fs := last[KeyArrays]; len(fs) > 0 {
		u.Arrays = make(map[string]*domain.Array, len(fs))
		for name, b := range fs {
			if b == nil {
				u.Arrays[name] = nil
				continue
			}
			a, err := DecodeArray(b)
			if err != nil {
				return nil, fmt.Errorf("change log: array %s: %w", name, err)
			}
			u.Arrays[name] = a
		}
	}
	tmpl := func(array string) *loomv1.Job {
		if a, ok := u.Arrays[array]; ok {
			if a == nil {
				return nil
			}
			return a.Template
		}
		return template(array)
	}
	if fs := last[KeyJobs]; len(fs) > 0 {
		u.Jobs = make(map[string]*domain.Job, len(fs))
		for name, b := range fs {
			if b == nil {
				u.Jobs[name] = nil
				continue
			}
			j, err := DecodeTask(name, b, tmpl)
			if err != nil {
				return nil, fmt.Errorf("change log: job %s: %w", name, err)
			}
			u.Jobs[name] = j
		}
	}
	return u, nil
}

// decodeFields decodes the JSON records of fs (nil: deleted) into *out.
func decodeFields[T any](fs map[string][]byte, key string, out *map[string]*T) error {
	if len(fs) == 0 {
		return nil
	}
	*out = make(map[string]*T, len(fs))
	for field, b := range fs {
		if b == nil {
			(*out)[field] = nil
			continue
		}
		v := new(T)
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("change log: %s %s: %w", key, field, err)
		}
		(*out)[field] = v
	}
	return nil
}

// isRecordKey reports whether key is one of the hashes of records.
func isRecordKey(key string) bool { return slices.Contains(recordKeys, key) }
