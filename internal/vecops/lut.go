package vecops

// LUT sets dst[i] = table[src[i]] for every byte of src (dst is at least as
// long as src): a copy, so every variant's result is the table's bits. The
// avx512 variant keeps a float32 table in registers and selects with
// permutes and blends; the others gather from it (VGATHERDPS/VGATHERDPD).
func LUT[T Float](v Variant, dst []T, src []byte, table *[256]T) {
	n := len(src)
	dst = dst[:n]
	done := 0
	if k := kernelsOf[T](&v); k.lut != nil && n >= k.lanes {
		k.lut(&dst[0], &src[0], n, table)
		done = n - n%k.lanes
	}
	dst, src = dst[done:], src[done:]
	for j, p := range src {
		dst[j] = table[p]
	}
}
