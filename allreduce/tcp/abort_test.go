package tcp

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// A mismatch travels in an abort frame with its ranks and headers intact,
// so errors.As finds it on the receiving rank; other causes travel as text.
func TestAbortPayloadRoundTrip(t *testing.T) {
	mm := &transport.MismatchError{Rank: 2, Peer: 3,
		Local: transport.Header{Seq: 5, Kind: 1, DType: 2, Op: 4, Root: -1, Count: 30000, Step: 1}, LocalBytes: 240000,
		Remote: transport.Header{Seq: 5, Kind: 1, DType: 2, Op: 4, Root: -1, Count: 30001, Step: 1}, RemoteBytes: 240008}
	cause := fmt.Errorf("allreduce: rank 2 called ...: %w", mm)
	flags, payload := abortPayload(cause)
	if flags != flagMismatch || len(payload) > maxCauseLen {
		t.Fatalf("flags %#x, %d bytes", flags, len(payload))
	}
	ae, err := decodeAbort(2, 4, flags, payload)
	if err != nil {
		t.Fatal(err)
	}
	var got *transport.MismatchError
	if !errors.As(ae, &got) || *got != *mm {
		t.Fatalf("mismatch %+v, want %+v", got, mm)
	}
	if !errors.Is(ae, transport.ErrMismatch) || ae.Cause != cause.Error() || ae.Rank != 2 {
		t.Fatalf("abort error %+v", ae)
	}

	long := errors.New(strings.Repeat("x", 5000))
	flags, payload = abortPayload(long)
	if flags != 0 || len(payload) != maxCauseLen {
		t.Fatalf("plain cause: flags %#x, %d bytes", flags, len(payload))
	}
	ae, err = decodeAbort(1, 4, flags, payload)
	if err != nil || ae.Detail != nil || errors.Is(ae, transport.ErrMismatch) {
		t.Fatalf("plain cause decoded as %+v, %v", ae, err)
	}

	// Ranks out of range and a damaged record are protocol errors.
	_, payload = abortPayload(cause)
	if _, err := decodeAbort(2, 3, flagMismatch, payload); err == nil {
		t.Fatal("rank 3 of 3 accepted")
	}
	payload[30] ^= 1
	if _, err := decodeAbort(2, 4, flagMismatch, payload); err == nil {
		t.Fatal("damaged record accepted")
	}
}

// FuzzDecodeAbort: any payload decodes or is refused, without panicking.
func FuzzDecodeAbort(f *testing.F) {
	_, p := abortPayload(fmt.Errorf("x: %w", &transport.MismatchError{Rank: 1, Peer: 0}))
	f.Add(byte(flagMismatch), p)
	f.Add(byte(0), []byte("plain"))
	f.Add(byte(flagMismatch), []byte{})
	f.Fuzz(func(t *testing.T, flags byte, b []byte) {
		if len(b) > maxCauseLen {
			return
		}
		_, _ = decodeAbort(0, 4, flags&flagMismatch, b)
	})
}
