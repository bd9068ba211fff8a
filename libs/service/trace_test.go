package service

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/telemetry"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// submitDesc is a one-method gRPC service standing for the gateway's job
// submission: its handler writes a SubmitJob to the outbox in the request's
// context, as the gateway does.
func submitDesc(b *Base) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "loom.test.Submit",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Submit", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(&emptypb.Empty{}); err != nil {
				return nil, err
			}
			var tx store.Tx
			tx.Emit(envelope.New(topics.JobCommands, "projects/default/clusters/c1", "loom/gateway",
				&eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/default/jobs/1", Cluster: "projects/default/clusters/c1"}}))
			if _, err := b.Store.Apply(ctx, "", &tx); err != nil {
				return nil, err
			}
			return &emptypb.Empty{}, nil
		}}},
	}
}

// TestOneTracePerRequest follows one submission through the frame every
// service runs in: a gRPC call to "gateway" writes a SubmitJob to its
// outbox; the relay publishes it; "scheduler" consumes it and writes a
// StartStep to its outbox; its relay publishes that; "agent" consumes it.
// Every span is in the request's trace, each the child of the one before,
// with the messaging conventions' names and attributes.
func TestOneTracePerRequest(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	ctx := telemetry.WithSpanExporter(testkit.Context(t, 90*time.Second), exp)
	cfg := testConfig(t)

	gw, err := New(ctx, "gateway", cfg)
	if err != nil {
		t.Fatal(err)
	}
	gw.GRPC.RegisterService(submitDesc(gw), nil)
	start(t, gw, nil)
	sched, err := New(ctx, "scheduler", cfg)
	if err != nil {
		t.Fatal(err)
	}
	start(t, sched, []Consume{{Topics: []string{topics.JobCommands}, Handler: func(ctx context.Context, ev envelope.Event) error {
		var tx store.Tx
		tx.Emit(envelope.New(topics.StepCommands, "projects/default/clusters/c1/nodes/gpu-0001", "loom/scheduler",
			&eventsv1.StartStep{Job: "projects/default/jobs/1", Node: "projects/default/clusters/c1/nodes/gpu-0001"}))
		_, err := sched.Store.Apply(ctx, ev.ID, &tx)
		return err
	}}})
	agent, err := New(ctx, "agent", cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan trace.SpanContext, 1)
	start(t, agent, []Consume{{Topics: []string{topics.StepCommands}, Handler: func(ctx context.Context, ev envelope.Event) error {
		select {
		case got <- trace.SpanContextFromContext(ctx):
		default:
		}
		return nil
	}}})

	addr, err := gw.GRPCAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(telemetry.Propagator))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Invoke(ctx, "/loom.test.Submit/Submit", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	var agentSpan trace.SpanContext
	select {
	case agentSpan = <-got:
	case <-ctx.Done():
		t.Fatal("the agent never got the StartStep")
	}

	chain := []struct{ name, service, group string }{
		{"loom.test.Submit/Submit", "gateway", ""},
		{"publish " + topics.JobCommands, "gateway", ""},
		{"process " + topics.JobCommands, "scheduler", "loom-scheduler"},
		{"publish " + topics.StepCommands, "scheduler", ""},
		{"process " + topics.StepCommands, "agent", "loom-agent"},
	}
	// A span is exported when it ends, and the scheduler's may end after
	// the agent has the record: wait for all of them.
	spans := map[string]tracetest.SpanStub{}
	testkit.WaitFor(t, 10*time.Second, "every span of the chain ended", func() (bool, error) {
		for _, s := range exp.GetSpans() {
			spans[s.Name] = s
		}
		for _, c := range chain {
			if _, ok := spans[c.name]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	var parent tracetest.SpanStub
	for i, c := range chain {
		s, ok := spans[c.name]
		if !ok {
			t.Fatalf("no span %q among %v", c.name, names(exp.GetSpans()))
		}
		if svc := serviceOf(s); svc != c.service {
			t.Errorf("span %q from service %q, want %q", c.name, svc, c.service)
		}
		if i > 0 {
			if s.SpanContext.TraceID() != parent.SpanContext.TraceID() || s.Parent.SpanID() != parent.SpanContext.SpanID() {
				t.Errorf("span %q: trace %v parent %v, want the child of %q (%v)", c.name, s.SpanContext.TraceID(), s.Parent.SpanID(),
					parent.Name, parent.SpanContext.SpanID())
			}
			topic := c.name[len("publish "):]
			op := "publish"
			if c.group != "" {
				topic, op = c.name[len("process "):], "process"
			}
			want := map[string]string{"messaging.system": "kafka", "messaging.destination.name": topic, "messaging.operation.type": op}
			if c.group != "" {
				want["messaging.consumer.group.name"] = c.group
			}
			attrs := map[string]string{}
			for _, a := range s.Attributes {
				attrs[string(a.Key)] = a.Value.Emit()
			}
			for k, v := range want {
				if attrs[k] != v {
					t.Errorf("span %q: %s = %q, want %q", c.name, k, attrs[k], v)
				}
			}
			if attrs["messaging.kafka.message.key"] == "" {
				t.Errorf("span %q has no messaging.kafka.message.key", c.name)
			}
		}
		parent = s
	}
	if agentSpan.SpanID() != parent.SpanContext.SpanID() {
		t.Errorf("the agent's handler ran in span %v, want its process span %v", agentSpan.SpanID(), parent.SpanContext.SpanID())
	}
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, 0, len(spans))
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// serviceOf is the service.name of the span's resource.
func serviceOf(s tracetest.SpanStub) string {
	for _, a := range s.Resource.Attributes() {
		if a.Key == "service.name" {
			return a.Value.AsString()
		}
	}
	return ""
}
