package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ringddp/ringddp/internal/safetensors"
	"github.com/ringddp/ringddp/optim"
)

// Reading a checkpoint: its metadata (metaReader), then readCheckpoint's
// steps, each of which checks what it reads.

// metaReader parses metadata fields, remembering the first error.
type metaReader struct {
	path string
	meta map[string]string
	err  error
}

func (m *metaReader) str(key string) string {
	v, ok := m.meta[key]
	if !ok && m.err == nil {
		m.err = ckErr(m.path, "metadata lacks %q", key)
	}
	return v
}

func (m *metaReader) int64(key string) int64 {
	s := m.str(key)
	if m.err != nil {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		m.err = ckErr(m.path, "metadata %q = %q is not a non-negative integer", key, s)
	}
	return v
}

func (m *metaReader) int(key string) int {
	v := m.int64(key)
	if v > math.MaxInt32 && m.err == nil {
		m.err = ckErr(m.path, "metadata %q = %d is too large", key, v)
	}
	return int(v)
}

func (m *metaReader) float(key string) float64 {
	s := m.str(key)
	if m.err != nil {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !finite(v) {
		m.err = ckErr(m.path, "metadata %q = %q is not a finite number", key, s)
	}
	return v
}

func (m *metaReader) json(key string, dst any) {
	s := m.str(key)
	if m.err != nil {
		return
	}
	if err := json.Unmarshal([]byte(s), dst); err != nil {
		m.err = ckErr(m.path, "metadata %q: %v", key, err)
	}
}

// ReadCheckpointInfo reads and fully validates the checkpoint at path and
// returns what it records about its run (for a CLI to default its flags).
func ReadCheckpointInfo(path string) (CheckpointInfo, error) {
	c, err := readCheckpoint(path)
	if err != nil {
		return CheckpointInfo{}, err
	}
	return c.CheckpointInfo, nil
}

// readCheckpoint reads path and checks its format, checksums and internal
// consistency: the file and its header (openCheckpoint), the run it
// records (readMeta), its parameters (readParams), its optimizer state
// (readOptimizer), its hook state (readHook), and that it holds no other
// tensor.
func readCheckpoint(path string) (*checkpoint, error) {
	f, err := openCheckpoint(path)
	if err != nil {
		return nil, err
	}
	c := &checkpoint{path: path}
	bufNames, err := c.readMeta(f.Metadata)
	if err != nil {
		return nil, err
	}
	tag := dtypeTag(c.DType)
	nParams, total, err := c.readParams(f, tag)
	if err != nil {
		return nil, err
	}
	nBuf, err := c.readOptimizer(f, tag, bufNames, total)
	if err != nil {
		return nil, err
	}
	nHook, err := c.readHook(f, tag)
	if err != nil {
		return nil, err
	}
	if len(f.Tensors) != nParams+nBuf+nHook {
		return nil, ckErr(path, "%d tensors, want %d parameters, %d optimizer buffers and %d hook tensors", len(f.Tensors), nParams, nBuf, nHook)
	}
	return c, nil
}

// openCheckpoint reads the safetensors file at path and checks that it is
// a ringddp checkpoint of the version this build reads, whose data and
// header match the checksums its metadata records.
func openCheckpoint(path string) (*safetensors.File, error) {
	f, err := safetensors.ReadFileLimits(path, checkpointLimits())
	if err != nil {
		if errors.Is(err, safetensors.ErrFormat) {
			return nil, fmt.Errorf("trainer: checkpoint %s is corrupt or not a safetensors file: %w: %w", path, ErrCheckpoint, err)
		}
		return nil, fmt.Errorf("trainer: reading checkpoint: %w", err)
	}
	meta := f.Metadata
	if meta["format"] != checkpointFormat {
		return nil, ckErr(path, "metadata format = %q, want %q (not a ringddp checkpoint)", meta["format"], checkpointFormat)
	}
	if meta["format_version"] != checkpointVersion {
		return nil, ckErr(path, "format_version = %q, this build reads %q", meta["format_version"], checkpointVersion)
	}
	if got, want := f.DataSHA256(), meta[keyDataSHA]; got != want {
		return nil, ckErr(path, "checksum mismatch: the data section's SHA-256 is %s but the metadata records %q (the file is corrupted)", got, want)
	}
	if got, want := indexSHA256(meta, f.Tensors), meta[keyIndexSHA]; got != want {
		return nil, ckErr(path, "checksum mismatch: the header's SHA-256 is %s but the metadata records %q (the file is corrupted)", got, want)
	}
	return f, nil
}

// readMeta fills c's CheckpointInfo (the run's configuration and its
// position: epoch, step, loss so far), its parameter layout and its
// optimizer's scalars from the metadata, and checks them. It returns the
// names of the optimizer buffers the metadata lists.
func (c *checkpoint) readMeta(meta map[string]string) ([]string, error) {
	path := c.path
	m := &metaReader{path: path, meta: meta}
	info := &c.CheckpointInfo
	info.Model = m.str("model")
	info.DType = m.str("dtype")
	info.GlobalBatch = m.int("global_batch")
	info.Ranks = m.int("ranks")
	if seed := m.str("seed"); m.err == nil {
		var err error
		if info.Seed, err = strconv.ParseInt(seed, 10, 64); err != nil {
			return nil, ckErr(path, "metadata %q = %q is not an integer", "seed", seed)
		}
	}
	switch z := meta[keyZero1]; z {
	case "", "false":
	case "true":
		info.Zero1 = true
	default:
		return nil, ckErr(path, "metadata %q = %q, want true or false", keyZero1, z)
	}
	if id, ok := meta[keyJobID]; ok {
		if id == "" {
			return nil, ckErr(path, "metadata %q is empty", keyJobID)
		}
		if err := CheckJobID(id); err != nil {
			return nil, ckErr(path, "metadata %q: %v", keyJobID, err)
		}
		info.JobID = id
	}
	info.Epoch = m.int("epoch")
	info.StepInEpoch = m.int("step_in_epoch")
	info.GlobalStep = m.int64("global_step")
	info.StepsPerEpoch = m.int("steps_per_epoch")
	info.EpochLossSum = m.float("epoch_loss_sum")
	info.EpochLossSteps = m.int("epoch_loss_steps")
	m.json("param_layout", &c.layout)
	var hyper []hyperEntry
	var bufNames []string
	c.opt.Optimizer = m.str("optim")
	c.opt.DType = m.str("optim.dtype")
	c.opt.Step = m.int64("optim.step")
	c.opt.Len = m.int("optim.len")
	m.json("optim.hyper", &hyper)
	m.json("optim.buffers", &bufNames)
	if m.err != nil {
		return nil, m.err
	}
	switch {
	case info.Model != ModelMLP && info.Model != ModelCNN:
		return nil, ckErr(path, "unknown model %q", info.Model)
	case info.DType != Float32 && info.DType != Float64:
		return nil, ckErr(path, "unknown dtype %q", info.DType)
	case info.GlobalBatch < 1 || info.Ranks < 1:
		return nil, ckErr(path, "global_batch %d, ranks %d: want both at least 1", info.GlobalBatch, info.Ranks)
	case c.opt.DType != info.DType:
		return nil, ckErr(path, "optimizer dtype %q differs from the model dtype %q", c.opt.DType, info.DType)
	}
	if info.Model == ModelMLP {
		for _, s := range strings.Split(m.str("hidden"), ",") {
			w, err := strconv.Atoi(s)
			if err != nil || w < 1 {
				return nil, ckErr(path, "metadata hidden = %q is not a list of widths", meta["hidden"])
			}
			info.Hidden = append(info.Hidden, w)
		}
		if m.err != nil {
			return nil, m.err
		}
	}
	for _, h := range hyper {
		c.opt.Hyper = append(c.opt.Hyper, optim.Hyper{Name: h.Name, Value: h.Value})
	}
	info.Optim = c.opt.Optimizer
	info.LR, _ = c.opt.HyperValue("lr")
	info.Momentum, _ = c.opt.HyperValue("momentum")
	info.WeightDecay, _ = c.opt.HyperValue("weight_decay")
	return bufNames, nil
}

// readParams reads c's parameters: exactly the layout's tensors, in its
// order, of the dtype tag, tiling the arena. It returns how many there are
// and the arena's elements.
func (c *checkpoint) readParams(f *safetensors.File, tag safetensors.DType) (nParams, total int, err error) {
	path := c.path
	for _, t := range f.Tensors {
		if strings.HasPrefix(t.Name, "param/") {
			nParams++
		}
	}
	if nParams != len(c.layout) || len(c.layout) == 0 {
		return 0, 0, ckErr(path, "%d parameter tensors but param_layout lists %d", nParams, len(c.layout))
	}
	for _, e := range c.layout {
		total += e.Size
	}
	covered := make([][2]int, len(c.layout))
	c.params = make([][]float64, len(c.layout))
	for i, e := range c.layout {
		name := paramTensorName(i, e.Name)
		t, ok := f.Tensor(name)
		switch {
		case e.Index != i:
			return 0, 0, ckErr(path, "param_layout entry %d has index %d", i, e.Index)
		case !ok:
			return 0, 0, ckErr(path, "tensor %q missing", name)
		case t.DType != tag:
			return 0, 0, ckErr(path, "tensor %q is %s, the checkpoint's dtype is %s", name, t.DType, c.DType)
		case !slices.Equal(t.Shape, e.Shape):
			return 0, 0, ckErr(path, "tensor %q has shape %v but param_layout says %v", name, t.Shape, e.Shape)
		}
		n, _ := t.NumElements()
		if n != e.Size || e.Offset < 0 || e.Offset > total-e.Size {
			return 0, 0, ckErr(path, "param_layout entry %d: offset %d size %d does not fit %d elements of %d", i, e.Offset, e.Size, n, total)
		}
		covered[i] = [2]int{e.Offset, e.Offset + e.Size}
		if c.params[i], err = safetensors.Float64s(t); err != nil {
			return 0, 0, ckErr(path, "%v", err)
		}
	}
	sort.Slice(covered, func(a, b int) bool { return covered[a][0] < covered[b][0] })
	for k := 1; k < len(covered); k++ {
		if covered[k][0] != covered[k-1][1] {
			return 0, 0, ckErr(path, "param_layout does not tile the arena at element %d", covered[k-1][1])
		}
	}
	return nParams, total, nil
}

// readOptimizer reads the optimizer buffers that bufNames lists, each of
// the dtype tag over the arena of total elements, into c.opt and validates
// the optimizer state. It returns how many buffers there are.
func (c *checkpoint) readOptimizer(f *safetensors.File, tag safetensors.DType, bufNames []string, total int) (int, error) {
	path := c.path
	nBuf := 0
	for _, t := range f.Tensors {
		if strings.HasPrefix(t.Name, optimPrefix) {
			nBuf++
		}
	}
	if nBuf != len(bufNames) {
		return 0, ckErr(path, "%d optimizer tensors but optim.buffers lists %d", nBuf, len(bufNames))
	}
	if len(bufNames) > 0 && c.opt.Len != total {
		return 0, ckErr(path, "optim.len = %d but the parameters have %d elements", c.opt.Len, total)
	}
	for _, name := range bufNames {
		t, ok := f.Tensor(optimPrefix + name)
		if !ok {
			return 0, ckErr(path, "tensor %q missing", optimPrefix+name)
		}
		if t.DType != tag || len(t.Shape) != 1 || t.Shape[0] != c.opt.Len {
			return 0, ckErr(path, "tensor %q is %s%v, want %s[%d]", t.Name, t.DType, t.Shape, tag, c.opt.Len)
		}
		data, err := safetensors.Float64s(t)
		if err != nil {
			return 0, ckErr(path, "%v", err)
		}
		c.opt.Buffers = append(c.opt.Buffers, optim.Buffer{Name: name, Data: data})
	}
	if err := c.opt.Validate(); err != nil {
		return 0, ckErr(path, "optimizer state: %v", err)
	}
	return nBuf, nil
}
