// Package app applies job events and UploadModel commands to the registry
// and answers its reads.
package app

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
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
	"github.com/loom-ml/loom/services/registry/internal/artifact"
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
	// versions counts registrations (RegisterMetrics; nil: none); under mu.
	versions prometheus.Counter
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

// Handle applies one event of loom.job.events.v1 or loom.model.commands.v1:
// a COMPLETED job with a model output registers the model's next version,
// and so does an UploadModel whose artifact directory is complete (see
// handleUpload); each is stored and answered in one Apply. Other events are
// ignored.
func (r *Registry) Handle(ctx context.Context, ev envelope.Event) error {
	switch p := ev.Payload.(type) {
	case *eventsv1.JobChanged:
		return r.handleJob(ctx, ev, p)
	case *eventsv1.UploadModel:
		return r.handleUpload(ctx, ev, p)
	}
	return nil
}

// handleJob registers the version a COMPLETED job's model output makes.
func (r *Registry) handleJob(ctx context.Context, ev envelope.Event, jc *eventsv1.JobChanged) error {
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
		r.registered()
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

// handleUpload answers an UploadModel, in one Apply with its inbox mark:
//   - a request_id that registered a version before (a command sent again)
//     answers that version again, registering nothing;
//   - a command that fails validation, or whose artifact directory is
//     missing or incomplete, is answered ModelUploadFailed with the reason;
//   - otherwise the next version is registered and answered
//     ModelVersionRegistered with the request id.
//
// An error (Redis, or the check of the directory cut short by ctx) leaves the
// command to be retried.
func (r *Registry) handleUpload(ctx context.Context, ev envelope.Event, cmd *eventsv1.UploadModel) error {
	if err := r.drv.Ready(ctx); err != nil {
		return err
	}
	// Hashing the artifacts is the costly part: a redelivery skips it.
	if seen, err := r.repo.Store().Seen(ctx, ev.ID); err != nil || seen {
		return err
	}
	r.mu.RLock()
	prev, answered := r.state.Answered(cmd.GetRequestId())
	var u domain.Upload
	var refusal error
	if !answered {
		u, refusal = domain.ValidateUpload(r.state, cmd)
	}
	r.mu.RUnlock()
	if answered {
		mv, err := resname.SplitModelVersion(prev.GetName()) // Answered parsed it
		if err != nil {
			return err
		}
		tx, err := r.repo.AnswerTx(mv.Model.String(), prev, cmd.GetRequestId())
		if err != nil {
			return err
		}
		if _, err := r.drv.Apply(ctx, ev.ID, tx, nil); err != nil {
			return fmt.Errorf("answer upload %s: %w", cmd.GetRequestId(), err)
		}
		r.log.Info("model upload sent again; answered its version", "request_id", cmd.GetRequestId(), "version", prev.GetName())
		return nil
	}
	if refusal == nil {
		// Outside the lock: reads go on while the files are hashed. Handle
		// is sequential, so nothing changes the state meanwhile.
		if err := artifact.Verify(ctx, u.Dir); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("upload %s: artifact check cut short: %w", cmd.GetRequestId(), err)
			}
			refusal = fmt.Errorf("model.artifact_uri: %w", err)
		}
	}
	if refusal != nil {
		failed, key := domain.Refusal(cmd, u.Model, refusal)
		tx, err := r.repo.RefuseTx(key, failed)
		if err != nil {
			return err
		}
		applied, err := r.drv.Apply(ctx, ev.ID, tx, nil)
		if err != nil {
			return fmt.Errorf("refuse upload %s: %w", cmd.GetRequestId(), err)
		}
		if applied {
			r.log.Info("model upload refused", "request_id", cmd.GetRequestId(), "model", u.Model, "reason", failed.GetReason())
		}
		return nil
	}
	r.mu.RLock()
	reg := domain.RegisterUpload(r.state, u, r.now().UTC())
	r.mu.RUnlock()
	tx, err := r.repo.Tx(reg)
	if err != nil {
		return fmt.Errorf("register %s: %w", reg.Version.GetName(), err)
	}
	applied, err := r.drv.Apply(ctx, ev.ID, tx, func() {
		r.mu.Lock()
		r.state.Apply(reg)
		r.registered()
		r.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", reg.Version.GetName(), err)
	}
	if applied {
		r.log.Info("model version registered", "version", reg.Version.GetName(), "request_id", cmd.GetRequestId(), "user", cmd.GetUser())
	}
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
