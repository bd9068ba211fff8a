package stack

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/loom-ml/loom/libs/telemetry"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// otlpSink is an OTLP/gRPC trace receiver: the agents run as processes of
// their own and export their spans to it.
type otlpSink struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []span
}

// span is what the test reads of a span, from either exporter.
type span struct {
	service, name     string
	trace, id, parent string
	attrs             map[string]string
}

func (s *otlpSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				svc = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.spans = append(s.spans, fromOTLP(svc, sp))
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func fromOTLP(svc string, sp *tracepb.Span) span {
	out := span{service: svc, name: sp.GetName(), trace: hex.EncodeToString(sp.GetTraceId()), id: hex.EncodeToString(sp.GetSpanId()),
		parent: hex.EncodeToString(sp.GetParentSpanId()), attrs: map[string]string{}}
	for _, a := range sp.GetAttributes() {
		v := a.GetValue()
		switch {
		case v.GetStringValue() != "":
			out.attrs[a.GetKey()] = v.GetStringValue()
		default:
			out.attrs[a.GetKey()] = fmt.Sprint(v.GetIntValue())
		}
	}
	return out
}

func fromMemory(s tracetest.SpanStub) span {
	out := span{name: s.Name, trace: s.SpanContext.TraceID().String(), id: s.SpanContext.SpanID().String(), attrs: map[string]string{}}
	if s.Parent.IsValid() {
		out.parent = s.Parent.SpanID().String()
	}
	for _, a := range s.Resource.Attributes() {
		if a.Key == "service.name" {
			out.service = a.Value.AsString()
		}
	}
	for _, a := range s.Attributes {
		out.attrs[string(a.Key)] = a.Value.Emit()
	}
	return out
}

// TestJobSubmissionIsOneTrace submits a job through the gateway of a whole
// stack (real Redis, the embedded broker, the services in this process, an
// agent process on a one-node cluster) and follows it: the gateway's
// SubmitJob, its publish to the job commands, the scheduler's process of it,
// the scheduler's publish of the step command and the agent's process of
// that are one trace, with the messaging conventions' names and attributes.
func TestJobSubmissionIsOneTrace(t *testing.T) {
	t.Parallel()
	sink := &otlpSink{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, sink)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	mem := tracetest.NewInMemoryExporter()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := testOptions(t)
	opts.AgentEnv = append(opts.AgentEnv, telemetry.EnvOTLPEndpoint+"="+ln.Addr().String())
	// The services of this process export to mem (the context's values
	// reach each service's telemetry).
	st := startOnChosenGateway(telemetry.WithSpanExporter(ctx, mem), t, &opts)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	conn := adminConn(t, st)
	createCPUCluster(ctx, t, conn, "tr")
	job, err := loomv1.NewJobServiceClient(conn).SubmitJob(ctx, &loomv1.SubmitJobRequest{Parent: "projects/default",
		Job: &loomv1.Job{Cluster: "projects/default/clusters/tr", Script: "#!/bin/sh\ntrue\n", NodeCount: 1}})
	if err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}

	chain := []struct{ service, name, op, group string }{
		{"gateway", "loom.v1.JobService/SubmitJob", "", ""},
		{"gateway", "publish " + topics.JobCommands, "publish", ""},
		{"scheduler", "process " + topics.JobCommands, "process", "loom-scheduler"},
		{"scheduler", "publish " + topics.StepCommands, "publish", ""},
		{"agent", "process " + topics.StepCommands, "process", ""},
	}
	var found, seen []span
	defer func() {
		if t.Failed() {
			for _, s := range seen {
				if strings.Contains(s.name, "job") || strings.Contains(s.name, "step") || s.name == chain[0].name {
					t.Logf("span %s %q trace %s id %s parent %s", s.service, s.name, s.trace, s.id, s.parent)
				}
			}
		}
	}()
	testkit.WaitFor(t, 90*time.Second, "the job's spans through gateway, scheduler and agent", func() (bool, error) {
		var all []span
		for _, s := range mem.GetSpans() {
			all = append(all, fromMemory(s))
		}
		sink.mu.Lock()
		all = append(all, sink.spans...)
		sink.mu.Unlock()
		seen = all
		found = nil
		trace := ""
		for _, s := range all {
			if s.service == "gateway" && s.name == chain[0].name {
				trace = s.trace // one submission in this test
			}
		}
		if trace == "" {
			return false, nil
		}
		for _, c := range chain {
			var hit *span
			for i := range all {
				s := &all[i]
				// An agent's service name is agent-<node>.
				if s.trace == trace && strings.HasPrefix(s.service, c.service) && s.name == c.name {
					hit = s
					break
				}
			}
			if hit == nil {
				return false, nil
			}
			found = append(found, *hit)
		}
		return true, nil
	})
	for i, c := range chain {
		s := found[i]
		if i == 0 {
			continue
		}
		// Each span is the child of the one before it.
		if p := found[i-1]; s.parent != p.id {
			t.Errorf("span %q (%s) has parent %s, want %q (%s)", c.name, s.service, s.parent, chain[i-1].name, p.id)
		}
		want := map[string]string{"messaging.system": "kafka", "messaging.operation.type": c.op,
			"messaging.destination.name": c.name[len(c.op)+1:]}
		if c.group != "" {
			want["messaging.consumer.group.name"] = c.group
		}
		for k, v := range want {
			if s.attrs[k] != v {
				t.Errorf("span %q (%s): %s = %q, want %q", c.name, c.service, k, s.attrs[k], v)
			}
		}
		if s.attrs["messaging.kafka.message.key"] == "" {
			t.Errorf("span %q (%s): no messaging.kafka.message.key", c.name, c.service)
		}
	}
	t.Logf("job %s: one trace %s through %d spans", job.GetName(), found[0].trace, len(found))
}
