package vecops

import "fmt"

// blockKernel copies or adds rows runs of full whole vectors and one
// masked vector (the bits of mask) from src to dst, the runs ss and ds
// elements apart.
type blockKernel[T Float] func(dst *T, ds int, src *T, ss int, rows, full int, mask uint16)

// CopyBlock copies a block of rows runs of width elements, the runs ss
// elements apart in src and ds apart in dst:
//
//	dst[r·ds + t] = src[r·ss + t]   for r < rows, t < width
//
// (a convolution's lowering: each run is a row of an image plane or a
// patch). The runs are copied in order, so runs that overlap in dst
// leave the last one's values. The avx512 variant moves each run with
// whole vectors and one masked vector, the others with the scalar loop;
// every variant gives the same bits. It panics when a run would fall
// outside dst or src or a size or stride is negative.
func CopyBlock[T Float](v Variant, dst []T, ds int, src []T, ss int, rows, width int) {
	if !checkBlock("CopyBlock", len(dst), ds, len(src), ss, rows, width) {
		return
	}
	if k := kernelsOf[T](&v); k.copyBlock != nil {
		k.copyBlock(&dst[0], ds, &src[0], ss, rows, width/k.lanes, uint16(1)<<(width%k.lanes)-1)
		return
	}
	for r := 0; r < rows; r++ {
		copy(dst[r*ds:r*ds+width], src[r*ss:r*ss+width])
	}
}

// AddBlock adds a block of rows runs of width elements into dst, the
// runs ss elements apart in src and ds apart in dst:
//
//	dst[r·ds + t] = dst[r·ds + t] + src[r·ss + t]   for r < rows, t < width
//
// one IEEE addition per element with dst's value as the first operand
// (the scalar code's, whose NaN survives when both are NaN), the runs in
// order, so that runs overlapping in dst (a col2im) add up in the same
// order in every variant: every variant gives the same bits. It panics
// as CopyBlock does.
func AddBlock[T Float](v Variant, dst []T, ds int, src []T, ss int, rows, width int) {
	if !checkBlock("AddBlock", len(dst), ds, len(src), ss, rows, width) {
		return
	}
	if k := kernelsOf[T](&v); k.addBlock != nil {
		k.addBlock(&dst[0], ds, &src[0], ss, rows, width/k.lanes, uint16(1)<<(width%k.lanes)-1)
		return
	}
	for r := 0; r < rows; r++ {
		d, s := dst[r*ds:r*ds+width], src[r*ss:r*ss+width]
		for t := range s {
			d[t] = d[t] + s[t]
		}
	}
}

// checkBlock panics when a block of rows runs of width elements, ds and
// ss apart, does not fit slices of nd and ns elements, and reports
// whether the block has any element.
func checkBlock(op string, nd, ds, ns, ss, rows, width int) bool {
	if rows < 0 || width < 0 || ds < 0 || ss < 0 {
		panic(fmt.Sprintf("vecops: %s: negative size or stride (rows %d, width %d, strides %d, %d)", op, rows, width, ds, ss))
	}
	if rows == 0 || width == 0 {
		return false
	}
	if (rows-1)*ds+width > nd || (rows-1)*ss+width > ns {
		panic(fmt.Sprintf("vecops: %s: %d runs of %d, strides %d and %d, do not fit %d and %d elements", op, rows, width, ds, ss, nd, ns))
	}
	return true
}
