package ingress

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/store"
	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// ResultPublisher publishes one IngressResult event (a public event) for
// project, never "": the result of a message filed under no project is
// withheld (App.Handler). It returns once the event is stored at its
// destination; the App retries a failed publish by not acknowledging the
// message.
type ResultPublisher func(ctx context.Context, project string, ev cloudevent.Event) error

// Retry bounds (defaults of Config's).
const (
	// DefaultAttempts is how often one delivery calls the gateway on a
	// transient failure before the delivery is given back to its transport.
	DefaultAttempts = 4
	// DefaultInternalAttempts is how often an Internal or Unknown error is
	// retried, over all of a message's deliveries the transport counts,
	// before the message FAILED.
	DefaultInternalAttempts = 3
	// DefaultMaxDeliveries is how many deliveries a message that keeps
	// failing transiently (not Unavailable: a deadline, a conflict, the
	// rate limit) gets before it is decided FAILED (REFUSED for the rate
	// limit), so that one message cannot hold its partition forever.
	// Unavailable (the gateway or a service behind it is down) is retried
	// for as long as the bridge runs: every other message would fail too.
	DefaultMaxDeliveries = 5
	// DefaultCallTimeout bounds one call to the gateway.
	DefaultCallTimeout = 30 * time.Second
	// principalTTL is how long a credential's principal (WhoAmI) is
	// cached; a revoked key is refused by the gateway's call itself.
	principalTTL = 30 * time.Second
	// maxPrincipals bounds the principal cache.
	maxPrincipals = 4096
)

// Config is an App's parts and bounds.
type Config struct {
	// Gateway is the gateway's connection; every call carries the
	// message's credential.
	Gateway grpc.ClientConnInterface
	// Store is the bridge's store (prefix "bridge:"): dedupe and records.
	Store *store.Store
	// Results publishes IngressResult events (required).
	Results ResultPublisher
	// MaxData bounds a message's data (cloudevent.DefaultMaxData when 0).
	MaxData int
	// DedupeTTL is how long a decided message is remembered (required).
	DedupeTTL time.Duration
	// Kept is how many recent messages are listed per project (DefaultKept).
	Kept int
	// MaxProducers and MaxProjectProducers bound the producers counted,
	// in all and a project (the messages filed under no project counted as
	// one): MaxProducers and MaxProjectProducers when 0.
	MaxProducers, MaxProjectProducers int
	// Attempts, InternalAttempts, MaxDeliveries, CallTimeout: see the
	// Default* constants (0: the default).
	Attempts, InternalAttempts, MaxDeliveries int
	CallTimeout                               time.Duration
	// Backoff is the first retry's delay, doubling to MaxBackoff
	// (100 ms and 2 s when 0).
	Backoff, MaxBackoff time.Duration
	// ClaimTTL is how long the claim of a message being decided outlives
	// a bridge that died deciding it (the ClaimTTL constant when 0).
	ClaimTTL time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Log logs decisions that are not acceptances (slog.Default when nil);
	// never the credential.
	Log *slog.Logger
}

// App decides ingress messages: the Handler of every source.
type App struct {
	cfg     Config
	rec     *records
	metrics *metrics

	mu         sync.Mutex
	principals map[[32]byte]cachedPrincipal
}

type cachedPrincipal struct {
	p       *loomv1.Principal
	expires time.Time
}

