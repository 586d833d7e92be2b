package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/internal/bytesize"
	"github.com/ringddp/ringddp/internal/run/launch"
)

// row is one size's result. The JSON keys are the report's stable schema;
// the optional ones appear in every row of a run that has them.
type row struct {
	Op        string `json:"op"`
	Transport string `json:"transport"`
	Ranks     int    `json:"ranks"`
	Algo      string `json:"algo"`
	// Ran is what ran: Algo, or for auto the algorithm (broadcast,
	// reduce: the schedule) it chose for the size.
	Ran    string  `json:"ran"`
	DType  string  `json:"dtype"`
	Bytes  int     `json:"bytes"`
	Count  int     `json:"count"`
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbps"`
	BusBW  float64 `json:"busbw_gbps"`
	Wrong  *int64  `json:"wrong"` // null with -check=false and in timing-only rows

	// LinkGBps (-transport sim) is the modelled bandwidth, in GB/s like
	// busbw, of the link a topology-blind algorithm pays: between nodes,
	// or within the node when there is one.
	LinkGBps *float64 `json:"link_gbps,omitempty"`
	// With a cost model, for all-reduce: Pick is the algorithm that ran
	// (auto's choice for auto), PredUS its predicted time and Ratio the
	// measured time over the predicted one (absent when that is 0).
	Pick   string   `json:"pick,omitempty"`
	PredUS *float64 `json:"pred_us,omitempty"`
	Ratio  *float64 `json:"ratio,omitempty"`
	// shape is the group's shape the prediction was made for (with a
	// model, for all-reduce), for -calibrate's refit.
	shape cost.Shape
	// minUS is, for -calibrate's rows, the fastest round's time.
	minUS float64

	redop   string
	root    int
	virtual bool   // timing-only (-transport sim): not checked
	ran     string // what ran: all-reduce's algorithm, broadcast's and reduce's schedule (auto's choice for auto)
}

// newRow computes the bandwidths of a size: algbw = bytes / time (GB/s,
// 1e9 bytes), busbw = algbw × the collective's bus factor.
func newRow(cfg *config, name string, bytes, count int, timeUS float64, wrong *int64) row {
	r := row{
		Op: cfg.op.name, Transport: cfg.transport, Ranks: cfg.ranks, Algo: name,
		DType: cfg.dtype.String(), Bytes: bytes, Count: count, TimeUS: timeUS,
		redop: "none", root: cfg.root,
	}
	if cfg.op.reduces {
		r.redop = cfg.redopName
	}
	if timeUS > 0 {
		r.AlgBW = float64(bytes) / (timeUS * 1e-6) / 1e9
	}
	r.BusBW = r.AlgBW * cfg.op.busFactor(cfg.ranks)
	if wrong != nil {
		v := *wrong
		r.Wrong = &v
	}
	return r
}

// printer writes the table (or JSON lines) and keeps the rows, for the
// footer's totals, -plot and -calibrate.
type printer struct {
	cfg       *config
	w         io.Writer
	enc       *json.Encoder
	rows      []row
	busbw     float64
	wrong     int64
	unchecked int  // timing-only rows
	link      bool // the link column (-transport sim)
	pred      bool // the pick, pred and ratio columns (a cost model; all-reduce, broadcast, reduce)
}

func newPrinter(cfg *config, w io.Writer) *printer {
	p := &printer{cfg: cfg, w: w}
	if cfg.json {
		p.enc = json.NewEncoder(w)
	}
	p.link = cfg.transport == simTransport && cfg.model != nil
	p.pred = cfg.model != nil && (cfg.op.kind == allreduce.KindAllReduce || cfg.op.rooted)
	return p
}

// The table's columns, in the manner of nccl-tests, and the optional ones.
const (
	headFmt     = "#%12s %12s %8s %6s %5s %17s %12s %8s %8s %7s"
	rowFmt      = "%13d %12d %8s %6s %5d %17s %12.2f %8.2f %8.2f %7s"
	linkHeadFmt = " %8s"
	linkRowFmt  = " %8.2f"
	predHeadFmt = " %12s %12s %7s"
	predRowFmt  = " %12s %12.2f %7s"
)

