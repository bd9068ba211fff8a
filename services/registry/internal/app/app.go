// Package app applies job events and UploadModel commands to the registry
// and answers its reads.
package app

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
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

	// wmu serialises every change (the consumer's and the RPCs'): each
	// decides from memory and writes through drv while holding it, so that
	// version ids are handed out once each, in order, and an alias moves in
	// one write, however many calls run at once.
	wmu sync.Mutex

	mu    sync.RWMutex
	state *domain.State

	exportRoot string
	// projectBuckets are the bucket URL prefixes, with ProjectPlaceholder,
	// that a project's bucket artifacts and exports must lie under
	// (SetProjectBuckets); none by default.
	projectBuckets []string
	// exportEndpoints are the endpoints an s3:// destination may name,
	// with their credentials (SetExportEndpoints), canonical; none by
	// default.
	exportEndpoints []ExportEndpoint
	// attempts counts the tries at each ExportModel command in hand, by
	// event id (HandleExport), and at each UploadModel, by "upload:" and
	// its event id (handleUploadAttempt); under amu.
	amu      sync.Mutex
	attempts map[string]int
	// uploadTimeout bounds one attempt at an UploadModel (SetUploadTimeout;
	// 0: not said).
	uploadTimeout time.Duration
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
// handleUpload); each is stored and answered in one Apply. Other events
// (ExportModel commands among them: HandleExport's own group runs them) are
// ignored.
func (r *Registry) Handle(ctx context.Context, ev envelope.Event) error {
	switch p := ev.Payload.(type) {
	case *eventsv1.JobChanged:
		return r.handleJob(ctx, ev, p)
	case *eventsv1.UploadModel:
		return r.handleUploadAttempt(ctx, ev, p)
	}
	return nil
}

// UploadAttempts is how many times an UploadModel command is tried (the
// registry consumer's bus MaxAttempts): the last attempt that cannot finish
// answers the upload failed rather than leaving it to the dead letters,
// unanswered, with its operation (or its pipeline) waiting for ever.
const UploadAttempts = 5

// handleUploadAttempt is handleUpload counting the attempts at each command
// (by event id): an attempt that fails returns its error, so that the
// command is delivered again, except the last, which answers
// ModelUploadFailed with the reason (DeadlineExceeded when the artifact
// check was cut short) and the inbox mark. An attempt that could not reach
// the store (bus.Unavailable: Redis restarting) is not counted, as the bus
// does not count it: the command waits for the store, and registers then.
func (r *Registry) handleUploadAttempt(ctx context.Context, ev envelope.Event, cmd *eventsv1.UploadModel) error {
	key := "upload:" + ev.ID
	r.amu.Lock()
	attempt := r.attempts[key] + 1
	r.amu.Unlock()
	err := r.handleUpload(ctx, ev, cmd)
	if bus.Unavailable(err) {
		return err
	}
	r.amu.Lock()
	if r.attempts == nil {
		r.attempts = map[string]int{}
	}
	if err == nil || attempt >= UploadAttempts {
		delete(r.attempts, key)
	} else {
		r.attempts[key] = attempt
	}
	r.amu.Unlock()
	if err == nil || attempt < UploadAttempts {
		return err
	}
	return r.giveUpUpload(ctx, ev, cmd, err)
}

