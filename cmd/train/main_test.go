package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/internal/run/launch/selftest"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/internal/gemm"
)

// writeMNISTDir writes a small synthetic MNIST-style IDX directory: 400
// training and 61 test images of 28×28 in 10 classes.
func writeMNISTDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	all := datasets.Synthetic(461, 28, 28, 10, 5)
	write := func(name string, ds *datasets.Dataset) {
		var images, labels []byte
		for i := range ds.Len() {
			images = append(images, ds.Image(i)...)
			labels = append(labels, byte(ds.Label(i)))
		}
		for _, f := range []struct {
			suffix string
			dims   []int
			data   []byte
		}{
			{"-images-idx3-ubyte", []int{ds.Len(), 28, 28}, images},
			{"-labels-idx1-ubyte", []int{ds.Len()}, labels},
		} {
			var b bytes.Buffer
			require.NoError(t, datasets.WriteIDX(&b, f.dims, f.data))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name+f.suffix), b.Bytes(), 0o644))
		}
	}
	write("train", all.Slice(0, 400))
	write("t10k", all.Slice(400, 461))
	return dir
}

func runTrain(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := runWith(ctx, args, &out, runEnv{ranks: selftest.RankCommand})
	return out.String(), err
}

var requiredKeys = []string{"epoch", "train_loss", "test_accuracy", "test_loss", "samples_per_sec", "epoch_seconds",
	"compute_seconds", "comm_wait_seconds", "optimizer_seconds", "opt_state_bytes_per_rank", "comm_bytes_per_step",
	"ranks", "global_batch"}

func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		for _, k := range requiredKeys {
			require.Contains(t, m, k)
		}
		rows = append(rows, m)
	}
	return rows
}

func TestRunJSONAndOutputs(t *testing.T) {
	data := writeMNISTDir(t)
	out := t.TempDir()
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	stdout, err := runTrain(t, "-data", data, "-ranks", "2", "-batch", "20", "-epochs", "2", "-hidden", "16",
		"-lr", "0.05", "-eval-batch", "25", "-json", "-out", out, "-checkpoint", ck)
	require.NoError(t, err)
	rows := jsonLines(t, stdout)
	require.Len(t, rows, 2)
	for i, r := range rows {
		require.Equal(t, float64(i+1), r["epoch"])
		require.Equal(t, 2.0, r["ranks"])
		require.Equal(t, 20.0, r["global_batch"])
		require.Equal(t, 61.0, r["test_count"])
		require.GreaterOrEqual(t, r["test_accuracy"], 0.0)
		require.LessOrEqual(t, r["test_accuracy"], 1.0)
		require.Greater(t, r["samples_per_sec"], 0.0)
		params := 784*16 + 16 + 16*10 + 10
		require.Equal(t, float64(params*4), r["opt_state_bytes_per_rank"])
		require.Equal(t, float64(params*4), r["comm_bytes_per_step"], "2(N-1)/N·M with N = 2")
	}
	require.Less(t, rows[1]["train_loss"], rows[0]["train_loss"])
	require.Greater(t, rows[1]["test_accuracy"], 0.8)

	f, err := os.Open(filepath.Join(out, metricsFile))
	require.NoError(t, err)
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	require.Equal(t, csvColumns(), recs[0])
	for _, k := range requiredKeys {
		require.Contains(t, recs[0], k)
	}
	require.Equal(t, "2", recs[2][0])

	pf, err := os.Open(filepath.Join(out, plotFile))
	require.NoError(t, err)
	img, err := png.Decode(pf)
	pf.Close()
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 100)

	_, err = os.Stat(ck)
	require.NoError(t, err)
}

