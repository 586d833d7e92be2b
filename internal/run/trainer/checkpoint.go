package trainer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/outfile"
	"github.com/ringddp/ringddp/internal/safetensors"
	"github.com/ringddp/ringddp/optim"
)

// Checkpoint file layout (safetensors):
//
//	tensors   param/<index>/<node name>   one per parameter, creation order
//	          hook/...                    the communication hook's state (optional;
//	                                      checkpoint_hook.go)
//	                                      index (3+ digits), model dtype, model shape
//	          optim/<buffer name>         the optimizer's per-element buffers
//	                                      (momentum_buffer; exp_avg, exp_avg_sq) over
//	                                      the flat parameter arena, model dtype
//	metadata  format, format_version      "ringddp.checkpoint", "1"
//	          model, dtype, hidden        what was trained (hidden: MLP widths, "a,b")
//	          global_batch, ranks, seed   the run's shape (ranks is informational)
//	          zero1                       "true" when written by a ZeRO-1 run (optional:
//	                                      absent reads as false)
//	          job_id                      the job that wrote it (job.go; optional:
//	                                      absent in files of older builds)
//	          epoch, step_in_epoch        position: 0-based epoch in progress and the
//	          global_step                 steps of it done; optimizer steps in total
//	          steps_per_epoch             at the writer's world size (informational)
//	          epoch_loss_sum, epoch_loss_steps   the partial epoch's train-loss sum
//	          param_layout                JSON [{index, name, shape, offset, size}]:
//	                                      where each parameter sits in the flat arena
//	                                      the optim/ buffers are laid out in
//	          optim, optim.dtype, optim.step, optim.len, optim.hyper (JSON
//	          [{name, value}]), optim.buffers (JSON names)
//	          hook.*                      the communication hook's state (optional;
//	                                      checkpoint_hook.go)
//	          data_sha256                 SHA-256 of the data section
//	          index_sha256                SHA-256 over every other metadata entry and
//	                                      every tensor's name, dtype, shape and data
//	                                      hash: covers the header too
//
// Because the optimizer buffers are stored per element with the arena
// layout spelled out, a reader can re-slice them for any arena layout or
// shard them over any number of ranks (optim.SliceState).

const (
	checkpointFormat  = "ringddp.checkpoint"
	checkpointVersion = "1"
	keyDataSHA        = "data_sha256"
	keyIndexSHA       = "index_sha256"
	keyJobID          = "job_id"
	keyZero1          = "zero1"
)

// ErrCheckpoint is wrapped by every error about an unreadable, corrupt or
// inconsistent checkpoint file.
var ErrCheckpoint = errors.New("bad checkpoint")

// ErrMismatch is wrapped by every error about a checkpoint that does not
// fit the run resuming from it (model, dtype, batch, ...).
var ErrMismatch = errors.New("checkpoint does not match the run")

// layoutEntry is one parameter's place in the checkpoint's flat arena.
type layoutEntry struct {
	Index  int    `json:"index"`
	Name   string `json:"name"`
	Shape  []int  `json:"shape"`
	Offset int    `json:"offset"`
	Size   int    `json:"size"`
}

type hyperEntry struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// CheckpointInfo is what a checkpoint says about the run that wrote it.
type CheckpointInfo struct {
	Model       string
	DType       string
	Hidden      []int // MLP only
	GlobalBatch int
	Ranks       int
	Seed        int64
	Zero1       bool   // written by a ZeRO-1 run
	JobID       string // the job that wrote it ("" from an older build)

	Epoch         int   // 0-based epoch in progress
	StepInEpoch   int   // steps of it done
	GlobalStep    int64 // optimizer steps done
	StepsPerEpoch int

	EpochLossSum   float64
	EpochLossSteps int

	Optim       string
	LR          float64
	Momentum    float64 // sgd
	WeightDecay float64
}

// checkpoint is a validated checkpoint file.
type checkpoint struct {
	path string
	CheckpointInfo
	layout []layoutEntry
	params [][]float64
	opt    optim.State  // buffers over the checkpoint's arena layout
	hook   *hookSection // the communication hook's state; nil: none (checkpoint_hook.go)
}

