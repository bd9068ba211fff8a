// Package app is the gateway's application layer: it validates and accepts
// commands (stored and emitted in one store.Apply), proxies reads to the owning
// services, finishes operations from cluster events, and feeds job watchers.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmmap"
	"github.com/loom-ml/loom/libs/slurmspec"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
	"github.com/loom-ml/loom/services/gateway/internal/domain"
)

// Source is the CloudEvents source of the gateway's commands.
const Source = "loom/gateway"

// DefaultWaitTimeout is WaitOperation's wait when the request sets none.
const DefaultWaitTimeout = 60 * time.Second

// MaxWaitTimeout is the longest one WaitOperation waits, whatever its
// timeout_seconds: a call holds a waiter, a timer and a ticker meanwhile.
const MaxWaitTimeout = time.Hour

// Options tune a Gateway. Zero values take the documented defaults.
type Options struct {
	// Clock is what the loops wait on (default the real clock); tests give a
	// clockwork.FakeClock. Now defaults to its Now.
	Clock clockwork.Clock
	// Now is the time the domain is given (default Clock.Now).
	Now func() time.Time
	// Log receives the gateway's reports (default slog.Default()).
	Log *slog.Logger
	// Poll is how often WaitOperation re-reads Redis (to see completions
	// applied by other gateway instances) and ReadJobLogs re-reads a
	// followed file (default 250 ms).
	Poll time.Duration
	// Feed, when set, brings job changes to watchers as they happen, run
	// only while someone watches; without it watchers see changes at their
	// refresh only.
	Feed Feed
	// ChangeFeed, when set, brings the changes of WatchChanges' other
	// collections (clusters, nodes, training resources, models: the
	// events of ChangeTopics, see HandleChangeEvent), run only while
	// someone watches one of them; without it they are seen at the
	// ChangeRefresh only.
	ChangeFeed Feed
	// WatchRefresh is how often WatchJob re-reads the job from its owner, in
	// case a change was missed on the bus (default 2 s).
	WatchRefresh time.Duration
	// PrivateJobs is PrivateData "jobs": a caller who does not administer
	// the project sees only their own jobs (GetJob, ListJobs, WatchJob,
	// steps and logs); others' are NotFound, or absent from lists.
	PrivateJobs bool
	// ChangeRefresh is how often WatchChanges lists its collections again,
	// a safety net for the changes no feed brought (another gateway
	// instance's model edit, a feed not ready in time; default
	// DefaultChangeRefresh).
	ChangeRefresh time.Duration
	// MaxChangeWatches caps the WatchChanges streams open at once in this
	// gateway, all principals together (default DefaultMaxChangeWatches;
	// negative: no cap).
	MaxChangeWatches int
	// JobHistory is how long ended jobs (and accepted job records) are
	// kept for sacct after they end (default DefaultJobHistory).
	JobHistory time.Duration
	// MaxArraySize is Slurm's MaxArraySize that submissions are checked
	// against (default slurmspec.DefaultMaxArraySize).
	MaxArraySize int
	// SlurmBackend says the scheduler runs the real-Slurm backend
	// (-scheduler-backend=slurm): the commands it does not map
	// (slurmmap.Command) are then refused FailedPrecondition before
	// anything is recorded or published (checkMapped).
	SlurmBackend bool
	// OpenQOS are the QOS every member of a project may ask for without an
	// association granting them (sorted, lower-case; nil: those of
	// domain.DefaultOpenQOS). Use []string{} for none.
	OpenQOS []string
	// Quota holds the per-project quotas and the per-user MaxSubmitJobs
	// (quota.go).
	Quota QuotaOptions
	// Audit bounds the audit trail kept in Redis (audit.go).
	Audit AuditOptions
}

// Gateway serves the public API. Its methods are safe for concurrent use.
type Gateway struct {
	repo *adapters.Repo
	own  *adapters.Owners
	opt  Options
	// clusters caches the provisioner's answers for SubmitJob.
	clusters clusterCache
	// quota is opt.Quota with its defaults; jobCounts the job counts its
	// checks read (quota.go).
	quota     QuotaOptions
	jobCounts jobCounts
	// trainingQuota serializes training creates from their quota count to
	// their Apply (training_quota.go).
	trainingQuota sync.Mutex

	jobs *hub
	// recent samples the job id counter for filtered lists (recentids.go).
	recent recentIDs
	// changes counts the open WatchChanges streams (watch.go).
	changes changeWatches
	// feed brings job changes to jobs' watchers while there are any; nil
	// without Options.Feed.
	feed *watchFeed
	// pokes and changeFeed bring the other collections' changes to
	// WatchChanges (changes.go); changeFeed is nil without
	// Options.ChangeFeed.
	pokes      *pokes
	changeFeed *watchFeed
	ops        *signals
	// beforeOperationWrite, when set (tests), runs in updateOperation
	// between reading an operation and writing its next state, so that a
	// test can put another writer in between deterministically.
	beforeOperationWrite func(name string)
	// beforeSweepWrite, when set (tests), runs in the history sweep
	// between reading a batch and writing its deletions.
	beforeSweepWrite func()

	stopOnce sync.Once
	stop     chan struct{}
}

// ErrStopping ends long calls (waits, watches, log follows) when the gateway shuts down.
var ErrStopping = fmt.Errorf("gateway is shutting down: %w", errs.Unavailable)

// New returns a gateway over its repository and the owning services' clients.
func New(repo *adapters.Repo, owners *adapters.Owners, opt Options) *Gateway {
	if opt.Clock == nil {
		opt.Clock = clockwork.NewRealClock()
	}
	if opt.Now == nil {
		opt.Now = opt.Clock.Now
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Poll <= 0 {
		opt.Poll = 250 * time.Millisecond
	}
	if opt.WatchRefresh <= 0 {
		opt.WatchRefresh = 2 * time.Second
	}
	if opt.ChangeRefresh <= 0 {
		opt.ChangeRefresh = DefaultChangeRefresh
	}
	if opt.MaxChangeWatches == 0 {
		opt.MaxChangeWatches = DefaultMaxChangeWatches
	}
	if opt.JobHistory <= 0 {
		opt.JobHistory = DefaultJobHistory
	}
	if opt.MaxArraySize <= 0 {
		opt.MaxArraySize = slurmspec.DefaultMaxArraySize
	}
	if opt.OpenQOS == nil {
		opt.OpenQOS, _ = domain.ParseQOSList("open-qos", domain.DefaultOpenQOS)
	}
	g := &Gateway{repo: repo, own: owners, opt: opt, jobs: newHub(), pokes: newPokes(), ops: newSignals(), stop: make(chan struct{}),
		quota: opt.Quota.withDefaults()}
	repo.OnReload(g.reload)
	if opt.Feed != nil {
		g.feed = &watchFeed{run: opt.Feed, log: opt.Log, stop: g.stop, linger: feedLinger,
			handle: func(ctx context.Context, ev envelope.Event) { _ = g.HandleJobEvent(ctx, ev) }}
	}
	if opt.ChangeFeed != nil {
		g.changeFeed = &watchFeed{run: opt.ChangeFeed, log: opt.Log, stop: g.stop, linger: feedLinger,
			handle: func(ctx context.Context, ev envelope.Event) { _ = g.HandleChangeEvent(ctx, ev) }}
	}
	return g
}

// Stop ends every wait, watch and log follow in progress (with ErrStopping),
// so that a graceful gRPC stop does not wait on them.
func (g *Gateway) Stop() { g.stopOnce.Do(func() { close(g.stop) }) }

func (g *Gateway) now() time.Time { return g.opt.Now().UTC() }

// isNotFound reports whether an owning service answered NotFound.
func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// ---- clusters ----

// CreateCluster validates req (the request's fields and the normalized spec,
// every problem at once), checks that the cluster does not exist yet and that
// its capacity is free, and stores a new operation together with the
// CreateCluster command (carrying the normalized spec). A retry
// with the same request_id returns the first call's operation.
func (g *Gateway) CreateCluster(ctx context.Context, req *loomv1.CreateClusterRequest) (*loomv1.Operation, error) {
	kind, rid, fp := adapters.RequestCreateCluster, req.GetRequestId(), domain.RequestFingerprint(req)
	if op, ok, err := g.replayOperation(ctx, kind, rid, fp); err != nil || ok {
		return op, err
	}
	cluster, err := domain.AcceptCluster(req)
	if err != nil {
		return nil, err
	}
	_, err = g.own.Clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: cluster.GetName()})
	switch {
	case err == nil:
		return nil, fmt.Errorf("cluster %s: %w", cluster.GetName(), errs.AlreadyExists)
	case !isNotFound(err):
		return nil, fmt.Errorf("ask the provisioner for %s: %w", cluster.GetName(), err)
	}
	if err := g.checkClusterQuota(ctx, cluster); err != nil {
		return nil, err
	}
	if err := g.checkCapacity(ctx, req.GetParent(), nil, cluster); err != nil {
		return nil, err
	}
	parent, _ := resname.ParseProject(req.GetParent())
	op := domain.NewOperation(resname.Operation{Project: parent.ID, ID: envelope.NewID()}.String(), domain.VerbCreate, cluster.GetName(), g.now())
	cmd, err := route(ctx, cluster.GetName(),
		&eventsv1.CreateCluster{Operation: op.GetName(), Cluster: cluster})
	if err != nil {
		return nil, err
	}
	return g.startOperation(ctx, kind, rid, fp, op, cmd)
}

