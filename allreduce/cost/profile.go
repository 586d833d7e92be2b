package cost

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Profile is a calibrated cost model as `cmd/bench -calibrate` writes it:
// the model, where it was measured, and the measurements it came from, so
// that a choice made by it can be checked against what was measured.
//
// Version 2 says how each of the model's links was measured: Nodes and
// LocalSize, the layout the calibration ran on, and IntraTransport and
// InterTransport, what the links within a node and between nodes were
// timed over ("shm", "tcp", "inproc"). Across nodes (Nodes > 1) each
// link is timed alone and the model's Intra and Inter differ; on one host
// (Nodes 1, InterTransport empty) Inter is Intra, as nothing between
// hosts was measured. A version 1 profile (one host, before the fields
// existed) reads as Nodes 1 with Intra = Inter over Transport.
type Profile struct {
	Version   int    `json:"version"`
	Transport string `json:"transport"`
	Ranks     int    `json:"ranks"`
	Host      string `json:"host,omitempty"`
	Created   string `json:"created,omitempty"`
	Model     Model  `json:"model"`

	Nodes          int    `json:"nodes,omitempty"`
	LocalSize      int    `json:"local_size,omitempty"`
	IntraTransport string `json:"intra_transport,omitempty"`
	InterTransport string `json:"inter_transport,omitempty"`

	// Measurements are timed AllReduce calls of each algorithm on Ranks
	// ranks of Transport, by size, and Broadcast and Reduce calls under
	// each schedule (cmd/bench -calibrate takes them after fitting the
	// model).
	Measurements []Measurement `json:"measurements,omitempty"`
}

// Measurement is the measured median time of one algorithm at one size,
// and the fastest of the rounds it is the median of (0: not recorded),
// which says how far the noise reached. Collective is empty for an
// AllReduce (Algorithm an AllReduce algorithm's name), or "broadcast" or
// "reduce" (Algorithm a schedule's: "tree" or "chain").
type Measurement struct {
	Collective string  `json:"collective,omitempty"`
	Algorithm  string  `json:"algorithm"`
	Bytes      int     `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	MinSeconds float64 `json:"min_seconds,omitempty"`
}

// ProfileVersion is the version of the profile format this package
// writes; it reads it and every earlier one (from 1).
const ProfileVersion = 2

// ProfileEnv is the environment variable that names a profile file for
// commands built on this package (cmd/bench -profile, cmd/train).
const ProfileEnv = "RINGDDP_PROFILE"

// ReadProfile reads and validates a profile file: its version, its
// model and its measurements' times, and, where known is not nil, their
// collectives and algorithms (known reports one this build does not know:
// allreduce.KnownMeasurement).
func ReadProfile(path string, known func(Measurement) error) (Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, fmt.Errorf("cost profile: %w", err)
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return Profile{}, fmt.Errorf("cost profile %s: not a profile: %w", path, err)
	}
	switch {
	case p.Version < 1:
		return Profile{}, fmt.Errorf("%w: cost profile %s: no version (want 1 to %d): not a profile cmd/bench -calibrate wrote", ErrInvalid, path, ProfileVersion)
	case p.Version > ProfileVersion:
		return Profile{}, fmt.Errorf("%w: cost profile %s: version %d, this build reads versions 1 to %d (written by a newer ringddp: calibrate again with this build's cmd/bench -calibrate)", ErrInvalid, path, p.Version, ProfileVersion)
	case p.Version == 1:
		p.Nodes, p.LocalSize, p.IntraTransport, p.InterTransport = 1, p.Ranks, p.Transport, ""
	}
	if err := p.Model.Validate(); err != nil {
		return Profile{}, fmt.Errorf("cost profile %s: %w", path, err)
	}
	if p.Nodes < 0 || p.LocalSize < 0 || p.Nodes > 1 && p.InterTransport == "" {
		return Profile{}, fmt.Errorf("%w: cost profile %s: %d nodes of %d ranks, inter-node link over %q: want nodes and local_size ≥ 0, and the inter-node link's transport across nodes", ErrInvalid, path, p.Nodes, p.LocalSize, p.InterTransport)
	}
	for _, m := range p.Measurements {
		if known != nil {
			if err := known(m); err != nil {
				return Profile{}, fmt.Errorf("cost profile %s: measurement: %w", path, err)
			}
		}
		if m.Bytes < 0 || !(m.Seconds >= 0) || !(m.MinSeconds >= 0) || m.MinSeconds > m.Seconds {
			return Profile{}, fmt.Errorf("cost profile %s: measurement of %s at %d bytes: %v s is not a time", path, m.Algorithm, m.Bytes, m.Seconds)
		}
	}
	return p, nil
}

// WriteProfile writes p to path atomically (a temporary file renamed into
// place), with Version set.
func WriteProfile(path string, p Profile) error {
	p.Version = ProfileVersion
	if err := p.Model.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".profile-*")
	if err != nil {
		return fmt.Errorf("cost profile: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("cost profile: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("cost profile: %w", err)
	}
	return nil
}

// ProfileFromEnv reads the profile RINGDDP_PROFILE names (ReadProfile,
// known as there); ok is false when it is unset or empty.
func ProfileFromEnv(getenv func(string) string, known func(Measurement) error) (p Profile, ok bool, err error) {
	path := getenv(ProfileEnv)
	if path == "" {
		return Profile{}, false, nil
	}
	p, err = ReadProfile(path, known)
	if err != nil {
		return Profile{}, false, fmt.Errorf("%s=%s: %w", ProfileEnv, path, err)
	}
	return p, true, nil
}
