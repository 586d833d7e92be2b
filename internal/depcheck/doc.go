// Package depcheck holds the test that keeps ringddp's dependencies
// pointing one way (DESIGN.md, "Layers and layout").
package depcheck
