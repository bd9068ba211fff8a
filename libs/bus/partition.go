package bus

import (
	"encoding/binary"
	"slices"

	"github.com/segmentio/kafka-go"
)

// PartitionOf is the partition of a topic with n partitions that the
// Producer writes records keyed key to: Murmur2 of the key, as Kafka's Java
// client places keys.
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	// Consistent: an empty key is hashed too, never placed at random.
	return kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: []byte(key)}, ids...)
}

// keyBalancer is the group balancer of a consumer with a PartitionKey: of
// each topic it assigns only the partition that records keyed key go to,
// and that to the newest member subscribed to the topic (the latest born,
// then the greatest member id), and no other partition to anyone. Every
// member of such a group must use the same key.
//
// Why the newest: such a group is one process's (a node's agent), and when
// it restarts, the member its killed predecessor left behind stays in the
// group until the broker times it out. Handed the partition, that member
// would hold the node's commands until then: the embedded broker was seen
// keeping one that died in the middle of a join for minutes, and the
// reimaged node's confirming check waited with it. The process that
// started last is the live one.
type keyBalancer struct {
	key string
	// born is when the member's consumer started (unix nanoseconds),
	// offered to the leader as the member's user data.
	born int64
}

func (b keyBalancer) ProtocolName() string { return "loom-key" }

func (b keyBalancer) UserData() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(b.born)), nil
}

// bornOf reads a member's user data; a member that offered none (or
// something else) counts as born at 0, older than any.
func bornOf(m kafka.GroupMember) int64 {
	if len(m.UserData) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(m.UserData))
}

func (b keyBalancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := kafka.GroupMemberAssignments{}
	for _, m := range members {
		out[m.ID] = map[string][]int{}
	}
	count := map[string]int{}
	for _, p := range partitions {
		count[p.Topic]++
	}
	for t, n := range count {
		var newest *kafka.GroupMember
		for i := range members {
			m := &members[i]
			if !slices.Contains(m.Topics, t) {
				continue
			}
			if newest == nil || bornOf(*m) > bornOf(*newest) || (bornOf(*m) == bornOf(*newest) && m.ID > newest.ID) {
				newest = m
			}
		}
		if newest != nil {
			out[newest.ID][t] = []int{PartitionOf(b.key, n)}
		}
	}
	return out
}
