package egress

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/resname"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	publicv1 "github.com/loom-ml/loom/proto/loom/public/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/bridge/internal/cloudevent"
)

// Mapped is the public event one internal event becomes.
type Mapped struct {
	// Event is the CloudEvent, data encoded (JSON), loomproject set.
	Event cloudevent.Event
	// Project is the project it belongs to ("" when the internal event
	// names none: then it goes only to sinks without a project filter).
	Project string
	// Payload is the public message the data encodes.
	Payload proto.Message
	// StateKey and StateToken make "only changes" hold: the event is
	// published only when StateToken differs from the token last published
	// for StateKey (see Egress). Empty StateKey: always published.
	StateKey, StateToken string
}

// mapping turns one internal payload into a public one. ok false: nothing
// public happened (an update that is not a state change an outsider sees,
// or a trial that has not finished).
type mapping struct {
	// source is "loom/<service>", the owner of the resource.
	source string
	// public is the public message's type, for the contract's coverage test.
	public string
	fn     func(p proto.Message) (m mapped, ok bool, err error)
}

// mapped is what a mapping returns: the public message, its subject, its
// project and the state it reports.
type mapped struct {
	msg                proto.Message
	subject, project   string
	stateKey, stateTok string
}

// mappings is the whole of what goes out, by internal type. Every field of
// every public message is set here, by hand: an internal field reaches the
// public contract only by being named below (TestGolden holds the result).
var mappings = map[string]mapping{
	envelope.TypeOf(&eventsv1.JobChanged{}): {source: "loom/scheduler", public: typeOf(&publicv1.JobStateChanged{}), fn: func(p proto.Message) (mapped, bool, error) {
		ev := p.(*eventsv1.JobChanged)
		j := ev.GetJob()
		project, err := projectOf("job.name", j.GetName())
		if err != nil {
			return mapped{}, false, err
		}
		if j.GetState() == loomv1.JobState_JOB_STATE_UNSPECIFIED {
			return mapped{}, false, nil
		}
		out := &publicv1.JobStateChanged{
			Job: j.GetName(), JobId: j.GetJobId(), Project: project, Cluster: j.GetCluster(),
			DisplayName: j.GetDisplayName(), User: j.GetUser(), State: j.GetState().String(),
			Final: j.GetState().Terminal(), Reason: j.GetStateReason(), ExitCode: j.GetExitCode(), ExitSignal: j.ExitSignal,
			Attempt: ev.GetAttempt(), RestartCount: j.GetRestartCount(),
			ArrayJobId: j.GetArrayJobId(), ArrayTaskId: j.GetArrayTaskId(),
			SubmitTime: j.GetSubmitTime(), StartTime: j.GetStartTime(), EndTime: j.GetEndTime(),
			RequeueFollows: ev.GetRequeueFollows(),
		}
		// The attempt is part of the state: RUNNING again after a requeue is
		// a new state to report even if REQUEUED was folded away.
		return mapped{msg: out, subject: j.GetName(), project: project,
			stateKey: "job:" + j.GetName(), stateTok: fmt.Sprintf("%s/%d", out.State, out.Attempt)}, true, nil
	}},
	envelope.TypeOf(&eventsv1.CustomJobChanged{}): {source: "loom/training", public: typeOf(&publicv1.CustomJobStateChanged{}), fn: func(p proto.Message) (mapped, bool, error) {
		cj := p.(*eventsv1.CustomJobChanged).GetCustomJob()
		project, err := projectOf("custom_job.name", cj.GetName())
		if err != nil {
			return mapped{}, false, err
		}
		if cj.GetState() == trainingv1.JobState_JOB_STATE_UNSPECIFIED {
			return mapped{}, false, nil
		}
		out := &publicv1.CustomJobStateChanged{
			CustomJob: cj.GetName(), Project: project, DisplayName: cj.GetDisplayName(), User: cj.GetUser(),
			State: cj.GetState().String(), ErrorCode: cj.GetError().GetCode(), ErrorMessage: cj.GetError().GetMessage(),
			Job: cj.GetJob(), Labels: cj.GetLabels(),
			CreateTime: cj.GetCreateTime(), StartTime: cj.GetStartTime(), EndTime: cj.GetEndTime(), UpdateTime: cj.GetUpdateTime(),
		}
		return mapped{msg: out, subject: cj.GetName(), project: project, stateKey: "customjob:" + cj.GetName(), stateTok: out.State}, true, nil
	}},
	envelope.TypeOf(&eventsv1.HyperparameterTuningJobChanged{}): {source: "loom/training", public: typeOf(&publicv1.HyperparameterTuningJobStateChanged{}), fn: func(p proto.Message) (mapped, bool, error) {
		tj := p.(*eventsv1.HyperparameterTuningJobChanged).GetTuningJob()
		project, err := projectOf("tuning_job.name", tj.GetName())
		if err != nil {
			return mapped{}, false, err
		}
		if tj.GetState() == trainingv1.JobState_JOB_STATE_UNSPECIFIED {
			return mapped{}, false, nil
		}
		out := &publicv1.HyperparameterTuningJobStateChanged{
			TuningJob: tj.GetName(), Project: project, DisplayName: tj.GetDisplayName(), User: tj.GetUser(),
			State: tj.GetState().String(), ErrorCode: tj.GetError().GetCode(), ErrorMessage: tj.GetError().GetMessage(),
			MaxTrialCount: tj.GetMaxTrialCount(), BestTrial: tj.GetBestTrial(), Labels: tj.GetLabels(),
			CreateTime: tj.GetCreateTime(), StartTime: tj.GetStartTime(), EndTime: tj.GetEndTime(), UpdateTime: tj.GetUpdateTime(),
		}
		return mapped{msg: out, subject: tj.GetName(), project: project, stateKey: "tuningjob:" + tj.GetName(), stateTok: out.State}, true, nil
	}},
	envelope.TypeOf(&eventsv1.TrialChanged{}): {source: "loom/training", public: typeOf(&publicv1.TrialFinished{}), fn: func(p proto.Message) (mapped, bool, error) {
		ev := p.(*eventsv1.TrialChanged)
		t := ev.GetTrial()
		project, err := projectOf("tuning_job", ev.GetTuningJob())
		if err != nil {
			return mapped{}, false, err
		}
		switch t.GetState() {
		case trainingv1.Trial_SUCCEEDED, trainingv1.Trial_INFEASIBLE:
		default:
			return mapped{}, false, nil
		}
		name := t.GetName()
		if name == "" {
			name = ev.GetTuningJob() + "/trials/" + t.GetId()
		}
		out := &publicv1.TrialFinished{
			TuningJob: ev.GetTuningJob(), Project: project, Trial: name, TrialId: t.GetId(), State: t.GetState().String(),
			InfeasibleReason: t.GetInfeasibleReason(), EarlyStopped: t.GetEarlyStopped(), CustomJob: t.GetCustomJob(),
			StartTime: t.GetStartTime(), EndTime: t.GetEndTime(),
		}
		for _, prm := range t.GetParameters() {
			out.Parameters = append(out.Parameters, &publicv1.TrialFinished_Parameter{ParameterId: prm.GetParameterId(), Value: prm.GetValue()})
		}
		if fm := t.GetFinalMeasurement(); fm != nil {
			m := &publicv1.TrialFinished_Measurement{ElapsedDuration: fm.GetElapsedDuration(), StepCount: fm.GetStepCount()}
			for _, x := range fm.GetMetrics() {
				m.Metrics = append(m.Metrics, &publicv1.TrialFinished_Measurement_Metric{MetricId: x.GetMetricId(), Value: x.GetValue()})
			}
			out.FinalMeasurement = m
		}
		// A finished trial is reported once, whatever updates follow.
		return mapped{msg: out, subject: name, project: project, stateKey: "trial:" + name, stateTok: "finished"}, true, nil
	}},
	envelope.TypeOf(&eventsv1.ModelVersionRegistered{}): {source: "loom/registry", public: typeOf(&publicv1.ModelVersionRegistered{}), fn: func(p proto.Message) (mapped, bool, error) {
		ev := p.(*eventsv1.ModelVersionRegistered)
		v := ev.GetVersion()
		model := ev.GetModel()
		if model == "" {
			model, _, _ = strings.Cut(v.GetName(), "/versions/")
		}
		project, err := projectOf("version.name", v.GetName())
		if err != nil {
			return mapped{}, false, err
		}
		out := &publicv1.ModelVersionRegistered{
			Model: model, Version: v.GetName(), VersionId: fmt.Sprint(v.GetVersion()), Project: project,
			DisplayName: v.GetDisplayName(), Aliases: v.GetAliases(), ArtifactUri: v.GetArtifactUri(),
			Labels: v.GetLabels(), CreateTime: v.GetCreateTime(),
		}
		if l := v.GetLineage(); l != nil || v.GetSourceJob() != "" {
			job := l.GetJob()
			if job == "" {
				job = v.GetSourceJob()
			}
			out.ProducedBy = &publicv1.ModelVersionRegistered_Lineage{
				Job: job, CustomJob: l.GetCustomJob(), TrainingPipeline: l.GetTrainingPipeline(),
				TuningJob: l.GetTuningJob(), Trial: l.GetTrial(), Parameters: l.GetHyperparameters(),
				Metrics: l.GetMetrics(), DataUri: l.GetDataUri(), RecordedBy: l.GetRecordedBy(),
			}
		}
		// A version is registered once: its id is its state.
		return mapped{msg: out, subject: v.GetName(), project: project, stateKey: "version:" + v.GetName(), stateTok: "registered"}, true, nil
	}},
	envelope.TypeOf(&eventsv1.NodeHealthChanged{}): {source: "loom/health", public: typeOf(&publicv1.NodeHealthChanged{}), fn: func(p proto.Message) (mapped, bool, error) {
		ev := p.(*eventsv1.NodeHealthChanged)
		project, host, err := nodeParts(ev.GetNode(), ev.GetCluster())
		if err != nil {
			return mapped{}, false, err
		}
		out := &publicv1.NodeHealthChanged{
			Node: ev.GetNode(), Cluster: ev.GetCluster(), Project: project, Hostname: host,
			Health: ev.GetHealth().String(), Reason: ev.GetReason(), Remediation: ev.GetState().String(),
			Xid: ev.GetXid(), Unreachable: ev.GetUnreachable(), Repaired: ev.GetRepaired(),
		}
		return mapped{msg: out, subject: ev.GetNode(), project: project, stateKey: "nodehealth:" + ev.GetNode(),
			stateTok: fmt.Sprintf("%s/%s/%t/%t", out.Health, out.Remediation, out.Unreachable, out.Repaired)}, true, nil
	}},
	envelope.TypeOf(&eventsv1.NodeChanged{}): {source: "loom/provisioner", public: typeOf(&publicv1.NodeChanged{}), fn: func(p proto.Message) (mapped, bool, error) {
		n := p.(*eventsv1.NodeChanged).GetNode()
		project, host, err := nodeParts(n.GetName(), n.GetCluster())
		if err != nil {
			return mapped{}, false, err
		}
		if n.GetHostname() != "" {
			host = n.GetHostname()
		}
		if n.GetState() == loomv1.Node_STATE_UNSPECIFIED {
			return mapped{}, false, nil
		}
		out := &publicv1.NodeChanged{
			Node: n.GetName(), Cluster: n.GetCluster(), Project: project, Hostname: host, NodePool: n.GetNodePool(),
			State: n.GetState().String(), Reason: n.GetReason(),
		}
		return mapped{msg: out, subject: n.GetName(), project: project, stateKey: "node:" + n.GetName(), stateTok: out.State}, true, nil
	}},
	envelope.TypeOf(&eventsv1.NodeRemoved{}): {source: "loom/provisioner", public: typeOf(&publicv1.NodeChanged{}), fn: func(p proto.Message) (mapped, bool, error) {
		ev := p.(*eventsv1.NodeRemoved)
		project, host, err := nodeParts(ev.GetNode(), ev.GetCluster())
		if err != nil {
			return mapped{}, false, err
		}
		out := &publicv1.NodeChanged{Node: ev.GetNode(), Cluster: ev.GetCluster(), Project: project, Hostname: host, State: NodeRemovedState}
		return mapped{msg: out, subject: ev.GetNode(), project: project, stateKey: "node:" + ev.GetNode(), stateTok: out.State}, true, nil
	}},
}

