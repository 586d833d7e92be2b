// Package depcheck holds the tests that keep ringddp's dependencies
// pointing one way (docs/architecture.md, "Layers"): the table of what
// each package must not depend on, the floor and the roof of internal/
// (internal/run/... above the library, the rest of internal/ below it),
// and the packages that must not link Go's testing package.
package depcheck
