package zero

// SetGatherSegment makes GatherOptimizerState move at most n elements per
// collective until the returned function restores the default.
func SetGatherSegment(n int) (restore func()) {
	old := gatherSegment
	gatherSegment = n
	return func() { gatherSegment = old }
}