// DeleteCluster checks that the cluster exists (and, when the request sets
// an etag, that it is the cluster's: ABORTED otherwise, here and again by
// the provisioner when it decides) and stores a new operation together with
// the DeleteCluster command. A retry with the same request_id returns the
// first call's operation.
func (g *Gateway) DeleteCluster(ctx context.Context, req *loomv1.DeleteClusterRequest) (*loomv1.Operation, error) {
	kind, rid, fp := adapters.RequestDeleteCluster, req.GetRequestId(), domain.RequestFingerprint(req)
	if err := domain.CheckRequestID(rid); err != nil {
		return nil, err
	}
	if op, ok, err := g.replayOperation(ctx, kind, rid, fp); err != nil || ok {
		return op, err
	}
	cluster, err := resname.ParseCluster(req.GetName())
	if err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	if err := domain.CheckEtag("etag", req.GetEtag()); err != nil {
		return nil, err
	}
	current, err := g.own.Clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: req.GetName()})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("cluster %s: %w", req.GetName(), errs.NotFound)
		}
		return nil, fmt.Errorf("ask the provisioner for %s: %w", req.GetName(), err)
	}
	// A second delete would be accepted only to fail in the provisioner:
	// refused now, as an update of a cluster being deleted is (a delete in
	// the middle of a create is what a delete is for, and goes on).
	if s := current.GetStatus().GetState(); s == loomv1.Cluster_DELETING || s == loomv1.Cluster_DELETED {
		return nil, fmt.Errorf("cluster %s is %s already; `loom operations list` shows the delete's operation: %w", req.GetName(), s, errs.FailedPrecondition)
	}
	if err := clusterspec.CheckEtag("delete", req.GetName(), req.GetEtag(), current.GetEtag()); err != nil {
		return nil, err
	}
	op := domain.NewOperation(resname.Operation{Project: cluster.Project, ID: envelope.NewID()}.String(), domain.VerbDelete, req.GetName(), g.now())
	cmd, err := route(ctx, req.GetName(),
		&eventsv1.DeleteCluster{Operation: op.GetName(), Cluster: req.GetName(), Etag: req.GetEtag()})
	if err != nil {
		return nil, err
	}
	return g.startOperation(ctx, kind, rid, fp, op, cmd)
}

// startOperation stores op and its commands (and the request id) in one Apply.
func (g *Gateway) startOperation(ctx context.Context, kind, rid, fp string, op *loomv1.Operation, cmds ...envelope.Event) (*loomv1.Operation, error) {
	return g.applyOperation(ctx, kind, rid, fp, op, func() (*loomv1.Operation, bool, error) { return g.replayOperation(ctx, kind, rid, fp) }, cmds...)
}

// startModelOperation is startOperation for an upload or an export, whose
// request ids are remembered by a scoped key (key; rid is the caller's
// own): a racer that loses the Apply on one key is answered as a retry of
// the winner would be (replayModelOperation), not by the cluster
// operations' admin-only replay, which cannot read such a key.
func (g *Gateway) startModelOperation(ctx context.Context, kind, key, rid, fp string, op *loomv1.Operation, cmd envelope.Event) (*loomv1.Operation, error) {
	return g.applyOperation(ctx, kind, key, fp, op, func() (*loomv1.Operation, bool, error) { return g.replayModelOperation(ctx, kind, key, rid, fp) }, cmd)
}

// applyOperation is startOperation's body; replay answers the call that
// lost the Apply to a concurrent one with the same request id.
func (g *Gateway) applyOperation(ctx context.Context, kind, rid, fp string, op *loomv1.Operation, replay func() (*loomv1.Operation, bool, error), cmds ...envelope.Event) (*loomv1.Operation, error) {
	tx := &store.Tx{}
	if err := adapters.PutOperation(tx, op); err != nil {
		return nil, err
	}
	adapters.PutRequest(tx, kind, rid, op.GetName(), fp)
	for _, cmd := range cmds {
		tx.Emit(cmd)
	}
	audited := auditInline(ctx, tx)
	applied, err := g.repo.Apply(ctx, adapters.RequestInboxID(kind, rid), tx)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op.GetMetadata().GetVerb(), op.GetMetadata().GetTarget(), err)
	}
	if applied {
		audited()
	}
	if !applied {
		// A concurrent call with the same request id won.
		first, ok, err := replay()
		if err == nil && !ok {
			err = fmt.Errorf("%s %s: a concurrent call with this request id has not recorded its operation yet; retry: %w", op.GetMetadata().GetVerb(), op.GetMetadata().GetTarget(), errs.Aborted)
		}
		return first, err
	}
	g.opt.Log.InfoContext(ctx, "operation started", "operation", op.GetName(), "verb", op.GetMetadata().GetVerb(), "target", op.GetMetadata().GetTarget())
	return op, nil
}

