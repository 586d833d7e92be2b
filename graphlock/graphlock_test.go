package graphlock

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDoReturnsError(t *testing.T) {
	want := errors.New("boom")
	assert.Same(t, want, Do(func() error { return want }))
	assert.NoError(t, Do(func() error { return nil }))
}

func TestDoIsExclusive(t *testing.T) {
	var inside, maxInside, count int // guarded by the lock under test
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 200; k++ {
				_ = Do(func() error {
					inside++
					if inside > maxInside {
						maxInside = inside
					}
					count++
					inside--
					return nil
				})
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, maxInside)
	assert.Equal(t, 8*200, count)
}

func TestDoReleasesOnPanic(t *testing.T) {
	require.Panics(t, func() { _ = Do(func() error { panic("x") }) })
	assert.NoError(t, Do(func() error { return nil }), "lock released after panic")
}
