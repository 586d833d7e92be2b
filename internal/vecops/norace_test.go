//go:build !race

package vecops

const raceBuild = false