// giveUpUpload answers an UploadModel whose last attempt failed with cause:
// ModelUploadFailed, written with the command's inbox mark (so that nothing
// is written when an attempt whose write's outcome was unknown did register
// it), with a context of its own: the handler's may be spent.
func (r *Registry) giveUpUpload(ctx context.Context, ev envelope.Event, cmd *eventsv1.UploadModel, cause error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	code := codes.Unavailable
	if retryable(ctx, cause) && errs.Code(cause) != codes.Unavailable {
		code = codes.DeadlineExceeded
	}
	bound := "the registry's bound on one attempt"
	if r.uploadTimeout > 0 {
		bound = r.uploadTimeout.String()
	}
	failed, key := domain.Refusal(cmd, "", fmt.Errorf("the upload did not finish in %d attempts (%v); nothing was registered: upload again (a set whose SHA-256 check takes longer than %s cannot be registered)",
		UploadAttempts, cause, bound))
	failed.Code = int32(code)
	tx, err := r.repo.RefuseTx(key, failed)
	if err != nil {
		return err
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := r.drv.Ready(wctx); err != nil {
		return fmt.Errorf("answer upload %s: %w (after %v)", cmd.GetRequestId(), err, cause)
	}
	applied, err := r.drv.Apply(wctx, ev.ID, tx, nil)
	if err != nil {
		return fmt.Errorf("answer upload %s: %w (after %v)", cmd.GetRequestId(), err, cause)
	}
	if applied {
		r.log.Warn("model upload given up", "request_id", cmd.GetRequestId(), "user", cmd.GetUser(), "attempts", UploadAttempts, "err", cause)
	}
	return nil
}

// SetUploadTimeout sets the bound on one attempt at an UploadModel (the
// consumer's handler timeout), which the answer of one given up names.
func (r *Registry) SetUploadTimeout(d time.Duration) { r.uploadTimeout = d }

// handleJob registers the version a COMPLETED job's model output makes,
// with the MANIFEST digest recordManifest records of its directory.
func (r *Registry) handleJob(ctx context.Context, ev envelope.Event, jc *eventsv1.JobChanged) error {
	if err := r.drv.Ready(ctx); err != nil {
		return err
	}
	r.mu.RLock()
	due := domain.Decide(r.state, jc, r.now().UTC()) != nil
	r.mu.RUnlock()
	if !due {
		return nil
	}
	// Hashing the directory is the costly part: a redelivery skips it, and
	// it runs outside every lock.
	if seen, err := r.repo.Store().Seen(ctx, ev.ID); err != nil || seen {
		return err
	}
	manifest, err := r.recordManifest(ctx, jc)
	if err != nil {
		return err
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.RLock()
	reg := domain.DecideRecorded(r.state, jc, manifest, r.now().UTC())
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

// recordManifest gives a completed job's model directory a MANIFEST
// (artifact.Record: the job's own when it matches the files, else one the
// registry writes, listing every file's SHA-256) read and written as the
// job's owner, who wrote the directory (libs/osuser.As: the registry must
// reach no more than they could), and returns its SHA-256 for the version,
// so that any later change of a file in place is found by the version's
// exports, not only by a second registration of the directory. It is
// bounded by half the handler's time (recordBound): a directory that
// cannot be recorded in time, or at all (no owner known on this host, the
// directory gone, past the MANIFEST's limits), is logged and registered
// without a digest, as before, never refused: a completed job's version is
// not lost for it. Only ctx ending (a restart) is an error: the event is
// handled again. An owner who is root on this host (uid 0, whatever the
// name: Account.Root, the check by which agents refuse root jobs) is
// refused so too (errRootOwner): as root the registry would read and write
// wherever the job's model directory points.
func (r *Registry) recordManifest(ctx context.Context, jc *eventsv1.JobChanged) (string, error) {
	dir, owner := jc.GetModelDir(), jc.GetJob().GetUser()
	if dir == "" {
		return "", nil
	}
	a, err := osuser.Lookup(owner)
	if err != nil {
		r.log.Warn("job's model output registered without a MANIFEST digest: its owner's OS account is not known here", "job", jc.GetJob().GetName(), "dir", dir, "owner", owner, "err", err)
		return "", nil
	}
	if a.Root() {
		r.log.Warn("job's model output registered without a MANIFEST digest", "job", jc.GetJob().GetName(), "dir", dir, "owner", owner,
			"err", fmt.Errorf("job.user %s is %s on the registry's host: %w", owner, a, errRootOwner))
		return "", nil
	}
	rctx, cancel := context.WithTimeout(ctx, r.recordBound())
	defer cancel()
	var manifest string
	err = osuser.As(a, func() (err error) { manifest, err = artifact.Record(rctx, dir); return err })
	switch {
	case err == nil:
		return manifest, nil
	case ctx.Err() != nil:
		return "", fmt.Errorf("record the MANIFEST of %s: %w", dir, ctx.Err())
	}
	r.log.Warn("job's model output registered without a MANIFEST digest", "job", jc.GetJob().GetName(), "dir", dir, "owner", owner, "err", err)
	return "", nil
}

// errRootOwner refuses a MANIFEST written as root (recordManifest): a job
// whose owner is uid 0 here (an agent's -allow-root-jobs, or a name mapped
// to uid 0 on this host) gets no file work from the registry done as root.
var errRootOwner = errors.New("the registry writes no MANIFEST as root (uid 0): give the job an owner that is not root on the registry's host")

// recordBound bounds recordManifest: half the time one event may take
// (SetUploadTimeout), a minute when not said, so that a directory too
// large to hash still leaves the registration its time.
func (r *Registry) recordBound() time.Duration {
	if r.uploadTimeout > 0 {
		return r.uploadTimeout / 2
	}
	return time.Minute
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
	var checked artifactCheck
	if refusal == nil {
		var err error
		if checked, refusal, err = r.verify(ctx, u); err != nil {
			return fmt.Errorf("upload %s: %w", cmd.GetRequestId(), err)
		}
	}
	if refusal == nil {
		reg, again, err := r.register(ctx, ev.ID, cmd, checked)
		if err != nil {
			return fmt.Errorf("upload %s: %w", cmd.GetRequestId(), err)
		}
		if again == nil {
			if reg != nil {
				r.log.Info("model version registered", "version", reg.Version.GetName(), "request_id", cmd.GetRequestId(), "user", cmd.GetUser())
			}
			return nil
		}
		refusal = again
	}
	{
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
}

// artifactCheck is what verify found of an upload's artifact set: the
// version's artifact_owner and the SHA-256 of the MANIFEST it checked.
type artifactCheck struct {
	owner, manifest string
}

// verify checks u's artifact set (a local directory, or a bucket URL through
// libs/blobstore): a refusal (the set missing or incomplete, a directory
// the uploader may not read, a bucket outside the project's part of the
// stores) or an error (the check cut short by ctx). A local directory is
// read as the uploader's OS account (UploadModel.os_user, libs/osuser.As):
// the registry reads with its own rights, and must read no more than the
// uploader could. checked.owner is that account, the version's
// artifact_owner (for an upload that may read anything,
// UploadModel.any_owner: a cluster administrator's, a service's, the
// directory's owner); "" for a bucket. checked.manifest is the SHA-256 of
// the MANIFEST checked, which the version records for its exports.
func (r *Registry) verify(ctx context.Context, u domain.Upload) (checked artifactCheck, refusal, err error) {
	// Outside every lock: reads and other changes go on while the files are
	// hashed.
	const field = "model.artifact_uri"
	var owner, manifest string
	var check func() error
	switch cmd := u.Cmd; {
	case u.Dir != "" && cmd.GetAnyOwner():
		// Read with the registry's rights, and recorded as its owner's:
		// an export reads it as them, so that a link put in place of a
		// directory above it later (by whoever owns that one) reaches
		// nothing they could not read.
		check = func() error {
			var err error
			if manifest, err = artifact.Verify(ctx, u.Dir); err != nil {
				return err
			}
			var st syscall.Stat_t
			if err := syscall.Stat(u.Dir, &st); err != nil {
				return fmt.Errorf("artifact directory %s: %v", u.Dir, err)
			}
			acct, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10))
			if err != nil {
				return fmt.Errorf("artifact directory %s belongs to uid %d, which has no account on the registry's host: an exported version is read as its owner", u.Dir, st.Uid)
			}
			owner = acct.Username
			return nil
		}
	case u.Dir != "":
		if cmd.GetOsUser() == "" {
			return checked, fmt.Errorf("%s: the upload names no OS account to read the directory as (a command from an older gateway?); upload it again", field), nil
		}
		a, err := osuser.Lookup(cmd.GetOsUser())
		if err != nil {
			return checked, fmt.Errorf("%s: the uploader's OS account is not known on the registry's host: %v", field, err), nil
		}
		owner = a.Name
		check = func() error {
			err := osuser.As(a, func() (err error) { manifest, err = artifact.Verify(ctx, u.Dir); return err })
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("%w (read as %s, the uploader)", err, a)
			}
			return err
		}
	default:
		open, err := r.artifactURL(field, u.URI)
		if err != nil {
			return checked, err, nil
		}
		if err := r.checkBucket(field, cmd.GetProject(), u.URI, open); err != nil {
			return checked, err, nil
		}
		check = func() (err error) { manifest, err = artifact.VerifyURL(ctx, open); return err }
	}
	if err := check(); err != nil {
		if ctx.Err() != nil {
			return checked, nil, fmt.Errorf("artifact check cut short: %w", err)
		}
		return checked, fmt.Errorf("%s: %w", field, err), nil
	}
	return artifactCheck{owner: owner, manifest: manifest}, nil, nil
}

// register registers the upload cmd, whose artifact directory was verified
// (checked: its owner and MANIFEST digest), as its model's next version,
// with the inbox mark inboxID ("" for none):
// under wmu it validates cmd again (the state may have changed while the
// files were hashed: the parent model deleted, a name taken), decides and
// writes. A refusal changes nothing; reg is nil when inboxID was applied
// before. An RPC's upload (inboxID "") whose request id registered a
// version meanwhile (a concurrent retry) registers nothing: reg then holds
// only that Version, with no Event.
func (r *Registry) register(ctx context.Context, inboxID string, cmd *eventsv1.UploadModel, checked artifactCheck) (reg *domain.Registration, refusal, err error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := r.drv.Ready(ctx); err != nil {
		return nil, nil, err
	}
	r.mu.RLock()
	if prev, ok := r.state.Answered(cmd.GetRequestId()); ok && inboxID == "" {
		r.mu.RUnlock()
		return &domain.Registration{Version: prev, RequestID: cmd.GetRequestId()}, nil, nil
	}
	u, refusal := domain.ValidateUpload(r.state, cmd)
	if refusal == nil {
		u.Owner, u.Manifest = checked.owner, checked.manifest
		reg = domain.RegisterUpload(r.state, u, r.now().UTC())
	}
	r.mu.RUnlock()
	if refusal != nil {
		return nil, refusal, nil
	}
	tx, err := r.repo.Tx(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("register %s: %w", reg.Version.GetName(), err)
	}
	applied, err := r.drv.Apply(ctx, inboxID, tx, func() {
		r.mu.Lock()
		r.state.Apply(reg)
		r.registered()
		r.mu.Unlock()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("register %s: %w", reg.Version.GetName(), err)
	}
	if !applied {
		return nil, nil, nil
	}
	return reg, nil, nil
}
