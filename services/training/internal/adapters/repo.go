// Package adapters holds the training service's Redis repository.
package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	"github.com/loom-ml/loom/services/training/internal/domain"
)

// KeyRoots is the hash of the roots, relative to the store's prefix
// ("training:"): root name (a CustomJob, tuning job or pipeline as created)
// → the root as JSON (see record), without its trials.
const KeyRoots = "roots"

// KeyTrialsPrefix + root name is the hash of a tuning root's trials: trial
// id → the trial (with its measurements) and its CustomJob as JSON (see
// trialRecord). A change writes only the trials it changed, so that a
// study of 1,000 trials rewrites one trial per measurement, not the study.
const KeyTrialsPrefix = "trials:"

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

// Load reads the whole stored state: each root with its trials.
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
		if root.Tuning != nil {
			trials, err := r.st.HGetAll(ctx, KeyTrialsPrefix+name)
			if err != nil {
				return nil, fmt.Errorf("load the trials of %s: %w", name, err)
			}
			if err := MergeTrials(root, trials); err != nil {
				return nil, fmt.Errorf("decode the trials of %s: %w", name, err)
			}
		}
		roots = append(roots, root)
	}
	return domain.NewState(roots...), nil
}

// Tx returns the transaction that stores c's root (or deletes it, with its
// trials) and emits what c emits, each routed by libs/topics
// (envelope.Route) with its principal. Of a tuning root's trials only those
// whose record differs from c.Before's are written; only those c.Trials
// names are looked at when it names them (the domain's changes do), so
// that a change of one trial of a big study encodes that trial, not the
// study.
func (r *Repo) Tx(c *domain.Change) (*store.Tx, error) {
	tx := &store.Tx{}
	if c.After == nil {
		tx.HDel(KeyRoots, c.Root)
		tx.Del(KeyTrialsPrefix + c.Root)
	} else {
		b, err := Encode(c.After)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", c.Root, err)
		}
		tx.HSet(KeyRoots, c.Root, b)
		if err := writeTrials(tx, c); err != nil {
			return nil, fmt.Errorf("encode the trials of %s: %w", c.Root, err)
		}
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

// writeTrials adds to tx the records of c.After's trials that differ from
// c.Before's: of the trials c.Trials names, or of all when it is nil.
func writeTrials(tx *store.Tx, c *domain.Change) error {
	if c.Trials == nil {
		trials, err := EncodeTrials(c.After)
		if err != nil {
			return err
		}
		var before map[string][]byte
		if c.Before != nil {
			if before, err = EncodeTrials(c.Before); err != nil {
				return err
			}
		}
		for _, id := range sortedIDs(trials) {
			if !bytes.Equal(before[id], trials[id]) {
				tx.HSet(KeyTrialsPrefix+c.Root, id, trials[id])
			}
		}
		return nil
	}
	for _, id := range c.Trials {
		after, err := encodeTrial(c.After, id)
		if err != nil {
			return err
		}
		if after == nil {
			continue // not a trial of After's: nothing to write
		}
		before, err := encodeTrial(c.Before, id)
		if err != nil {
			return err
		}
		if !bytes.Equal(before, after) {
			tx.HSet(KeyTrialsPrefix+c.Root, id, after)
		}
	}
	return nil
}

// sortedIDs is m's trial ids in numeric order (writes in a fixed order).
func sortedIDs(m map[string][]byte) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return trialLess(ids[i], ids[j]) })
	return ids
}

// trialLess orders trial ids numerically ("2" before "10").
func trialLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// record is a root as stored: the resources as protojson, the service's own
// fields beside them.
type record struct {
	Name     string          `json:"name"`
	CJs      []cjRecord      `json:"custom_jobs,omitempty"`
	Tuning   *tuningRecord   `json:"tuning,omitempty"`
	Pipeline *pipelineRecord `json:"pipeline,omitempty"`
	// LogDir and LogDirWhy: where its CustomJobs' output goes
	// (domain.Root.LogDir), decided at its create.
	LogDir    string `json:"log_dir,omitempty"`
	LogDirWhy string `json:"log_dir_why,omitempty"`
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
	StepsEnded     []string        `json:"steps_ended,omitempty"`
	// StepsExited are the nodes of StepsEnded whose program exited 0 by itself.
	StepsExited []string `json:"steps_exited,omitempty"`
	// PendingStepEnds are step ends read before their run's event.
	PendingStepEnds []stepEndRecord `json:"pending_step_ends,omitempty"`
	// PendingMetrics are a trial's metric points read before their run's
	// event (measurements as protojson).
	PendingMetrics []pendingMetricsRecord `json:"pending_metrics,omitempty"`
	// RetryAt is Unix nanoseconds (0: none); Refused the last refusal.
	RetryAt int64  `json:"retry_at,omitempty"`
	Refused string `json:"refused,omitempty"`
	// LogDir and LogDirWhy: where its output goes instead of its
	// ephemeral cluster's shared directory (domain.CJ.LogDir). A record
	// written before there was a log directory has neither: its output
	// goes with its cluster, as it did.
	LogDir    string `json:"log_dir,omitempty"`
	LogDirWhy string `json:"log_dir_why,omitempty"`
}

