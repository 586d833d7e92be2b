package main

import (
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// compressModel is the cost model -compress auto prices the link by: the
// -profile's, as the communicator gets it (nil without one, or without
// auto).
func compressModel(compress, profile string) (*cost.Model, error) {
	if compress != "auto" || profile == "" {
		return nil, nil
	}
	p, err := cost.ReadProfile(profile, allreduce.KnownMeasurement)
	if err != nil {
		return nil, fmt.Errorf("-profile: %w", err)
	}
	return &p.Model, nil
}