// NodeRemovedState is the public NodeChanged state of a node that no longer
// exists (the internal NodeRemoved).
const NodeRemovedState = "REMOVED"

// Types are the internal event types that have a public form: the egress
// consumer passes over every other record without decoding it.
func Types() map[string]bool {
	out := make(map[string]bool, len(mappings))
	for t := range mappings {
		out[t] = true
	}
	return out
}

// jsonOpts encodes public data: camelCase names (the contract's), no
// unpopulated fields, enum names.
var jsonOpts = protojson.MarshalOptions{}

// Map turns internal event ev into its public event, if it has one: ok
// false for a type that has none or an update an outsider does not see. It
// is pure: the same ev always gives the same result (the CloudEvent id is
// derived from ev.ID), so that a redelivered internal event is published
// with the same id. An error means ev is unusable (a name without a
// project): retrying cannot fix it.
func Map(ev envelope.Event) (m Mapped, ok bool, err error) {
	mp, known := mappings[ev.Type]
	if !known || ev.Payload == nil {
		return Mapped{}, false, nil
	}
	out, ok, err := mp.fn(ev.Payload)
	if err != nil || !ok {
		return Mapped{}, false, err
	}
	data, err := jsonOpts.Marshal(out.msg)
	if err != nil {
		return Mapped{}, false, fmt.Errorf("encode %s: %w", typeOf(out.msg), err)
	}
	typ := typeOf(out.msg)
	ce := cloudevent.Event{
		ID: PublicID(typ, ev.ID), Source: mp.source, Type: typ, Subject: out.subject,
		Time: ev.Time.UTC(), DataContentType: "application/json", Data: data,
		Extensions: map[string]string{cloudevent.ExtProject: out.project},
	}
	return Mapped{Event: ce, Project: out.project, Payload: out.msg, StateKey: out.stateKey, StateToken: out.stateTok}, true, nil
}

