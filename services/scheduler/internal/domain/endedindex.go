package domain

import (
	"time"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/goodput"
)

// endedSpan is the span of end times one bucket of the ended index holds.
const endedSpan = int64(time.Hour)

// endedBucket holds the compact records of one cluster's jobs that ended
// within one endedSpan, and the sum of their goodput.
//
// Why: the records are kept for the retention's EndedAge (30 days: a busy
// cluster's million jobs), and both GetClusterGoodput and Prune's expiry
// walked every one of them under the state's lock. With the records
// bucketed by end, a cluster's goodput since a time adds the buckets after
// it whole and reads the records of one bucket, and expiry reads only the
// buckets old enough to expire.
type endedBucket struct {
	recs  []*Ended
	total goodput.Total // of the records with goodput
}

// endedIndex is one cluster's buckets, by endedKey.
type endedIndex map[int64]*endedBucket

// endedKey is the bucket of a time: from its seconds (an hour's edges are
// whole seconds), which, unlike its nanoseconds, do not overflow for any
// time a caller can send as since (years 1..9999).
func endedKey(t time.Time) int64 {
	const span = endedSpan / int64(time.Second)
	n := t.Unix()
	k := n / span
	if n%span < 0 {
		k-- // floor, for times before 1970
	}
	return k
}

// putEnded keeps e, in place of a record of its name.
func (s *State) putEnded(e *Ended) {
	if s.ended == nil {
		s.ended = map[string]*Ended{}
	}
	if old := s.ended[e.Name]; old != nil {
		s.dropEnded([]string{e.Name})
	}
	s.ended[e.Name] = e
	if s.endedIdx == nil {
		s.endedIdx = map[string]endedIndex{}
	}
	idx := s.endedIdx[e.Cluster]
	if idx == nil {
		idx = endedIndex{}
		s.endedIdx[e.Cluster] = idx
	}
	k := endedKey(e.End)
	b := idx[k]
	if b == nil {
		b = &endedBucket{}
		idx[k] = b
	}
	b.recs = append(b.recs, e)
	if e.Goodput != nil {
		b.total.Add(e.Goodput)
	}
}

// dropEnded forgets the records of names (unknown names are skipped). Each
// bucket they were in is rewritten once, its sum added up anew.
func (s *State) dropEnded(names []string) {
	type at struct {
		cluster string
		key     int64
	}
	gone := map[at]map[*Ended]bool{}
	for _, name := range names {
		e := s.ended[name]
		if e == nil {
			continue
		}
		delete(s.ended, name)
		a := at{e.Cluster, endedKey(e.End)}
		if gone[a] == nil {
			gone[a] = map[*Ended]bool{}
		}
		gone[a][e] = true
	}
	for a, set := range gone {
		idx := s.endedIdx[a.cluster]
		b := idx[a.key]
		if b == nil {
			continue
		}
		kept := b.recs[:0]
		var total goodput.Total
		for _, e := range b.recs {
			if set[e] {
				continue
			}
			kept = append(kept, e)
			if e.Goodput != nil {
				total.Add(e.Goodput)
			}
		}
		clear(b.recs[len(kept):]) // no pointer kept past the slice's end
		b.recs, b.total = kept, total
		if len(kept) == 0 {
			delete(idx, a.key)
		}
		if len(idx) == 0 {
			delete(s.endedIdx, a.cluster)
		}
	}
}

// endedGoodput adds to total the goodput of cluster's compact records that
// ended at or after since.
func (s *State) endedGoodput(cluster string, since time.Time, total *goodput.Total) {
	first := endedKey(since)
	for k, b := range s.endedIdx[cluster] {
		switch {
		case k > first:
			total.AddTotal(&b.total)
		case k == first:
			for _, e := range b.recs {
				if e.Goodput != nil && !e.End.Before(since) {
					total.Add(e.Goodput)
				}
			}
		}
	}
}

// expiredEnded returns the names of at most max (0: no bound) compact
// records that ended at or before cutoff (which, past max, is left to the
// next call). It reads only the buckets that hold such records.
func (s *State) expiredEnded(cutoff time.Time, max int) []string {
	last := endedKey(cutoff)
	var out []string
	for _, idx := range s.endedIdx {
		for k, b := range idx {
			if k > last {
				continue
			}
			for _, e := range b.recs {
				if max > 0 && len(out) >= max {
					return out
				}
				if !e.End.After(cutoff) {
					out = append(out, e.Name)
				}
			}
		}
	}
	return out
}
