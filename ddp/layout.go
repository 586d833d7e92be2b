package ddp

import "fmt"

// Default bucket sizes, as in PyTorch DDP.
const (
	DefaultFirstBucketBytes = 1 << 20
	DefaultBucketBytes      = 25 << 20
)

// slot is one parameter's place in the arenas.
type slot struct {
	param  int // index in the wrapped parameter list (creation order)
	offset int // element offset in the arenas
	size   int // elements
	bucket int
}

// bucketRange is a bucket's element range [lo, hi) of the arenas and the
// number of parameters in it.
type bucketRange struct {
	lo, hi int
	params int
}

// planLayout places parameters of the given sizes (elements, creation
// order) in reverse creation order and cuts the arena into buckets of whole
// parameters: the first of at most firstBucket elements, the others of at
// most bucket elements; a parameter larger than the limit gets a bucket of
// its own. It returns the slots by parameter index and the buckets in order.
func planLayout(sizes []int, firstBucket, bucket int) ([]slot, []bucketRange, error) {
	if firstBucket < 1 || bucket < 1 {
		return nil, nil, fmt.Errorf("ddp: bucket sizes must be positive (first %d, rest %d elements)", firstBucket, bucket)
	}
	limit := func(b int) int {
		if b == 0 {
			return firstBucket
		}
		return bucket
	}
	slots := make([]slot, len(sizes))
	var buckets []bucketRange
	offset := 0
	for k := len(sizes) - 1; k >= 0; k-- {
		n := sizes[k]
		if n < 0 {
			return nil, nil, fmt.Errorf("ddp: parameter %d has %d elements", k, n)
		}
		last := len(buckets) - 1
		if last < 0 || (buckets[last].params > 0 && buckets[last].hi-buckets[last].lo+n > limit(last)) {
			buckets = append(buckets, bucketRange{lo: offset, hi: offset})
			last++
		}
		buckets[last].hi += n
		buckets[last].params++
		slots[k] = slot{param: k, offset: offset, size: n, bucket: last}
		offset += n
	}
	return slots, buckets, nil
}
