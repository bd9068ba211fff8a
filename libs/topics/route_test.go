package topics

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/wrapperspb"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// wantRoutes is the topic of every event type, written out independently of
// the table in route.go (as docs/ARCHITECTURE.md's topic table has it), so
// that a type moved to another topic fails here.
var wantRoutes = map[string]string{
	"CreateCluster":                  ClusterCommands,
	"UpdateCluster":                  ClusterCommands,
	"DeleteCluster":                  ClusterCommands,
	"CreateReservation":              ClusterCommands,
	"DeleteReservation":              ClusterCommands,
	"ClusterChanged":                 ClusterEvents,
	"ClusterOperationFailed":         ClusterEvents,
	"ClusterDeleted":                 ClusterEvents,
	"ReservationChanged":             ClusterEvents,
	"ReservationDeleted":             ClusterEvents,
	"NodeChanged":                    NodeEvents,
	"NodeRemoved":                    NodeEvents,
	"AgentRegistered":                NodeTelemetry,
	"Heartbeat":                      NodeTelemetry,
	"SubmitJob":                      JobCommands,
	"CancelJob":                      JobCommands,
	"UpdateJob":                      JobCommands,
	"UpdateSlurmNode":                JobCommands,
	"CreateJobStep":                  JobCommands,
	"CancelJobStep":                  JobCommands,
	"JobChanged":                     JobEvents,
	"NodeDrained":                    JobEvents,
	"StartStep":                      StepCommands,
	"StopStep":                       StepCommands,
	"SignalStep":                     StepCommands,
	"LaunchTasks":                    StepCommands,
	"KillTasks":                      StepCommands,
	"StepChanged":                    StepEvents,
	"TasksChanged":                   StepEvents,
	"NodeHealthChanged":              HealthEvents,
	"ModelVersionRegistered":         ModelEvents,
	"AuditRecorded":                  Audit,
	"AssociationChanged":             JobCommands,
	"AccountChanged":                 JobCommands,
	"RemediationFinished":            NodeEvents,
	"RemediationProgress":            NodeEvents,
	"GpuTelemetry":                   NodeTelemetry,
	"XidObserved":                    NodeTelemetry,
	"HealthCheckCompleted":           NodeTelemetry,
	"NodesNeedCheck":                 JobEvents,
	"SlurmNodeChanged":               JobEvents,
	"StepProgress":                   StepEvents,
	"UsageReported":                  StepEvents,
	"RunHealthCheck":                 NodeCommands,
	"InjectNodeFault":                NodeCommands,
	"ScanNodes":                      HealthCommands,
	"ReportFaultyNodes":              HealthCommands,
	"UpdateNodeRemediation":          HealthCommands,
	"InjectFault":                    HealthCommands,
	"RemediateNode":                  RemediationCommand,
	"MetricsReported":                StepEvents,
	"ModelUploadFailed":              ModelEvents,
	"UploadModel":                    ModelCommands,
	"ModelExported":                  ModelEvents,
	"ModelExportFailed":              ModelEvents,
	"ExportModel":                    ModelCommands,
	"CreateCustomJob":                TrainingCommands,
	"CreateHyperparameterTuningJob":  TrainingCommands,
	"CreateTrainingPipeline":         TrainingCommands,
	"CancelTraining":                 TrainingCommands,
	"DeleteTraining":                 TrainingCommands,
	"CustomJobChanged":               TrainingEvents,
	"HyperparameterTuningJobChanged": TrainingEvents,
	"TrialChanged":                   TrainingEvents,
	"TrainingPipelineChanged":        TrainingEvents,
}

// TestEveryEventRoutes enumerates every message of loom.events.v1 — the only
// payloads Loom's services emit — and checks that each routes, to its topic,
// and that the topic is one the services create.
func TestEveryEventRoutes(t *testing.T) {
	t.Parallel()
	created := map[string]bool{}
	for _, s := range All() {
		created[s.Name] = true
	}
	msgs := eventsv1.File_loom_events_v1_events_proto.Messages()
	if msgs.Len() != len(wantRoutes) {
		t.Errorf("loom.events.v1 has %d messages, the test knows %d: add the new ones to wantRoutes and route.go",
			msgs.Len(), len(wantRoutes))
	}
	for i := range msgs.Len() {
		name := msgs.Get(i).FullName()
		mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := For(mt.New().Interface())
		if err != nil {
			t.Errorf("%s does not route: %v", name, err)
			continue
		}
		want, ok := wantRoutes[string(name.Name())]
		if !ok {
			t.Errorf("%s routes to %s, but the test does not know it", name, got)
			continue
		}
		if got != want {
			t.Errorf("%s routes to %s, want %s", name, got, want)
		}
		if !created[got] || strings.HasSuffix(got, DLQSuffix) {
			t.Errorf("%s routes to %s, which All does not create as a topic", name, got)
		}
	}
	// A typed nil is still its type: a domain that built no payload yet
	// cannot make For guess.
	if got, err := For((*eventsv1.JobChanged)(nil)); err != nil || got != JobEvents {
		t.Errorf("For((*JobChanged)(nil)) = %q, %v; want %s", got, err, JobEvents)
	}
}

// TestUnroutedIsAnError checks that a message no topic carries is refused,
// not given some topic or an empty one.
func TestUnroutedIsAnError(t *testing.T) {
	t.Parallel()
	for _, m := range []proto.Message{nil, wrapperspb.String("x"), &loomv1.Job{}} {
		got, err := For(m)
		if !errors.Is(err, ErrUnrouted) || got != "" {
			t.Errorf("For(%T) = %q, %v; want \"\" and ErrUnrouted", m, got, err)
		}
	}
}

// TestTableRefusesATypeOnTwoTopics checks the load-time guard of the table.
func TestTableRefusesATypeOnTwoTopics(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "loom.events.v1.JobChanged") {
			t.Fatalf("recovered %v, want a panic naming JobChanged", r)
		}
	}()
	table(map[string][]proto.Message{JobEvents: {&eventsv1.JobChanged{}}, StepEvents: {&eventsv1.JobChanged{}}})
}

// BenchmarkFor measures the routing every emitted event pays.
func BenchmarkFor(b *testing.B) {
	msg := &eventsv1.JobChanged{}
	for b.Loop() {
		if _, err := For(msg); err != nil {
			b.Fatal(err)
		}
	}
}
