package bus

import (
	"time"

	"github.com/segmentio/kafka-go"
)

// CrashOnStop makes c's Run return, once its context ends, without
// committing what it handled since its last commit, as a process that died
// would.
func CrashOnStop(c *Consumer) { c.crashed.Store(true) }

// KeyBalancer is the group balancer of a consumer with PartitionKey key
// whose consumer started at born (unix nanoseconds).
func KeyBalancer(key string, born int64) kafka.GroupBalancer {
	return keyBalancer{key: key, born: born}
}

// SetPartitionRecheck sets how long after a re-read of its topics'
// partition counts c may read them again (a second); call it before Run.
func SetPartitionRecheck(c *Consumer, d time.Duration) { c.recheck = d }

// SetDropLogEvery makes c log its drops past NodeRate at most once every d
// (10 s), and look for a flood's last ones as often; call it before Run.
func SetDropLogEvery(c *Consumer, d time.Duration) {
	if c.drops != nil {
		c.drops.WithEvery(d)
	}
}

// HeartbeatFor is the heartbeat interval of a consumer whose session
// timeout is session.
func HeartbeatFor(session time.Duration) time.Duration { return heartbeatFor(session) }
