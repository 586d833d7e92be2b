package main

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/trainer"
)

// A run stopped by -max-steps inside an epoch reports that epoch as a full
// one is reported, marked partial: the text line, the JSON object and the
// metrics.csv row.
func TestMaxStepsPrintsPartialEpoch(t *testing.T) {
	data := writeMNISTDir(t) // 400 training examples: 10 steps of 40 per epoch
	args := []string{"-data", data, "-ranks", "2", "-batch", "40", "-epochs", "2", "-hidden", "8", "-max-steps", "15"}

	text, err := runTrain(t, append(args, "-quiet")...)
	require.NoError(t, err)
	require.Contains(t, text, "epoch 1/2  train_loss ")
	require.Contains(t, text, "epoch 2/2 (partial: step 5/10)  train_loss ")
	require.Contains(t, text, "% overlapped)")
	require.Contains(t, text, "stopped at -max-steps 15 (epoch 2, step 5)")

	out := t.TempDir()
	js, err := runTrain(t, append(args, "-json", "-out", out)...)
	require.NoError(t, err)
	rows := jsonLines(t, js)
	require.Len(t, rows, 2)
	require.Equal(t, false, rows[0]["partial"])
	require.Equal(t, 10.0, rows[0]["step_in_epoch"])
	part := rows[1]
	require.Equal(t, true, part["partial"])
	require.Equal(t, 2.0, part["epoch"])
	require.Equal(t, 5.0, part["steps"])
	require.Equal(t, 5.0, part["step_in_epoch"])
	require.Equal(t, 10.0, part["steps_per_epoch"])
	require.Equal(t, 15.0, part["global_step"])
	require.Equal(t, 61.0, part["test_count"])
	require.Greater(t, part["samples_per_sec"], 0.0)
	require.Greater(t, part["comm_seconds"], 0.0)

	f, err := os.Open(filepath.Join(out, metricsFile))
	require.NoError(t, err)
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	col := slices.Index(recs[0], "partial")
	require.GreaterOrEqual(t, col, 0)
	require.Equal(t, "false", recs[1][col])
	require.Equal(t, "true", recs[2][col])
	require.Contains(t, recs[0], "comm_seconds")
}

func TestEpochX(t *testing.T) {
	require.Equal(t, 2.0, epochX(trainer.EpochMetrics{Epoch: 2, StepInEpoch: 10, StepsPerEpoch: 10}))
	require.Equal(t, 1.25, epochX(trainer.EpochMetrics{Epoch: 2, Partial: true, StepInEpoch: 5, StepsPerEpoch: 20}))
}