func (p *printer) header() error {
	if p.enc != nil {
		return nil
	}
	c := p.cfg
	names := fmt.Sprintf(headFmt, "size", "count", "type", "redop", "root", "algo", "time", "algbw", "busbw", "#wrong")
	units := fmt.Sprintf(headFmt, "(B)", "(elements)", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")
	if p.link {
		names += fmt.Sprintf(linkHeadFmt, "link")
		units += fmt.Sprintf(linkHeadFmt, "(GB/s)")
	}
	if p.pred {
		names += fmt.Sprintf(predHeadFmt, "pick", "pred", "ratio")
		units += fmt.Sprintf(predHeadFmt, "", "(us)", "")
	}
	_, err := fmt.Fprintf(p.w,
		"# ringddp bench: op %s, transport %s, ranks %d%s, algo %s, dtype %s, redop %s, root %d, iters %d, warmup %d%s, check %v\n"+
			"%s"+
			"# algo: %s\n"+
			"# algbw = bytes / time; busbw = algbw * %s\n"+
			"%s#\n%s\n%s\n",
		c.op.name, c.transport, c.ranks, nodesText(c), c.algo, c.dtype, c.redopName, c.root, c.iters, c.warmup, backToBackText(c), c.check,
		timeText(c), algoText(c), busFactorText(c.op.name), modelText(c, p),
		strings.TrimRight(names, " "), strings.TrimRight(units, " "))
	return err
}

// backToBackText names -back-to-back in the header, when given.
func backToBackText(c *config) string {
	if c.backToBack {
		return ", back-to-back"
	}
	return ""
}

// nodesText says how the ranks sit on nodes, when the flags say.
func nodesText(c *config) string {
	if c.localSize <= 0 || c.mp != nil {
		return ""
	}
	s := plannedShape(c)
	return fmt.Sprintf(" (%s of %d)", launch.Count(s.Nodes, "node"), s.LocalSize)
}

// timeText explains the time column.
func timeText(c *config) string {
	if c.transport == simTransport {
		return "# time: virtual (the simulator's modelled time): every rank aligns its clock to the latest (a free\n" +
			"#       barrier), runs the collective once, and the row's time is the slowest rank's end minus that\n" +
			"#       start; virtual time does not vary, so there is one iteration per size (-iters, -warmup ignored)\n"
	}
	if c.backToBack {
		return "# time: median over iterations of the slowest rank; back to back: a barrier before a size's first\n" +
			"#       iteration only, and each rank times an iteration from its own return from the last one\n"
	}
	return "# time: median over iterations of the slowest rank; every iteration starts with a barrier and each\n" +
		"#       rank times the collective from its own exit of that barrier to its own return\n"
}

// modelText describes the cost model and the optional columns.
func modelText(c *config, p *printer) string {
	var b strings.Builder
	if c.model != nil {
		fmt.Fprintf(&b, "# model: %s (%s)\n", describeModel(*c.model), c.modelFrom)
	}
	if c.transport == simTransport {
		switch c.payload {
		case payloadReal:
			b.WriteString("# payload: real in every row (checked)\n")
		case payloadNone:
			b.WriteString("# payload: timing-only in every row (bytes accounted, not allocated; #wrong -)\n")
		default:
			fmt.Fprintf(&b, "# payload: real (checked) while ranks x bytes <= %s, timing-only above (#wrong -)\n", bytesize.Format(simRealLimit))
		}
	}
	if p.link {
		b.WriteString("# link: the modelled link between nodes (within the node when there is one), GB/s like busbw\n")
	}
	if p.pred {
		b.WriteString("# pick: the algorithm (broadcast, reduce: the schedule) that ran, auto's choice for auto; pred: its\n" +
			"#       predicted time on the group's shape (allreduce.Predict, PredictRooted); ratio = time / pred\n")
	}
	return b.String()
}

// algoText says which algorithm the collective runs.
func algoText(c *config) string {
	switch c.op.name {
	case "allreduce":
		switch c.algo {
		case "auto":
			return "auto (per size class, the algorithm the cost model predicts fastest, named in the algo column: auto:<algorithm>; see -explain)"
		case algoAll:
			return "all: " + algoNames(c.algos)
		default:
			return c.algo
		}
	case "reducescatter", "allgather":
		return c.algo + " (" + c.op.name + " has one algorithm: ring)"
	}
	var names []string
	for _, s := range c.schedules {
		switch s {
		case allreduce.RootedAuto:
			names = append(names, "auto (per size class, the binomial tree or the pipelined chain, whichever the cost model predicts faster, named in the algo column: auto:tree, auto:chain; see -explain)")
		case allreduce.RootedTree:
			names = append(names, "tree (binomial)")
		default:
			names = append(names, s.String()+" (pipelined; the binomial tree on 2 ranks)")
		}
	}
	return strings.Join(names, ", ")
}

func busFactorText(op string) string {
	switch op {
	case "allreduce":
		return "2(N-1)/N"
	case "reducescatter", "allgather":
		return "(N-1)/N"
	}
	return "1"
}

func (p *printer) row(r row) error {
	p.rows = append(p.rows, r)
	p.busbw += r.BusBW
	if r.Wrong != nil {
		p.wrong += *r.Wrong
	}
	if r.virtual {
		p.unchecked++
	}
	if p.enc != nil {
		r.Ran = r.ran
		if r.Ran == "" {
			r.Ran = r.Algo
		}
		return p.enc.Encode(r)
	}
	wrong := "N/A"
	switch {
	case r.virtual:
		wrong = "-"
	case r.Wrong != nil:
		wrong = strconv.FormatInt(*r.Wrong, 10)
	}
	algo := r.Algo
	if algo == allreduce.Auto.String() && r.ran != "" {
		algo += ":" + r.ran // what auto chose for this size
	}
	line := fmt.Sprintf(rowFmt, r.Bytes, r.Count, r.DType, r.redop, r.root, algo, r.TimeUS, r.AlgBW, r.BusBW, wrong)
	if p.link {
		line += fmt.Sprintf(linkRowFmt, deref(r.LinkGBps))
	}
	if p.pred {
		ratio := "-"
		if r.Ratio != nil {
			ratio = strconv.FormatFloat(*r.Ratio, 'f', 2, 64)
		}
		line += fmt.Sprintf(predRowFmt, r.Pick, deref(r.PredUS), ratio)
	}
	_, err := fmt.Fprintln(p.w, line)
	return err
}

// deref is *x, or 0 for nil.
func deref(x *float64) float64 {
	if x == nil {
		return 0
	}
	return *x
}

func (p *printer) footer() error {
	if p.enc != nil {
		return nil
	}
	status := "OK"
	switch {
	case !p.cfg.check:
		status = "not checked"
	case p.wrong > 0:
		status = "FAILED"
	}
	if p.unchecked > 0 && p.cfg.check {
		status += fmt.Sprintf(" (%d timing-only rows not checked)", p.unchecked)
	}
	avg := 0.0
	if n := len(p.rows); n > 0 {
		avg = p.busbw / float64(n)
	}
	_, err := fmt.Fprintf(p.w, "# wrong elements    : %d %s\n# avg bus bandwidth : %.3f GB/s\n", p.wrong, status, avg)
	return err
}
