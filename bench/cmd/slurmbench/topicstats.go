package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/topics"
)

// topicOffsets returns, per topic of package topics, the sum of its
// partitions' end offsets: how many records it holds in all.
func topicOffsets(ctx context.Context, broker string) (map[string]int64, error) {
	c := &kafka.Client{Addr: kafka.TCP(broker)}
	req := map[string][]kafka.OffsetRequest{}
	for _, s := range topics.All() {
		for p := 0; p < s.Partitions; p++ {
			req[s.Name] = append(req[s.Name], kafka.LastOffsetOf(p))
		}
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req})
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := map[string]int64{}
	for t, ps := range res.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, fmt.Errorf("list offsets of %s/%d: %w", t, p.Partition, p.Error)
			}
			out[t] += p.LastOffset
		}
	}
	return out, nil
}

// topicLine says how many records each topic got per job between two
// topicOffsets, busiest first.
func topicLine(before, after map[string]int64, jobs int) string {
	type tc struct {
		name string
		n    int64
	}
	var ts []tc
	for t, n := range after {
		if d := n - before[t]; d > 0 {
			ts = append(ts, tc{t, d})
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].n > ts[j].n || ts[i].n == ts[j].n && ts[i].name < ts[j].name })
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimSuffix(strings.TrimPrefix(t.name, "loom."), ".v1"), float64(t.n)/float64(jobs)))
	}
	return strings.Join(parts, ", ")
}
