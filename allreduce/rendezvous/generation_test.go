package rendezvous

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGenerationKeys(t *testing.T) {
	require.Equal(t, "ringddp/elastic/job-1/g0/fault", GenerationKey("job-1", 0, "fault"))
	require.NotEqual(t, GenerationKey("job-1", 1, "plan"), GenerationKey("job-1", 2, "plan"))
	require.NotEqual(t, GenerationKey("job-1", 1, "plan"), GenerationKey("job-2", 1, "plan"))
	// Generation 0 dials as a job without generations; later ones apart.
	require.Equal(t, "job-1", GenerationRunID("job-1", 0))
	require.Equal(t, "job-1-g3", GenerationRunID("job-1", 3))
	require.NotEqual(t, GenerationRunID("job-1", 1), GenerationRunID("job-1", 2))
}
