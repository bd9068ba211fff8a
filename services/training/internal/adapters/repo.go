// Package adapters holds the training service's Redis repository.
package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

// KeyRoots is the one hash of the state, relative to the store's prefix
// ("training:"): root name (a CustomJob, tuning job or pipeline as created)
// → the root as JSON (see record).
const KeyRoots = "roots"

// Source is the CloudEvents source of the training service's records.
const Source = "loom/training"

// Repo reads and writes the training service's state in its Store.
type Repo struct {
	st *store.Store
}

// NewRepo returns a repository over st.
func NewRepo(st *store.Store) *Repo { return &Repo{st: st} }

// Store returns the repository's store.
func (r *Repo) Store() *store.Store { return r.st }

// Load reads the whole stored state.
func (r *Repo) Load(ctx context.Context) (*domain.State, error) {
	raw, err := r.st.HGetAll(ctx, KeyRoots)
	if err != nil {
		return nil, fmt.Errorf("load roots: %w", err)
	}
	roots := make([]*domain.Root, 0, len(raw))
	for name, b := range raw {
		root, err := Decode(b)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", name, err)
		}
		roots = append(roots, root)
	}
	return domain.NewState(roots...), nil
}

// Tx returns the transaction that stores c's root (or deletes it) and
// emits what c emits, each routed by libs/topics (envelope.Route) with its
// principal.
func (r *Repo) Tx(c *domain.Change) (*store.Tx, error) {
	tx := &store.Tx{}
	if c.After == nil {
		tx.HDel(KeyRoots, c.Root)
	} else {
		b, err := Encode(c.After)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", c.Root, err)
		}
		tx.HSet(KeyRoots, c.Root, b)
	}
	for _, e := range c.Emits {
		ev, err := envelope.Route(e.Key, Source, e.Payload)
		if err != nil {
			return nil, err
		}
		ev.Principal = e.Principal
		tx.Emit(ev)
	}
	return tx, nil
}

// record is a root as stored: the resources as protojson, the service's own
// fields beside them.
type record struct {
	Name     string          `json:"name"`
	CJs      []cjRecord      `json:"custom_jobs,omitempty"`
	Tuning   *tuningRecord   `json:"tuning,omitempty"`
	Pipeline *pipelineRecord `json:"pipeline,omitempty"`
}

type cjRecord struct {
	Job            json.RawMessage `json:"job"`
	TrialID        string          `json:"trial_id,omitempty"`
	Ephemeral      bool            `json:"ephemeral,omitempty"`
	Submitted      bool            `json:"submitted,omitempty"`
	ClusterDeleted bool            `json:"cluster_deleted,omitempty"`
	CancelSent     bool            `json:"cancel_sent,omitempty"`
	Stop           string          `json:"stop,omitempty"`
	Nodes          []string        `json:"nodes,omitempty"`
	Attempt        int32           `json:"attempt,omitempty"`
	// RetryAt is Unix nanoseconds (0: none); Refused the last refusal.
	RetryAt int64  `json:"retry_at,omitempty"`
	Refused string `json:"refused,omitempty"`
}

type tuningRecord struct {
	Job      json.RawMessage `json:"job"`
	Ending   int32           `json:"ending,omitempty"`
	EndError json.RawMessage `json:"end_error,omitempty"`
}

type pipelineRecord struct {
	P          json.RawMessage `json:"pipeline"`
	Reserved   int64           `json:"reserved,omitempty"`
	Child      string          `json:"child,omitempty"`
	RequestID  string          `json:"request_id,omitempty"`
	Cancelling bool            `json:"cancelling,omitempty"`
}

func marshal(m proto.Message) (json.RawMessage, error) {
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
}

func unmarshal(b json.RawMessage, m proto.Message) error {
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}

// Encode is a root as stored.
func Encode(r *domain.Root) ([]byte, error) {
	rec := record{Name: r.Name}
	for _, j := range r.CJs {
		b, err := marshal(j.Job)
		if err != nil {
			return nil, err
		}
		rec.CJs = append(rec.CJs, cjRecord{Job: b, TrialID: j.TrialID, Ephemeral: j.Ephemeral, Submitted: j.Submitted,
			ClusterDeleted: j.ClusterDeleted, CancelSent: j.CancelSent, Stop: j.Stop, Nodes: j.Nodes, Attempt: j.Attempt,
			Refused: j.Refused})
		if !j.RetryAt.IsZero() {
			rec.CJs[len(rec.CJs)-1].RetryAt = j.RetryAt.UnixNano()
		}
	}
	if t := r.Tuning; t != nil {
		b, err := marshal(t.Job)
		if err != nil {
			return nil, err
		}
		rec.Tuning = &tuningRecord{Job: b, Ending: int32(t.Ending)}
		if t.EndError != nil {
			if rec.Tuning.EndError, err = marshal(t.EndError); err != nil {
				return nil, err
			}
		}
	}
	if p := r.Pipeline; p != nil {
		b, err := marshal(p.P)
		if err != nil {
			return nil, err
		}
		rec.Pipeline = &pipelineRecord{P: b, Reserved: p.Reserved, Child: p.Child, RequestID: p.RequestID, Cancelling: p.Cancelling}
	}
	return json.Marshal(rec)
}

// Decode reads a root Encode wrote.
func Decode(b []byte) (*domain.Root, error) {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	r := &domain.Root{Name: rec.Name}
	for _, j := range rec.CJs {
		job := &trainingv1.CustomJob{}
		if err := unmarshal(j.Job, job); err != nil {
			return nil, err
		}
		cj := &domain.CJ{Job: job, TrialID: j.TrialID, Ephemeral: j.Ephemeral, Submitted: j.Submitted,
			ClusterDeleted: j.ClusterDeleted, CancelSent: j.CancelSent, Stop: j.Stop, Nodes: j.Nodes, Attempt: j.Attempt,
			Refused: j.Refused}
		if j.RetryAt != 0 {
			cj.RetryAt = time.Unix(0, j.RetryAt).UTC()
		}
		r.CJs = append(r.CJs, cj)
	}
	if t := rec.Tuning; t != nil {
		job := &trainingv1.HyperparameterTuningJob{}
		if err := unmarshal(t.Job, job); err != nil {
			return nil, err
		}
		r.Tuning = &domain.Tuning{Job: job, Ending: trainingv1.JobState(t.Ending)}
		if len(t.EndError) > 0 {
			r.Tuning.EndError = &trainingv1.Status{}
			if err := unmarshal(t.EndError, r.Tuning.EndError); err != nil {
				return nil, err
			}
		}
	}
	if p := rec.Pipeline; p != nil {
		pl := &trainingv1.TrainingPipeline{}
		if err := unmarshal(p.P, pl); err != nil {
			return nil, err
		}
		r.Pipeline = &domain.Pipeline{P: pl, Reserved: p.Reserved, Child: p.Child, RequestID: p.RequestID, Cancelling: p.Cancelling}
	}
	return r, nil
}
