// Package tapevm runs a compiled gorgonia tape machine again without
// dropping the values it computed last time.
//
// gorgonia's tapeMachine.Reset rewinds the program and also forgets every
// register's value, so that the next RunAll allocates each intermediate
// tensor afresh (zeroed by the Go allocator, then collected): megabytes a
// step for a small MLP, and a large share of a step once the matrix
// products are fast. The tape's own alloc instructions already keep a
// register whose value has the right dtype and shape, and every op
// overwrites its preallocated output, so rewinding the program counter
// alone gives the same results with none of the allocations.
//
// That holds for the ops Safe lists, which overwrite the whole of their
// output every run. It does not hold for all of gorgonia's: its transposes,
// im2col and pooling keep views and strides of values across the ops
// that share a register, and a LeNet built on gorgonia's Conv2d and
// MaxPool2D rewound this way indexes past a slice. So a caller asks Safe
// about its graph once and rewinds only graphs made of listed ops and of
// ops of this module, which all overwrite their outputs or return fresh
// values (models' LeNet, on models' own convolution and pooling, is one).
//
// Rewind does that for gorgonia v0.9's *tapeMachine, whose program counter
// is the unexported int field pc; for any other machine, or if a gorgonia
// version changes the field, it falls back to Reset.
package tapevm

import (
	"reflect"
	"strings"
	"unsafe"

	G "gorgonia.org/gorgonia"
)

// rewindable reports whether a gorgonia op, by reflected type, overwrites
// all of its output on every run whatever the register held: matrix
// products, element-wise binary ops, repeats (broadcasts), reshapes,
// sums, sizes and constants; everything an MLP with bias and ReLU needs,
// forward and backward. A test (TestRewindMatchesReset in package models)
// holds them to bitwise equality with Reset.
func rewindable(opType string) bool {
	switch opType {
	case "gorgonia.linAlgBinOp", "gorgonia.elemBinOp", "*gorgonia.repeatOp", "gorgonia.reshapeOp",
		"gorgonia.sumOp", "gorgonia.sizeOp", "gorgonia.constantScalar":
		return true
	}
	return false
}

// ownPackages is the import path prefix of this module's ops.
const ownPackages = "github.com/ringddp/ringddp/"

// Safe reports whether every op of g is one that Rewind runs correctly
// (see the package comment), and names the first that is not.
func Safe(g *G.ExprGraph) (ok bool, unknown string) {
	for _, n := range g.AllNodes() {
		op := n.Op()
		if op == nil {
			continue
		}
		t := reflect.TypeOf(op)
		if rewindable(t.String()) {
			continue
		}
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if strings.HasPrefix(t.PkgPath(), ownPackages) {
			continue
		}
		return false, reflect.TypeOf(op).String()
	}
	return true, ""
}

// Resetter is what Rewind needs of a VM: its Reset, the fallback.
type Resetter interface{ Reset() }

// tapeMachineType is the reflected type name of gorgonia's tape machine.
const tapeMachineType = "gorgonia.tapeMachine"

// Rewind readies vm to run its program again from the start, keeping its
// registers' values (see the package comment); it reports whether it
// could, having called vm.Reset otherwise.
func Rewind(vm Resetter) bool {
	if pc := programCounter(vm); pc != nil {
		*pc = 0
		return true
	}
	vm.Reset()
	return false
}

// programCounter returns the address of vm's program counter when vm is a
// gorgonia tape machine with the expected layout, nil otherwise.
func programCounter(vm Resetter) *int {
	v := reflect.ValueOf(vm)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	e := v.Elem()
	if e.Kind() != reflect.Struct || e.Type().String() != tapeMachineType {
		return nil
	}
	f := e.FieldByName("pc")
	if !f.IsValid() || f.Kind() != reflect.Int {
		return nil
	}
	return (*int)(unsafe.Pointer(f.UnsafeAddr()))
}
