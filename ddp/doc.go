// Package ddp is data-parallel training of gorgonia models: every rank holds
// a full replica, computes gradients on its own part of the batch, and the
// gradients are averaged over ranks with all-reduce while the backward pass
// is still running, like PyTorch's DistributedDataParallel.
//
// Vocabulary:
//   - arena: one flat slice holding every parameter (the parameter arena)
//     and one of the same layout holding every gradient (the gradient
//     arena). Parameters are laid out in reverse creation order, the order
//     their gradients become ready in a backward pass, so that a bucket is a
//     contiguous range of both arenas.
//   - bucket: a contiguous range of whole parameters, at most
//     FirstBucketBytes for the first and BucketBytes for the rest (a larger
//     parameter gets a bucket of its own). A bucket is all-reduced (Avg) as
//     soon as the gradients of all its parameters have arrived.
//   - tap: an identity op applied to each parameter, which the forward pass
//     uses in its place. It joins the graph at its first use, right before
//     its first consumer (see newTap). Its derivative wraps the incoming
//     gradient in a hook.
//   - hook: an identity op on a parameter's gradient. gorgonia's tape runs
//     nodes in creation order, and G.Grad creates the hook when it reaches
//     the tap, right after the consumer's gradients, so a hook runs
//     mid-backward, as soon as that gradient is complete, before the
//     backward pass of earlier layers. It copies the gradient into the
//     arena and, when the bucket is complete, hands it to the communication
//     goroutine without blocking.
//   - agreement (WithAgreement): the step's loss and a stop vote, averaged
//     over ranks by the last bucket's collective rather than one of their
//     own; the gradients stay bitwise what the bucket alone gives.
//
// A step is: fill the inputs, Run (vm.RunAll with buckets all-reducing
// mid-backward, then wait for the last bucket), Step (the optimizer on the
// arenas), and the next Run resets the machine. Construction checks that
// every rank has the same parameter shapes and broadcasts rank 0's values.
// StepStats says how long the bucket collectives took in all (Comm) and
// how much of that the backward pass did not hide (CommWait).
package ddp
