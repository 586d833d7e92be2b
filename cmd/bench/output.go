package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// row is one size's result. The JSON keys are the report's stable schema.
type row struct {
	Op        string  `json:"op"`
	Transport string  `json:"transport"`
	Ranks     int     `json:"ranks"`
	Algo      string  `json:"algo"`
	DType     string  `json:"dtype"`
	Bytes     int     `json:"bytes"`
	Count     int     `json:"count"`
	TimeUS    float64 `json:"time_us"`
	AlgBW     float64 `json:"algbw_gbps"`
	BusBW     float64 `json:"busbw_gbps"`
	Wrong     *int64  `json:"wrong"` // null with -check=false

	redop string
	root  int
}

// newRow computes the bandwidths of a size: algbw = bytes / time (GB/s,
// 1e9 bytes), busbw = algbw × the collective's bus factor.
func newRow(cfg *config, bytes, count int, timeUS float64, wrong *int64) row {
	r := row{
		Op: cfg.op.name, Transport: cfg.transport, Ranks: cfg.ranks, Algo: cfg.algo,
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

// printer writes the table (or JSON lines) and keeps the totals for the
// footer.
type printer struct {
	cfg   *config
	w     io.Writer
	enc   *json.Encoder
	rows  int
	busbw float64
	wrong int64
}

func newPrinter(cfg *config, w io.Writer) *printer {
	p := &printer{cfg: cfg, w: w}
	if cfg.json {
		p.enc = json.NewEncoder(w)
	}
	return p
}

// The table's columns, in the manner of nccl-tests.
const (
	headFmt = "#%12s %12s %8s %6s %5s %5s %10s %8s %8s %7s"
	rowFmt  = "%13d %12d %8s %6s %5d %5s %10.2f %8.2f %8.2f %7s\n"
)

func (p *printer) header() error {
	if p.enc != nil {
		return nil
	}
	c := p.cfg
	names := fmt.Sprintf(headFmt, "size", "count", "type", "redop", "root", "algo", "time", "algbw", "busbw", "#wrong")
	units := fmt.Sprintf(headFmt, "(B)", "(elements)", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")
	_, err := fmt.Fprintf(p.w,
		"# ringddp bench: op %s, transport %s, ranks %d, algo %s, dtype %s, redop %s, root %d, iters %d, warmup %d, check %v\n"+
			"# time: median over iterations of the slowest rank; every iteration starts with a barrier and each\n"+
			"#       rank times the collective from its own exit of that barrier to its own return\n"+
			"# algo: %s\n"+
			"# algbw = bytes / time; busbw = algbw * %s\n"+
			"#\n%s\n%s\n",
		c.op.name, c.transport, c.ranks, c.algo, c.dtype, c.redopName, c.root, c.iters, c.warmup, c.check,
		algoText(c), busFactorText(c.op.name), names, strings.TrimRight(units, " "))
	return err
}

// algoText says which algorithm the collective runs.
func algoText(c *config) string {
	switch c.op.name {
	case "allreduce":
		switch c.algo {
		case "auto":
			return "auto (direct where the transport shares memory between ranks, as inproc does; ring elsewhere)"
		default:
			return c.algo
		}
	case "reducescatter", "allgather":
		return c.algo + " (" + c.op.name + " has one algorithm: ring)"
	}
	return c.algo + " (" + c.op.name + " has one algorithm: binomial tree)"
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
	p.rows++
	p.busbw += r.BusBW
	if r.Wrong != nil {
		p.wrong += *r.Wrong
	}
	if p.enc != nil {
		return p.enc.Encode(r)
	}
	wrong := "N/A"
	if r.Wrong != nil {
		wrong = strconv.FormatInt(*r.Wrong, 10)
	}
	_, err := fmt.Fprintf(p.w, rowFmt, r.Bytes, r.Count, r.DType, r.redop, r.root, r.Algo, r.TimeUS, r.AlgBW, r.BusBW, wrong)
	return err
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
	avg := 0.0
	if p.rows > 0 {
		avg = p.busbw / float64(p.rows)
	}
	_, err := fmt.Fprintf(p.w, "# wrong elements    : %d %s\n# avg bus bandwidth : %.3f GB/s\n", p.wrong, status, avg)
	return err
}
