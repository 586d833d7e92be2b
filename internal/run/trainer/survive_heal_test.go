package trainer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The senders agree when every rank but the joiners is at the same
// (global step, epoch, step); a joiner's own position does not count.
func TestSendersAgree(t *testing.T) {
	all := []int64{7, 0, 7, 7, 0, 7, -1, 0, 0, 7, 0, 7}
	require.True(t, sendersAgree(all, []int{2}))
	require.False(t, sendersAgree(all, nil))
	all[3] = 6
	require.False(t, sendersAgree(all, []int{2}))
	require.True(t, sendersAgree(all, []int{1, 2}))
}

// The example usage crosses the heal as bytes and back, unchanged.
func TestUsageBytes(t *testing.T) {
	u := []int32{0, 1, 2, 1 << 20, -1}
	b := append([]byte(nil), usageBytes(u)...)
	require.Len(t, b, 20)
	got := make([]int32, len(u))
	copy(usageBytes(got), b)
	require.Equal(t, u, got)
	require.Nil(t, usageBytes(nil))
}
