package bus

import (
	"sort"

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
// to the group's members in turn (by member id), and no other partition to
// anyone. Every member of such a group must use the same key.
type keyBalancer struct{ key string }

func (b keyBalancer) ProtocolName() string      { return "loom-key" }
func (b keyBalancer) UserData() ([]byte, error) { return nil, nil }

func (b keyBalancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := kafka.GroupMemberAssignments{}
	if len(members) == 0 {
		return out
	}
	ids := make([]string, len(members))
	subscribed := map[string]map[string]bool{}
	for i, m := range members {
		ids[i] = m.ID
		out[m.ID] = map[string][]int{}
		subscribed[m.ID] = map[string]bool{}
		for _, t := range m.Topics {
			subscribed[m.ID][t] = true
		}
	}
	sort.Strings(ids)
	count := map[string]int{}
	for _, p := range partitions {
		count[p.Topic]++
	}
	topics := make([]string, 0, len(count))
	for t := range count {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	next := 0
	for _, t := range topics {
		for range ids {
			id := ids[next%len(ids)]
			next++
			if subscribed[id][t] {
				out[id][t] = []int{PartitionOf(b.key, count[t])}
				break
			}
		}
	}
	return out
}
