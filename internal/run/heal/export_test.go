package heal

// WithCorruption makes this rank, as a sender, pass each segment it sends
// to corrupt after its checksum is taken: a stripe damaged on the wire.
func WithCorruption(corrupt func(stripe int, p []byte)) Option {
	return func(c *config) { c.corrupt = corrupt }
}
