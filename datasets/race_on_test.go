//go:build race

package datasets

// raceEnabled reports whether the race detector is on; the tests then skip
// decompressing the 47 MB of MNIST training images, which it slows 25-fold.
const raceEnabled = true
