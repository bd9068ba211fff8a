package main

import (
	"context"
	"time"

	"github.com/loom-ml/loom/bench/internal/busread"
	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// registry decodes what the benchmark times: health's verdicts, the
// scheduler's job changes and the agents' step reports (read, not verified:
// the benchmark acts on none).
var registry = envelope.NewRegistry(&eventsv1.NodeHealthChanged{}, &eventsv1.JobChanged{}, &eventsv1.StepChanged{})

// readTopics reads every record of the topics, up to their current ends, in
// time order. Records of other types are skipped.
func readTopics(ctx context.Context, broker string, names ...string) ([]envelope.Event, error) {
	return busread.Topics(ctx, broker, registry, names...)
}

// stepsRunning tells, from the agents' StepChanged events evs, when attempt
// of job had its process running on nodes nodes: the time (the envelope's,
// the agent's) of the last of those nodes' first STEP_RUNNING report, or
// zero while one has not reported. A job is RUNNING from its placement
// (as slurmctld's), before any node has started its program: what the
// benchmark times as "running again" is the program running again, as the
// nodes report it.
func stepsRunning(evs []envelope.Event, job string, attempt int32, nodes int) time.Time {
	seen := map[string]bool{}
	var last time.Time
	for _, ev := range evs {
		p, ok := ev.Payload.(*eventsv1.StepChanged)
		if !ok || p.GetJob() != job || p.GetAttempt() != attempt || p.GetState() != eventsv1.StepState_STEP_RUNNING || seen[p.GetNode()] {
			continue
		}
		seen[p.GetNode()] = true
		if ev.Time.After(last) {
			last = ev.Time
		}
	}
	if len(seen) < nodes {
		return time.Time{}
	}
	return last
}
