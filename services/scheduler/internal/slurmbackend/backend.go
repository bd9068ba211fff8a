// Package slurmbackend is the scheduler's second backend: instead of
// placing jobs itself (the built-in engine, package domain), it forwards
// them to a real Slurm through slurmrestd (libs/slurmrest) and mirrors
// what Slurm does with them, keeping the scheduler's contracts: the same
// commands in (loom.job.commands.v1), the same JobChanged out
// (loom.job.events.v1), the same JobService reads for the gateway. What
// it does not map yet is refused, naming the feature, never run
// differently (docs/slurm-backend.md).
//
// State is one record per job in Redis (KeyJobs), written only through a
// store.Driver: the Loom job as it shows, the Slurm job id, and whether a
// submission was tried. A restart reloads it and goes on polling the jobs
// it submitted; a job whose submission may have reached Slurm without its
// id being recorded is found again by its --comment (CommentPrefix) among
// its owner's jobs (tag).
package slurmbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmmap"
	"github.com/loom-ml/loom/libs/slurmrest"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/scheduler/internal/adapters"
	"github.com/loom-ml/loom/services/scheduler/internal/app"
	"github.com/loom-ml/loom/services/scheduler/internal/domain"
	"github.com/loom-ml/loom/services/scheduler/internal/domain/views"
)

// Source is the CloudEvents source of the backend's events: the
// scheduler's, whichever backend runs.
const Source = "loom/scheduler"

// KeyJobs is the hash of the backend's job records (under the scheduler's
// store prefix: scheduler:slurm:jobs), job name → stored.
const KeyJobs = "slurm:jobs"

// Poll bounds.
const (
	// DefaultPoll is how often Slurm's job list is read: a state change
	// shows in Loom at most this late.
	DefaultPoll = 2 * time.Second
	// MinPoll and MaxPoll bound -slurm-poll: each poll is one GET jobs of
	// every job slurmctld holds (about 2.5 KB each).
	MinPoll = 200 * time.Millisecond
	MaxPoll = time.Minute
)

// ErrNotLeader refuses a command while this instance does not lead (the
// consumer retries it).
var ErrNotLeader = errors.New("not the scheduler leader")

// Config is what the backend needs.
type Config struct {
	// URL is slurmrestd's base URL ("http://127.0.0.1:6820").
	URL string
	// Signer mints each job owner's token.
	Signer *Signer
	// ReadUser is the Slurm user the poll lists jobs as (it must see
	// every user's jobs: with PrivateData=jobs, an operator), and an
	// administrator's hold and release are made as (an operator's hold
	// is Slurm's admin hold, JobHeldAdmin).
	ReadUser string
	// Poll is how often Slurm's jobs are read (DefaultPoll when 0).
	Poll time.Duration
	// MinJobAge is how long an ended job is kept after its end (the
	// scheduler's -min-job-age; 5 minutes when 0): then the gateway's
	// history, which took the final JobChanged, answers for it.
	MinJobAge time.Duration
	// AllowRootJobs lets a job whose owner is root go to Slurm, run as
	// root (-slurm-allow-root-jobs). Off, root is one of the refused
	// owners (RefusedOwners): the backend mints any user's token, so
	// without this a Loom principal named root (a cluster admin may
	// submit as any user) would get root's jobs on every Slurm node,
	// which the built-in engine allows only on agents started with
	// -allow-root-jobs.
	AllowRootJobs bool
	// RefusedOwners are the owners whose jobs end FAILED rather than go
	// to Slurm (-slurm-refused-owners), besides root (AllowRootJobs): nil
	// is DefaultRefusedOwners, an empty list none. They are meant for
	// Slurm's own accounts: SlurmUser can read the JWT key, so a job run
	// as it can mint root's token.
	RefusedOwners []string
}

// DefaultRefusedOwners is Config.RefusedOwners when nil: the SlurmUser
// most clusters run slurmctld as.
var DefaultRefusedOwners = []string{"slurm"}

// RefusedSet is the one owner rule's set: the owners in list (nil:
// DefaultRefusedOwners) and root unless allowRoot. Each must be an OS
// account name, and root may not be listed and allowed at once: each
// problem is added to v under the flag's name, slurm-refused-owners.
func RefusedSet(v *errs.Validator, list []string, allowRoot bool) map[string]bool {
	if list == nil {
		list = DefaultRefusedOwners
	}
	set := make(map[string]bool, len(list)+1)
	for _, name := range list {
		if err := auth.CheckUserName(name); err != nil {
			v.Add("slurm-refused-owners", "%q: %v", name, err)
			continue
		}
		v.Check(!(name == "root" && allowRoot), "slurm-refused-owners", "lists root, which -slurm-allow-root-jobs allows: drop one")
		set[name] = true
	}
	if !allowRoot {
		set["root"] = true
	}
	return set
}

// record is one job: the Loom job as GetJob shows it, Slurm's id once it
// has one, and whether a submission was tried (the job may be in Slurm
// though no id was recorded: a crash between the two).
type record struct {
	job     *loomv1.Job
	slurmID string
	tried   bool
}

func (r *record) clone() *record {
	return &record{job: proto.Clone(r.job).(*loomv1.Job), slurmID: r.slurmID, tried: r.tried}
}

