// Package app applies job events to the registry and answers its reads.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/registry/internal/adapters"
	"github.com/loom-ml/loom/services/registry/internal/domain"
)

// Registry is the registry's state in memory, kept in step with Redis.
// Handle must be called sequentially (one consumer); reads are safe
// concurrently with it.
type Registry struct {
	repo *adapters.Repo
	log  *slog.Logger
	now  func() time.Time
	// drv writes each registration and reloads memory after a write whose
	// outcome is unknown (Handle's caller serialises its calls).
	drv *store.Driver

	mu    sync.RWMutex
	state *domain.State
}

// New loads the stored state through repo. now is the clock (time.Now when nil).
func New(ctx context.Context, repo *adapters.Repo, log *slog.Logger, now func() time.Time) (*Registry, error) {
	if now == nil {
		now = time.Now
	}
	st, err := repo.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r := &Registry{repo: repo, log: log, now: now, state: st}
	r.drv = store.NewDriver(repo.Store(), r.reload)
	return r, nil
}

// reload replaces memory with what Redis holds.
func (r *Registry) reload(ctx context.Context) error {
	st, err := r.repo.Load(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.state = st
	r.mu.Unlock()
	r.log.Info("state reloaded", "models", len(st.Models))
	return nil
}

// Handle applies one event of loom.job.events.v1: a COMPLETED job with a
// model output registers the model's next version, stored and emitted in one
// Apply. Other events are ignored.
func (r *Registry) Handle(ctx context.Context, ev envelope.Event) error {
	jc, ok := ev.Payload.(*eventsv1.JobChanged)
	if !ok {
		return nil
	}
	if err := r.drv.Ready(ctx); err != nil {
		return err
	}
	r.mu.RLock()
	reg := domain.Decide(r.state, jc, r.now().UTC())
	r.mu.RUnlock()
	if reg == nil {
		return nil
	}
	tx, err := r.repo.Tx(reg)
	if err != nil {
		return fmt.Errorf("register %s: %w", reg.Version.GetName(), err)
	}
	applied, err := r.drv.Apply(ctx, ev.ID, tx, func() {
		r.mu.Lock()
		r.state.Apply(reg)
		r.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", reg.Version.GetName(), err)
	}
	if !applied {
		// Seen before: the state loaded at start, applied by this process,
		// or reloaded after a write whose outcome was unknown has it.
		return nil
	}
	r.log.Info("model version registered", "version", reg.Version.GetName(), "job", reg.Version.GetSourceJob())
	return nil
}

// ListModels returns the models of the project parent ("projects/{p}") by name.
func (r *Registry) ListModels(parent string) ([]*loomv1.Model, error) {
	project, err := resname.ParseProject(parent)
	if err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*loomv1.Model
	for name, m := range r.state.Models {
		if n, err := resname.SplitModel(name); err == nil && n.Project == project.ID {
			out = append(out, proto.Clone(m).(*loomv1.Model))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// GetModel returns the model name, or NotFound.
func (r *Registry) GetModel(name string) (*loomv1.Model, error) {
	if _, err := resname.ParseModel(name); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.state.Models[name]
	if !ok {
		return nil, fmt.Errorf("model %s: %w", name, errs.NotFound)
	}
	return proto.Clone(m).(*loomv1.Model), nil
}

// ListVersions returns the versions of the model parent in version order, or
// NotFound when the model does not exist.
func (r *Registry) ListVersions(parent string) ([]*loomv1.ModelVersion, error) {
	if _, err := resname.ParseModel(parent); err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, ok := r.state.Models[parent]; !ok {
		return nil, fmt.Errorf("model %s: %w", parent, errs.NotFound)
	}
	vs := r.state.Versions[parent]
	out := make([]*loomv1.ModelVersion, len(vs))
	for i, v := range vs {
		out[i] = proto.Clone(v).(*loomv1.ModelVersion)
	}
	return out, nil
}