type stepEndRecord struct {
	Attempt int32  `json:"attempt"`
	Node    string `json:"node"`
	Exited  bool   `json:"exited,omitempty"`
}

type pendingMetricsRecord struct {
	Attempt      int32             `json:"attempt"`
	Node         string            `json:"node"`
	Measurements []json.RawMessage `json:"measurements"`
	Records      int               `json:"records,omitempty"`
}

// trialRecord is one trial as stored under KeyTrialsPrefix: the trial
// (protojson, with its measurements) and its CustomJob.
type trialRecord struct {
	Trial json.RawMessage `json:"trial"`
	CJ    *cjRecord       `json:"custom_job,omitempty"`
}

type tuningRecord struct {
	Job      json.RawMessage `json:"job"`
	Ending   int32           `json:"ending,omitempty"`
	EndError json.RawMessage `json:"end_error,omitempty"`
	// EndBy and EndByAdmin: who cancelled it (domain.Tuning.EndBy).
	EndBy      string `json:"end_by,omitempty"`
	EndByAdmin bool   `json:"end_by_admin,omitempty"`
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

// Encode is a root's own record: the root without a tuning root's trials
// and their CustomJobs, which EncodeTrials gives.
func Encode(r *domain.Root) ([]byte, error) {
	rec := record{Name: r.Name, LogDir: r.LogDir.Dir, LogDirWhy: r.LogDir.Why}
	for _, j := range r.CJs {
		if r.Tuning != nil && j.TrialID != "" {
			continue
		}
		c, err := encodeCJ(j)
		if err != nil {
			return nil, err
		}
		rec.CJs = append(rec.CJs, c)
	}
	if t := r.Tuning; t != nil {
		b, err := marshal(domain.WithoutTrials(t.Job))
		if err != nil {
			return nil, err
		}
		rec.Tuning = &tuningRecord{Job: b, Ending: int32(t.Ending), EndBy: t.EndBy.User, EndByAdmin: t.EndBy.Admin}
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

// EncodeTrials is a tuning root's trials as stored, by trial id, each with
// its CustomJob; none for another root.
func EncodeTrials(r *domain.Root) (map[string][]byte, error) {
	if r.Tuning == nil {
		return nil, nil
	}
	cjs := map[string]*domain.CJ{}
	for _, j := range r.CJs {
		if j.TrialID != "" {
			cjs[j.TrialID] = j
		}
	}
	out := make(map[string][]byte, len(r.Tuning.Job.GetTrials()))
	for _, tr := range r.Tuning.Job.GetTrials() {
		b, err := encodeTrialRecord(tr, cjs[tr.GetId()])
		if err != nil {
			return nil, err
		}
		out[tr.GetId()] = b
	}
	return out, nil
}

// encodeTrial is trial id's record of tuning root r, as EncodeTrials
// gives it; nil when r (possibly nil) has no such trial.
func encodeTrial(r *domain.Root, id string) ([]byte, error) {
	if r == nil || r.Tuning == nil {
		return nil, nil
	}
	for _, tr := range r.Tuning.Job.GetTrials() {
		if tr.GetId() != id {
			continue
		}
		for _, j := range r.CJs {
			if j.TrialID == id {
				return encodeTrialRecord(tr, j)
			}
		}
		return encodeTrialRecord(tr, nil)
	}
	return nil, nil
}

// encodeTrialRecord is the record of trial tr and its CustomJob j (nil:
// none).
func encodeTrialRecord(tr *trainingv1.Trial, j *domain.CJ) ([]byte, error) {
	b, err := marshal(tr)
	if err != nil {
		return nil, err
	}
	rec := trialRecord{Trial: b}
	if j != nil {
		c, err := encodeCJ(j)
		if err != nil {
			return nil, err
		}
		rec.CJ = &c
	}
	return json.Marshal(rec)
}

// MergeTrials puts a tuning root's stored trials (EncodeTrials' records)
// into r: its trials in id order, each trial's CustomJob after the root's
// own. A record written before trials were stored apart holds them inline;
// a trial's own record wins.
func MergeTrials(r *domain.Root, trials map[string][]byte) error {
	if r.Tuning == nil || len(trials) == 0 {
		return nil
	}
	byID := map[string]*trainingv1.Trial{}
	for _, tr := range r.Tuning.Job.GetTrials() {
		byID[tr.GetId()] = tr
	}
	cjs := map[string]*domain.CJ{}
	var own []*domain.CJ
	for _, j := range r.CJs {
		if j.TrialID != "" {
			cjs[j.TrialID] = j
		} else {
			own = append(own, j)
		}
	}
	for id, b := range trials {
		var rec trialRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("trial %s: %w", id, err)
		}
		tr := &trainingv1.Trial{}
		if err := unmarshal(rec.Trial, tr); err != nil {
			return fmt.Errorf("trial %s: %w", id, err)
		}
		byID[id] = tr
		if rec.CJ != nil {
			j, err := decodeCJ(*rec.CJ)
			if err != nil {
				return fmt.Errorf("trial %s: %w", id, err)
			}
			cjs[id] = j
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return trialLess(ids[i], ids[j]) })
	r.Tuning.Job.Trials = r.Tuning.Job.Trials[:0]
	r.CJs = own
	for _, id := range ids {
		r.Tuning.Job.Trials = append(r.Tuning.Job.Trials, byID[id])
		if j := cjs[id]; j != nil {
			r.CJs = append(r.CJs, j)
		}
	}
	return nil
}

func encodeCJ(j *domain.CJ) (cjRecord, error) {
	b, err := marshal(j.Job)
	if err != nil {
		return cjRecord{}, err
	}
	c := cjRecord{Job: b, TrialID: j.TrialID, Ephemeral: j.Ephemeral, Submitted: j.Submitted,
		ClusterDeleted: j.ClusterDeleted, CancelSent: j.CancelSent, Stop: j.Stop, Nodes: j.Nodes, Attempt: j.Attempt,
		StepsEnded: j.StepsEnded, StepsExited: j.StepsExited, Refused: j.Refused, LogDir: j.LogDir.Dir, LogDirWhy: j.LogDir.Why}
	for _, e := range j.PendingStepEnds {
		c.PendingStepEnds = append(c.PendingStepEnds, stepEndRecord{Attempt: e.Attempt, Node: e.Node, Exited: e.Exited})
	}
	for _, p := range j.PendingMetrics {
		pr := pendingMetricsRecord{Attempt: p.Attempt, Node: p.Node, Records: p.Records}
		for _, m := range p.Measurements {
			b, err := marshal(m)
			if err != nil {
				return cjRecord{}, err
			}
			pr.Measurements = append(pr.Measurements, b)
		}
		c.PendingMetrics = append(c.PendingMetrics, pr)
	}
	if !j.RetryAt.IsZero() {
		c.RetryAt = j.RetryAt.UnixNano()
	}
	return c, nil
}

func decodeCJ(j cjRecord) (*domain.CJ, error) {
	job := &trainingv1.CustomJob{}
	if err := unmarshal(j.Job, job); err != nil {
		return nil, err
	}
	cj := &domain.CJ{Job: job, TrialID: j.TrialID, Ephemeral: j.Ephemeral, Submitted: j.Submitted,
		ClusterDeleted: j.ClusterDeleted, CancelSent: j.CancelSent, Stop: j.Stop, Nodes: j.Nodes, Attempt: j.Attempt,
		StepsEnded: j.StepsEnded, StepsExited: j.StepsExited, Refused: j.Refused,
		LogDir: domain.LogDir{Dir: j.LogDir, Why: j.LogDirWhy}}
	for _, e := range j.PendingStepEnds {
		cj.PendingStepEnds = append(cj.PendingStepEnds, domain.StepEnd{Attempt: e.Attempt, Node: e.Node, Exited: e.Exited})
	}
	for _, p := range j.PendingMetrics {
		pm := domain.PendingMetrics{Attempt: p.Attempt, Node: p.Node, Records: p.Records}
		for _, b := range p.Measurements {
			m := &trainingv1.Measurement{}
			if err := unmarshal(b, m); err != nil {
				return nil, err
			}
			pm.Measurements = append(pm.Measurements, m)
		}
		cj.PendingMetrics = append(cj.PendingMetrics, pm)
	}
	if j.RetryAt != 0 {
		cj.RetryAt = time.Unix(0, j.RetryAt).UTC()
	}
	return cj, nil
}

// Decode reads a root Encode wrote (without its trials: MergeTrials adds
// them).
func Decode(b []byte) (*domain.Root, error) {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	r := &domain.Root{Name: rec.Name, LogDir: domain.LogDir{Dir: rec.LogDir, Why: rec.LogDirWhy}}
	for _, j := range rec.CJs {
		cj, err := decodeCJ(j)
		if err != nil {
			return nil, err
		}
		r.CJs = append(r.CJs, cj)
	}
	if t := rec.Tuning; t != nil {
		job := &trainingv1.HyperparameterTuningJob{}
		if err := unmarshal(t.Job, job); err != nil {
			return nil, err
		}
		r.Tuning = &domain.Tuning{Job: job, Ending: trainingv1.JobState(t.Ending),
			EndBy: domain.Canceller{User: t.EndBy, Admin: t.EndByAdmin}}
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
