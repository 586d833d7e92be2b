package datasets

import "fmt"

// Synthetic returns a deterministic, easily learnable dataset of n
// rows×cols images in classes classes (1..256): each class has a fixed
// random prototype image (about a quarter of its pixels bright), and each
// example is its class's prototype plus uniform pixel noise of ±64. Labels
// are balanced (example counts per class differ by at most one) and in
// shuffled order. The same arguments give the same dataset on every
// machine; the prototypes depend only on seed, rows, cols and classes.
//
// For a train/test pair, make one dataset and cut it with Slice: the two
// parts share the prototypes but not the examples.
//
// It panics on n < 0, rows or cols < 1, or classes outside 1..256.
func Synthetic(n, rows, cols, classes int, seed int64) *Dataset {
	if n < 0 || rows < 1 || cols < 1 || classes < 1 || classes > 256 {
		panic(fmt.Sprintf("datasets: Synthetic(n=%d, rows=%d, cols=%d, classes=%d): want n >= 0, rows, cols >= 1, classes 1..256",
			n, rows, cols, classes))
	}
	f := rows * cols
	r := newRNG(seed)

	protos := make([]uint8, classes*f)
	for i := range protos {
		if r.uintN(4) == 0 {
			protos[i] = uint8(160 + r.uintN(96)) // bright: 160..255
		} else {
			protos[i] = uint8(r.uintN(41)) // dark: 0..40
		}
	}

	labels := make([]uint8, n)
	for i := range labels {
		labels[i] = uint8(i % classes)
	}
	order := permutation(n, seed^0x5eed) // balanced labels, shuffled
	shuffled := make([]uint8, n)
	for i, j := range order {
		shuffled[i] = labels[j]
	}
	labels = shuffled

	images := make([]uint8, n*f)
	var bits uint64
	left := 0
	for i, l := range labels {
		img, proto := images[i*f:(i+1)*f], protos[int(l)*f:(int(l)+1)*f]
		for j, p := range proto {
			if left == 0 {
				bits, left = r.src.Uint64(), 8
			}
			noise := int(bits&0xff)/2 - 64 // -64..63
			bits >>= 8
			left--
			img[j] = uint8(min(255, max(0, int(p)+noise)))
		}
	}

	d, err := NewDataset(images, labels, rows, cols, classes)
	if err != nil {
		panic("datasets: Synthetic: " + err.Error()) // unreachable: sizes agree by construction
	}
	return d
}