// New checks cfg and returns an App.
func New(cfg Config) (*App, error) {
	if cfg.Gateway == nil || cfg.Store == nil || cfg.Results == nil || cfg.DedupeTTL <= 0 {
		return nil, errors.New("ingress: Gateway, Store, Results and a positive DedupeTTL are required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MaxData, cloudevent.DefaultMaxData)
	def(&cfg.Kept, DefaultKept)
	def(&cfg.MaxProducers, MaxProducers)
	def(&cfg.MaxProjectProducers, MaxProjectProducers)
	def(&cfg.Attempts, DefaultAttempts)
	def(&cfg.InternalAttempts, DefaultInternalAttempts)
	def(&cfg.MaxDeliveries, DefaultMaxDeliveries)
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	if cfg.ClaimTTL <= 0 {
		cfg.ClaimTTL = ClaimTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &App{cfg: cfg, rec: &records{st: cfg.Store, ttl: cfg.DedupeTTL, kept: cfg.Kept, now: cfg.Now, claimTTL: cfg.ClaimTTL,
		maxProducers: cfg.MaxProducers, maxProjectProducers: cfg.MaxProjectProducers},
		principals: map[[32]byte]cachedPrincipal{}}, nil
}

// ErrTransient wraps what a Handler returns when it could not decide a
// message yet (the gateway unavailable, Redis or a destination failing):
// the transport delivers the message again.
var ErrTransient = errors.New("ingress: not decided yet; deliver again")

// Handler is the cloudevent.Handler of a source whose refused messages go
// to dl. It returns nil once the message is decided: applied, or
// dead-lettered; answered by its IngressResult; recorded. A redelivery of a
// decided message is counted and acknowledged without a second call.
//
// Crash safety, step by step: nothing is acknowledged before the record is
// written, so a crash anywhere before it delivers the message again and it
// is decided again. The gateway's request_id idempotency (the bridge sends
// RequestID(key)) makes a second SubmitJob or Create* return the first
// call's resource instead of making another. Requests without a request_id
// (the cancels, ReportFaultyNodes) are idempotent in effect, but a second
// call may be answered differently (a cancel of a job the first call
// ended). The dead letter and the IngressResult are at least once: a crash
// after either and before the record publishes them again (readers dedupe
// on the result's CloudEvent id, "result-" + key).
//
// The IngressResult of a message filed under no project (no credential, or
// one of no member of the project it names) is withheld: the public
// stream's every reader would otherwise get what anyone may publish (its
// id, source and type, and a stranger's principal and failure), in events
// integrations act on. Its producer is no one a result could be addressed
// to; the operator has its dead letter, its record under projects/- and
// loom_bridge_ingress_results_withheld_total.
func (a *App) Handler(dl cloudevent.DeadLetters) cloudevent.Handler {
	if dl == nil {
		panic("ingress: Handler needs its transport's dead letters") // a wiring mistake, found at start
	}
	return func(ctx context.Context, d cloudevent.Delivery) error { return a.handle(ctx, dl, d) }
}

// decision is one message's outcome.
type decision struct {
	outcome   string
	code      codes.Code
	reason    string
	resource  string
	project   string
	principal string
}

func (a *App) handle(ctx context.Context, dl cloudevent.DeadLetters, d cloudevent.Delivery) error {
	start := a.cfg.Now()
	key, tag := Key(d), CredentialTag(d)
	dup, err := a.rec.duplicate(ctx, key, tag, start)
	if err == nil && dup == otherCredential {
		// Another credential had this source and id first: this is
		// another producer's message (or the real one, after an impostor),
		// deduped under its own key.
		key = ScopedKey(key, tag)
		dup, err = a.rec.duplicate(ctx, key, tag, start)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTransient, err)
	}
	if dup == duplicate {
		a.metrics.count(d.Transport, "DUPLICATE", a.cfg.Now().Sub(start))
		return nil
	}
	claim, err := a.rec.claim(ctx, key)
	if err != nil {
		// Held: a copy being decided now; this one comes again and is
		// then a duplicate.
		return fmt.Errorf("%w: %v", ErrTransient, err)
	}
	decided := false
	defer func() { claim.end(decided) }()
	if d.Attempt <= 0 {
		// The transport does not count deliveries (Pub/Sub without a
		// dead-letter policy): counted here, so that a message that keeps
		// failing is decided after MaxDeliveries instead of being
		// retried until the transport drops it, unanswered.
		n, err := a.rec.delivered(ctx, key)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrTransient, err)
		}
		d.Attempt = n
	}
	dec, err := a.decide(ctx, d, key)
	if err != nil {
		return err
	}
	if dec.outcome != OutcomeAccepted {
		// At least once: a crash after this and before the record below
		// dead-letters the message again on its redelivery.
		if err := dl.DeadLetter(ctx, d.Raw.Redacted(), CodeName(dec.code), dec.reason); err != nil {
			return fmt.Errorf("%w: dead letter: %v", ErrTransient, err)
		}
		a.cfg.Log.Info("ingress message refused", "transport", d.Transport, "source", clip(d.Event.Source),
			"id", clip(d.Event.ID), "type", clip(d.Event.Type), "outcome", dec.outcome, "code", CodeName(dec.code), "reason", dec.reason,
			"result_withheld", dec.project == "")
	} else if dec.project == "" {
		// Every ingress type's request names its project, so an accepted
		// call without one is a bug of the bridge's or the API's: said
		// loudly, and withheld all the same.
		a.cfg.Log.Warn("ingress message accepted without a project: its result is withheld from the public stream",
			"transport", d.Transport, "source", clip(d.Event.Source), "id", clip(d.Event.ID), "type", clip(d.Event.Type),
			"resource", dec.resource)
	}
	decidedAt := a.cfg.Now()
	// What came from the message is made valid UTF-8 before it goes into
	// JSON (protojson refuses invalid strings: the message would never be
	// decided).
	id, source, typ, reason := text(d.Event.ID), text(d.Event.Source), text(d.Event.Type), text(dec.reason)
	res := &publicv1.IngressResult{
		MessageId: id, MessageSource: source, MessageType: typ,
		Outcome: OutcomeOf(dec.outcome), Code: CodeName(dec.code), Reason: reason, Resource: dec.resource,
		Project: dec.project, Principal: dec.principal,
		ReceivedTime: timestamppb.New(start), DecidedTime: timestamppb.New(decidedAt),
	}
	if dec.project != "" {
		ev, err := ResultEvent(key, res)
		if err != nil {
			return err
		}
		// At least once, as the dead letter.
		if err := a.cfg.Results(ctx, dec.project, ev); err != nil {
			return fmt.Errorf("%w: publish result: %v", ErrTransient, err)
		}
	}
	m := &loomv1.IngressMessage{
		Id: id, Source: source, Type: typ, Project: dec.project, Principal: dec.principal,
		Transport: text(d.Transport), Outcome: dec.outcome, Code: CodeName(dec.code), Reason: reason, Resource: dec.resource,
		ReceivedTime: res.ReceivedTime, DecidedTime: res.DecidedTime, Deliveries: 1,
	}
	recorded, err := a.rec.record(ctx, key, tag, m)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTransient, err)
	}
	decided = true
	if !recorded {
		// A concurrent delivery of the same message (Pub/Sub may deliver
		// twice at once) recorded first; this one counted as a delivery.
		a.metrics.count(d.Transport, "DUPLICATE", a.cfg.Now().Sub(start))
		return nil
	}
	a.metrics.count(d.Transport, dec.outcome, a.cfg.Now().Sub(start))
	if dec.project == "" {
		a.metrics.withhold(d.Transport, dec.outcome)
	}
	return nil
}