// replayOperation returns the operation of an earlier call with request id
// rid, ok=false when there was none (or rid is empty).
func (g *Gateway) replayOperation(ctx context.Context, kind, rid, fp string) (*loomv1.Operation, bool, error) {
	if rid == "" {
		return nil, false, nil
	}
	// Checked before it names a key to look up: a request id of megabytes
	// is not looked for. No request was ever accepted with one that fails
	// the check, so there is nothing to replay; the caller's validation
	// refuses it, with the request's other problems.
	if domain.CheckRequestID(rid) != nil {
		return nil, false, nil
	}
	rec, err := g.repo.Request(ctx, kind, rid)
	if errors.Is(err, errs.NotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	name, stored := adapters.SplitRequest(rec)
	op, err := g.repo.Operation(ctx, name)
	if err != nil {
		return nil, false, err
	}
	// Only an administrator of the operation's project replays it (every
	// call that starts one needs admin there).
	if !callerOf(ctx, op.GetName()).Admin {
		return nil, false, errRequestIDTaken(rid)
	}
	if err := domain.RequestIDReused(rid, stored, fp); err != nil {
		return nil, false, err
	}
	return op, true, nil
}

// GetCluster reads a cluster from the provisioner.
func (g *Gateway) GetCluster(ctx context.Context, req *loomv1.GetClusterRequest) (*loomv1.Cluster, error) {
	if _, err := resname.ParseCluster(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	return g.own.Clusters.GetCluster(ctx, req)
}

// ListClusters lists a project's clusters from the provisioner, or every
// project's for "projects/-" (which authorization grants only a cluster
// administrator).
func (g *Gateway) ListClusters(ctx context.Context, req *loomv1.ListClustersRequest) (*loomv1.ListClustersResponse, error) {
	if req.GetParent() == (resname.Project{ID: resname.Wildcard}).String() {
		return g.own.Clusters.ListClusters(ctx, req)
	}
	if _, err := resname.ParseProject(req.GetParent()); err != nil {
		return nil, errs.Invalid("parent", "%v", err)
	}
	return g.own.Clusters.ListClusters(ctx, req)
}

// allClustersParent is ListNodes' parent for every cluster of every
// project.
const allClustersParent = "projects/-/clusters/-"

// ListNodes lists nodes from the provisioner: of one cluster (NotFound
// when there is no such cluster), of every cluster of the project, or of
// every cluster of every project ("projects/-/clusters/-": authz lets only
// a cluster administrator name projects/-).
func (g *Gateway) ListNodes(ctx context.Context, req *loomv1.ListNodesRequest) (*loomv1.ListNodesResponse, error) {
	parent, err := resname.ParseClusterParent(req.GetParent())
	if req.GetParent() == allClustersParent {
		parent, err = resname.Cluster{Project: resname.Wildcard, ID: resname.Wildcard}, nil
	}
	if err != nil {
		return nil, errs.Invalid("parent", "%v (or %s: every project's, for cluster administrators)", err, allClustersParent)
	}
	resp, err := g.own.Nodes.ListNodes(ctx, req)
	if err != nil {
		return nil, err
	}
	// The provisioner lists the nodes it has under any name: a cluster
	// that does not exist is NotFound, not a cluster without nodes.
	if parent.ID != resname.Wildcard {
		if err := g.emptyOrNotFound(ctx, req.GetParent(), len(resp.GetNodes()) == 0, req.GetPageToken()); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// ---- operations ----

// GetOperation reads an operation from the gateway's store.
func (g *Gateway) GetOperation(ctx context.Context, req *loomv1.GetOperationRequest) (*loomv1.Operation, error) {
	if _, err := resname.ParseOperation(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	return g.repo.Operation(ctx, req.GetName())
}

// WaitOperation returns the operation once it is done, or as it is when
// timeout_seconds (default 60, at most MaxWaitTimeout) pass first. Completions applied by this
// process wake it at once; those applied by other gateway instances are seen
// by re-reading the store every Poll.
func (g *Gateway) WaitOperation(ctx context.Context, req *loomv1.WaitOperationRequest) (*loomv1.Operation, error) {
	if _, err := resname.ParseOperation(req.GetName()); err != nil {
		return nil, errs.Invalid("name", "%v", err)
	}
	if req.GetTimeoutSeconds() < 0 {
		return nil, errs.Invalid("timeout_seconds", "%d must not be negative", req.GetTimeoutSeconds())
	}
	timeout := DefaultWaitTimeout
	if req.GetTimeoutSeconds() > 0 {
		// At most MaxWaitTimeout, as Google's WaitOperation uses its own
		// maximum for a longer timeout: the caller asks again.
		timeout = time.Duration(min(int64(req.GetTimeoutSeconds()), int64(MaxWaitTimeout/time.Second))) * time.Second
	}
	// Listen before reading, so a completion between the two is not missed.
	woken, done := g.ops.wait(req.GetName())
	defer done()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(g.opt.Poll)
	defer tick.Stop()
	for {
		op, err := g.repo.Operation(ctx, req.GetName())
		if err != nil || op.GetDone() {
			return op, err
		}
		select {
		case <-woken:
		case <-tick.C:
		case <-deadline.C:
			return op, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-g.stop:
			return op, nil
		}
	}
}

// HandleClusterEvent finishes or advances the operation an event of
// loom.cluster.events.v1 names (ClusterChanged, ClusterOperationFailed,
// ClusterDeleted, ReservationChanged, ReservationDeleted): the new operation
// is written with the event's inbox mark, only while the operation is still
// the one the event was applied to (updateOperation: an operation done in
// between, cancelled say, stays as it is), then its waiters are woken.
func (g *Gateway) HandleClusterEvent(ctx context.Context, ev envelope.Event) error {
	var opName string
	switch p := ev.Payload.(type) {
	case *eventsv1.ClusterChanged:
		opName = p.GetOperation()
	case *eventsv1.ClusterOperationFailed:
		opName = p.GetOperation()
	case *eventsv1.ClusterDeleted:
		opName = p.GetOperation()
	case *eventsv1.ReservationChanged:
		opName = p.GetOperation()
	case *eventsv1.ReservationDeleted:
		opName = p.GetOperation()
	}
	if opName == "" {
		return nil
	}
	return g.applyOperationEvent(ctx, opName, "cluster", ev, domain.OnClusterEvent)
}

// applyOperationEvent writes what on makes of event ev for operation
// opName, as a compare-and-set (updateOperation: a cancel and a completion
// never overwrite each other), and wakes the operation's waiters. An event
// on decides nothing for (the operation done already, a redelivery) writes
// nothing; one for an operation that is not stored is logged, naming what
// kind of event it was, and dropped.
func (g *Gateway) applyOperationEvent(ctx context.Context, opName, what string, ev envelope.Event,
	on func(op *loomv1.Operation, payload proto.Message, now time.Time) (*loomv1.Operation, bool)) error {
	var next *loomv1.Operation
	_, err := g.updateOperation(ctx, opName, ev.ID, func(op *loomv1.Operation) (*store.Tx, error) {
		n, changed := on(op, ev.Payload, g.now())
		if !changed {
			// Done already (a cancel came first, or a redelivery), or not
			// this operation's event: nothing to write.
			next = nil
			return nil, nil
		}
		next = n
		tx := &store.Tx{}
		return tx, adapters.PutOperation(tx, n)
	})
	if errors.Is(err, errs.NotFound) {
		g.opt.Log.WarnContext(ctx, what+" event for an unknown operation", "operation", opName, "event", ev.ID, "type", ev.Type)
		return nil
	}
	if err != nil || next == nil {
		return err
	}
	if next.GetDone() {
		g.opt.Log.InfoContext(ctx, "operation done", "operation", opName, "error", next.GetError().GetMessage())
	}
	g.ops.notify(opName)
	return nil
}

// ---- jobs ----

// SubmitJob validates req against its cluster (Slurm options included),
// assigns the next job id (a block of ids for an array), and stores the
// accepted job together with the SubmitJob command (one for an array). A
// retry with the same request_id returns the first call's job (as it is now).
// With validate_only it runs the same checks and writes nothing: it answers
// the job as it would be accepted, its job_id the next one (not taken).
func (g *Gateway) SubmitJob(ctx context.Context, req *loomv1.SubmitJobRequest) (*loomv1.Job, error) {
	kind, rid, fp := adapters.RequestSubmitJob, req.GetRequestId(), domain.RequestFingerprint(req)
	validate := req.GetValidateOnly()
	// The job is the caller's: Job.user comes from the principal, never
	// from the request.
	if req.GetJob() != nil {
		parent, _ := resname.ParseProject(req.GetParent())
		caller := callerIn(ctx, parent.ID)
		owner, err := submitAs(caller, req.GetJob().GetUser())
		if err != nil {
			return nil, err
		}
		if err := domain.CheckNiceAllowed(caller, "job.nice", req.GetJob().GetNice()); err != nil {
			return nil, err
		}
		req = proto.Clone(req).(*loomv1.SubmitJobRequest)
		req.Job.User = owner
	}
	var cluster *loomv1.Cluster
	if name := domain.JobCluster(req); name != "" {
		c, err := g.clusters.get(ctx, name, g.now(), func(ctx context.Context, name string) (*loomv1.Cluster, error) {
			return g.own.Clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: name})
		})
		switch {
		case err == nil:
			cluster = c
		case !isNotFound(err):
			return nil, fmt.Errorf("ask the provisioner for %s: %w", name, err)
		}
	}
	err := domain.ValidateSubmitJob(req, cluster, g.opt.MaxArraySize)
	if err == nil {
		// Before any id or quota is taken: the request as sent, then the
		// job as accepted below.
		err = g.checkMapped(&eventsv1.SubmitJob{Job: req.GetJob()})
	}
	if err == nil {
		err = g.checkJobNodes(ctx, req.GetJob(), cluster)
	}
	if err == nil {
		err = g.checkDependencyJobs(ctx, req.GetJob().GetDependency(), "job.dependency")
	}
	if err != nil {
		// A retry of a request that was accepted answers what it got then,
		// even when the same request would be refused now (validate_only
		// looks nothing up).
		if validate {
			return nil, err
		}
		if j, ok, rerr := g.replayJob(ctx, rid, fp); rerr != nil || ok {
			return j, rerr
		}
		return nil, err
	}
	// The association's account and MaxSubmitJobs (accounts.go), then the
	// quotas: the project's pending jobs and the user's default
	// MaxSubmitJobs (quota.go). A retry of an accepted request answers what
	// it got then.
	charged, err := g.submitAssociation(ctx, req)
	var counted *jobReservation
	tasks := max(1, domain.ArrayTaskCount(req.GetJob().GetArray()))
	if err == nil {
		project, _ := resname.ParseProject(req.GetParent())
		counted, err = g.reserveJobs(ctx, project.ID, submitter(ctx, req.GetJob()), int64(tasks), validate)
	}
	if err != nil && validate {
		return nil, err
	}
	if err != nil {
		if j, ok, rerr := g.replayJob(ctx, rid, fp); rerr != nil || ok {
			return j, rerr
		}
		return nil, err
	}
	if validate {
		return g.validatedJob(ctx, req, cluster, charged)
	}
	accepted := false
	defer func() {
		if !accepted {
			counted.release()
		}
	}()
	// The replay check and the ids are one round trip: an array reserves one
	// id per task (the array's job id is the first, task k in ascending
	// index order gets the first + k).
	replay, id, err := g.repo.ReplayOrJobIDs(ctx, kind, rid, tasks)
	if err != nil {
		return nil, err
	}
	if replay != "" {
		name, stored := adapters.SplitRequest(replay)
		j, err := g.job(ctx, name)
		if err != nil {
			return nil, err
		}
		if j, err = replayedJob(ctx, j, rid); err != nil {
			return nil, err
		}
		return j, domain.RequestIDReused(rid, stored, fp)
	}
	counted.commit(id)
	job := domain.AcceptJob(req, cluster, id, g.now())
	if charged.account != "" {
		job.Account = charged.account
	}
	job.Qos = charged.qos
	tx := &store.Tx{}
	if err := adapters.PutJob(tx, job); err != nil {
		return nil, err
	}
	adapters.PutRequest(tx, kind, rid, job.GetName(), fp)
	// Again on the job as accepted (defaults filled), which is what the
	// scheduler judges.
	submit := &eventsv1.SubmitJob{Job: job}
	if err := g.checkMapped(submit); err != nil {
		return nil, err
	}
	cmd, err := route(ctx, job.GetCluster(), submit)
	if err != nil {
		return nil, err
	}
	tx.Emit(cmd)
	audited := auditInline(ctx, tx)
	applied, err := g.repo.Apply(ctx, adapters.RequestInboxID(kind, rid), tx)
	if err != nil {
		return nil, fmt.Errorf("submit %s: %w", job.GetName(), err)
	}
	if applied {
		audited()
	}
	if !applied {
		first, ok, err := g.replayJob(ctx, rid, fp)
		if err == nil && !ok {
			err = fmt.Errorf("request %s: applied but not recorded", rid)
		}
		return first, err
	}
	accepted = true
	g.opt.Log.InfoContext(ctx, "job submitted", "job", job.GetName(), "cluster", job.GetCluster())
	return job, nil
}

// validatedJob is SubmitJob's answer to a validate_only request that
// passed every check: the job as it would be accepted now, charged as it
// would be, with no name and no job_id. The id the next submission would
// take is not answered: job ids are one counter for the whole
// installation, so any member of any project polling validate_only could
// count every project's submissions; and it was never reserved.
func (g *Gateway) validatedJob(_ context.Context, req *loomv1.SubmitJobRequest, cluster *loomv1.Cluster, charged charge) (*loomv1.Job, error) {
	job := domain.AcceptJob(req, cluster, 0, g.now())
	job.Name, job.JobId = "", ""
	if charged.account != "" {
		job.Account = charged.account
	}
	job.Qos = charged.qos
	return job, nil
}

// replayJob returns the job of an earlier SubmitJob with request id rid.
func (g *Gateway) replayJob(ctx context.Context, rid, fp string) (*loomv1.Job, bool, error) {
	if rid == "" {
		return nil, false, nil
	}
	if domain.CheckRequestID(rid) != nil { // as replayOperation
		return nil, false, nil
	}
	rec, err := g.repo.Request(ctx, adapters.RequestSubmitJob, rid)
	if errors.Is(err, errs.NotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	name, stored := adapters.SplitRequest(rec)
	j, err := g.job(ctx, name)
	if err != nil {
		return nil, false, err
	}
	if j, err = replayedJob(ctx, j, rid); err == nil {
		err = domain.RequestIDReused(rid, stored, fp)
	}
	if err != nil {
		return nil, false, err
	}
	return j, true, nil
}

// GetJob reads a job from the scheduler, or, when the scheduler no longer
// knows it (retention), the job history, or, when it does not know it yet,
// the record of it the gateway accepted. The name may name an array
// task, "projects/p/jobs/A_i".
func (g *Gateway) GetJob(ctx context.Context, req *loomv1.GetJobRequest) (*loomv1.Job, error) {
	ref, err := g.resolveJob(ctx, req.GetName(), false)
	if err != nil {
		return nil, err
	}
	j, c, err := g.visibleJob(ctx, ref.name)
	if err != nil {
		return nil, err
	}
	return c.Present(j), nil
}

func (g *Gateway) job(ctx context.Context, name string) (*loomv1.Job, error) {
	j, err := g.own.Jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: name})
	if err == nil {
		return j, nil
	}
	if !isNotFound(err) {
		return nil, fmt.Errorf("ask the scheduler for %s: %w", name, err)
	}
	// Pruned by the scheduler's retention: the history; else not known to
	// it yet: the accepted record.
	if h, err := g.repo.HistoryJob(ctx, name); err == nil {
		return h, nil
	} else if !errors.Is(err, errs.NotFound) {
		return nil, err
	}
	return g.repo.AcceptedJob(ctx, name)
}

// workloadRef is ref as a workload caller may act on it: its own job
// alone. An array's first task's name is also the array's, which would
// act on every task; for the task's own processes it names the task
// ("A_0").
func workloadRef(c domain.Caller, ref jobRef) jobRef {
	if c.Workload != "" && ref.array {
		ref.array, ref.command = false, ref.name+"_0"
	}
	return ref
}

// jobRef is a job name resolved: the canonical name (an array task's own
// job id), and whether it names a whole array.
type jobRef struct {
	name  string
	array bool
	// command is the name a cancel or update carries: name, except for an
	// array's first task, whose record name is the array's (which the
	// scheduler takes for every task): "A_0" for it.
	command string
}

// resolveJob checks a job name, "projects/p/jobs/A" or "projects/p/jobs/A_i"
// (InvalidArgument naming "name"), and resolves an array task to its own job
// name: from the array as the gateway accepted it (the gateway assigned the
// ids), else by asking the scheduler. NotFound when there is no such task.
// For "A" it tells whether A is an array only when wantArray (it costs a read).
func (g *Gateway) resolveJob(ctx context.Context, name string, wantArray bool) (jobRef, error) {
	ref, err := g.resolveJobRef(ctx, name, wantArray)
	if ref.command == "" {
		ref.command = ref.name
	}
	return ref, err
}

func (g *Gateway) resolveJobRef(ctx context.Context, name string, wantArray bool) (jobRef, error) {
	jn, err := resname.ParseJob(name)
	if err != nil {
		return jobRef{}, errs.Invalid("name", "%v", err)
	}
	project := jn.Project
	ref, _ := jn.Ref() // ParseJob checked it
	if ref.Task < 0 && !wantArray {
		return jobRef{name: name}, nil
	}
	parentName := resname.JobOf(project, ref.JobID).String()
	parent, err := g.repo.AcceptedJob(ctx, parentName)
	if err == nil && !callerIn(ctx, project).Sees(parent, g.opt.PrivateJobs) {
		// Say nothing of a job the caller may not see (not even whether
		// it is an array, or which tasks it has).
		return jobRef{}, jobNotFound(name)
	}
	switch {
	case err == nil && ref.Task < 0:
		return jobRef{name: name, array: parent.GetArray() != ""}, nil
	case err == nil:
		id, ok := domain.ArrayTaskJobID(parent, ref.Task)
		if !ok {
			if parent.GetArray() == "" {
				return jobRef{}, fmt.Errorf("job %s: job %d is not an array: %w", name, ref.JobID, errs.NotFound)
			}
			return jobRef{}, fmt.Errorf("job %s: array %d (%s) has no task %d: %w", name, ref.JobID, parent.GetArray(), ref.Task, errs.NotFound)
		}
		out := jobRef{name: resname.JobOf(project, id).String()}
		if id == ref.JobID {
			out.command = jn.String()
		}
		return out, nil
	case !errors.Is(err, errs.NotFound):
		return jobRef{}, err
	case ref.Task < 0:
		return jobRef{name: name}, nil
	}
	// Not accepted here: the scheduler may know the array.
	j, err := g.own.Jobs.GetJob(ctx, &loomv1.GetJobRequest{Name: name})
	if err != nil {
		if isNotFound(err) {
			return jobRef{}, fmt.Errorf("job %s: %w", name, errs.NotFound)
		}
		return jobRef{}, fmt.Errorf("ask the scheduler for %s: %w", name, err)
	}
	out := jobRef{name: j.GetName()}
	if j.GetJobId() == strconv.FormatInt(ref.JobID, 10) {
		out.command = jn.String()
	}
	return out, nil
}

// inProject reports whether job names a job of project.
// maxIndexScan bounds the index entries one ListJobs reads of each of the
// history and the accepted jobs: a page whose filters pass few of them
// ends there, short, with a token to go on from.
const maxIndexScan = 10000

// scanJobIndex reads project's history (history) or accepted jobs not
// ended, in list order from after, no further than upto ("": no bound),
// keeping those keep keeps, until want are kept, the index is exhausted
// or maxIndexScan entries were read: the jobs kept, and the last key read
// when it stopped short of upto with more in the index ("": exhausted).
//
// desc reads the index backwards (order_by "submit_time desc"): after is
// then the key the page goes on below, and upto the least key it reads.
func (g *Gateway) scanJobIndex(ctx context.Context, project string, history, desc bool, after, upto string, want int, keep func(*loomv1.Job) bool) ([]*loomv1.Job, string, error) {
	chunk := int64(max(want, 100))
	var out []*loomv1.Job
	for read := int64(0); ; read += chunk {
		jobs, last, more, err := g.repo.IndexedJobsIn(ctx, project, history, desc, after, upto, chunk)
		if err != nil {
			return nil, "", err
		}
		for _, j := range jobs {
			if keep(j) {
				out = append(out, j)
			}
		}
		if !more {
			return out, "", nil
		}
		after = last
		if len(out) >= want || read+chunk >= maxIndexScan {
			return out, last, nil
		}
	}
}

func inProject(job, project string) bool {
	j, err := resname.SplitJob(job)
	return err == nil && j.Project == project
}

// ListJobs lists one page (AIP-158: page_size, page_token; libs/paging) of
// a project's jobs (optionally one cluster's), in job id order, filtered as
// the request says (users, states, job ids, names, partitions, active only;
// the scheduler applies them): the scheduler's, with the ended jobs of the
// history the scheduler pruned and the accepted jobs it does not know yet
// that pass the same filters.
//
// The page is a merge of three sources in one key order (paging.JobKey):
// the scheduler's page of the live jobs after the token's key, and the
// history's and accepted jobs' after it. When the scheduler has more, the
// merge stops at its page's last key, since live jobs past it are not
// known yet; the next page starts after the last job returned, so no job
// comes twice and none is skipped.
//
// order_by "submit_time desc" (paging.JobOrder) runs the same merge
// backwards: every source is read from the token's key down, the
// scheduler's page bounds it from below, and the page is the newest
// first. Its tokens hash order_by with the other fields, so a token of one
// order is InvalidArgument in the other.
func (g *Gateway) ListJobs(ctx context.Context, req *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	return g.listJobs(ctx, req, false)
}

// listJobs is ListJobs; asOwner lists for a workload caller what its owner
// would see (the gateway's own counts of the owner's jobs against a limit:
// narrowed to the job, a job's submissions would never reach its owner's
// MaxSubmitJobs).
func (g *Gateway) listJobs(ctx context.Context, req *loomv1.ListJobsRequest, asOwner bool) (*loomv1.ListJobsResponse, error) {
	project, err := resname.ParseProject(req.GetParent())
	var v errs.Validator
	if err != nil {
		v.Add("parent", "%v", err)
	}
	cluster := req.GetCluster()
	if cluster != "" {
		if resname.ValidID(cluster) && project.ID != "" {
			cluster = resname.Cluster{Project: project.ID, ID: cluster}.String()
		}
		c, err := resname.ParseCluster(cluster)
		v.Check(err == nil, "cluster", "want projects/{project}/clusters/{cluster} or a cluster id, got %q", req.GetCluster())
		// The caller's role was checked in the parent's project: a cluster
		// of another project would list jobs it may not see.
		v.Check(err != nil || project.ID == "" || c.Project == project.ID, "cluster", "%s is not in %s", cluster, req.GetParent())
	}
	domain.ValidateListJobs(&v, req)
	desc := paging.JobOrder(&v, req.GetOrderBy())
	size, after := paging.Check(&v, req)
	if err := v.Err(); err != nil {
		return nil, err
	}
	caller := callerIn(ctx, project.ID)
	if asOwner {
		caller.Workload = ""
	}
	// The page token is checked against, and made from, the request as
	// sent; the filters applied are the caller's (PrivateData narrows the
	// users to the caller).
	sent := req
	if caller.Workload != "" && len(req.GetJobIds()) == 0 {
		// A workload lists its own job alone (any other job is NotFound
		// to it): its id as the job id filter when it gives none ("A_k",
		// its task's, is as good), and the page's jobs checked after
		// (the id of an array's first task names every task).
		own, _ := resname.ParseJob(caller.Workload)
		req = proto.Clone(req).(*loomv1.ListJobsRequest)
		req.JobIds = []string{own.ID}
	} else if caller.Workload == "" && g.opt.PrivateJobs && !caller.Admin {
		req = proto.Clone(req).(*loomv1.ListJobsRequest)
		own := caller.User != "" && (len(req.GetUsers()) == 0 || slices.Contains(req.GetUsers(), caller.User))
		if !own {
			// Only others' jobs asked for: none of them is there.
			return &loomv1.ListJobsResponse{}, nil
		}
		req.Users = []string{caller.User}
	}
	fwd := proto.Clone(req).(*loomv1.ListJobsRequest)
	fwd.Cluster, fwd.PageSize, fwd.PageToken = cluster, int32(size), ""
	if after != "" {
		fwd.PageToken = paging.Token(fwd, after)
	}
	resp, err := g.own.Jobs.ListJobs(ctx, fwd)
	if err != nil {
		return nil, fmt.Errorf("ask the scheduler for jobs: %w", err)
	}
	// bound is the last key the scheduler's page covers ("": all of them):
	// the key its token goes on from, which is its last job's, or past it
	// when the scheduler stopped testing jobs short of a full page
	// (views.MaxScan; the page may then be empty).
	bound := ""
	if next := resp.GetNextPageToken(); next != "" {
		// Read without the check of the request it hashes: a scheduler of
		// another release may encode the request differently.
		if bound, err = paging.TokenKey(next); err != nil || bound == "" {
			// Not the caller's token: an Internal error, not theirs to fix.
			return nil, fmt.Errorf("the scheduler's next page token %q does not parse: %v", next, err)
		}
	}
	// before reports whether key a comes before b in the list's order.
	before := func(a, b string) bool { return a < b }
	if desc {
		before = func(a, b string) bool { return a > b }
	}
	inPage := func(j *loomv1.Job) bool {
		k := paging.JobKey(j)
		return (after == "" || before(after, k)) && (bound == "" || !before(bound, k)) &&
			inProject(j.GetName(), project.ID) && (cluster == "" || j.GetCluster() == cluster)
	}
	listed := make(map[string]bool, len(resp.GetJobs()))
	for _, j := range resp.GetJobs() {
		listed[j.GetName()] = true
	}
	// Ended jobs the scheduler pruned come from the history, jobs it does
	// not know yet from the accepted records; each is read from its
	// project's index from the page token on, within the scheduler's page
	// (bound), and no further than it must: a source cut short bounds the
	// page (its frontier), and the next page goes on from there.
	keep := func(j *loomv1.Job) bool {
		if listed[j.GetName()] || !inPage(j) || !domain.MatchesList(req, j) {
			return false
		}
		listed[j.GetName()] = true
		return true
	}
	// The accepted jobs first, then the history: a job that ends between
	// the two reads is in the second (PutHistory takes it out of the
	// first), never in neither. A history record wins over its accepted
	// one, matching or not.
	accAfter, accUpto := after, bound
	if domain.Filtered(req) {
		// Only accepted jobs of the last acceptedWindow can be added to a
		// filtered list (unknownToScheduler): those have ids past floor.
		floor, err := g.recentIDFloor(ctx)
		if err != nil {
			return nil, err
		}
		// Newest first, the floor bounds the read from below instead.
		if k := fmt.Sprintf("%020d\xff", floor); floor > 0 && !desc && k > accAfter {
			accAfter = k
		} else if floor > 0 && desc && (accUpto == "" || k > accUpto) {
			accUpto = k
		}
	}
	candidates, frontier, err := g.scanJobIndex(ctx, project.ID, false, desc, accAfter, accUpto, size, keep)
	if err != nil {
		return nil, err
	}
	frontiers := []string{frontier}
	accepted := make(map[string]bool, len(candidates))
	for _, j := range candidates {
		accepted[j.GetName()] = true
	}
	ended := map[string]bool{}
	keepEnded := func(j *loomv1.Job) bool {
		ended[j.GetName()] = true
		if !inPage(j) || (listed[j.GetName()] && !accepted[j.GetName()]) {
			return false
		}
		listed[j.GetName()] = true
		return domain.MatchesList(req, j)
	}
	var history []*loomv1.Job
	if !req.GetActiveOnly() {
		hist, frontier, err := g.scanJobIndex(ctx, project.ID, true, desc, after, bound, size, keepEnded)
		if err != nil {
			return nil, err
		}
		history, frontiers = hist, append(frontiers, frontier)
		kept := candidates[:0]
		for _, j := range candidates {
			if !ended[j.GetName()] {
				kept = append(kept, j)
			}
		}
		candidates = kept
	}
	if req.GetActiveOnly() && len(candidates) > 0 {
		// The history was not read: an accepted job that already ended and
		// was pruned is not pending.
		names := make([]string, len(candidates))
		for i, j := range candidates {
			names[i] = j.GetName()
		}
		ended, err := g.repo.InHistory(ctx, names)
		if err != nil {
			return nil, err
		}
		kept := candidates[:0]
		for _, j := range candidates {
			if !ended[j.GetName()] {
				kept = append(kept, j)
			}
		}
		candidates = kept
	}
	if domain.Filtered(req) && len(candidates) > 0 {
		// A filtered answer leaves out jobs the scheduler knows but that
		// no longer pass (a finished job for active_only): ask about the
		// candidates by id, unfiltered, and add only those it does not
		// know, and, of those it came to know since its page (an array
		// just split into tasks), the ones that pass as it has them now.
		keepKnown := func(j *loomv1.Job) bool {
			// An accepted candidate is listed as the scheduler has it.
			if (listed[j.GetName()] && !accepted[j.GetName()]) || !inPage(j) || !domain.MatchesList(req, j) {
				return false
			}
			listed[j.GetName()] = true
			return true
		}
		if candidates, err = g.unknownToScheduler(ctx, req.GetParent(), cluster, candidates, keepKnown); err != nil {
			return nil, err
		}
	}
	jobs := append(append(resp.GetJobs(), history...), candidates...)
	limit := bound
	for _, f := range frontiers {
		if f != "" && (limit == "" || before(f, limit)) {
			limit = f
		}
	}
	if limit != bound {
		kept := jobs[:0]
		for _, j := range jobs {
			if !before(limit, paging.JobKey(j)) {
				kept = append(kept, j)
			}
		}
		jobs = kept
	}
	if desc {
		paging.SortDesc(jobs, paging.JobKey)
	} else {
		paging.Sort(jobs, paging.JobKey)
	}
	page, next := paging.Page(jobs, paging.JobKey, "", size)
	if next == "" {
		next = limit
	}
	if cluster != "" {
		// A mistyped cluster says so (as squeue -M does) rather than
		// showing an empty queue.
		if err := g.emptyOrNotFound(ctx, cluster, len(page) == 0, sent.GetPageToken()); err != nil {
			return nil, err
		}
	}
	if caller.Workload != "" {
		page = slices.DeleteFunc(page, func(j *loomv1.Job) bool { return !caller.Sees(j, true) })
	}
	for i, j := range page {
		page[i] = caller.Present(j)
	}
	out := &loomv1.ListJobsResponse{Jobs: page}
	if next != "" {
		out.NextPageToken = paging.Token(sent, next)
	}
	return out, nil
}

// unknownToScheduler returns the jobs of candidates the scheduler does not
// know, and, as the scheduler has them, the jobs of those ids it knows that
// keepKnown takes (those that came to be known after the scheduler's page
// was read, which that page could not hold). Only recent candidates are
// asked about: one accepted longer ago than acceptedWindow that the
// scheduler still does not know is left out of filtered lists (GetJob
// still answers for it).
func (g *Gateway) unknownToScheduler(ctx context.Context, parent, cluster string, candidates []*loomv1.Job, keepKnown func(*loomv1.Job) bool) ([]*loomv1.Job, error) {
	recent := candidates[:0]
	ids := make([]string, 0, len(candidates))
	for _, j := range candidates {
		if g.now().Sub(j.GetSubmitTime().AsTime()) <= acceptedWindow {
			recent = append(recent, j)
			ids = append(ids, j.GetJobId())
		}
	}
	if len(recent) == 0 {
		return nil, nil
	}
	seen := make(map[string]bool, len(ids))
	var now []*loomv1.Job // known since the page: as the scheduler has them
	err := paging.Each(func(token string) (string, error) {
		known, err := g.own.Jobs.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: parent, Cluster: cluster, JobIds: ids,
			PageSize: paging.MaxSize, PageToken: token})
		for _, j := range known.GetJobs() {
			seen[j.GetName()] = true
			if keepKnown(j) {
				now = append(now, j)
			}
		}
		return known.GetNextPageToken(), err
	})
	if err != nil {
		return nil, fmt.Errorf("ask the scheduler for jobs: %w", err)
	}
	out := now
	for _, j := range recent {
		if !seen[j.GetName()] {
			out = append(out, j)
		}
	}
	return out, nil
}

