package allreduce

// PipelineBlocks is how many blocks Hierarchical and Torus cut a buffer
// of bytes into across several nodes (pipeline.go).
func PipelineBlocks(bytes int) int {
	return max(1, min(maxPipelineBlocks, bytes/minPipelineBlock))
}
