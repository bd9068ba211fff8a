// Package adapters holds the registry's Redis repository.
package adapters

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
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
	return domain.Load(models, versions, jobs), nil
}

// Tx returns the transaction that stores reg and emits its
// ModelVersionRegistered, keyed by the model name (routed by libs/topics to
// loom.model.events.v1).
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
	tx.HSet(KeyJobs, reg.Version.GetSourceJob(), []byte(reg.Version.GetName()))
	ev, err := envelope.Route(reg.Model.GetName(), Source, reg.Event)
	if err != nil {
		return nil, err
	}
	tx.Emit(ev)
	return tx, nil
}

// Store returns the repository's store, which the app writes through its
// store.Driver.
func (r *Repo) Store() *store.Store { return r.st }
