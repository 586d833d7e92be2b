// Package inproc is the embedded transport: N ranks as goroutines of one
// process. A message is never staged: Send lends its buffer to the receiver,
// whose sink copies or reduces straight out of it, and Send returns once the
// receiver is done with it. So a ring step costs exactly the reduce (or copy)
// of one chunk, with no extra memcpy.
//
// A World also injects faults for tests: per directed link it can delay,
// drop, cut or fail messages, and any rank can be killed.
package inproc