func TestRunText(t *testing.T) {
	data := writeMNISTDir(t)
	stdout, err := runTrain(t, "-data", data, "-ranks", "2", "-batch", "40", "-epochs", "1", "-hidden", "8", "-optim", "adam")
	require.NoError(t, err)
	// The report names the kernel variant and each rank's share of the cores.
	v, err := gemm.Best()
	require.NoError(t, err)
	blasName := fmt.Sprintf("gemm %s ×%d BLAS", v.Name, max(1, runtime.GOMAXPROCS(0)/2))
	for _, want := range []string{
		"training mlp (float32", "with DDP on 2 inproc ranks, " + blasName + ": 400 train / 61 test examples",
		"global batch 40 (20 per rank), 10 steps per epoch, adam lr 0.001",
		"  epoch 1/1  step 10/10  loss ",
		"epoch 1/1  train_loss ", "test_acc ", "samples/s", "comm wait ", "optimizer ",
		"done: test accuracy ", "10 steps in total",
	} {
		require.Contains(t, stdout, want)
	}
	quiet, err := runTrain(t, "-data", data, "-ranks", "1", "-batch", "40", "-epochs", "1", "-hidden", "8", "-quiet")
	require.NoError(t, err)
	require.NotContains(t, quiet, "step 10/10")
	require.NotContains(t, quiet, "training mlp")
	require.Contains(t, quiet, "epoch 1/1  train_loss")
}

func TestResumeFromFlags(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	stdout, err := runTrain(t, "-data", data, "-ranks", "2", "-batch", "20", "-epochs", "2", "-hidden", "12",
		"-optim", "adamw", "-seed", "9", "-max-steps", "25", "-checkpoint", ck)
	require.NoError(t, err)
	require.Contains(t, stdout, "stopped at -max-steps 25 (epoch 2, step 5)")
	require.Contains(t, stdout, "checkpoint: "+ck)

	// The checkpoint supplies ranks, model, hidden, batch, seed, optimizer
	// and its hyper-parameters.
	stdout, err = runTrain(t, "-data", data, "-epochs", "2", "-resume", ck, "-checkpoint", ck)
	require.NoError(t, err)
	require.Contains(t, stdout, "resuming from "+ck+" at epoch 2, step 5 (global step 25)")
	require.Contains(t, stdout, "on 2 inproc ranks")
	require.Contains(t, stdout, "adamw lr 0.001 weight decay 0.01")
	require.Contains(t, stdout, "epoch 2/2  train_loss")
	require.Contains(t, stdout, "40 steps in total")

	_, err = runTrain(t, "-data", data, "-resume", ck, "-model", "cnn")
	require.ErrorContains(t, err, `model: checkpoint has "mlp", this run has "cnn"`)
	_, err = runTrain(t, "-data", data, "-resume", ck, "-lr", "0.5")
	require.ErrorContains(t, err, "lr: checkpoint has 0.001, this run has 0.5")

	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	b, err := os.ReadFile(ck)
	require.NoError(t, err)
	b[len(b)-5] ^= 1
	require.NoError(t, os.WriteFile(bad, b, 0o644))
	_, err = runTrain(t, "-data", data, "-resume", bad)
	require.ErrorContains(t, err, "-resume")
	require.ErrorContains(t, err, "checksum mismatch")
}

func TestFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-ranks", "0"}, "-ranks 0: need at least 1"},
		{[]string{"-model", "rnn"}, `-model "rnn": unknown model`},
		{[]string{"-dtype", "float16"}, `-dtype "float16": unknown element type`},
		{[]string{"-epochs", "0"}, "-epochs 0"},
		{[]string{"-batch", "0"}, "-batch 0"},
		{[]string{"-batch", "3"}, "-batch 3 is smaller than -ranks 4"},
		{[]string{"-eval-batch", "0"}, "-eval-batch 0"},
		{[]string{"-optim", "lbfgs"}, `-optim "lbfgs": unknown optimizer`},
		{[]string{"-lr", "-1"}, "-lr -1: must be positive"},
		{[]string{"-momentum", "-0.5"}, "-momentum -0.5"},
		{[]string{"-optim", "adam", "-momentum", "0.9"}, "-momentum 0.9: only -optim sgd has momentum"},
		{[]string{"-weight-decay", "-1"}, "-weight-decay -1"},
		{[]string{"-bucket-mb", "0"}, "-bucket-mb 0"},
		{[]string{"-max-steps", "-3"}, "-max-steps -3"},
		{[]string{"-hidden", "16,x"}, `-hidden "16,x"`},
		{[]string{"-model", "cnn", "-hidden", "16"}, "-hidden applies to -model mlp only"},
		{[]string{"-transport", "pigeon"}, `-transport "pigeon": unknown transport (valid: auto, inproc, shm, tcp)`},
		{[]string{"-ranks", "x"}, `invalid value "x" for flag -ranks`},
		{[]string{"-nosuch"}, "flag provided but not defined: -nosuch"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-resume", filepath.Join(t.TempDir(), "missing.safetensors")}, "-resume"},
		{[]string{"-data", t.TempDir()}, "train-images-idx3-ubyte"},
	}
	for _, c := range cases {
		_, err := runTrain(t, c.args...)
		require.ErrorContains(t, err, c.want, "args %q", c.args)
	}
}

func TestHelp(t *testing.T) {
	out, err := runTrain(t, "-h")
	require.NoError(t, err)
	for _, f := range []string{"-ranks", "-model", "-dtype", "-epochs", "-batch", "-lr", "-momentum", "-weight-decay",
		"-optim", "-bucket-mb", "-seed", "-data", "-export-data", "-checkpoint", "-resume", "-max-steps", "-out", "-json", "-transport",
		"-timeout", "-quiet", "-nnodes", "-node-rank", "-master", "-insecure",
		"-checkpoint-every", "-checkpoint-keep", "-max-restarts", "-min-ranks", "-join-timeout"} {
		require.Regexp(t, `(?m)^  `+f+`( |$)`, out)
	}
}

// -export-data writes the bundled MNIST where -data reads it, for hosts
// without the go command.
func TestExportData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := datasets.BundledMNISTDir(ctx); err != nil {
		t.Skipf("bundled MNIST not available: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "mnist")
	out, err := runTrain(t, "-export-data", dir)
	require.NoError(t, err)
	for _, name := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		require.Contains(t, out, "wrote "+filepath.Join(dir, name)+"\n")
	}
	require.Contains(t, out, "train with -data "+dir)

	out, err = runTrain(t, "-data", dir, "-ranks", "2", "-batch", "20", "-hidden", "8", "-max-steps", "2", "-eval-batch", "1000", "-quiet", "-json")
	require.NoError(t, err, out)
	_, err = runTrain(t, "-data", dir, "-ranks", "2", "-batch", "20", "-hidden", "8", "-max-steps", "2", "-eval-batch", "1000")
	require.NoError(t, err)

	_, err = runTrain(t, "-export-data", dir, "-ranks", "2")
	require.ErrorContains(t, err, "-export-data writes the data and exits: it takes no other flags (got -ranks)")
	_, err = runTrain(t, "-export-data", "")
	require.ErrorContains(t, err, "-export-data: needs a directory")
}

// Where the bundled MNIST cannot be found (a deployed binary: no go
// command, no module cache), the error says what to do.
func TestNoBundledMNIST(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PATH", "")
	t.Setenv("HOME", home)
	t.Setenv("GOPATH", filepath.Join(home, "go"))
	t.Setenv("GOMODCACHE", filepath.Join(home, "modcache"))
	_, err := runTrain(t, "-ranks", "1", "-max-steps", "1")
	require.ErrorIs(t, err, datasets.ErrBundledMNISTUnavailable)
	for _, want := range []string{"no go command", "-data DIR", "-export-data DIR", datasets.MNISTDownloadURL} {
		require.ErrorContains(t, err, want)
	}
	_, err = runTrain(t, "-export-data", t.TempDir())
	require.ErrorIs(t, err, datasets.ErrBundledMNISTUnavailable)
	require.ErrorContains(t, err, "-export-data: ")
}