// Backend is the Slurm backend's state and the one path that changes it.
// Writers (Handle, Poll) take turns under work to decide and write; reads
// take mu. No call to slurmrestd is made under either: a hung slurmrestd
// (up to the client's 30 s a call) would hold up every command and, for
// the poll, every other job. A call about one job is made with the job
// claimed instead (inflight), which orders the commands and the poll on
// that job alone.
type Backend struct {
	cfg Config
	drv *store.Driver
	now func() time.Time
	log *slog.Logger

	work sync.Mutex
	mu   sync.RWMutex
	jobs map[string]*record
	// refused is the owners whose jobs end FAILED (RefusedSet).
	refused map[string]bool

	// Leadership (under work): as the built-in engine's (app.App), every
	// write of a leader carries its term's fence.
	leading, fenced bool
	token           string
	seq             uint64
	onFenced        func()

	// inflight (under work) holds the jobs with a call to slurmrestd
	// under way outside work, each with a channel closed when it ends:
	// the poll leaves such a job alone and a command about it waits, so
	// a cancel cannot pass the submission it would have to cancel, nor a
	// poll submit a job whose submission has no answer yet.
	inflight map[string]chan struct{}
	// parked counts the commands waiting for a claimed job (tests).
	parked atomic.Int32
	// polling makes polls take turns: a poll's calls are made without
	// work.
	polling sync.Mutex
}

// New returns a backend over st; Lead (or Start, unfenced) loads it.
func New(st *store.Store, cfg Config, now func() time.Time, log *slog.Logger) (*Backend, error) {
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.MinJobAge <= 0 {
		cfg.MinJobAge = 5 * time.Minute
	}
	var v errs.Validator
	v.Check(strings.HasPrefix(cfg.URL, "http://") || strings.HasPrefix(cfg.URL, "https://"), "slurm-url",
		"want slurmrestd's http(s):// URL, got %q", cfg.URL)
	v.Check(cfg.Signer != nil, "slurm-jwt-key", "required with -backend=slurm")
	v.Check(cfg.ReadUser != "", "slurm-read-user", "required with -backend=slurm")
	v.Check(cfg.Poll >= MinPoll && cfg.Poll <= MaxPoll, "slurm-poll", "want %v to %v, got %v", MinPoll, MaxPoll, cfg.Poll)
	refused := RefusedSet(&v, cfg.RefusedOwners, cfg.AllowRootJobs)
	if err := v.Err(); err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, now: now, log: log, jobs: map[string]*record{}, inflight: map[string]chan struct{}{}, refused: refused}
	b.drv = store.NewDriver(st, b.reload)
	return b, nil
}

// client is a slurmrestd client acting as Slurm user user.
func (b *Backend) client(user string) (*slurmrest.Client, error) {
	tok, err := b.cfg.Signer.Token(user)
	if err != nil {
		return nil, err
	}
	return slurmrest.New(b.cfg.URL, user, tok)
}

// Start loads the records and leads without a fence (one instance, tests).
func (b *Backend) Start(ctx context.Context) error {
	b.work.Lock()
	defer b.work.Unlock()
	b.leading, b.fenced = true, false
	return b.reload(ctx)
}

// Lead makes this instance the leader for the lease term token: it
// reloads every record and fences each write with token from then on;
// onFenced is called when a write finds a later term has taken over.
func (b *Backend) Lead(ctx context.Context, token string, onFenced func()) error {
	b.work.Lock()
	defer b.work.Unlock()
	if err := b.reload(ctx); err != nil {
		return err
	}
	b.leading, b.fenced, b.token, b.seq, b.onFenced = true, true, token, 0, onFenced
	b.log.Info("leading (slurm backend)", "term", token, "jobs", len(b.jobs))
	return nil
}

// StepDown stops this instance from writing; it keeps serving reads.
func (b *Backend) StepDown() {
	b.work.Lock()
	defer b.work.Unlock()
	b.leading, b.onFenced = false, nil
}

// Refresh reloads a follower's memory from Redis (a leader's is current).
func (b *Backend) Refresh(ctx context.Context) error {
	b.work.Lock()
	defer b.work.Unlock()
	if b.leading {
		return nil
	}
	return b.reload(ctx)
}

// reload replaces memory with every stored record.
func (b *Backend) reload(ctx context.Context) error {
	raw, err := b.drv.Store().HGetAll(ctx, KeyJobs)
	if err != nil {
		return fmt.Errorf("slurm backend: load: %w", err)
	}
	jobs := make(map[string]*record, len(raw))
	for name, v := range raw {
		r, err := decode(v)
		if err != nil {
			return fmt.Errorf("slurm backend: load %s: %w", name, err)
		}
		jobs[name] = r
	}
	b.mu.Lock()
	b.jobs = jobs
	b.mu.Unlock()
	return nil
}

// write stores recs and emits a JobChanged for each job in changed (the
// job as it is now; a final state carries its run), with the inbox mark
// inboxID ("" for none), and then commits recs to memory.
func (b *Backend) write(ctx context.Context, inboxID string, recs []*record, changed []*record) (bool, error) {
	return b.writeDrop(ctx, inboxID, recs, changed, nil)
}