// acceptedWindow bounds how long after its submission an accepted job the
// scheduler does not list is still added to filtered job lists.
const acceptedWindow = 10 * time.Minute

// CancelJob asks the scheduler to cancel a job, or, with signal, to send the
// job's processes that signal (scancel --signal), and returns the job as the
// scheduler has it. The name may name an array task ("A_i"); "A" of an array
// acts on every task. Only the job's owner or an administrator may
// (PermissionDenied). NotFound for unknown jobs; FailedPrecondition ("Job/step
// already completing or completed") for a job that is ending or ended, for
// a signal to a job that has not started, and for a signal to an array or
// any of its tasks while tasks of it are still pending (Slurm's "Job can
// not be altered now, try again later", naming them:
// domain.PendingArraySignal); nothing is signalled then.
func (g *Gateway) CancelJob(ctx context.Context, req *loomv1.CancelJobRequest) (*loomv1.Job, error) {
	ref, err := g.resolveJob(ctx, req.GetName(), true)
	if err != nil {
		return nil, err
	}
	signal, err := domain.ParseCancelSignal(req.GetSignal())
	if err != nil {
		return nil, err
	}
	if err := domain.CheckCompletion(req, signal); err != nil {
		return nil, err
	}
	// req.user is no longer trusted (it is checked as text only): the
	// principal decides.
	if err := domain.CheckUser(req.GetUser()); err != nil {
		return nil, err
	}
	j, caller, err := g.visibleJob(ctx, ref.name)
	if err != nil {
		return nil, err
	}
	ref = workloadRef(caller, ref)
	// The tasks of an array share its owner: the first's stands for all.
	if err := caller.CheckAccess(j); err != nil {
		return nil, err
	}
	if !ref.array && (j.GetState().Terminal() || j.GetState() == loomv1.JobState_COMPLETING) {
		return nil, domain.CheckCancel(j, signal)
	}
	if signal != "" {
		// Decided here, where the answer can say so, for the REST and
		// gRPC callers and the Slurm commands alike.
		if err := g.checkArraySignal(ctx, j); err != nil {
			return nil, err
		}
	}
	if !ref.array {
		// An array's tasks are in different states; the scheduler judges
		// each of them.
		if err := domain.CheckCancel(j, signal); err != nil {
			return nil, err
		}
	}
	cmd := &eventsv1.CancelJob{Job: ref.command, Cluster: j.GetCluster(), Signal: signal,
		User: caller.User, Admin: caller.Admin, Batch: req.GetBatch(), Full: req.GetFull(), ExitCode: req.ExitCode}
	if err := g.emitCommands(ctx, j.GetCluster(), cmd); err != nil {
		return nil, fmt.Errorf("cancel %s: %w", ref.name, err)
	}
	g.opt.Log.InfoContext(ctx, "job cancel requested", "job", ref.name, "signal", signal, "by", caller.Name)
	return caller.Present(j), nil
}

