// Package depcheck holds the test that keeps ringddp's dependencies
// pointing one way (docs/architecture.md, "Layers").
package depcheck