// ResultEvent is the IngressResult's CloudEvent (docs/integration.md
// "Guarantees"): id "result-" + key, source "loom/bridge", subject the
// message's id, JSON data.
func ResultEvent(key string, res *publicv1.IngressResult) (cloudevent.Event, error) {
	data, err := protojson.Marshal(res)
	if err != nil {
		return cloudevent.Event{}, fmt.Errorf("ingress: encode result: %w", err)
	}
	ev := cloudevent.Event{ID: "result-" + key, Source: "loom/bridge", Type: "loom.public.v1.IngressResult",
		Subject: clipAttr(res.GetMessageId()), Time: res.GetDecidedTime().AsTime(), DataContentType: "application/json", Data: data}
	if res.GetProject() != "" {
		ev.Extensions = map[string]string{cloudevent.ExtProject: res.GetProject()}
	}
	return ev, nil
}

// text is s as valid UTF-8 (invalid bytes become U+FFFD).
func text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// clipAttr bounds a value copied into a CloudEvents attribute (a message
// that was refused for an over-long id still gets an answer).
func clipAttr(s string) string {
	if len(s) <= cloudevent.MaxAttrLen {
		return s
	}
	cut := cloudevent.MaxAttrLen
	for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence (Pub/Sub attributes are UTF-8)
		cut--
	}
	return s[:cut]
}

