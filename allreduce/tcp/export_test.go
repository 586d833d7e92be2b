package tcp

// Kill drops every connection of c without a word, as a crashed process
// would (for the external tests).
func Kill(c *Conn) { c.kill() }
