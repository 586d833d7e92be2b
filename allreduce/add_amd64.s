#include "textflag.h"

// AVX2 element-wise add kernels: out[i] = a[i] + b[i] for i < n.
//
// Register use: DI = out, SI = a, DX = b, CX = elements left.
// Every element gets exactly one IEEE add (VADDPS/VADDPD, or VADDSS/VADDSD in
// the scalar tail) with a as the first source, as the Go loop does, so the
// result is bitwise identical to it; integer adds wrap. All loads and stores
// are unaligned-safe. out may alias a or b exactly: each block loads its
// inputs before it stores the same positions of out.

// ADD4 adds 4 YMM registers' worth (128 bytes) and advances the pointers.
// MOV is the unaligned load/store of the operation's domain (VMOVUPS,
// VMOVUPD or VMOVDQU) and VOP the packed add.
#define ADD4(MOV, VOP) \
	MOV     0(SI), Y0    \
	MOV     32(SI), Y1   \
	MOV     64(SI), Y2   \
	MOV     96(SI), Y3   \
	VOP     0(DX), Y0, Y0  \
	VOP     32(DX), Y1, Y1 \
	VOP     64(DX), Y2, Y2 \
	VOP     96(DX), Y3, Y3 \
	MOV     Y0, 0(DI)    \
	MOV     Y1, 32(DI)   \
	MOV     Y2, 64(DI)   \
	MOV     Y3, 96(DI)   \
	ADDQ    $128, SI     \
	ADDQ    $128, DX     \
	ADDQ    $128, DI

// ADD1 adds one YMM register's worth (32 bytes) and advances the pointers.
#define ADD1(MOV, VOP) \
	MOV     0(SI), Y0   \
	VOP     0(DX), Y0, Y0 \
	MOV     Y0, 0(DI)   \
	ADDQ    $32, SI     \
	ADDQ    $32, DX     \
	ADDQ    $32, DI

// VECLOOPS runs the 4-register loop while CX >= 4*W, then the 1-register
// loop while CX >= W, W being the elements per YMM register; it leaves
// CX < W elements for the scalar tail.
#define VECLOOPS(MOV, VOP, W, L4, L1, T1) \
	CMPQ CX, $(4*W) \
	JB   L1         \
L4:                 \
	ADD4(MOV, VOP)  \
	SUBQ $(4*W), CX \
	CMPQ CX, $(4*W) \
	JAE  L4         \
L1:                 \
	CMPQ CX, $W     \
	JB   T1         \
	ADD1(MOV, VOP)  \
	SUBQ $W, CX     \
	JMP  L1         \
T1:

// func addFloat32AVX2(out, a, b *float32, n int)
TEXT ·addFloat32AVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	VECLOOPS(VMOVUPS, VADDPS, 8, loop4, loop1, tail)
	TESTQ CX, CX
	JZ    done

scalar:
	VMOVSS 0(SI), X0
	VADDSS 0(DX), X0, X0
	VMOVSS X0, 0(DI)
	ADDQ   $4, SI
	ADDQ   $4, DX
	ADDQ   $4, DI
	DECQ   CX
	JNZ    scalar

done:
	VZEROUPPER
	RET

// func addFloat64AVX2(out, a, b *float64, n int)
TEXT ·addFloat64AVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	VECLOOPS(VMOVUPD, VADDPD, 4, loop4, loop1, tail)
	TESTQ CX, CX
	JZ    done

scalar:
	VMOVSD 0(SI), X0
	VADDSD 0(DX), X0, X0
	VMOVSD X0, 0(DI)
	ADDQ   $8, SI
	ADDQ   $8, DX
	ADDQ   $8, DI
	DECQ   CX
	JNZ    scalar

done:
	VZEROUPPER
	RET

// func addInt32AVX2(out, a, b *int32, n int)
TEXT ·addInt32AVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	VECLOOPS(VMOVDQU, VPADDD, 8, loop4, loop1, tail)
	TESTQ CX, CX
	JZ    done

scalar:
	MOVL 0(SI), AX
	ADDL 0(DX), AX
	MOVL AX, 0(DI)
	ADDQ $4, SI
	ADDQ $4, DX
	ADDQ $4, DI
	DECQ CX
	JNZ  scalar

done:
	VZEROUPPER
	RET

// func addInt64AVX2(out, a, b *int64, n int)
TEXT ·addInt64AVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	VECLOOPS(VMOVDQU, VPADDQ, 4, loop4, loop1, tail)
	TESTQ CX, CX
	JZ    done

scalar:
	MOVQ 0(SI), AX
	ADDQ 0(DX), AX
	MOVQ AX, 0(DI)
	ADDQ $8, SI
	ADDQ $8, DX
	ADDQ $8, DI
	DECQ CX
	JNZ  scalar

done:
	VZEROUPPER
	RET