// decide reads the delivery and, for a call, makes it. An error means
// "not decided yet" (ErrTransient).
func (a *App) decide(ctx context.Context, d cloudevent.Delivery, key string) (decision, error) {
	call, ref := decideKeyed(d, a.cfg.MaxData, key)
	if ref != nil {
		return decision{outcome: ref.Outcome, code: ref.Code, reason: ref.Reason}, nil
	}
	var dec decision
	creds := grpc.PerRPCCredentials(auth.Bearer(call.Credential))
	principal, err := a.principal(ctx, call.Credential, creds)
	if err != nil {
		if c, r := Classify(err); c == Decided {
			dec.outcome, dec.code, dec.reason = r.Outcome, r.Code, r.Reason
			return dec, nil
		}
		// The call below decides (and retries) whatever WhoAmI could not.
	}
	dec.principal = principal.GetName()
	if inProject(principal, call.Project) {
		dec.project = call.Project
	}
	resp := call.Method.NewResponse()
	err = a.callWithRetry(ctx, d, func(ctx context.Context) error {
		return a.cfg.Gateway.Invoke(ctx, call.Method.FullMethod, call.Request, resp, creds)
	})
	class, r := Classify(err)
	var gaveUp gaveUpError
	switch {
	case class == Applied:
		// The call was the project's to make (whatever WhoAmI could say).
		dec.project = call.Project
		dec.outcome, dec.code, dec.resource = OutcomeAccepted, codes.OK, ResourceOf(call.Request, resp)
		return dec, nil
	case class == Decided || errors.As(err, &gaveUp):
		r = ForProject(r, call.Project)
		dec.outcome, dec.code, dec.reason, dec.resource = r.Outcome, r.Code, r.Reason, ResourceOf(call.Request, nil)
		return dec, nil
	}
	return dec, fmt.Errorf("%w: %s: %s", ErrTransient, CodeName(r.Code), r.Reason)
}

// gaveUpError marks a transient error the App stopped retrying: a
// decision (FAILED, or REFUSED for the rate limit).
type gaveUpError struct {
	err    error
	reason string
}

func (g gaveUpError) Error() string { return g.reason }

// GRPCStatus gives Classify the underlying code with the reason.
func (g gaveUpError) GRPCStatus() *status.Status {
	return status.New(status.Code(g.err), g.reason)
}

// callWithRetry calls f with backoff on transient failures, within the
// App's bounds (see the Default* constants); the returned error is the last
// one, a gaveUpError when the message is to be decided anyway.
func (a *App) callWithRetry(ctx context.Context, d cloudevent.Delivery, f func(context.Context) error) error {
	delay := a.cfg.Backoff
	internal := max(d.Attempt-1, 0) // earlier deliveries' internal failures, where the transport counts
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
		err := f(cctx)
		cancel()
		class, r := Classify(err)
		switch class {
		case Applied, Decided:
			return err
		case RetryThenFail:
			internal++
			if internal >= a.cfg.InternalAttempts {
				return gaveUpError{err: err, reason: fmt.Sprintf("the gateway failed %d times: %s; Loom could not apply the message: send it again with a new id once the error is fixed", internal, r.Reason)}
			}
		case Retry:
			if ctx.Err() != nil {
				return err
			}
			if attempt >= a.cfg.Attempts {
				if status.Code(err) != codes.Unavailable && d.Attempt >= a.cfg.MaxDeliveries {
					return gaveUpError{err: err, reason: fmt.Sprintf("gave up after %d deliveries of %d calls each: %s", d.Attempt, attempt, r.Reason)}
				}
				return err
			}
		}
		wait := max(delay, min(RetryDelay(err), 10*time.Second))
		delay = min(delay*2, a.cfg.MaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// principal is who cred proves (WhoAmI through the gateway), cached for a
// short while by the credential's hash; the error is WhoAmI's.
func (a *App) principal(ctx context.Context, cred string, creds grpc.CallOption) (*loomv1.Principal, error) {
	h := sha256.Sum256([]byte(cred))
	now := a.cfg.Now()
	a.mu.Lock()
	if p, ok := a.principals[h]; ok && now.Before(p.expires) {
		a.mu.Unlock()
		return p.p, nil
	}
	a.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	defer cancel()
	p := &loomv1.Principal{}
	if err := a.cfg.Gateway.Invoke(cctx, loomv1.AuthService_WhoAmI_FullMethodName, &loomv1.WhoAmIRequest{}, p, creds); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if len(a.principals) >= maxPrincipals {
		clear(a.principals)
	}
	a.principals[h] = cachedPrincipal{p: p, expires: now.Add(principalTTL)}
	a.mu.Unlock()
	return p, nil
}

// inProject reports whether p is known to the project (a member, a cluster
// administrator, or a workload of it): only then is a message filed under
// the project it names, where its members read it. Anyone may publish, with
// any credential or none, naming any project. WhoAmI keys roles by the
// project's resource name ("projects/p"); a bare id is taken as well.
func inProject(p *loomv1.Principal, project string) bool {
	switch {
	case p == nil || project == "":
		return false
	case p.GetClusterAdmin() || p.GetRoles()[resname.Project{ID: project}.String()] != "" || p.GetRoles()[project] != "":
		return true
	}
	return strings.HasPrefix(p.GetName(), "jobs/"+project+"/")
}