// writeDrop is write that also deletes the records named in drop.
func (b *Backend) writeDrop(ctx context.Context, inboxID string, recs, changed []*record, drop []string) (bool, error) {
	if len(recs) == 0 && len(drop) == 0 {
		return true, nil
	}
	tx := &store.Tx{}
	if b.fenced {
		b.seq++
		adapters.Fence(tx, b.token, b.seq)
	}
	for _, r := range recs {
		v, err := encode(r)
		if err != nil {
			return false, err
		}
		tx.HSet(KeyJobs, r.job.GetName(), v)
	}
	for _, name := range drop {
		tx.HDel(KeyJobs, name)
	}
	for _, r := range changed {
		j := proto.Clone(r.job).(*loomv1.Job)
		if j.GetState().Terminal() {
			j.Runs = []*loomv1.JobRun{run(j)}
		}
		ev, err := envelope.Route(j.GetCluster(), Source, &eventsv1.JobChanged{Job: j, Attempt: 1})
		if err != nil {
			return false, err
		}
		ev.Subject = j.GetName()
		tx.Emit(ev)
	}
	applied, err := b.drv.Apply(ctx, inboxID, tx, func() {
		b.mu.Lock()
		for _, r := range recs {
			b.jobs[r.job.GetName()] = r
		}
		for _, name := range drop {
			delete(b.jobs, name)
		}
		b.mu.Unlock()
	})
	if err != nil && adapters.IsFenced(err) {
		b.log.Warn("a later leader took over; stepping down", "term", b.token)
		b.leading = false
		if b.onFenced != nil {
			b.onFenced()
		}
	}
	return applied, err
}

// refuse is a command this backend does not carry out: dead-lettered at
// once (retrying cannot help), naming what and the backend.
func refuse(ev envelope.Event, what string) error {
	return bus.Permanent(fmt.Errorf("event %s (%s): %s: %w", ev.ID, ev.Type, refusal(what), errs.FailedPrecondition))
}

// Handle applies one command (bus.Handler). SubmitJob, CancelJob and
// UpdateJob's hold, uhold and release are carried out; what slurmmap.Command
// names (the gateway refuses it first when told the backend, so this is the
// last line: a command from before, or a gateway not told) and the account
// commands are refused (refuse); other events are ignored.
func (b *Backend) Handle(ctx context.Context, ev envelope.Event) error {
	if what := slurmmap.Command(ev.Payload); what != "" {
		if _, ok := ev.Payload.(*eventsv1.SubmitJob); !ok {
			return refuse(ev, what)
		}
		// A submission is recorded FAILED with the reason (submit), so
		// that the job shows why.
	}
	if err := b.lockLeading(ctx, ev.ID); err != nil {
		return err
	}
	b.work.Unlock() // submit and cancel take it for each of their steps
	switch p := ev.Payload.(type) {
	case *eventsv1.SubmitJob:
		return b.submit(ctx, ev, p.GetJob())
	case *eventsv1.CancelJob:
		// Held to the built-in engine's rules (app, domain.MayCancel):
		// a cancel naming no one is the gateway's alone, and a user's
		// own acts as the principal the gateway stamped.
		if err := app.CheckCancelPrincipal(ev.Signer, p); err != nil {
			return err
		}
		return b.cancel(ctx, ev, app.AsPrincipal(ev).(*eventsv1.CancelJob))
	case *eventsv1.UpdateJob:
		return b.update(ctx, ev, app.AsPrincipal(ev).(*eventsv1.UpdateJob))
	case *eventsv1.AssociationChanged, *eventsv1.AccountChanged:
		return refuse(ev, "associations and accounts (sacctmgr): configure them in Slurm's own accounting")
	}
	return nil
}

// lockLeading takes work for a command's step (event id) and checks that
// this instance leads and its memory is current; on an error work is not
// held.
func (b *Backend) lockLeading(ctx context.Context, id string) error {
	b.work.Lock()
	if !b.leading {
		b.work.Unlock()
		return fmt.Errorf("event %s: %w", id, ErrNotLeader)
	}
	if err := b.drv.Ready(ctx); err != nil {
		b.work.Unlock()
		return err
	}
	return nil
}

// claim marks job name as having a call to slurmrestd under way (inflight);
// the caller holds work and calls done, under work too, when the call's
// outcome is written (or dropped).
func (b *Backend) claim(name string) (done func()) {
	ch := make(chan struct{})
	b.inflight[name] = ch
	return func() {
		delete(b.inflight, name)
		close(ch)
	}
}

// settled returns job name's record once no call is under way for it (its
// submission, or a command before this one: this command then acts on the
// Slurm job that call made), with work held, as the caller held it on
// entry. It returns nil, with work not held, when there is no such job or
// live rejects it, and an error, with work not held, when the wait ends
// (waitClaimed).
func (b *Backend) settled(ctx context.Context, id, name string, live func(*loomv1.Job) bool) (*record, error) {
	for {
		b.mu.RLock()
		cur := b.jobs[name]
		b.mu.RUnlock()
		if cur == nil || !live(cur.job) {
			b.work.Unlock()
			return nil, nil
		}
		ch := b.inflight[name]
		if ch == nil {
			return cur, nil
		}
		if err := b.waitClaimed(ctx, id, ch); err != nil {
			return nil, err
		}
	}
}

