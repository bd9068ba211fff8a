package slurmconf

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/hostlist"
)

// numName is a host name split at its trailing number.
type numName struct {
	prefix string
	digits string
	value  int64
}

// compress returns hostlist.Compress(names), faster for the names Loom
// makes: unique, each ending in a number written at one width per prefix
// (gpu-0001…gpu-1000). The provisioner renders on every node change, so a
// 1,000-node cluster compresses tens of thousands of names per change.
// Anything else goes to hostlist.Compress itself.
func compress(names []string) string {
	if len(names) == 0 {
		return ""
	}
	parsed := make([]numName, len(names))
	sorted := true
	for i, n := range names {
		j := len(n)
		for j > 0 && n[j-1] >= '0' && n[j-1] <= '9' {
			j--
		}
		if j == len(n) || len(n)-j > 18 {
			return hostlist.Compress(names)
		}
		v, _ := strconv.ParseInt(n[j:], 10, 64)
		parsed[i] = numName{prefix: n[:j], digits: n[j:], value: v}
		if i > 0 && cmpNum(parsed[i-1], parsed[i]) >= 0 {
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(parsed, cmpNum)
	}
	var b strings.Builder
	for i := 0; i < len(parsed); {
		// One prefix: its numbers must share a width, and be unique.
		j := i
		for j < len(parsed) && parsed[j].prefix == parsed[i].prefix {
			if len(parsed[j].digits) != len(parsed[i].digits) || (j > i && parsed[j].value == parsed[j-1].value) {
				return hostlist.Compress(names)
			}
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(parsed[i].prefix)
		group := parsed[i:j]
		if len(group) == 1 {
			b.WriteString(group[0].digits)
		} else {
			b.WriteByte('[')
			for k := 0; k < len(group); {
				l := k
				for l+1 < len(group) && group[l+1].value == group[l].value+1 {
					l++
				}
				if k > 0 {
					b.WriteByte(',')
				}
				b.WriteString(group[k].digits)
				if l > k {
					b.WriteByte('-')
					b.WriteString(group[l].digits)
				}
				k = l + 1
			}
			b.WriteByte(']')
		}
		i = j
	}
	return b.String()
}

func cmpNum(a, b numName) int {
	return cmp.Or(strings.Compare(a.prefix, b.prefix), cmp.Compare(a.value, b.value))
}