func ckErr(path, format string, args ...any) error {
	return fmt.Errorf("trainer: checkpoint %s: %w: %s", path, ErrCheckpoint, fmt.Sprintf(format, args...))
}

func paramTensorName(i int, name string) string { return fmt.Sprintf("param/%03d/%s", i, name) }

const optimPrefix = "optim/"

func dtypeTag(dtype string) safetensors.DType {
	if dtype == Float64 {
		return safetensors.F64
	}
	return safetensors.F32
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// indexSHA256 hashes every metadata entry but itself and every tensor's
// name, dtype, shape and data hash, in a canonical order.
func indexSHA256(meta map[string]string, tensors []safetensors.Tensor) string {
	h := sha256.New()
	str := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		if k != keyIndexSHA {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		str(k)
		str(meta[k])
	}
	ts := slices.Clone(tensors)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	for _, t := range ts {
		str(t.Name)
		str(string(t.DType))
		str(fmt.Sprint(t.Shape))
		sum := sha256.Sum256(t.Data)
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeCheckpoint writes the parameters (from d's arena), the full optimizer state st,
// the hook state (nil: none) and info to path, atomically.
func writeCheckpoint[T Float](path string, info CheckpointInfo, params G.Nodes, d *ddp.DDP[T], st optim.State, hook *hookSection) error {
	arena := d.ParamArena()
	tensors := make([]safetensors.Tensor, 0, len(params)+2)
	layout := make([]layoutEntry, len(params))
	for i, p := range params {
		lo, hi := d.Offset(i)
		shape := []int(p.Shape().Clone())
		t, err := safetensors.New(paramTensorName(i, p.Name()), shape, arena[lo:hi])
		if err != nil {
			return err
		}
		tensors = append(tensors, t)
		layout[i] = layoutEntry{Index: i, Name: p.Name(), Shape: shape, Offset: lo, Size: hi - lo}
	}
	bufNames := make([]string, len(st.Buffers))
	for k, b := range st.Buffers {
		bufNames[k] = b.Name
		data := make([]T, len(b.Data))
		for j, x := range b.Data {
			data[j] = T(x) // exact: the buffers hold T values
		}
		t, err := safetensors.New(optimPrefix+b.Name, []int{len(data)}, data)
		if err != nil {
			return err
		}
		tensors = append(tensors, t)
	}
	hyper := make([]hyperEntry, len(st.Hyper))
	for k, h := range st.Hyper {
		hyper[k] = hyperEntry{h.Name, h.Value}
	}
	layoutJSON, err := json.Marshal(layout)
	if err != nil {
		return err
	}
	hyperJSON, err := json.Marshal(hyper)
	if err != nil {
		return err
	}
	bufJSON, err := json.Marshal(bufNames)
	if err != nil {
		return err
	}
	meta := map[string]string{
		"format":           checkpointFormat,
		"format_version":   checkpointVersion,
		"model":            info.Model,
		"dtype":            info.DType,
		"global_batch":     strconv.Itoa(info.GlobalBatch),
		"ranks":            strconv.Itoa(info.Ranks),
		"seed":             strconv.FormatInt(info.Seed, 10),
		"epoch":            strconv.Itoa(info.Epoch),
		"step_in_epoch":    strconv.Itoa(info.StepInEpoch),
		"global_step":      strconv.FormatInt(info.GlobalStep, 10),
		"steps_per_epoch":  strconv.Itoa(info.StepsPerEpoch),
		"epoch_loss_sum":   formatFloat(info.EpochLossSum),
		"epoch_loss_steps": strconv.Itoa(info.EpochLossSteps),
		"param_layout":     string(layoutJSON),
		"optim":            st.Optimizer,
		"optim.dtype":      st.DType,
		"optim.step":       strconv.FormatInt(st.Step, 10),
		"optim.len":        strconv.Itoa(st.Len),
		"optim.hyper":      string(hyperJSON),
		"optim.buffers":    string(bufJSON),
	}
	if info.Model == ModelMLP {
		meta["hidden"] = joinInts(info.Hidden)
	}
	if info.JobID != "" {
		meta[keyJobID] = info.JobID
	}
	meta[keyZero1] = strconv.FormatBool(info.Zero1)
	if tensors, err = addHookSection[T](hook, tensors, meta); err != nil {
		return err
	}
	meta[keyDataSHA] = safetensors.DataSHA256(tensors)
	meta[keyIndexSHA] = indexSHA256(meta, tensors)
	if err := checkpointLimits().CheckWrite(tensors, meta); err != nil {
		return fmt.Errorf("trainer: the checkpoint would not be readable: %w", err)
	}
	return safetensors.WriteFile(path, outfile.Private, tensors, meta)
}

func mismatch(path, field string, ck, run any) error {
	return fmt.Errorf("trainer: resume from %s: %w: %s: checkpoint has %v, this run has %v", path, ErrMismatch, field, ck, run)
}

// checkConfig compares the checkpoint with the run's configuration and
// names the first field that differs. Ranks may differ.
func (c *checkpoint) checkConfig(cfg Config) error {
	q := func(s string) string { return strconv.Quote(s) }
	switch {
	case c.Model != cfg.Model:
		return mismatch(c.path, "model", q(c.Model), q(cfg.Model))
	case c.DType != cfg.DType:
		return mismatch(c.path, "dtype", q(c.DType), q(cfg.DType))
	case c.Model == ModelMLP && !slices.Equal(c.Hidden, cfg.hidden()):
		return mismatch(c.path, "hidden", joinInts(c.Hidden), joinInts(cfg.hidden()))
	case c.GlobalBatch != cfg.GlobalBatch:
		return mismatch(c.path, "batch (global)", c.GlobalBatch, cfg.GlobalBatch)
	case c.Seed != cfg.Seed:
		return mismatch(c.path, "seed", c.Seed, cfg.Seed)
	case c.Optim != cfg.Optim:
		return mismatch(c.path, "optim", q(c.Optim), q(cfg.Optim))
	case c.LR != cfg.LR:
		return mismatch(c.path, "lr", c.LR, cfg.LR)
	case c.Optim == OptimSGD && c.Momentum != cfg.Momentum:
		return mismatch(c.path, "momentum", c.Momentum, cfg.Momentum)
	case c.WeightDecay != cfg.WeightDecay:
		return mismatch(c.path, "weight-decay", c.WeightDecay, cfg.WeightDecay)
	}
	return nil
}

// restore loads the checkpoint's parameters into d's arena (every rank
// does, so no broadcast is needed) and hands its optimizer state,
// re-laid-out for d's arena, to load.
func restoreCheckpoint[T Float](c *checkpoint, params G.Nodes, d *ddp.DDP[T], load func(optim.State) error) error {
	if len(params) != len(c.layout) {
		return fmt.Errorf("trainer: resume from %s: %w: the checkpoint has %d parameters, the model %d", c.path, ErrMismatch, len(c.layout), len(params))
	}
	arena := d.ParamArena()
	for i, p := range params {
		e := c.layout[i]
		if !slices.Equal(e.Shape, []int(p.Shape())) || e.Name != p.Name() {
			return fmt.Errorf("trainer: resume from %s: %w: parameter %d is %s%v in the checkpoint but %s%v in the model",
				c.path, ErrMismatch, i, e.Name, e.Shape, p.Name(), []int(p.Shape()))
		}
	}
	for i := range params {
		lo, hi := d.Offset(i)
		dst := arena[lo:hi]
		for j, x := range c.params[i] {
			dst[j] = T(x)
		}
	}
	st := c.opt.Clone()
	if len(st.Buffers) > 0 {
		for k, b := range st.Buffers {
			data := make([]float64, len(arena))
			for i, e := range c.layout {
				lo, _ := d.Offset(i)
				copy(data[lo:lo+e.Size], b.Data[e.Offset:e.Offset+e.Size])
			}
			st.Buffers[k].Data = data
		}
	}
	if st.Step > 0 {
		st.Len = len(arena)
	}
	if err := load(st); err != nil {
		return fmt.Errorf("trainer: resume from %s: loading the optimizer state: %w", c.path, err)
	}
	return nil
}
