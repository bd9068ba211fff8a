package domain

// keyed is a sort key and the index of what it sorts.
type keyed struct {
	key uint64
	i   int32
}

// radixSort sorts items by key, ascending, stably: an LSD radix sort on
// 16-bit digits that skips digits every key shares (so keys that span fewer
// bits cost fewer passes). It sorts 100,000 keys several times faster than a
// comparison sort.
// buf, when at least as long as items, is used as the second buffer.
func radixSort(items, buf []keyed) {
	if len(items) < 256 {
		insertionSortKeyed(items)
		return
	}
	var or, and uint64 = 0, ^uint64(0)
	for _, it := range items {
		or |= it.key
		and &= it.key
	}
	diff := or ^ and // bits that differ between some keys
	if len(buf) < len(items) {
		buf = make([]keyed, len(items))
	}
	src, dst := items, buf[:len(items)]
	var count [1 << 16]int
	for shift := uint(0); shift < 64; shift += 16 {
		if (diff>>shift)&0xffff == 0 {
			continue
		}
		clear(count[:])
		for _, it := range src {
			count[(it.key>>shift)&0xffff]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, it := range src {
			d := (it.key >> shift) & 0xffff
			dst[count[d]] = it
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &items[0] {
		copy(items, src)
	}
}

func insertionSortKeyed(items []keyed) {
	for i := 1; i < len(items); i++ {
		for j := i; j > 0 && items[j].key < items[j-1].key; j-- {
			items[j], items[j-1] = items[j-1], items[j]
		}
	}
}
