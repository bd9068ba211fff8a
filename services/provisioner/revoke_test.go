package provisioner

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// registeredProducer is a producer signing as node's agent with an identity
// of registration reg, as the gateway issues one.
func registeredProducer(t *testing.T, broker, node, cluster, reg string) *bus.Producer {
	t.Helper()
	id, err := auth.IssueNodeIdentity(testkit.ServiceKey(), node, cluster, "gpu", reg, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := envelope.NewNodeSigner(id.Key, id.Cert)
	if err != nil {
		t.Fatal(err)
	}
	p := bus.NewProducer([]string{broker})
	p.SetSigner(s)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// stepReader is another service reading the step events, as the scheduler
// does: the registrations of the StepChanged it handled, in order.
type stepReader struct {
	mu   sync.Mutex
	regs []string
}

func (r *stepReader) handled(reg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, got := range r.regs {
		if got == reg {
			return true
		}
	}
	return false
}

func startStepReader(t *testing.T, broker, redis string) *stepReader {
	t.Helper()
	r := &stepReader{}
	testkit.Start(t, "step reader", func(ctx context.Context) error {
		b, err := service.New(ctx, "stepreader", config.Common{Brokers: []string{broker}, RedisAddr: redis,
			GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ServiceKeyFile: testkit.ServiceKeyFile(t), LogLevel: "warn"})
		if err != nil {
			return err
		}
		return b.Run(ctx, []service.Consume{{Topics: []string{topics.StepEvents}, Handler: func(_ context.Context, ev envelope.Event) error {
			if _, ok := ev.Payload.(*eventsv1.StepChanged); ok {
				r.mu.Lock()
				r.regs = append(r.regs, ev.SignerRegistration)
				r.mu.Unlock()
			}
			return nil
		}}})
	})
	return r
}

func countReason(dls []testkit.DeadLetter, reason string) int {
	n := 0
	for _, d := range dls {
		if d.Reason == reason {
			n++
		}
	}
	return n
}

// A node the provisioner removes (its cluster deleted) has its identity
// revoked with it: from then on its registrations (AgentRegistered, read
// by the provisioner) and its StepChanged (read by another service) are dead-lettered as
// revoked, within the services' poll of the list, though its certificate
// has most of an hour left. The cluster made again with the same name has
// a node of the same name, whose new registration is accepted (the
// provisioner records it, the step reader takes its StepChanged), the old
// one still refused.
func TestRemovedNodesIdentityIsRevoked(t *testing.T) {
	t.Parallel()
	f := startSim(t)
	steps := startStepReader(t, f.broker, f.redis)

	const id = "again"
	cluster := project + "/clusters/" + id
	node := cluster + "/nodes/gpu-0001"
	testkit.PublishAs(t, f.broker, "gateway", createCluster("create1", id, 1))
	nodeEvent(t, f.broker, node, func(*loomv1.Node) bool { return true })
	waitRunning(t, f.broker, "create1")

	oldReg := auth.NewRegistration(time.Now(), "old")
	old := registeredProducer(t, f.broker, node, cluster, oldReg)
	// Longer than the waits below, so that a wait that times out says
	// what it waited for.
	ctx := testkit.Context(t, 3*wait)
	job := project + "/jobs/1"
	stepChanged := func(p *bus.Producer) {
		t.Helper()
		if err := p.Publish(ctx, envelope.New(topics.StepEvents, job, "loom/agent", &eventsv1.StepChanged{Node: node, Job: job})); err != nil {
			t.Fatal(err)
		}
	}
	registered := func(p *bus.Producer) {
		t.Helper()
		if err := p.Publish(ctx, envelope.New(topics.NodeTelemetry, node, "loom/agent",
			&eventsv1.AgentRegistered{Node: node, Cluster: cluster, Hostname: "gpu-0001", Gpus: 2})); err != nil {
			t.Fatal(err)
		}
	}
	// Before the removal the node's records are taken.
	stepChanged(old)
	testkit.WaitFor(t, wait, "the node's StepChanged before its removal", func() (bool, error) { return steps.handled(oldReg), nil })

	testkit.PublishAs(t, f.broker, "gateway", envelope.New(topics.ClusterCommands, cluster, "loom/gateway",
		&eventsv1.DeleteCluster{Operation: project + "/operations/delete1", Cluster: cluster}))
	testkit.WaitEvent(t, f.broker, topics.NodeEvents, wait, func(ev envelope.Event) bool {
		r, ok := ev.Payload.(*eventsv1.NodeRemoved)
		return ok && r.GetNode() == node
	})
	removed := time.Now()
	// Refused from the next poll of the list on: one record of each kind
	// at a time until both are, then every later one.
	var refusedAfter time.Duration
	testkit.WaitFor(t, wait, "the removed node's records refused as revoked", func() (bool, error) {
		registered(old)
		stepChanged(old)
		tel := countReason(testkit.DeadLetters(t, f.broker, topics.NodeTelemetry), envelope.ReasonRevoked)
		st := countReason(testkit.DeadLetters(t, f.broker, topics.StepEvents), envelope.ReasonRevoked)
		refusedAfter = time.Since(removed)
		return tel > 0 && st > 0, nil
	})
	t.Logf("refused %v after NodeRemoved was seen (poll %v)", refusedAfter.Round(time.Millisecond), service.RevocationPoll)
	if refusedAfter > 10*service.RevocationPoll {
		t.Errorf("the removed node's records were refused only %v after its removal; the services poll every %v", refusedAfter, service.RevocationPoll)
	}

	// The cluster made again: a node of the same name, registered anew.
	testkit.PublishAs(t, f.broker, "gateway", createCluster("create2", id, 1))
	waitRunning(t, f.broker, "create2")
	newReg := auth.NewRegistration(time.Now(), "new")
	fresh := registeredProducer(t, f.broker, node, cluster, newReg)
	stBefore := countReason(testkit.DeadLetters(t, f.broker, topics.StepEvents), envelope.ReasonRevoked)
	telBefore := countReason(testkit.DeadLetters(t, f.broker, topics.NodeTelemetry), envelope.ReasonRevoked)
	stepChanged(old)
	registered(old)
	stepChanged(fresh)
	registered(fresh)
	testkit.WaitFor(t, wait, "the StepChanged of the node made again", func() (bool, error) { return steps.handled(newReg), nil })
	// The old identity's were read before (same key, same partition).
	if n := countReason(testkit.DeadLetters(t, f.broker, topics.StepEvents), envelope.ReasonRevoked); n != stBefore+1 {
		t.Errorf("%d StepChanged refused as revoked once the node was made again, want 1 (the old identity's)", n-stBefore)
	}
	// The provisioner takes the new registration, not the old one.
	nodeEvent(t, f.broker, node, func(n *loomv1.Node) bool { return n.GetRegistration() == newReg })
	if n := countReason(testkit.DeadLetters(t, f.broker, topics.NodeTelemetry), envelope.ReasonRevoked); n != telBefore+1 {
		t.Errorf("%d AgentRegistered refused as revoked once the node was made again, want 1 (the old identity's)", n-telBefore)
	}
	for _, d := range testkit.DeadLetters(t, f.broker, topics.NodeTelemetry) {
		if d.Reason != envelope.ReasonRevoked && d.Signer == auth.NodeName(node) {
			t.Errorf("a record of the node dead-lettered as %s: %+v", d.Reason, d)
		}
	}
}