// UpdateJob asks the scheduler to hold, release or requeue a job, or to
// change its time limit, partition, nice, begin time, dependency, QOS,
// account, name, size, hosts or (an array's) throttle (scontrol hold/uhold/
// release/requeue/update), and returns the job as the scheduler has it.
// Sizes and hosts are judged against the cluster as at submission. Only the job's
// owner or an administrator may (PermissionDenied, "Access/permission
// denied"), and only an administrator releases an admin hold. The name may name an array
// task; "A" of an array acts on every task. InvalidArgument for a bad action
// or value (a partition the job's cluster does not have), NotFound for
// unknown jobs, FailedPrecondition (in Slurm's words) for a job whose state
// does not allow the action.
func (g *Gateway) UpdateJob(ctx context.Context, req *loomv1.UpdateJobRequest) (*loomv1.Job, error) {
	ref, err := g.resolveJob(ctx, req.GetName(), true)
	if err != nil {
		return nil, err
	}
	action, err := domain.ValidateUpdateJob(req)
	if err != nil {
		return nil, err
	}
	// req.user is no longer trusted: the principal decides.
	j, caller, err := g.visibleJob(ctx, ref.name)
	if err != nil {
		return nil, err
	}
	ref = workloadRef(caller, ref)
	if err := caller.CheckAccess(j); err != nil {
		return nil, err
	}
	if req.ArrayTaskThrottle != nil && caller.Workload != "" {
		return nil, &domain.Denied{Msg: domain.MsgAccessDenied + ": a job's own token may not change its array's throttle (the array's other tasks are not its)"}
	}
	if err := domain.CheckNiceAllowed(caller, "nice", req.GetNice()); err != nil {
		return nil, err
	}
	if err := g.checkTimeLimit(ctx, caller, ref, j, req.GetTimeLimitSeconds()); err != nil {
		return nil, err
	}
	if action == "release" || action == "hold" || action == "uhold" {
		// A user's hold would replace the administrator's with one the
		// user may release.
		if err := caller.CheckRelease(j); err != nil {
			return nil, err
		}
	}
	if req.ArrayTaskThrottle != nil && j.GetArrayJobId() == "" {
		return nil, errs.Invalid("array_task_throttle", "job %s is not an array", j.GetJobId())
	}
	if !ref.array {
		if err := domain.CheckUpdate(action, req, j); err != nil {
			return nil, err
		}
	}
	partition := req.GetPartition()
	nodeCount, maxNodeCount := req.NodeCount, req.MaxNodeCount
	if domain.Resizes(req) {
		c, err := g.own.Clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: j.GetCluster()})
		if err != nil {
			return nil, fmt.Errorf("ask the provisioner for %s: %w", j.GetCluster(), err)
		}
		// A move to a DRAIN or INACTIVE partition is refused as a
		// submission to it is; of a list, those are left out.
		if partition, err = domain.UpdatedPartition(c, j, partition); err != nil {
			return nil, err
		}
		ureq := req
		if partition != req.GetPartition() {
			ureq = proto.Clone(req).(*loomv1.UpdateJobRequest)
			ureq.Partition = partition
		}
		updated := domain.Updated(j, ureq)
		left := j.GetNodeCount() // the minimum the update leaves, as asked
		if nodeCount != nil {
			left = *nodeCount
		}
		if n := updated.GetNodeCount(); n != left {
			// The hosts raised the range's minimum (Updated): the
			// scheduler gets the range as the update leaves it, and
			// raises the tasks to it as Updated does.
			nodeCount, maxNodeCount = proto.Int32(n), proto.Int32(updated.GetMaxNodeCount())
		}
		var nodes map[string]*loomv1.Node
		if len(updated.GetNodelist())+len(updated.GetExclude()) > 0 {
			if nodes, err = g.clusterNodes(ctx, j.GetCluster()); err != nil {
				return nil, err
			}
		}
		if err := domain.CheckUpdatedJob(updated, c, nodes); err != nil {
			return nil, err
		}
	}
	if err := g.checkDependencyJobs(ctx, req.GetDependency(), "dependency"); err != nil {
		return nil, err
	}
	if err := g.checkDependencyCycle(ctx, ref, j, req.GetDependency()); err != nil {
		return nil, err
	}
	account, qos, err := g.updateCharge(ctx, j, ref.array, req.Account, req.Qos)
	if err != nil {
		return nil, err
	}
	if action == "requeue" && j.GetState().Terminal() {
		// Ended jobs count against no quota: back to pending they count
		// as a submission would, or "submit, cancel, requeue" would pass
		// the project's pending jobs and the user's MaxSubmitJobs.
		n := int64(1)
		if ref.array {
			if a, err := slurmspec.ParseArray(j.GetArray(), math.MaxInt32); err == nil {
				n = int64(a.Count())
			}
		}
		jn, err := resname.ParseJob(ref.name)
		if err != nil {
			return nil, err
		}
		r, err := g.reserveJobs(ctx, jn.Project, j.GetUser(), n, false)
		if err != nil {
			return nil, err
		}
		defer r.release() // counted again from the scheduler's lists once requeued
	}
	cmd := &eventsv1.UpdateJob{Job: ref.command, Cluster: j.GetCluster(), Action: action, Qos: qos, Account: account,
		TimeLimitSeconds: req.GetTimeLimitSeconds(), Partition: partition, Nice: req.Nice,
		BeginTime: req.GetBeginTime(), Dependency: req.Dependency, JobName: req.JobName,
		NodeCount: nodeCount, MaxNodeCount: maxNodeCount, Ntasks: req.Ntasks, MemMb: req.MemMb, Nodelist: req.GetNodelist(), Exclude: req.GetExclude(),
		ArrayTaskThrottle: req.ArrayTaskThrottle, GpusPerNode: req.GpusPerNode, GpuType: req.GpuType, User: caller.User, Admin: caller.Admin}
	if err := g.emitCommands(ctx, j.GetCluster(), cmd); err != nil {
		return nil, fmt.Errorf("%s %s: %w", action, ref.name, err)
	}
	g.opt.Log.InfoContext(ctx, "job update requested", "job", ref.name, "action", action, "by", caller.Name)
	return caller.Present(j), nil
}