// waitClaimed lets go of work, which the caller holds, and waits until
// the call under way that closes ch ends: then it takes work again as
// lockLeading does (event id), since leadership may have changed
// meanwhile. On an error (ctx ended, no longer leading) work is not held.
func (b *Backend) waitClaimed(ctx context.Context, id string, ch chan struct{}) error {
	b.work.Unlock()
	b.parked.Add(1)
	defer b.parked.Add(-1)
	select {
	case <-ch:
		return b.lockLeading(ctx, id)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// submit records a new job and submits it to Slurm as its owner. A job
// that cannot be mapped ends FAILED at once, its reason naming why.
func (b *Backend) submit(ctx context.Context, ev envelope.Event, j *loomv1.Job) error {
	var v errs.Validator
	v.Check(j.GetName() != "", "job.name", "required")
	v.Check(j.GetCluster() != "", "job.cluster", "required")
	if err := v.Err(); err != nil {
		return bus.Permanent(fmt.Errorf("event %s (SubmitJob): %w", ev.ID, err))
	}
	if err := b.lockLeading(ctx, ev.ID); err != nil {
		return err
	}
	unlocked := false
	defer func() {
		if !unlocked {
			b.work.Unlock()
		}
	}()
	b.mu.RLock()
	_, known := b.jobs[j.GetName()]
	b.mu.RUnlock()
	if known {
		return nil // submitted before (another command naming it, or a redelivery past the inbox)
	}
	now := b.now()
	r := &record{job: proto.Clone(j).(*loomv1.Job)}
	r.job.State, r.job.StateReason = loomv1.JobState_PENDING, ""
	if r.job.SubmitTime == nil {
		r.job.SubmitTime = timestamppb.New(now)
	}
	spec, wait, problem := b.jobSpec(r.job)
	if problem != "" {
		fail(r.job, problem, now)
		_, err := b.write(ctx, ev.ID, []*record{r}, []*record{r})
		return err
	}
	if wait != "" {
		// Not tried: nothing of it is in Slurm, the poll submits it once
		// the job it waits for has a Slurm id.
		deferDependent(r.job, wait)
		_, err := b.write(ctx, ev.ID, []*record{r}, []*record{r})
		return err
	}
	r.job.OutputPath, r.job.ErrorPath = spec.StandardOutput, spec.StandardError
	r.job.Placement = "submitting to Slurm"
	// Marked tried before it is: a crash between the submission and the
	// write of its id leaves a record that says to look for the job in
	// Slurm (by its comment) before submitting it again.
	r.tried = true
	applied, err := b.write(ctx, ev.ID, []*record{r}, []*record{r})
	if err != nil || !applied {
		return err
	}
	done := b.claim(r.job.GetName())
	b.work.Unlock()
	unlocked = true
	_, err = b.sendClaimed(ctx, r, spec, done)
	return err
}

// sendClaimed submits r's job (spec) to Slurm, without work (which the
// caller does not hold), r being the job's record, already written with
// tried set, and the job claimed (done ends the claim). The outcome is
// written unless the record was replaced meanwhile (a reload, another
// leader): then the tried record stands and the poll finds the job by its
// comment. It reports whether slurmrestd answered (sendToSlurm).
func (b *Backend) sendClaimed(ctx context.Context, r *record, spec slurmrest.JobSpec, done func()) (bool, error) {
	// The claim ends however the call does: a panic (which the bus
	// recovers, retrying the command) must not leave the job claimed,
	// which every later poll would skip and every cancel wait on.
	ended := false
	defer func() {
		if !ended {
			b.work.Lock()
			done()
			b.work.Unlock()
		}
	}()
	next := r.clone()
	answered := b.sendToSlurm(ctx, next, spec)
	b.work.Lock()
	defer b.work.Unlock()
	ended = true
	defer done()
	if !answered {
		return false, nil
	}
	b.mu.RLock()
	current := b.jobs[r.job.GetName()] == r
	b.mu.RUnlock()
	if !b.leading || !current {
		b.log.Warn("the job's record changed while it was submitted; the poll finds it in Slurm by its comment",
			"job", r.job.GetName(), "slurm_job", next.slurmID)
		return true, nil
	}
	_, err := b.write(ctx, "", []*record{next}, changedIf(next, r))
	return true, err
}

// jobSpec is the package's jobSpec after the owner check (ownerProblem)
// and with the job's dependency over Slurm's ids (slurmDependency): every
// path that sends a job to Slurm goes through it, so that a record stored
// before a check existed is held to it too. wait, when not "", is the
// Loom id of a job the dependency names that is not in Slurm yet: j is
// not sent before it is. The caller holds neither work nor mu, or work
// alone.
func (b *Backend) jobSpec(j *loomv1.Job) (spec slurmrest.JobSpec, wait, problem string) {
	if problem := ownerProblem(j.GetUser(), b.refused); problem != "" {
		return slurmrest.JobSpec{}, "", problem
	}
	if what := unmapped(j); what != "" {
		return slurmrest.JobSpec{}, "", refusal(what)
	}
	b.mu.RLock()
	dep, wait, problem := slurmDependency(j, func(name string) *record { return b.jobs[name] })
	b.mu.RUnlock()
	if problem != "" || wait != "" {
		return slurmrest.JobSpec{}, wait, problem
	}
	spec, problem = jobSpec(j, dep)
	return spec, "", problem
}

// deferDependent shows job as waiting, before Slurm has it, for the job
// of Loom id wait that its dependency names: pending on Dependency, as
// Slurm would show it, with the placement saying why it is not in Slurm.
func deferDependent(job *loomv1.Job, wait string) {
	job.StateReason = ReasonDependency
	job.Placement = "waiting for job " + wait + " to reach Slurm (--dependency)"
}

// changedIf is []*record{next} when its job shows differently from prev's.
func changedIf(next, prev *record) []*record {
	if proto.Equal(next.job, prev.job) {
		return nil
	}
	return []*record{next}
}

// fail ends job FAILED with reason.
func fail(job *loomv1.Job, reason string, now time.Time) {
	job.State, job.StateReason, job.EndTime = loomv1.JobState_FAILED, reason, timestamppb.New(now)
	job.Placement = ""
}

// sendToSlurm submits r's job (spec) as its owner and records the outcome
// in r: the Slurm id, or FAILED with Slurm's refusal. An error that may
// pass (slurmrestd unreachable) leaves r as it was: the poll tries again.
// It reports whether r changed.
func (b *Backend) sendToSlurm(ctx context.Context, r *record, spec slurmrest.JobSpec) bool {
	c, err := b.client(r.job.GetUser())
	if err == nil {
		var sub slurmrest.Submitted
		if sub, err = c.SubmitJob(ctx, spec); err == nil {
			r.slurmID = sub.JobID
			r.job.Placement = slurmID(sub.JobID)
			// As submit shows them; a job the poll submits (its
			// dependency deferred it) gets them only now.
			r.job.OutputPath, r.job.ErrorPath = spec.StandardOutput, spec.StandardError
			b.log.Info("submitted to Slurm", "job", r.job.GetName(), "slurm_job", sub.JobID, "user", r.job.GetUser())
			return true
		}
	}
	if refused(err) {
		fail(r.job, clipText("Slurm refused the job: "+err.Error()), b.now())
		return true
	}
	b.log.Warn("submission to Slurm failed; the next poll retries", "job", r.job.GetName(), "err", err)
	return false
}

// refused reports whether err is Slurm's answer about the request itself
// (an error number other than -1, which a bad token or a slurmctld outage
// gives, and other than the numbers that say "try again": slurmTransient):
// sending it again gets the same answer.
func refused(err error) bool {
	var se *slurmrest.Error
	if !errors.As(err, &se) {
		return false
	}
	final := false
	for _, e := range se.Slurm {
		for _, n := range []int{e.Number, e.Code} {
			if slurmTransient[n] {
				return false
			}
			final = final || n > 0
		}
	}
	return final
}

// slurmTransient are Slurm's error numbers (slurm_errno.h) that say the
// request may succeed if sent again: sbatch itself retries a submission
// on EAGAIN and ESLURM_ERROR_ON_DESC_TO_RECORD_COPY ("Unable to create job
// record, try again"); the others are slurmctld out of reach or in
// standby. A job must not end FAILED on one of them.
var slurmTransient = map[int]bool{
	11:   true, // EAGAIN
	1001: true, // SLURM_COMMUNICATIONS_CONNECTION_ERROR
	1002: true, // SLURM_COMMUNICATIONS_SEND_ERROR
	1003: true, // SLURM_COMMUNICATIONS_RECEIVE_ERROR
	1004: true, // SLURM_COMMUNICATIONS_SHUTDOWN_ERROR
	1800: true, // SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR
	1801: true, // SLURMCTLD_COMMUNICATIONS_SEND_ERROR
	1802: true, // SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR
	1803: true, // SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR
	2007: true, // ESLURM_ERROR_ON_DESC_TO_RECORD_COPY
	2027: true, // ESLURM_IN_STANDBY_MODE
	5004: true, // SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT
}

// cancel cancels (or, with a signal, signals) a job in Slurm as its owner,
// when p (as app.AsPrincipal made it) may act on it (domain.MayCancel).
// The state change comes with the next poll, as Slurm reports it.
func (b *Backend) cancel(ctx context.Context, ev envelope.Event, p *eventsv1.CancelJob) error {
	if err := b.lockLeading(ctx, ev.ID); err != nil {
		return err
	}
	name := p.GetJob()
	cur, err := b.settled(ctx, ev.ID, name, func(j *loomv1.Job) bool { return !j.GetState().Terminal() })
	if cur == nil || err != nil {
		return err
	}
	owner := cur.job.GetUser()
	if !domain.MayCancel(owner, p) {
		b.work.Unlock()
		b.log.Warn("cancel ignored: the user neither owns the job nor administers it", "job", name,
			"user", p.GetUser(), "on_behalf_of", p.GetOnBehalfOf())
		return nil
	}
	done := b.claim(name)
	b.work.Unlock()
	defer func() {
		b.work.Lock()
		done()
		b.work.Unlock()
	}()
	id := cur.slurmID
	if id == "" && cur.tried {
		// It may be in Slurm under its comment (a crash after the submit).
		if found, err := b.findByComment(ctx, cur.job); err != nil {
			return err
		} else if found != nil {
			id = fmt.Sprint(found.JobID)
		}
	}
	if id == "" {
		if p.GetSignal() != "" {
			return nil // Job is pending execution: nothing to signal
		}
		b.work.Lock()
		defer b.work.Unlock()
		b.mu.RLock()
		current := b.jobs[name] == cur
		b.mu.RUnlock()
		if !b.leading || !current {
			// Reloaded meanwhile (another leader's term): the command
			// is retried on what is current then.
			return fmt.Errorf("event %s: job %s changed while its cancel looked for it in Slurm; retrying", ev.ID, name)
		}
		next := cur.clone()
		next.job.State, next.job.StateReason, next.job.EndTime = loomv1.JobState_CANCELLED, "", timestamppb.New(b.now())
		next.job.Placement = ""
		_, err := b.write(ctx, ev.ID, []*record{next}, []*record{next})
		return err
	}
	c, err := b.client(owner)
	if err != nil {
		return err
	}
	err = c.CancelJob(ctx, id, p.GetSignal())
	switch {
	case err == nil, errors.Is(err, slurmrest.ErrNotFound):
		return nil
	case strings.Contains(err.Error(), "already completing or completed"):
		return nil
	case refused(err):
		return bus.Permanent(fmt.Errorf("event %s (CancelJob %s): %w", ev.ID, p.GetJob(), err))
	}
	return err
}

// Update actions this backend carries out (slurmmap's, the built-in
// engine's domain.ActionHold, ActionUHold, ActionRelease).
const (
	actionHold    = slurmmap.ActionHold
	actionUHold   = slurmmap.ActionUHold
	actionRelease = slurmmap.ActionRelease
)

// update holds or releases a pending job in Slurm (scontrol hold, uhold,
// release; POST job/{id}), when p (as app.AsPrincipal made it) may act on
// it (domain.MayAct); the rest of UpdateJob is refused. Slurm decides
// whose hold it is by who asks, so an administrator's hold and release
// are made as -slurm-read-user (an operator: JobHeldAdmin) and the rest as
// the job's owner (JobHeldUser: uhold, a user's own hold and release). An
// admin hold a user tries to release is Slurm's to refuse, as the gateway
// does first. The new state comes with the next poll.
func (b *Backend) update(ctx context.Context, ev envelope.Event, p *eventsv1.UpdateJob) error {
	if err := b.lockLeading(ctx, ev.ID); err != nil {
		return err
	}
	name := p.GetJob()
	// As the built-in engine: only a pending job is held, and one that
	// ended has nothing to release.
	cur, err := b.settled(ctx, ev.ID, name, func(j *loomv1.Job) bool { return j.GetState() == loomv1.JobState_PENDING })
	if cur == nil || err != nil {
		return err
	}
	owner := cur.job.GetUser()
	if !domain.MayAct(owner, p.GetUser(), p.GetAdmin()) {
		b.work.Unlock()
		b.log.Warn("update ignored: the user neither owns the job nor administers it", "job", name, "user", p.GetUser())
		return nil
	}
	id := cur.slurmID
	if id == "" {
		b.work.Unlock()
		return refuse(ev, "holding or releasing a job not in Slurm yet (waiting for its dependency, or its submission unanswered)")
	}
	done := b.claim(name)
	b.work.Unlock()
	defer func() {
		b.work.Lock()
		done()
		b.work.Unlock()
	}()
	as := owner
	if p.GetAdmin() && p.GetAction() != actionUHold {
		as = b.cfg.ReadUser
	}
	c, err := b.client(as)
	if err != nil {
		return err
	}
	err = c.HoldJob(ctx, id, p.GetAction() != actionRelease)
	switch {
	case err == nil, errors.Is(err, slurmrest.ErrNotFound):
		return nil
	case refused(err):
		return bus.Permanent(fmt.Errorf("event %s (UpdateJob %s %s): %w", ev.ID, p.GetAction(), name, err))
	}
	return err
}

// tag is what makes a Slurm job the one the backend submitted for a Loom
// job: its comment and its Slurm user. The comment alone is not: any Slurm
// user may give their own job --comment=loom:<another's job name> (names
// are easy to guess), and adopting it would mirror their job as the
// other's, which then never runs, and send the other's scancel to it.
type tag struct{ comment, user string }

// tagOf is the tag of the Slurm job the backend submits for j.
func tagOf(j *loomv1.Job) tag { return tag{CommentPrefix + j.GetName(), j.GetUser()} }

// findByComment returns the Slurm job of j's owner tagged with j's
// comment (tag), nil when there is none.
func (b *Backend) findByComment(ctx context.Context, j *loomv1.Job) (*slurmrest.Job, error) {
	c, err := b.client(b.cfg.ReadUser)
	if err != nil {
		return nil, err
	}
	jobs, err := c.ListJobs(ctx)
	if err != nil {
		return nil, err
	}
	want := tagOf(j)
	for i := range jobs {
		if (tag{jobs[i].Comment, jobs[i].UserName}) == want {
			return &jobs[i], nil
		}
	}
	return nil, nil
}

// RunPoll polls every cfg.Poll until ctx ends; a failed poll is logged and
// the next one tries again.
func (b *Backend) RunPoll(ctx context.Context) error {
	t := time.NewTicker(b.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := b.Poll(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("slurm poll failed", "err", err)
		}
	}
}

// Poll reads Slurm's jobs once (GET jobs, as ReadUser) and brings every
// active job to what Slurm says: a state change is written with its
// JobChanged. A job not yet in Slurm is found by its comment (adopted) or
// submitted again; one Slurm no longer knows ends FAILED, saying so
// (without slurmdbd its end cannot be read any more). Its calls are made
// without work: what it read is written only for the jobs whose records
// did not change meanwhile (the next poll sees the others again), and a
// job with a call of a command under way (inflight) is left to the next.
func (b *Backend) Poll(ctx context.Context) error {
	b.polling.Lock()
	defer b.polling.Unlock()
	active, err := b.pollStart(ctx)
	if err != nil || len(active) == 0 {
		return err
	}
	c, err := b.client(b.cfg.ReadUser)
	if err != nil {
		return err
	}
	list, err := c.ListJobs(ctx)
	if err != nil {
		return err
	}
	steps := b.mapPoll(active, list)
	// After one call that failed for want of slurmrestd (unreachable, or
	// no answer within the client's timeout), the poll makes no more:
	// each would wait as long. The next poll tries again.
	unreachable := false
	for i := range steps {
		st := &steps[i]
		switch {
		case unreachable || st.act == actNone:
		case st.act == actSubmit:
			st.next = nil // written by sendClaimed, or left as it is
			r, done, err := b.claimForPoll(ctx, st.cur)
			if err != nil {
				return err
			}
			if r == nil {
				continue // changed or claimed since the poll began
			}
			answered, err := b.sendClaimed(ctx, r, st.spec, done)
			if err != nil {
				return err
			}
			unreachable = !answered
		case st.act == actLookup:
			switch _, err := c.GetJob(ctx, st.cur.slurmID); {
			case errors.Is(err, slurmrest.ErrNotFound):
				fail(st.next.job, fmt.Sprintf("Slurm no longer knows job %s and its end was not seen (it was purged after MinJobAge while the scheduler was away; reading it back needs slurmdbd)", st.cur.slurmID), b.now())
			case err != nil && !refused(err):
				unreachable = true
			}
		}
	}
	b.work.Lock()
	defer b.work.Unlock()
	if !b.leading {
		return nil
	}
	var recs, changed []*record
	b.mu.RLock()
	for _, st := range steps {
		if st.next == nil || b.jobs[st.cur.job.GetName()] != st.cur || b.inflight[st.cur.job.GetName()] != nil {
			continue
		}
		next, cur := st.next, st.cur
		if next.job.GetState().Terminal() && next.job.GetEndTime() == nil {
			// Slurm said no end time: the end is when it was seen,
			// which retention counts from.
			next.job.EndTime = timestamppb.New(b.now())
		}
		if next.slurmID != cur.slurmID || next.tried != cur.tried || !proto.Equal(next.job, cur.job) {
			recs = append(recs, next)
			changed = append(changed, changedIf(next, cur)...)
		}
	}
	b.mu.RUnlock()
	_, err = b.write(ctx, "", recs, changed)
	return err
}

// pollStart is the poll's first step, under work: it drops the ended
// records past MinJobAge and returns the active ones no call is under way
// for, as they are now.
func (b *Backend) pollStart(ctx context.Context) ([]*record, error) {
	b.work.Lock()
	defer b.work.Unlock()
	if !b.leading {
		return nil, nil
	}
	if err := b.drv.Ready(ctx); err != nil {
		return nil, err
	}
	b.mu.RLock()
	var active []*record
	var expired []string
	horizon := b.now().Add(-b.cfg.MinJobAge)
	for name, r := range b.jobs {
		switch {
		case b.inflight[name] != nil:
		case !r.job.GetState().Terminal():
			active = append(active, r)
		case r.job.GetEndTime().AsTime().Before(horizon): // every ended record has an end time
			expired = append(expired, name)
		}
	}
	b.mu.RUnlock()
	if len(expired) > 0 {
		// Retention, as the built-in engine's: past MinJobAge the
		// gateway's history answers for an ended job.
		if _, err := b.writeDrop(ctx, "", nil, nil, expired); err != nil {
			return nil, err
		}
	}
	return active, nil
}

// claimForPoll claims cur's job for the poll's submission of it: nil when
// its record changed or a command claimed it since the poll read it. A
// record not yet marked tried is written so first (recorded, then sent).
// The caller does not hold work.
func (b *Backend) claimForPoll(ctx context.Context, cur *record) (*record, func(), error) {
	b.work.Lock()
	defer b.work.Unlock()
	name := cur.job.GetName()
	b.mu.RLock()
	current := b.jobs[name] == cur
	b.mu.RUnlock()
	if !b.leading || !current || b.inflight[name] != nil {
		return nil, nil, nil
	}
	r := cur
	if !r.tried {
		r = cur.clone()
		r.tried = true
		if _, err := b.write(ctx, "", []*record{r}, nil); err != nil {
			return nil, nil, err
		}
	}
	return r, b.claim(name), nil
}

// What the poll does about one job after reading Slurm's list.
const (
	actNone   = iota
	actSubmit // submit it (spec): Slurm has no job of it
	actLookup // GET job/{id}: Slurm's list lacks its job
)

// pollStep is one active job in a poll: its record when the poll began,
// the record as Slurm's list makes it, and the call left to make.
type pollStep struct {
	cur, next *record
	act       int
	spec      slurmrest.JobSpec
}

// mapPoll maps Slurm's job list onto the active records, in list order
// (views.KeyOf), without a call: each job's state as Slurm reports it, a
// lost submission adopted by its tag, and what needs a call (a submission,
// a lookup). It sorts the records and indexes the list at each poll: the
// active jobs and Slurm's live jobs, not a history
// (BenchmarkMapPoll: 10,000 of each).
func (b *Backend) mapPoll(active []*record, list []slurmrest.Job) []pollStep {
	slices.SortFunc(active, func(x, y *record) int { return views.KeyOf(x.job).Compare(views.KeyOf(y.job)) })
	byID := make(map[string]slurmrest.Job, len(list))
	byComment := map[tag]slurmrest.Job{}
	for _, sj := range list {
		byID[fmt.Sprint(sj.JobID)] = sj
		if strings.HasPrefix(sj.Comment, CommentPrefix) {
			byComment[tag{sj.Comment, sj.UserName}] = sj
		}
	}
	steps := make([]pollStep, len(active))
	for i, cur := range active {
		st := pollStep{cur: cur}
		if sj, ok := byID[cur.slurmID]; ok && cur.slurmID != "" {
			// The common case, every job every poll: cloned only when
			// Slurm reports a change, so that the unchanged ones cost
			// neither a clone nor the comparison under work (next nil:
			// nothing to write).
			if observe(cur.job, sj, false) {
				st.next = cur.clone()
				observe(st.next.job, sj, true)
			}
			steps[i] = st
			continue
		}
		st.next = cur.clone()
		next := st.next
		if next.slurmID == "" {
			if sj, ok := byComment[tagOf(next.job)]; ok && next.tried {
				next.slurmID = fmt.Sprint(sj.JobID)
				next.job.Placement = slurmID(next.slurmID)
				b.log.Info("adopted a Slurm job submitted before a restart", "job", next.job.GetName(), "slurm_job", next.slurmID)
				observe(next.job, sj, true)
			} else if spec, wait, problem := b.jobSpec(next.job); problem != "" {
				fail(next.job, problem, b.now())
			} else if wait != "" {
				deferDependent(next.job, wait)
			} else {
				st.act, st.spec = actSubmit, spec
			}
		} else {
			st.act = actLookup
		}
		steps[i] = st
	}
	return steps
}

// GetJob returns the job named name as the read API serves it.
func (b *Backend) GetJob(name string) (*loomv1.Job, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	r := b.jobs[name]
	if r == nil {
		return nil, fmt.Errorf("job %s: %w", name, errs.NotFound)
	}
	return view(r), nil
}

// view is r's job as GetJob serves it: a copy, with its one run.
func view(r *record) *loomv1.Job {
	j := proto.Clone(r.job).(*loomv1.Job)
	if j.GetState() != loomv1.JobState_PENDING || j.GetStartTime() != nil {
		j.Runs = []*loomv1.JobRun{run(j)}
	}
	return j
}

// ListJobs returns one page of the jobs f selects (views.ListPage).
func (b *Backend) ListJobs(f views.JobFilter, after string, size int) ([]*loomv1.Job, string) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return views.ListPage(source{b.jobs}, f, after, size, b.now())
}

// unimplemented is the read API's answer for what this backend does not
// serve.
func unimplemented(what string) error {
	return status.Errorf(codes.Unimplemented, "%s", refusal(what))
}

// ListPartitions, ListSlurmNodes and ListShares (ports.Jobs): the backend
// keeps none; SlurmServer answers those RPCs Unimplemented instead.
func (b *Backend) ListPartitions(string) []*loomv1.Partition { return nil }

// ListSlurmNodes: see ListPartitions.
func (b *Backend) ListSlurmNodes(string) []*loomv1.SlurmNode { return nil }

// ListShares: see ListPartitions.
func (b *Backend) ListShares(string) []*loomv1.Share { return nil }

// SlurmServer is loom.v1.SlurmService under this backend: sinfo's
// partitions and nodes and sshare's shares are not mapped yet (Slurm's own
// sinfo and sshare show them), so each answers Unimplemented naming the
// backend rather than NotFound, which would say the cluster is unknown.
type SlurmServer struct {
	loomv1.UnimplementedSlurmServiceServer
}

// ListPartitions answers Unimplemented.
func (SlurmServer) ListPartitions(context.Context, *loomv1.ListPartitionsRequest) (*loomv1.ListPartitionsResponse, error) {
	return nil, unimplemented("partitions (sinfo, scontrol show partition)")
}

// ListSlurmNodes answers Unimplemented.
func (SlurmServer) ListSlurmNodes(context.Context, *loomv1.ListSlurmNodesRequest) (*loomv1.ListSlurmNodesResponse, error) {
	return nil, unimplemented("Slurm nodes (sinfo -N, scontrol show node)")
}

// ListShares answers Unimplemented.
func (SlurmServer) ListShares(context.Context, *loomv1.ListSharesRequest) (*loomv1.ListSharesResponse, error) {
	return nil, unimplemented("fair-share standing (sshare)")
}

// ListJobSteps and GetJobStep: Unimplemented (slurmrestd 22.05 has no step
// endpoints).
func (b *Backend) ListJobSteps(string, int32) ([]*loomv1.JobStep, error) {
	return nil, unimplemented("job steps (sacct's steps, sstat, scontrol show step)")
}

// GetJobStep: see ListJobSteps.
func (b *Backend) GetJobStep(string, int32) (*loomv1.JobStep, error) {
	return nil, unimplemented("job steps (sacct's steps, sstat, scontrol show step)")
}

// source is the records as views.JobSource reads them.
type source struct{ jobs map[string]*record }

func (s source) ResolveJobName(name string) string { return name }

func (s source) EachJob(fn func(j *loomv1.Job)) {
	for _, r := range s.jobs {
		fn(r.job)
	}
}

// ProjectJobs sorts the project's jobs at each call: the backend keeps no
// list index (as the built-in engine's B-trees); its jobs are those Slurm
// runs now, not a history.
func (s source) ProjectJobs(project string, active bool, after views.ListKey, first, desc bool, fn func(j *loomv1.Job) bool) {
	prefix := project + "/jobs/"
	var js []*loomv1.Job
	for name, r := range s.jobs {
		if strings.HasPrefix(name, prefix) && (!active || !r.job.GetState().Terminal()) {
			js = append(js, r.job)
		}
	}
	slices.SortFunc(js, func(x, y *loomv1.Job) int { return views.KeyOf(x).Compare(views.KeyOf(y)) })
	if desc {
		slices.Reverse(js)
	}
	for _, j := range js {
		k := views.KeyOf(j)
		if !first && ((!desc && !after.Less(k)) || (desc && !k.Less(after))) {
			continue
		}
		if !fn(j) {
			return
		}
	}
}

func (s source) JobViewer(time.Time) func(name string) *loomv1.Job {
	return func(name string) *loomv1.Job {
		r := s.jobs[name]
		if r == nil {
			return nil
		}
		return view(r)
	}
}
