package rendezvous

import "strconv"

// Generations. A job whose ranks continue after a peer fails (the
// launcher's -on-failure continue, docs/elastic.md) runs as a sequence of
// groups, its generations: generation 0 is the group the job started
// with, and each change of membership (a rank lost; later, a rank joining
// at a step boundary) makes the next. Every key a generation uses carries
// its number, so that nothing written for one generation (a fault report,
// a check-in, a plan, a rank's transport address) is ever read as another
// generation's, and the transport's run id carries it too
// (GenerationRunID), so that a connection or frame of an old generation's
// mesh fails the new mesh's handshake instead of being taken for one of
// its own.
//
// The keys of generation g, under GenerationKey(runID, g, name):
//
//	fault          set by whoever first sees generation g fail (a rank
//	               whose collective failed, the launcher seeing a rank
//	               exit): the reason; every member watches it
//	alive/<rank>   a member's check-in after the fault: the optimizer steps
//	               it has completed (<rank> its rank at the job's start)
//	plan           the launcher's plan of generation g+1 is published as
//	               the plan key of generation g+1
//
// The first generation's transport keeps the job's run id, so that a job
// that never loses a rank connects exactly as one started without
// generations.

// GenerationKey is key name of generation gen of the job runID.
func GenerationKey(runID string, gen int, name string) string {
	return "ringddp/elastic/" + runID + "/g" + strconv.Itoa(gen) + "/" + name
}

// GenerationRunID is the transport run id of generation gen of the job
// runID: runID itself for generation 0, "<runID>-g<gen>" after.
func GenerationRunID(runID string, gen int) string {
	if gen == 0 {
		return runID
	}
	return runID + "-g" + strconv.Itoa(gen)
}

// Generation is what a rank learns when its group changes: the new
// generation's number, its rank and world size in it, and the ranks (by
// their rank at the job's start) that left it.
type Generation struct {
	Number    int
	Rank      int   // this rank in the generation
	Size      int   // the generation's world size
	StartRank int   // this rank's rank when the job started
	Lost      []int // ranks at the job's start removed at this change
}
