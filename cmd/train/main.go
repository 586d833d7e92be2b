// Command train trains a model on MNIST with data-parallel ranks
// (ringddp's DDP over gorgonia) and reports, per epoch, the training loss,
// test accuracy, throughput and where each step's time went.
//
//	go run ./cmd/train -ranks 4                  # the MLP, 3 epochs, real MNIST
//	go run ./cmd/train -model cnn                # LeNet
//	go run ./cmd/train -checkpoint ck.safetensors -max-steps 300
//	go run ./cmd/train -resume ck.safetensors -checkpoint ck.safetensors
//	go run ./cmd/train -json -out results        # JSON lines, metrics.csv, loss_accuracy.png
//
// Each rank is a goroutine with its own model replica; gradients are
// averaged with all-reduce while the backward pass runs. Ctrl-C stops all
// ranks after the same step and writes a checkpoint (with -checkpoint);
// a second Ctrl-C exits at once. With -transport tcp -max-restarts K the
// launcher restarts a job that lost a rank from its newest valid
// checkpoint (docs/elastic.md). Run with -h for the flags.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/ringddp/ringddp/internal/run/launch"
)

func main() { os.Exit(runMain(runEnv{ranks: launch.ThisProgram, runsDir: defaultRunsDir})) }

// runMain is main with env: it trains as the command line says and returns
// the exit status.
func runMain(env runEnv) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills the process
	}()
	err := runWith(ctx, os.Args[1:], os.Stdout, env)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		return 1
	}
	return 0
}