// checkMapped refuses cmd, FailedPrecondition naming what and pointing to
// docs/slurm-backend.md, when the scheduler runs the real-Slurm backend
// (Options.SlurmBackend) and that backend does not carry it out
// (slurmmap.Command, the predicate the backend refuses it by again): the
// caller hears it now, rather than the command being accepted and then
// dead-lettered, or the job failed, once the scheduler consumes it.
func (g *Gateway) checkMapped(cmd proto.Message) error {
	if !g.opt.SlurmBackend {
		return nil
	}
	if what := slurmmap.Command(cmd); what != "" {
		return slurmmap.Refuse(what)
	}
	return nil
}

// emitCommands writes commands about a cluster (keyed by it; libs/topics
// routes each to its service's topic: the scheduler's, health's) through the
// outbox in one Apply, so that all of them are published or none, each
// stamped with the caller's principal.
func (g *Gateway) emitCommands(ctx context.Context, cluster string, cmds ...proto.Message) error {
	tx := &store.Tx{}
	for _, cmd := range cmds {
		if err := g.checkMapped(cmd); err != nil {
			return err
		}
		ev, err := route(ctx, cluster, cmd)
		if err != nil {
			return err
		}
		tx.Emit(ev)
	}
	_, err := g.repo.Apply(ctx, "", tx)
	return err
}

