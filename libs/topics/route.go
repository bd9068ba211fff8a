package topics

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// ErrUnrouted is returned (wrapped) by For for a message that no topic
// carries: an event the table below does not name can never be published, so
// writing it must fail rather than be dropped or sent somewhere by guess.
var ErrUnrouted = errors.New("no topic carries this event type")

// routes maps each event type, by its full protobuf name (the ce_type), to the
// one topic it travels on. It is the only place that decides an event's
// topic: services' domains say what happened (payload, key, subject) and the
// write path asks For where it goes. One topic per type keeps one writer per
// topic (see the constants' comments) and lets consumers pass over records by
// type alone.
var routes = table(map[string][]proto.Message{
	ClusterCommands: {&eventsv1.CreateCluster{}, &eventsv1.UpdateCluster{}, &eventsv1.DeleteCluster{},
		&eventsv1.CreateReservation{}, &eventsv1.DeleteReservation{}},
	ClusterEvents: {&eventsv1.ClusterChanged{}, &eventsv1.ClusterOperationFailed{}, &eventsv1.ClusterDeleted{},
		&eventsv1.ReservationChanged{}, &eventsv1.ReservationDeleted{}},
	NodeEvents: {&eventsv1.NodeChanged{}, &eventsv1.NodeRemoved{}, &eventsv1.RemediationFinished{}, &eventsv1.RemediationProgress{}},
	NodeTelemetry: {&eventsv1.AgentRegistered{}, &eventsv1.Heartbeat{}, &eventsv1.GpuTelemetry{}, &eventsv1.XidObserved{},
		&eventsv1.HealthCheckCompleted{}},
	JobCommands: {&eventsv1.SubmitJob{}, &eventsv1.CancelJob{}, &eventsv1.UpdateJob{}, &eventsv1.UpdateSlurmNode{},
		&eventsv1.CreateJobStep{}, &eventsv1.CancelJobStep{}, &eventsv1.AssociationChanged{}, &eventsv1.AccountChanged{}},
	JobEvents: {&eventsv1.JobChanged{}, &eventsv1.NodeDrained{}, &eventsv1.NodesNeedCheck{}, &eventsv1.SlurmNodeChanged{}},
	StepCommands: {&eventsv1.StartStep{}, &eventsv1.StopStep{}, &eventsv1.SignalStep{}, &eventsv1.LaunchTasks{},
		&eventsv1.KillTasks{}},
	StepEvents:   {&eventsv1.StepChanged{}, &eventsv1.TasksChanged{}, &eventsv1.StepProgress{}, &eventsv1.MetricsReported{}, &eventsv1.UsageReported{}},
	HealthEvents: {&eventsv1.NodeHealthChanged{}},
	NodeCommands: {&eventsv1.RunHealthCheck{}, &eventsv1.InjectNodeFault{}},
	HealthCommands: {&eventsv1.ScanNodes{}, &eventsv1.ReportFaultyNodes{}, &eventsv1.UpdateNodeRemediation{},
		&eventsv1.InjectFault{}},
	RemediationCommand: {&eventsv1.RemediateNode{}},
	ModelEvents:        {&eventsv1.ModelVersionRegistered{}, &eventsv1.ModelUploadFailed{}, &eventsv1.ModelExported{}, &eventsv1.ModelExportFailed{}},
	ModelCommands:      {&eventsv1.UploadModel{}, &eventsv1.ExportModel{}},
	TrainingCommands: {&eventsv1.CreateCustomJob{}, &eventsv1.CreateHyperparameterTuningJob{},
		&eventsv1.CreateTrainingPipeline{}, &eventsv1.CancelTraining{}, &eventsv1.DeleteTraining{}},
	TrainingEvents: {&eventsv1.CustomJobChanged{}, &eventsv1.HyperparameterTuningJobChanged{}, &eventsv1.TrialChanged{},
		&eventsv1.TrainingPipelineChanged{}},
	Audit: {&eventsv1.AuditRecorded{}},
})

// table inverts topic → event types into type → topic. A type listed under
// two topics is a bug in the table, caught when the package loads.
func table(byTopic map[string][]proto.Message) map[protoreflect.FullName]string {
	out := map[protoreflect.FullName]string{}
	for topic, msgs := range byTopic {
		for _, m := range msgs {
			name := m.ProtoReflect().Descriptor().FullName()
			if prev, ok := out[name]; ok {
				panic(fmt.Sprintf("topics: %s routed to both %s and %s", name, prev, topic))
			}
			out[name] = topic
		}
	}
	return out
}

// For returns the topic that carries msg's type. It fails, wrapping
// ErrUnrouted, for a nil message or a type no topic carries.
func For(msg proto.Message) (string, error) {
	if msg == nil {
		return "", fmt.Errorf("route a nil event: %w", ErrUnrouted)
	}
	name := msg.ProtoReflect().Descriptor().FullName()
	if topic, ok := routes[name]; ok {
		return topic, nil
	}
	return "", fmt.Errorf("route %s: %w", name, ErrUnrouted)
}
