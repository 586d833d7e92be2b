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
type Profile struct {
	Version   int    `json:"version"`
	Transport string `json:"transport"`
	Ranks     int    `json:"ranks"`
	Host      string `json:"host,omitempty"`
	Created   string `json:"created,omitempty"`
	Model     Model  `json:"model"`
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

// ProfileVersion is the version of the profile format this package reads
// and writes.
const ProfileVersion = 1

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
	if p.Version != ProfileVersion {
		return Profile{}, fmt.Errorf("cost profile %s: version %d, this build reads version %d", path, p.Version, ProfileVersion)
	}
	if err := p.Model.Validate(); err != nil {
		return Profile{}, fmt.Errorf("cost profile %s: %w", path, err)
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
