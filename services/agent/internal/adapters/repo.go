// Package adapters turns the agent's step records and events into Redis
// state and bus events, and back.
//
// Redis layout under the agent's prefix ("agent-<cluster-id>-<hostname>:"):
//
//	steps    hash: "<job name>#<attempt>" → JSON domain.Step
//	tasks    hash: "<job name>#<attempt>.<step id>" → JSON domain.Tasks (srun steps)
//	boot_id  string: the boot id of the agent's latest start
//	metrics  hash: "<job name>#<attempt>" → JSON position of the tail of a
//	         running step's metrics file, as of its last record sent
package adapters

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	"github.com/loom-ml/loom/services/agent/internal/domain"
)

// Source is the CloudEvents source of the agent's events.
const Source = "loom/agent"

// Redis keys relative to the store's prefix.
const (
	KeySteps  = "steps"
	KeyTasks  = "tasks"
	KeyBootID = "boot_id"
	// KeyMetrics holds, by step key, where the agent's tail of a running
	// step's metrics file stands: written with each MetricsReported it
	// sends, removed when the step ends.
	KeyMetrics = "metrics"
)

// LoadMetricPositions reads every step's metrics tail position (JSON, as
// the app wrote it).
func LoadMetricPositions(ctx context.Context, st *store.Store) (map[string][]byte, error) {
	m, err := st.HGetAll(ctx, KeyMetrics)
	if err != nil {
		return nil, fmt.Errorf("load metrics positions: %w", err)
	}
	return m, nil
}

// LoadSteps reads every step record.
func LoadSteps(ctx context.Context, st *store.Store) (map[string]*domain.Step, error) {
	m, err := st.HGetAll(ctx, KeySteps)
	if err != nil {
		return nil, fmt.Errorf("load steps: %w", err)
	}
	out := make(map[string]*domain.Step, len(m))
	for k, b := range m {
		var s domain.Step
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("load step %s: %w", k, err)
		}
		out[k] = &s
	}
	return out, nil
}

// PutStep adds the write of a step record to tx and, when emit, the
// StepChanged that reports it (from the agent of self).
func PutStep(tx *store.Tx, s *domain.Step, self domain.Self, emit bool) error {
	var ev proto.Message
	if emit {
		ev = s.Event(self)
	}
	return put(tx, KeySteps, "step", s.Key(), s, ev)
}

// LoadTasks reads every task record (job steps' tasks on this node).
func LoadTasks(ctx context.Context, st *store.Store) (map[string]*domain.Tasks, error) {
	m, err := st.HGetAll(ctx, KeyTasks)
	if err != nil {
		return nil, fmt.Errorf("load tasks: %w", err)
	}
	out := make(map[string]*domain.Tasks, len(m))
	for k, b := range m {
		var t domain.Tasks
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("load tasks %s: %w", k, err)
		}
		out[k] = &t
	}
	return out, nil
}

// PutTasks adds the write of a task record to tx and, when emit, the
// TasksChanged that reports it (from the agent of self).
func PutTasks(tx *store.Tx, t *domain.Tasks, self domain.Self, emit bool) error {
	var ev proto.Message
	if emit {
		ev = t.Event(self)
	}
	return put(tx, KeyTasks, "tasks", t.Key(), t, ev)
}

// put adds the write of record rec (JSON, field key of hash) to tx, and
// the event ev unless nil.
func put(tx *store.Tx, hash, what, key string, rec any, ev proto.Message) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", what, key, err)
	}
	tx.HSet(hash, key, b)
	if ev != nil {
		e, err := Event(ev)
		if err != nil {
			return fmt.Errorf("encode %s %s event: %w", what, key, err)
		}
		tx.Emit(e)
	}
	return nil
}

// Event wraps a payload the agent emits in an envelope, keyed by the entity
// whose order matters (step events by job, telemetry by node), on the topic
// libs/topics routes its type to.
func Event(p proto.Message) (envelope.Event, error) {
	switch m := p.(type) {
	case *eventsv1.StepChanged:
		return envelope.Route(m.GetJob(), Source, p)
	case *eventsv1.TasksChanged:
		return envelope.Route(m.GetJob(), Source, p)
	case *eventsv1.StepProgress:
		return envelope.Route(m.GetJob(), Source, p)
	case *eventsv1.UsageReported:
		return envelope.Route(m.GetJob(), Source, p)
	case *eventsv1.MetricsReported:
		return envelope.Route(m.GetJob(), Source, p)
	case *eventsv1.AgentRegistered:
		return envelope.Route(m.GetNode(), Source, p)
	case *eventsv1.Heartbeat:
		return envelope.Route(m.GetNode(), Source, p)
	}
	return envelope.Event{}, fmt.Errorf("agent does not emit %T", p)
}
