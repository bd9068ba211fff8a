package envelope

import (
	"crypto/ed25519"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const testNode = "projects/p/clusters/c/nodes/n1"

type keys struct {
	svcPub  ed25519.PublicKey
	svc     ed25519.PrivateKey
	node    *Signer
	now     time.Time
	service *Signer
}

func newKeys(t testing.TB) keys {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	npub, npriv, _ := ed25519.GenerateKey(nil)
	now := time.Unix(1_800_000_000, 0)
	cert, err := auth.SignNodeCert(priv, auth.NodeCert{Node: testNode, Cluster: "projects/p/clusters/c", Pool: "gpu", PublicKey: npub, NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := NewNodeSigner(npriv, cert)
	if err != nil {
		t.Fatal(err)
	}
	return keys{svcPub: pub, svc: priv, node: ns, now: now, service: NewServiceSigner("scheduler", priv)}
}

func mustEncode(t testing.TB, e Event) kafka.Message {
	t.Helper()
	m, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSignedRecordsVerify(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	v := NewVerifier(k.svcPub, func() time.Time { return k.now })

	cmd := mustEncode(t, New("loom.step.commands.v1", testNode, "loom/scheduler", &eventsv1.StartStep{Node: testNode, Job: "projects/p/jobs/1"}))
	k.service.Sign(&cmd)
	e, err := Default.DecodeVerified(cmd, v, ServicesOnly)
	if err != nil || e.Signer != "services/scheduler" {
		t.Fatalf("service-signed command: %v, signer %q", err, e.Signer)
	}

	ev := mustEncode(t, New("loom.step.events.v1", "projects/p/jobs/1", "loom/agent", &eventsv1.StepChanged{Node: testNode, Job: "projects/p/jobs/1"}))
	k.node.Sign(&ev)
	e, err = Default.DecodeVerified(ev, v, AcceptNodeEvents)
	if err != nil || e.Signer != auth.NodeName(testNode) {
		t.Fatalf("node-signed StepChanged: %v, signer %q", err, e.Signer)
	}
	// A node's record is not a command.
	if _, err := Default.DecodeVerified(ev, v, ServicesOnly); ReasonOf(err) != ReasonNotService {
		t.Fatalf("node record under ServicesOnly: %v", err)
	}
}

// A node's record refused as not-a-service names its verified signer, so
// that the node's rate (libs/bus's NodeRate) counts it: under ServicesOnly,
// and of a type nodes may not write.
func TestNotAServiceNamesTheVerifiedNode(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	v := NewVerifier(k.svcPub, func() time.Time { return k.now })
	ev := mustEncode(t, New("loom.step.events.v1", "projects/p/jobs/1", "loom/agent", &eventsv1.StepChanged{Node: testNode, Job: "projects/p/jobs/1"}))
	k.node.Sign(&ev)
	cmd := mustEncode(t, New("loom.step.commands.v1", testNode, "loom/scheduler", &eventsv1.StartStep{Node: testNode, Job: "projects/p/jobs/1"}))
	k.node.Sign(&cmd)
	for name, c := range map[string]struct {
		m      kafka.Message
		policy Policy
	}{"services only": {ev, ServicesOnly}, "not a node's type": {cmd, AcceptNodeEvents}} {
		e, err := Default.DecodeVerified(c.m, v, c.policy)
		if ReasonOf(err) != ReasonNotService || e.Signer != auth.NodeName(testNode) {
			t.Errorf("%s: %v, signer %q, want %s and %s", name, err, e.Signer, ReasonNotService, auth.NodeName(testNode))
		}
	}
	// A forged one names no one.
	m := mustEncode(t, New("loom.step.commands.v1", testNode, "loom/scheduler", &eventsv1.StartStep{Node: testNode, Job: "projects/p/jobs/1"}))
	k.node.Sign(&m)
	m.Value = append(m.Value, 0x08, 0x01)
	if e, err := Default.DecodeVerified(m, v, AcceptNodeEvents); ReasonOf(err) != ReasonBadSignature || e.Signer != "" {
		t.Errorf("forged: %v, signer %q, want %s and none", err, e.Signer, ReasonBadSignature)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	v := NewVerifier(k.svcPub, func() time.Time { return k.now })
	start := func() kafka.Message {
		return mustEncode(t, New("loom.step.commands.v1", testNode, "loom/scheduler", &eventsv1.StartStep{Node: testNode, Job: "projects/p/jobs/1"}))
	}
	_, otherPriv, _ := ed25519.GenerateKey(nil)

	cases := map[string]struct {
		m      func() kafka.Message
		policy Policy
		want   string
	}{
		"unsigned": {m: start, want: ReasonUnsigned},
		"random key": {m: func() kafka.Message {
			m := start()
			NewServiceSigner("scheduler", otherPriv).Sign(&m)
			return m
		}, want: ReasonBadSignature},
		"payload changed": {m: func() kafka.Message {
			m := start()
			k.service.Sign(&m)
			m.Value = append(m.Value, 0x08, 0x01)
			return m
		}, want: ReasonBadSignature},
		"moved topic": {m: func() kafka.Message {
			m := start()
			k.service.Sign(&m)
			m.Topic = "loom.job.commands.v1"
			return m
		}, want: ReasonBadSignature},
		"principal changed": {m: func() kafka.Message {
			m := start()
			k.service.Sign(&m)
			m.Headers = append(m.Headers, kafka.Header{Key: HeaderPrincipal, Value: []byte("users/root")})
			return m
		}, want: ReasonBadSignature},
		"duplicate type": {m: func() kafka.Message {
			m := start()
			k.service.Sign(&m)
			m.Headers = append(m.Headers, kafka.Header{Key: HeaderType, Value: []byte("loom.events.v1.CancelJob")})
			return m
		}, want: ReasonDuplicate},
		"node sends a command": {m: func() kafka.Message {
			m := start()
			k.node.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonNotService},
		"node reports another node": {m: func() kafka.Message {
			m := mustEncode(t, New("loom.step.events.v1", "j", "loom/agent", &eventsv1.StepChanged{Node: "projects/p/clusters/c/nodes/n2"}))
			k.node.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonWrongNode},
		"node reports another node's check result": {m: func() kafka.Message {
			m := mustEncode(t, New("loom.node.telemetry.v1", "n", "loom/agent", &eventsv1.HealthCheckCompleted{
				Result: &loomv1.HealthCheckResult{Node: "projects/p/clusters/c/nodes/n2", Outcome: loomv1.CheckOutcome_CHECK_FAIL}}))
			k.node.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonWrongNode},
		"node registers into another cluster": {m: func() kafka.Message {
			m := mustEncode(t, New("loom.node.events.v1", "n", "loom/agent", &eventsv1.AgentRegistered{Node: testNode, Cluster: "projects/q/clusters/z"}))
			k.node.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonWrongNode},
		"node keys its heartbeat by another node": {m: func() kafka.Message {
			m := mustEncode(t, New("loom.node.telemetry.v1", "projects/p/clusters/c/nodes/n2", "loom/agent", &eventsv1.Heartbeat{Node: testNode}))
			k.node.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonWrongKey},
		"node keys its check result by another key": {m: func() kafka.Message {
			m := mustEncode(t, New("loom.node.telemetry.v1", "", "loom/agent", &eventsv1.HealthCheckCompleted{
				Result: &loomv1.HealthCheckResult{Node: testNode, Outcome: loomv1.CheckOutcome_CHECK_PASS}}))
			k.node.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonWrongKey},
		"node keys a step event by another job": {m: func() kafka.Message {
			m := mustEncode(t, New("loom.step.events.v1", "projects/p/jobs/2", "loom/agent", &eventsv1.StepProgress{Node: testNode, Job: "projects/p/jobs/1"}))
			k.node.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonWrongKey},
		"node keys a step event by itself": {m: func() kafka.Message {
			m := mustEncode(t, New("loom.step.events.v1", testNode, "loom/agent", &eventsv1.StepChanged{Node: testNode, Job: "projects/p/jobs/1"}))
			k.node.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonWrongKey},
		"signer name not the certificate's": {m: func() kafka.Message {
			m := mustEncode(t, New("loom.step.events.v1", "j", "loom/agent", &eventsv1.StepChanged{Node: testNode}))
			s := *k.node
			s.name = auth.NodeName("projects/p/clusters/c/nodes/n2")
			s.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonWrongNode},
		"certificate of another service key": {m: func() kafka.Message {
			npub, npriv, _ := ed25519.GenerateKey(nil)
			cert, _ := auth.SignNodeCert(otherPriv, auth.NodeCert{Node: testNode, PublicKey: npub, NotAfter: k.now.Add(time.Hour)})
			s, _ := NewNodeSigner(npriv, cert)
			m := mustEncode(t, New("loom.step.events.v1", "j", "loom/agent", &eventsv1.StepChanged{Node: testNode}))
			s.Sign(&m)
			return m
		}, policy: AcceptNodeEvents, want: ReasonBadCert},
		"unknown signer": {m: func() kafka.Message {
			m := start()
			s := *k.service
			s.name = "users/root"
			s.Sign(&m)
			return m
		}, want: ReasonUnknownSigner},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Default.DecodeVerified(c.m(), v, c.policy)
			if !errors.Is(err, ErrRejected) || ReasonOf(err) != c.want {
				t.Fatalf("got %v (reason %q), want reason %q", err, ReasonOf(err), c.want)
			}
		})
	}
}

// Every type a node writes is accepted from the node when it is keyed as
// the agent keys it (by the node, or by the job of a step event, a string
// field of its payload).
func TestNodeRecordsKeyedAsTheAgentKeysThem(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	v := NewVerifier(k.svcPub, func() time.Time { return k.now })
	const job = "projects/p/jobs/7"
	for typ, field := range NodeEventTypes {
		mt, ok := Default.types[typ]
		if !ok {
			t.Fatalf("NodeEventTypes names %s, not an event type", typ)
		}
		p := mt.New()
		fs := p.Descriptor().Fields()
		key := testNode
		if field != "node" && field != "job" {
			t.Errorf("%s: keyed by %q, neither node nor job", typ, field)
			continue
		}
		if f := fs.ByName("job"); field == "job" && (f == nil || f.Kind() != protoreflect.StringKind || f.IsList()) {
			t.Errorf("%s: keyed by its job, which its payload has no string field for", typ)
			continue
		}
		if field == "job" {
			key = job
			p.Set(fs.ByName("job"), protoreflect.ValueOfString(job))
		}
		if f := fs.ByName("node"); f != nil {
			p.Set(f, protoreflect.ValueOfString(testNode))
		}
		if r, ok := p.Interface().(*eventsv1.HealthCheckCompleted); ok {
			r.Result = &loomv1.HealthCheckResult{Node: testNode}
		}
		topic, err := topics.For(p.Interface())
		if err != nil {
			t.Fatal(err)
		}
		m := mustEncode(t, New(topic, key, "loom/agent", p.Interface()))
		k.node.Sign(&m)
		if _, err := Default.DecodeVerified(m, v, AcceptNodeEvents); err != nil {
			t.Errorf("%s keyed %q: %v", typ, key, err)
		}
	}
}

// A record of a type in Senders (a command a node runs, a repair's answer,
// an operator's command to health, the scheduler's call for checks or word
// of a drained node, the provisioner's nodes, health's verdict and call for
// a repair, a command to the provisioner or the scheduler, a node's report,
// a service's word on what it owns) is accepted from the services that send
// it and refused from any other service, though that one's signature holds:
// least privilege among services that share a key.
func TestCommandsOnlyFromTheirSender(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	v := NewVerifier(k.svcPub, func() time.Time { return k.now })
	const cluster = "projects/p/clusters/c"
	cmds := []struct {
		senders []string
		cmd     proto.Message
	}{
		{[]string{"scheduler"}, &eventsv1.StartStep{Node: testNode}},
		{[]string{"health"}, &eventsv1.RunHealthCheck{Node: testNode}},
		{[]string{"provisioner"}, &eventsv1.RemediationFinished{Node: testNode, RemediationId: "r1", Ok: true}},
		{[]string{"provisioner"}, &eventsv1.RemediationProgress{Node: testNode, RemediationId: "r1"}},
		{[]string{"gateway"}, &eventsv1.UpdateNodeRemediation{Cluster: cluster, Hostname: "n1"}},
		{[]string{"gateway"}, &eventsv1.ScanNodes{Cluster: cluster}},
		{[]string{"scheduler"}, &eventsv1.NodesNeedCheck{Cluster: cluster}},
		{[]string{"scheduler"}, &eventsv1.NodeDrained{Node: testNode, Cluster: cluster}},
		{[]string{"provisioner"}, &eventsv1.NodeChanged{Node: &loomv1.Node{Name: testNode, Cluster: cluster}}},
		{[]string{"provisioner"}, &eventsv1.NodeRemoved{Node: testNode, Cluster: cluster}},
		{[]string{"health"}, &eventsv1.NodeHealthChanged{Node: testNode, Cluster: cluster, Health: eventsv1.NodeHealth_UNHEALTHY}},
		{[]string{"health"}, &eventsv1.RemediateNode{Node: testNode, Cluster: cluster}},
		{[]string{"gateway", "training"}, &eventsv1.CreateCluster{Cluster: &loomv1.Cluster{Name: cluster}}},
		{[]string{"gateway"}, &eventsv1.UpdateCluster{Cluster: &loomv1.Cluster{Name: cluster}}},
		{[]string{"gateway", "training"}, &eventsv1.DeleteCluster{Cluster: cluster}},
		{[]string{"gateway"}, &eventsv1.CreateReservation{}},
		{[]string{"gateway", "training"}, &eventsv1.SubmitJob{Job: &loomv1.Job{Cluster: cluster}}},
		{[]string{"gateway", "training"}, &eventsv1.CancelJob{Cluster: cluster}},
		{[]string{"gateway"}, &eventsv1.UpdateJob{Cluster: cluster}},
		{[]string{"gateway"}, &eventsv1.UpdateSlurmNode{Cluster: cluster, Hostname: "n1", State: "DRAIN"}},
		{[]string{"gateway"}, &eventsv1.CreateJobStep{Cluster: cluster}},
		{[]string{"gateway"}, &eventsv1.AccountChanged{Project: "p"}},
		// The training commands: training submits the jobs they ask for,
		// as the user they name.
		{[]string{"gateway"}, &eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{Name: "projects/p/locations/l/customJobs/1", User: "alice"}}},
		{[]string{"gateway"}, &eventsv1.CreateHyperparameterTuningJob{}},
		{[]string{"gateway"}, &eventsv1.CreateTrainingPipeline{}},
		{[]string{"gateway"}, &eventsv1.CancelTraining{Name: "projects/p/locations/l/customJobs/1", User: "root", Admin: true}},
		{[]string{"gateway"}, &eventsv1.DeleteTraining{Name: "projects/p/locations/l/customJobs/1", User: "root", Admin: true}},
		// The model commands.
		{[]string{"gateway"}, &eventsv1.ExportModel{Name: "projects/p/locations/l/models/m"}},
		{[]string{"gateway", "registry", "training"}, &eventsv1.UploadModel{Project: "p", AnyOwner: true}},
		// A node's reports: no service's, but for the sim provider's
		// simulated agents (the provisioner's). A forged StepChanged
		// would end any job's run.
		{nil, &eventsv1.StepChanged{Job: "projects/p/jobs/7", Node: testNode, State: eventsv1.StepState_STEP_EXITED, ExitCode: 1}},
		{nil, &eventsv1.TasksChanged{Job: "projects/p/jobs/7", Node: testNode}},
		{nil, &eventsv1.StepProgress{Job: "projects/p/jobs/7", Node: testNode}},
		{nil, &eventsv1.MetricsReported{Job: "projects/p/jobs/7", Node: testNode}},
		{nil, &eventsv1.UsageReported{Job: "projects/p/jobs/7", Node: testNode}},
		{nil, &eventsv1.HealthCheckCompleted{Result: &loomv1.HealthCheckResult{Node: testNode}}},
		{nil, &eventsv1.GpuTelemetry{Node: testNode}},
		{nil, &eventsv1.XidObserved{Node: testNode}},
		{[]string{"provisioner"}, &eventsv1.AgentRegistered{Node: testNode, Cluster: cluster}},
		{[]string{"provisioner"}, &eventsv1.Heartbeat{Node: testNode, Cluster: cluster}},
		// Each service's word on what it owns: another service's
		// JobChanged would end a trial's run or register a model, its
		// ClusterChanged change the scheduler's partitions.
		{[]string{"scheduler"}, &eventsv1.JobChanged{Job: &loomv1.Job{Name: "projects/p/jobs/7", Cluster: cluster, State: loomv1.JobState_COMPLETED}}},
		{[]string{"scheduler"}, &eventsv1.SlurmNodeChanged{Cluster: cluster, Hostname: "n1", State: "DRAIN"}},
		{[]string{"provisioner"}, &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{Name: cluster}}},
		{[]string{"provisioner"}, &eventsv1.ClusterOperationFailed{Cluster: cluster}},
		{[]string{"provisioner"}, &eventsv1.ClusterDeleted{Cluster: cluster}},
		{[]string{"provisioner"}, &eventsv1.ReservationChanged{}},
		{[]string{"provisioner"}, &eventsv1.ReservationDeleted{}},
		{[]string{"registry"}, &eventsv1.ModelVersionRegistered{Model: "projects/p/locations/l/models/m"}},
		{[]string{"registry"}, &eventsv1.ModelUploadFailed{}},
		{[]string{"registry"}, &eventsv1.ModelExported{}},
		{[]string{"registry"}, &eventsv1.ModelExportFailed{}},
		{[]string{"training"}, &eventsv1.CustomJobChanged{}},
		{[]string{"training"}, &eventsv1.HyperparameterTuningJobChanged{}},
		{[]string{"training"}, &eventsv1.TrialChanged{}},
		{[]string{"training"}, &eventsv1.TrainingPipelineChanged{}},
		{[]string{"gateway"}, &eventsv1.AuditRecorded{}},
	}
	for _, signer := range []string{"scheduler", "health", "gateway", "provisioner", "training", "registry", "bridge", "test"} {
		for _, c := range cmds {
			for _, policy := range []Policy{ServicesOnly, AcceptNodeEvents} {
				m := mustEncode(t, New("t", testNode, "loom/"+signer, c.cmd))
				NewServiceSigner(signer, k.svc).Sign(&m)
				_, err := Default.DecodeVerified(m, v, policy)
				if slices.Contains(c.senders, signer) {
					if err != nil {
						t.Errorf("%s from services/%s: %v", TypeOf(c.cmd), signer, err)
					}
				} else if ReasonOf(err) != ReasonWrongSender {
					t.Errorf("%s from services/%s (policy %d): %v, want reason %s", TypeOf(c.cmd), signer, policy, err, ReasonWrongSender)
				}
			}
		}
	}
	// A type without a row (anySender's) is accepted from any service.
	if !MaySend("loom.events.v1.NoRow", "services/registry") {
		t.Error("MaySend refuses a type without a row")
	}
}

// Every event type of loom.events.v1 that travels on the bus (all of
// them: libs/topics routes each) names its senders in Senders, or is
// listed in anySender with why any service may send it, so that a new
// type cannot be forgotten; and every row names a type and at least one
// sender, each a service or Nodes.
func TestSendersCoverEveryEventType(t *testing.T) {
	t.Parallel()
	msgs := eventsv1.File_loom_events_v1_events_proto.Messages()
	for i := range msgs.Len() {
		typ := string(msgs.Get(i).FullName())
		mt, ok := Default.types[typ]
		if !ok {
			t.Errorf("%s is a message of loom.events.v1 the Default registry does not know", typ)
			continue
		}
		topic, err := topics.For(mt.New().Interface())
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		_, rowed := Senders[typ]
		why, listed := anySender[typ]
		switch {
		case rowed && listed:
			t.Errorf("%s (on %s) has a row in Senders and is in anySender: which is it?", typ, topic)
		case !rowed && !listed:
			t.Errorf("%s (on %s) has no row in Senders: name who sends it, or list it in anySender with why any service may", typ, topic)
		case listed && strings.TrimSpace(why) == "":
			t.Errorf("anySender lists %s without a reason", typ)
		}
	}
	for typ := range anySender {
		if !Default.Known(typ) {
			t.Errorf("anySender names %s, not an event type", typ)
		}
	}
	for typ, senders := range Senders {
		if !Default.Known(typ) {
			t.Errorf("Senders names %s, not an event type", typ)
		}
		if len(senders) == 0 {
			t.Errorf("Senders' row of %s names no one", typ)
		}
		for _, s := range senders {
			if !strings.HasPrefix(s, "services/") && s != Nodes {
				t.Errorf("Senders' row of %s names %q, neither services/<name> nor Nodes", typ, s)
			}
		}
	}
}

// Every type a node writes (NodeEventTypes) has a row naming Nodes, so
// that no service but those the row names may forge one, and no other row
// names Nodes: a node may write only what NodeEventTypes lets it.
func TestSendersCoverTheNodeEvents(t *testing.T) {
	t.Parallel()
	for typ := range NodeEventTypes {
		if !slices.Contains(Senders[typ], Nodes) {
			t.Errorf("%s is a node's report (NodeEventTypes) but its row in Senders, %q, does not name Nodes", typ, Senders[typ])
		}
	}
	for typ, senders := range Senders {
		if _, ok := NodeEventTypes[typ]; slices.Contains(senders, Nodes) && !ok {
			t.Errorf("Senders' row of %s names Nodes, but a node may not write it (NodeEventTypes)", typ)
		}
	}
	if MaySend(TypeOf(&eventsv1.StepChanged{}), Nodes) {
		t.Error("MaySend takes Nodes for a service")
	}
}

// A service's refusal of a node's report says who may send it.
func TestWrongSenderNamesTheNodes(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	v := NewVerifier(k.svcPub, func() time.Time { return k.now })
	m := mustEncode(t, New("loom.step.events.v1", "projects/p/jobs/7", "loom/registry",
		&eventsv1.StepChanged{Job: "projects/p/jobs/7", Node: testNode, State: eventsv1.StepState_STEP_EXITED, ExitCode: 1}))
	NewServiceSigner("registry", k.svc).Sign(&m)
	_, err := Default.DecodeVerified(m, v, AcceptNodeEvents)
	if ReasonOf(err) != ReasonWrongSender || !strings.Contains(err.Error(), "accepted only from a node, not from services/registry") {
		t.Fatalf("StepChanged from the registry: %v, want %s naming a node", err, ReasonWrongSender)
	}
	m = mustEncode(t, New("loom.node.events.v1", testNode, "loom/registry", &eventsv1.AgentRegistered{Node: testNode}))
	NewServiceSigner("registry", k.svc).Sign(&m)
	_, err = Default.DecodeVerified(m, v, AcceptNodeEvents)
	if ReasonOf(err) != ReasonWrongSender || !strings.Contains(err.Error(), "accepted only from a node or services/provisioner") {
		t.Fatalf("AgentRegistered from the registry: %v, want %s naming a node or the provisioner", err, ReasonWrongSender)
	}
}

func TestExpiredCertificate(t *testing.T) {
	t.Parallel()
	k := newKeys(t)
	now := k.now
	v := NewVerifier(k.svcPub, func() time.Time { return now })
	m := mustEncode(t, New("loom.node.telemetry.v1", testNode, "loom/agent", &eventsv1.Heartbeat{Node: testNode}))
	k.node.Sign(&m)
	if _, err := Default.DecodeVerified(m, v, AcceptNodeEvents); err != nil {
		t.Fatal(err)
	}
	// Cached, and still refused once the clock passes its end.
	now = now.Add(2 * time.Hour)
	if _, err := Default.DecodeVerified(m, v, AcceptNodeEvents); ReasonOf(err) != ReasonExpiredCert {
		t.Fatalf("expired certificate (cached): %v", err)
	}
	v2 := NewVerifier(k.svcPub, func() time.Time { return now })
	if _, err := Default.DecodeVerified(m, v2, AcceptNodeEvents); ReasonOf(err) != ReasonExpiredCert {
		t.Fatalf("expired certificate (fresh): %v", err)
	}
}

func BenchmarkVerifyNodeRecord(b *testing.B) {
	k := newKeys(b)
	v := NewVerifier(k.svcPub, func() time.Time { return k.now })
	m := mustEncode(b, New("loom.step.events.v1", "j", "loom/agent", &eventsv1.StepChanged{Node: testNode, Job: "j"}))
	k.node.Sign(&m)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Default.DecodeVerified(m, v, AcceptNodeEvents); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeVerified feeds records whose headers and payload are arbitrary,
// some of them derived from a validly signed record: decoding never panics,
// and a record is accepted only if its signed fields are exactly the ones
// signed.
func FuzzDecodeVerified(f *testing.F) {
	k := newKeys(f)
	v := NewVerifier(k.svcPub, func() time.Time { return k.now })
	good := mustEncode(f, New("loom.step.commands.v1", testNode, "loom/scheduler", &eventsv1.StartStep{Node: testNode, Job: "j"}))
	k.service.Sign(&good)
	hdr := func(key string) []byte {
		for _, h := range good.Headers {
			if h.Key == key {
				return h.Value
			}
		}
		return nil
	}
	f.Add(string(hdr(HeaderID)), string(hdr(HeaderType)), string(hdr(HeaderSigner)), hdr(HeaderSig), []byte(nil), good.Value, good.Key)
	f.Add("x", "loom.events.v1.StepChanged", "nodes/n", []byte("!!"), []byte(`{"b":"e30=","s":""}`), []byte{0xff}, []byte("k"))
	f.Fuzz(func(t *testing.T, id, typ, signer string, sig, cert, value, key []byte) {
		m := kafka.Message{Topic: good.Topic, Key: key, Value: value}
		m.Headers = append(m.Headers, kafka.Header{Key: HeaderID, Value: []byte(id)}, kafka.Header{Key: HeaderType, Value: []byte(typ)},
			kafka.Header{Key: HeaderTime, Value: hdr(HeaderTime)}, kafka.Header{Key: HeaderSource, Value: hdr(HeaderSource)},
			kafka.Header{Key: HeaderSubject, Value: hdr(HeaderSubject)},
			kafka.Header{Key: HeaderSigner, Value: []byte(signer)}, kafka.Header{Key: HeaderSig, Value: sig})
		if cert != nil {
			m.Headers = append(m.Headers, kafka.Header{Key: HeaderCert, Value: cert})
		}
		for _, p := range []Policy{ServicesOnly, AcceptNodeEvents} {
			e, err := Default.DecodeVerified(m, v, p)
			if err != nil {
				continue
			}
			same := id == string(hdr(HeaderID)) && typ == string(hdr(HeaderType)) && signer == string(hdr(HeaderSigner)) &&
				string(value) == string(good.Value) && string(key) == string(good.Key) && cert == nil
			if !same {
				t.Fatalf("accepted a record that was not signed as it is: signer %q id %q type %q", e.Signer, id, typ)
			}
		}
	})
}

func BenchmarkSign(b *testing.B) {
	k := newKeys(b)
	m := mustEncode(b, New("loom.step.events.v1", "j", "loom/agent", &eventsv1.StepChanged{Node: testNode}))
	b.ReportAllocs()
	for b.Loop() {
		k.node.Sign(&m)
	}
}

// A removed node's identity is revoked (SetRevocations): its records are
// refused as revoked, naming the verified signer (so that its rate counts
// them), those of its earlier registrations and of none too; the node made
// again with the same name, registered after the revocation, is accepted;
// an expired revocation revokes nothing.
func TestRevokedNodeIdentity(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	now := time.Unix(1_800_000_000, 0)
	removed := now.Add(-time.Minute)
	signer := func(reg string) *Signer {
		npub, npriv, _ := ed25519.GenerateKey(nil)
		cert, err := auth.SignNodeCert(priv, auth.NodeCert{Node: testNode, Cluster: "projects/p/clusters/c", Pool: "gpu", PublicKey: npub, NotAfter: now.Add(3 * time.Hour), Reg: reg})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewNodeSigner(npriv, cert)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	heartbeat := func(s *Signer) kafka.Message {
		m := mustEncode(t, New("loom.node.telemetry.v1", testNode, "loom/agent", &eventsv1.Heartbeat{Node: testNode}))
		s.Sign(&m)
		return m
	}
	clock := now
	v := NewVerifier(pub, func() time.Time { return clock })
	old := heartbeat(signer(auth.NewRegistration(removed.Add(-time.Hour), "a")))
	if _, err := Default.DecodeVerified(old, v, AcceptNodeEvents); err != nil {
		t.Fatalf("before the removal: %v", err)
	}
	rev := auth.RevocationFor(removed, "", time.Hour)
	v.SetRevocations(func(node string) (auth.NodeRevocation, bool) { return rev, node == testNode })
	for name, m := range map[string]kafka.Message{
		"the registration of before (its certificate cached)": old,
		"a registration made at the removal":                  heartbeat(signer(rev.Before)),
		"no registration":                                     heartbeat(signer("")),
		"an adopted registration":                             heartbeat(signer(auth.AdoptedRegistrationPrefix + "x")),
	} {
		e, err := Default.DecodeVerified(m, v, AcceptNodeEvents)
		if ReasonOf(err) != ReasonRevoked || e.Signer != auth.NodeName(testNode) {
			t.Errorf("%s: %v, signer %q; want %s naming %s", name, err, e.Signer, ReasonRevoked, auth.NodeName(testNode))
		}
	}
	again := heartbeat(signer(auth.NewRegistration(removed.Add(time.Nanosecond), "b")))
	if _, err := Default.DecodeVerified(again, v, AcceptNodeEvents); err != nil {
		t.Fatalf("the node made again: %v", err)
	}
	clock = rev.Until
	if _, err := Default.DecodeVerified(heartbeat(signer(auth.NewRegistration(removed, "c"))), v, AcceptNodeEvents); err != nil {
		t.Fatalf("once the revocation expired: %v", err)
	}
}
