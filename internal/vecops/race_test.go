//go:build race

package vecops

// raceBuild: the race detector's instrumentation changes the compiler's
// register allocation in the scalar code, and with it which operand's NaN
// an operation on two NaNs keeps; the kernels mirror the ordinary build.
const raceBuild = true