// PublicID is the CloudEvent id of the public event of type typ that the
// internal event internalID became: a hash, so that it is the same on every
// redelivery and says nothing of Loom's internal ids.
func PublicID(typ, internalID string) string {
	h := sha256.Sum256([]byte(typ + "\n" + internalID))
	return hex.EncodeToString(h[:16])
}

func typeOf(m proto.Message) string { return string(m.ProtoReflect().Descriptor().FullName()) }

// projectOf is the project of a resource name "projects/{p}/...".
func projectOf(field, name string) (string, error) {
	rest, ok := strings.CutPrefix(name, "projects/")
	id, _, _ := strings.Cut(rest, "/")
	if !ok || !resname.ValidID(id) {
		return "", fmt.Errorf("%s %q: want projects/{project}/...", field, clip(name))
	}
	return id, nil
}

// nodeParts is the project and hostname of a node, from its name
// (projects/{p}/clusters/{c}/nodes/{host}) or, failing that, its cluster's:
// cluster names carry their project, so no look-up is needed.
func nodeParts(node, cluster string) (project, host string, err error) {
	if n, err := resname.SplitNode(node); err == nil {
		return n.Cluster.Project, n.Host, nil
	}
	c, err := resname.SplitCluster(cluster)
	if err != nil || !resname.ValidID(c.Project) {
		return "", "", fmt.Errorf("node %q of cluster %q: want projects/{project}/clusters/{cluster}/nodes/{host}", clip(node), clip(cluster))
	}
	return c.Project, "", nil
}

func clip(s string) string {
	if len(s) > 128 {
		return s[:128] + "..."
	}
	return s
}
