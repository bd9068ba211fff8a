package domain

import (
	"fmt"
	"time"
)

// Lifeline decides when an agent ends itself rather than run on with no
// one to answer to: when its node's directory is gone (the node, or the
// whole data directory, was removed under it) or when its control plane
// (Kafka and Redis) has not answered for OrphanAfter (the control plane is
// gone for good, as when a one-command `loom up` stopped and never came
// back). An agent outlives a control-plane restart shorter than that, and
// its steps go on, as under slurmd. It is pure: the app reports what it
// observed and when.
type Lifeline struct {
	// OrphanAfter is how long the control plane may stay silent.
	OrphanAfter time.Duration
	// kafka and redis are when each last answered.
	kafka, redis time.Time
}

// NewLifeline starts a Lifeline at now, as if both parts of the control
// plane had just answered (the agent has just connected to them).
func NewLifeline(now time.Time, orphanAfter time.Duration) *Lifeline {
	return &Lifeline{OrphanAfter: orphanAfter, kafka: now, redis: now}
}

// KafkaAnswered records that a write to Kafka (a heartbeat) succeeded at now.
func (l *Lifeline) KafkaAnswered(now time.Time) { l.kafka = later(l.kafka, now) }

// RedisAnswered records that Redis answered at now.
func (l *Lifeline) RedisAnswered(now time.Time) { l.redis = later(l.redis, now) }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// SelfExit is why an agent ends itself.
type SelfExit struct {
	// Reason says why, for its log and its error.
	Reason string
	// Orphaned is set when the control plane is what is gone: the ends of
	// the steps cannot be recorded, and the next start reports them LOST.
	Orphaned bool
}

// Check says, at now, whether the agent must exit (nil: it goes on).
// dirGone says that the node's directory dir no longer exists.
func (l *Lifeline) Check(now time.Time, dir string, dirGone bool) *SelfExit {
	if dirGone {
		return &SelfExit{Reason: fmt.Sprintf("its node directory %s is gone (the node was removed)", dir)}
	}
	for _, p := range []struct {
		name string
		last time.Time
	}{{"Kafka", l.kafka}, {"Redis", l.redis}} {
		if silent := now.Sub(p.last); silent > l.OrphanAfter {
			return &SelfExit{Orphaned: true, Reason: fmt.Sprintf("its control plane is unreachable: %s has not answered for %s, more than LOOM_AGENT_ORPHAN_AFTER (%s)",
				p.name, silent.Round(time.Second), l.OrphanAfter)}
		}
	}
	return nil
}
