// Package adapters holds the registry's Redis repository.
package adapters

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/domain"
)

// Redis keys, relative to the store's prefix ("registry:").
const (
	// KeyModels is a hash: model name → loom.v1.Model.
	KeyModels = "models"
	// KeyVersions is a hash: version name → loom.v1.ModelVersion.
	KeyVersions = "versions"
	// KeyJobs is a hash: job name → the version it registered.
	KeyJobs = "jobs"
	// KeyRequests is a hash: an UploadModel's request_id → "<seq> <version
	// name>", the last domain.MaxRequests of them (seq orders eviction).
	KeyRequests = "requests"
)

// Source is the CloudEvents source of the registry's events.
const Source = "loom/registry"

// Repo reads and writes the registry's state in its Store.
type Repo struct {
	st *store.Store
}

// NewRepo returns a repository over st.
func NewRepo(st *store.Store) *Repo { return &Repo{st: st} }

// Load reads the whole stored state.
func (r *Repo) Load(ctx context.Context) (*domain.State, error) {
	rawModels, err := r.st.HGetAll(ctx, KeyModels)
	if err != nil {
		return nil, fmt.Errorf("load models: %w", err)
	}
	rawVersions, err := r.st.HGetAll(ctx, KeyVersions)
	if err != nil {
		return nil, fmt.Errorf("load versions: %w", err)
	}
	rawJobs, err := r.st.HGetAll(ctx, KeyJobs)
	if err != nil {
		return nil, fmt.Errorf("load job versions: %w", err)
	}
	models := make([]*loomv1.Model, 0, len(rawModels))
	for name, b := range rawModels {
		m := &loomv1.Model{}
		if err := proto.Unmarshal(b, m); err != nil {
			return nil, fmt.Errorf("decode model %s: %w", name, err)
		}
		models = append(models, m)
	}
	versions := make([]*loomv1.ModelVersion, 0, len(rawVersions))
	for name, b := range rawVersions {
		v := &loomv1.ModelVersion{}
		if err := proto.Unmarshal(b, v); err != nil {
			return nil, fmt.Errorf("decode version %s: %w", name, err)
		}
		versions = append(versions, v)
	}
	jobs := make(map[string]string, len(rawJobs))
	for j, v := range rawJobs {
		jobs[j] = string(v)
	}
	rawRequests, err := r.st.HGetAll(ctx, KeyRequests)
	if err != nil {
		return nil, fmt.Errorf("load request records: %w", err)
	}
	requests := make(map[string]domain.Request, len(rawRequests))
	for id, b := range rawRequests {
		req, err := decodeRequest(b)
		if err != nil {
			return nil, fmt.Errorf("decode request record %s: %w", id, err)
		}
		requests[id] = req
	}
	return domain.Load(models, versions, jobs, requests), nil
}

// encodeRequest and decodeRequest are a request record's stored form,
// "<seq> <version name>".
func encodeRequest(r domain.Request) []byte {
	return []byte(strconv.FormatInt(r.Seq, 10) + " " + r.Version)
}

func decodeRequest(b []byte) (domain.Request, error) {
	seq, version, ok := strings.Cut(string(b), " ")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || err != nil || version == "" {
		return domain.Request{}, fmt.Errorf("%q is not \"<seq> <version>\"", b)
	}
	return domain.Request{Seq: n, Version: version}, nil
}

// Tx returns the transaction that stores reg (model, version, its job →
// version record when it names a job, its request record and evictions) and
// emits its ModelVersionRegistered, keyed by the model name (routed by
// libs/topics to loom.model.events.v1).
func (r *Repo) Tx(reg *domain.Registration) (*store.Tx, error) {
	mb, err := proto.Marshal(reg.Model)
	if err != nil {
		return nil, fmt.Errorf("encode model %s: %w", reg.Model.GetName(), err)
	}
	vb, err := proto.Marshal(reg.Version)
	if err != nil {
		return nil, fmt.Errorf("encode version %s: %w", reg.Version.GetName(), err)
	}
	tx := &store.Tx{}
	tx.HSet(KeyModels, reg.Model.GetName(), mb)
	tx.HSet(KeyVersions, reg.Version.GetName(), vb)
	for _, m := range append(reg.Moved, reg.Overwritten...) {
		if err := hsetVersion(tx, m); err != nil {
			return nil, err
		}
	}
	if j := reg.Version.GetSourceJob(); j != "" {
		tx.HSet(KeyJobs, j, []byte(reg.Version.GetName()))
	}
	for _, id := range reg.Evict {
		tx.HDel(KeyRequests, id)
	}
	if reg.RequestID != "" {
		tx.HSet(KeyRequests, reg.RequestID, encodeRequest(reg.Request))
	}
	if err := emit(tx, reg.Model.GetName(), reg.Event); err != nil {
		return nil, err
	}
	return tx, nil
}

// ChangeTx returns the transaction that stores c (an update, an alias
// move, a deleted version, or a deleted model with the request records
// naming its versions) with no event: these are the registry's own state,
// which nothing downstream follows.
func (r *Repo) ChangeTx(c *domain.Change) (*store.Tx, error) {
	tx := &store.Tx{}
	if c.DeletedModel != "" {
		tx.HDel(KeyModels, c.DeletedModel)
	} else {
		mb, err := proto.Marshal(c.Model)
		if err != nil {
			return nil, fmt.Errorf("encode model %s: %w", c.Model.GetName(), err)
		}
		tx.HSet(KeyModels, c.Model.GetName(), mb)
	}
	for _, v := range c.Versions {
		if err := hsetVersion(tx, v); err != nil {
			return nil, err
		}
	}
	for _, n := range c.Deleted {
		tx.HDel(KeyVersions, n)
	}
	for _, id := range c.Forgotten {
		tx.HDel(KeyRequests, id)
	}
	return tx, nil
}

// hsetVersion adds the write of v to tx.
func hsetVersion(tx *store.Tx, v *loomv1.ModelVersion) error {
	b, err := proto.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode version %s: %w", v.GetName(), err)
	}
	tx.HSet(KeyVersions, v.GetName(), b)
	return nil
}

// AnswerTx returns the transaction that answers an UploadModel sent again
// for a version it registered before: ModelVersionRegistered of that
// version, with the request id, and no change of state.
func (r *Repo) AnswerTx(model string, v *loomv1.ModelVersion, requestID string) (*store.Tx, error) {
	tx := &store.Tx{}
	err := emit(tx, model, &eventsv1.ModelVersionRegistered{Version: v, Model: model, RequestId: requestID})
	return tx, err
}

// RefuseTx returns the transaction that answers a refused UploadModel with
// ModelUploadFailed, keyed key, and changes no state.
func (r *Repo) RefuseTx(key string, ev *eventsv1.ModelUploadFailed) (*store.Tx, error) {
	tx := &store.Tx{}
	err := emit(tx, key, ev)
	return tx, err
}

// AnswerExportTx returns the transaction that answers an ExportModel
// command with ev (ModelExported or ModelExportFailed), keyed key, and
// changes no state.
func (r *Repo) AnswerExportTx(key string, ev proto.Message) (*store.Tx, error) {
	tx := &store.Tx{}
	err := emit(tx, key, ev)
	return tx, err
}

// emit adds msg, keyed key, to tx's outbox (libs/topics routes it to
// loom.model.events.v1).
func emit(tx *store.Tx, key string, msg proto.Message) error {
	ev, err := envelope.Route(key, Source, msg)
	if err != nil {
		return err
	}
	tx.Emit(ev)
	return nil
}

// Store returns the repository's store, which the app writes through its
// store.Driver.
func (r *Repo) Store() *store.Store { return r.st }