// Watched reports whether a record on loom.job.events.v1 with this
// CloudEvents type and subject would reach one of this process's watchers,
// so that the feed passes over the others without decoding them: the
// changes of jobs nobody watches (neither the job through WatchJob nor its
// project through WatchChanges), and what is not a JobChanged. A
// JobChanged without a subject (the job's name) is decoded to be sure.
func (g *Gateway) Watched(typ, subject string) bool {
	return typ == jobChangedType && (subject == "" || g.jobs.watched(subject) || g.jobs.watched(jobProject(subject)))
}

// jobChangedType is JobChanged's CloudEvents type.
var jobChangedType = envelope.TypeOf(&eventsv1.JobChanged{})

// HandleJobEvent feeds a job change from loom.job.events.v1 to this
// process's watchers of the job. A run's end that a requeue follows in the
// same change (requeue_follows) is not fed: it is not the job's end, and a
// watch stops at a terminal state; the REQUEUED event after it is.
func (g *Gateway) HandleJobEvent(_ context.Context, ev envelope.Event) error {
	if jc, ok := ev.Payload.(*eventsv1.JobChanged); ok && jc.GetJob().GetName() != "" && !jc.GetRequeueFollows() {
		g.jobs.publish(jc.GetJob())
	}
	return nil
}

// WatchJob sends the job's current state, then each change, and returns
// after it sent a terminal state (or when ctx ends).
func (g *Gateway) WatchJob(ctx context.Context, req *loomv1.WatchJobRequest, send func(*loomv1.Job) error) error {
	ref, err := g.resolveJob(ctx, req.GetName(), false)
	if err != nil {
		return err
	}
	name := ref.name
	// Subscribe before reading: a change between the read and the
	// subscription would otherwise be lost.
	s := g.jobs.subscribe(name)
	defer g.jobs.unsubscribe(s)
	if g.feed != nil {
		// The feed must be reading before the first read of the job, or a
		// change in between would wait for the refresh.
		ready := g.feed.acquire()
		defer g.feed.release()
		select {
		case <-ready:
		case <-time.After(feedReadyWait):
		case <-ctx.Done():
			return ctx.Err()
		case <-g.stop:
			return ErrStopping
		}
	}
	last, caller, err := g.visibleJob(ctx, name)
	if err != nil {
		return err
	}
	if err := send(caller.Present(last)); err != nil {
		return err
	}
	refresh := time.NewTicker(g.opt.WatchRefresh)
	defer refresh.Stop()
	for !last.GetState().Terminal() {
		var next *loomv1.Job
		select {
		case j, ok := <-s.C:
			if !ok {
				return fmt.Errorf("watch %s fell behind; watch again: %w", name, errs.Unavailable)
			}
			next = j
		case <-refresh.C:
			// Catches changes the feed did not bring (one that was not
			// ready in time, or fell behind).
			j, err := g.job(ctx, name)
			if err != nil {
				return err
			}
			next = j
		case <-ctx.Done():
			return ctx.Err()
		case <-g.stop:
			return ErrStopping
		}
		// A change buffered before the first read, or overtaken by a
		// refresh, can be older than what was sent: never go back (a
		// requeued job's return to PENDING is newer: it counts a restart).
		if proto.Equal(next, last) || domain.Older(next, last) {
			continue
		}
		if err := send(caller.Present(next)); err != nil {
			return err
		}
		last = next
	}
	return nil
}
