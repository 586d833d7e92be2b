package launch

import (
	"bytes"
	"context"
	"flag"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// parseTransportFlags registers the transport flags on a fresh flag set,
// parses args and resolves them for ranks.
func parseTransportFlags(t *testing.T, ranks int, env map[string]string, args ...string) (*Transport, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var tf TransportFlags
	tf.Register(fs)
	tf.RegisterJoinTimeout(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return tf.Resolve(ranks, given, func(k string) string { return env[k] })
}

func TestTransportFlagsResolve(t *testing.T) {
	none := map[string]string{}
	tr, err := parseTransportFlags(t, 3, none)
	if err != nil || tr.Name != Inproc || tr.Timeout != DefaultInprocTimeout || tr.Ranks != 3 || tr.MP != nil || tr.Launcher() || !tr.HoldsRank0() {
		t.Errorf("defaults: %+v, %v", tr, err)
	}
	tr, err = parseTransportFlags(t, 3, none, "-timeout", "5s")
	if err != nil || tr.Timeout != 5*time.Second {
		t.Errorf("-timeout 5s: %+v, %v", tr, err)
	}
	tr, err = parseTransportFlags(t, 3, none, "-transport", "tcp")
	if err != nil || !tr.Launcher() || tr.Timeout != DefaultTimeout || tr.Ranks != 3 || tr.MP.LocalRanks != 3 || !tr.HoldsRank0() {
		t.Errorf("tcp launcher: %+v, %v", tr, err)
	}
	tr, err = parseTransportFlags(t, 3, none, "-transport", "tcp")
	if err != nil || tr.JoinTimeout != DefaultJoinTimeout {
		t.Errorf("-join-timeout's default: %v, %v", tr.JoinTimeout, err)
	}
	tr, err = parseTransportFlags(t, 3, none, "-transport", "tcp", "-join-timeout", "20s")
	if err != nil || tr.JoinTimeout != 20*time.Second {
		t.Errorf("-join-timeout 20s: %v, %v", tr.JoinTimeout, err)
	}
	rank1 := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
	tr, err = parseTransportFlags(t, 4, rank1, "-transport", "tcp", "-timeout", "2s")
	if err != nil || tr.Launcher() || tr.Ranks != 2 || tr.MP.Env.Rank != 1 || tr.HoldsRank0() || tr.Timeout != 2*time.Second {
		t.Errorf("tcp rank 1 of 2: %+v, %v", tr, err)
	}

	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{none, []string{"-transport", "nccl"}, `-transport "nccl": unknown transport (valid: auto, inproc, shm, tcp)`},
		{none, []string{"-transport", "shm", "-wire-protection", "mac"}, `-transport shm runs every rank on this host`},
		{none, []string{"-timeout", "-1s"}, "-timeout -1s: must not be negative"},
		{none, []string{"-nnodes", "2"}, "-nnodes applies to -transport tcp only"},
		{none, []string{"-insecure"}, "-insecure applies to -transport tcp only"},
		{none, []string{"-transport", "tcp", "-nnodes", "2"}, "-nnodes 2 needs -master host:port"},
		{rank1, []string{"-transport", "tcp", "-ranks", "4"}, "-ranks 4 disagrees with the launcher's world size WORLD_SIZE=2"},
		{none, []string{"-join-timeout", "1m"}, "-join-timeout applies to -transport tcp only"},
		{none, []string{"-transport", "tcp", "-join-timeout", "-1s"}, "-join-timeout -1s: must not be negative"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var tf TransportFlags
		tf.Register(fs)
		tf.RegisterJoinTimeout(fs)
		ranks := fs.Int("ranks", 4, "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		_, err := tf.Resolve(*ranks, given, func(k string) string { return c.env[k] })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

func TestTransportFlagsHelp(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var tf TransportFlags
	tf.Register(fs)
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, want := range []string{"-transport string", "transport: auto, inproc, shm, tcp (default \"inproc\")",
		"(default 60s in process, 30s over tcp)", "-nnodes", "-node-rank", "-master", "-insecure"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
}

func TestTransportConnectInproc(t *testing.T) {
	tr, err := parseTransportFlags(t, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	conns, err := tr.Connect(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 3 {
		t.Fatalf("%d endpoints, want 3", len(conns))
	}
	checkAllReduce(t, conns)
}

// Two tcp ranks of one host (goroutines here, processes in a job) connect
// through their Transports; connecting leaves GOMAXPROCS alone, and
// ShareCores, called explicitly, takes each rank's share.
func TestTransportConnectTCP(t *testing.T) {
	old := runtime.GOMAXPROCS(4)
	defer runtime.GOMAXPROCS(old)
	port := freeLoopbackPort(t)
	trs := make([]*Transport, 2)
	for r := range trs {
		env := rendezvous.Env{Rank: r, WorldSize: 2, LocalRank: r, LocalWorldSize: 2, MasterAddr: "127.0.0.1",
			MasterPort: port, Secret: []byte("launch transport test secret"), Found: true, Launcher: "torchrun"}
		trs[r] = &Transport{Name: TCP, Timeout: 10 * time.Second, Ranks: 2, MP: &Setup{Env: env, WorldSize: 2, LocalRanks: 2}}
	}
	if _, err := trs[1].Connect(context.Background(), 3); err == nil || !strings.Contains(err.Error(), "3 ranks asked for, the launcher's world has 2") {
		t.Errorf("a world size other than the launcher's: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conns := make([]transport.Conn, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cs []transport.Conn
			cs, errs[r] = trs[r].Connect(ctx, 2)
			if errs[r] == nil {
				conns[r] = cs[0]
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	checkAllReduce(t, conns)
	if got := runtime.GOMAXPROCS(0); got != 4 {
		t.Errorf("GOMAXPROCS %d after connecting, want 4 (unchanged)", got)
	}

	want := 2 // 4 / 2 local ranks
	if os.Getenv("GOMAXPROCS") != "" {
		want = 4 // set by the user: left alone
	}
	if got := trs[0].ShareCores(); got != want || runtime.GOMAXPROCS(0) != want {
		t.Errorf("ShareCores = %d, GOMAXPROCS %d; want %d", got, runtime.GOMAXPROCS(0), want)
	}
	runtime.GOMAXPROCS(4)
	if got := (&Transport{Name: Inproc}).ShareCores(); got != 4 {
		t.Errorf("in process: ShareCores = %d, want 4 (unchanged)", got)
	}
}

// checkAllReduce sums each rank's rank+1 over conns, one goroutine per
// rank, and closes them.
func checkAllReduce(t *testing.T, conns []transport.Conn) {
	t.Helper()
	n := len(conns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, n)
	got := make([][]int64, n)
	var wg sync.WaitGroup
	for r, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := allreduce.NewGroup(c)
			if err != nil {
				errs[r] = err
				return
			}
			defer g.Close()
			got[r] = []int64{int64(c.Rank() + 1)}
			if errs[r] = allreduce.AllReduce(ctx, g, got[r], allreduce.Sum); errs[r] == nil {
				errs[r] = allreduce.Barrier(ctx, g) // rank 0 hosts a tcp job's store: leave together
			}
		}()
	}
	wg.Wait()
	for r := range conns {
		if errs[r] != nil || got[r][0] != int64(n*(n+1)/2) {
			t.Errorf("rank %d: sum %v, %v; want %d", r, got[r], errs[r], n*(n+1)/2)
		}
	}
}

func TestTransportNotRankOrLauncher(t *testing.T) {
	launcher, err := parseTransportFlags(t, 2, nil, "-transport", "tcp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := launcher.Connect(context.Background(), 2); err == nil || !strings.Contains(err.Error(), "this process is not a rank") {
		t.Errorf("Connect in the launcher: %v", err)
	}
	inproc, err := parseTransportFlags(t, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := inproc.Launch(context.Background(), nil, ThisProgram, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "not a job's launcher") {
		t.Errorf("Launch in process: %v", err)
	}
}

func TestTransportWireProtection(t *testing.T) {
	none := map[string]string{}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want tcp.WireProtection
	}{
		{none, []string{"-transport", "tcp"}, ""},
		{none, []string{"-transport", "tcp", "-wire-protection", "mac"}, tcp.WireMAC},
		{map[string]string{EnvWireProtection: "aead"}, []string{"-transport", "tcp"}, tcp.WireAEAD},
		{map[string]string{EnvWireProtection: "aead"}, []string{"-transport", "tcp", "-wire-protection", "none"}, tcp.WireNone},
		{none, []string{"-transport", "tcp", "-insecure", "-wire-protection", "none"}, tcp.WireNone},
		{none, []string{"-transport", "tcp", "-wire-protection", "auto"}, tcp.WireAuto},
	} {
		tr, err := parseTransportFlags(t, 2, c.env, c.args...)
		if err != nil || tr.WireProtection != c.want {
			t.Errorf("%q %v: %v, %v; want %q", c.args, c.env, tr, err, c.want)
		}
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{none, []string{"-wire-protection", "mac"}, "-wire-protection applies to -transport tcp only"},
		{none, []string{"-transport", "tcp", "-wire-protection", "tls"}, `-wire-protection "tls": unknown mode (valid: auto, none, mac, aead)`},
		{map[string]string{EnvWireProtection: "yes"}, []string{"-transport", "tcp"}, EnvWireProtection + ` "yes": unknown mode`},
		{none, []string{"-transport", "tcp", "-insecure", "-wire-protection", "mac"}, "-wire-protection mac needs the job's secret"},
		{map[string]string{EnvWireProtection: "aead", EnvInsecure: "1"}, []string{"-transport", "tcp"}, EnvWireProtection + " aead needs the job's secret"},
		{none, []string{"-transport", "tcp", "-insecure", "-wire-protection", "auto"}, "-wire-protection auto needs the job's secret"},
	} {
		if _, err := parseTransportFlags(t, 2, c.env, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %v: got %v, want an error containing %q", c.args, c.env, err, c.want)
		}
	}

	// Two ranks over tcp with aead from the flag, mac from the environment.
	for _, mode := range []tcp.WireProtection{tcp.WireAEAD, ""} {
		port := freeLoopbackPort(t)
		getenv := func(k string) string {
			if k == EnvWireProtection {
				return "mac"
			}
			return ""
		}
		conns := make([]transport.Conn, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				env := rendezvous.Env{Rank: r, WorldSize: 2, LocalRank: r, LocalWorldSize: 2, MasterAddr: "127.0.0.1",
					MasterPort: port, Secret: []byte("launch transport test secret"), Found: true, Launcher: "torchrun"}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				conns[r], _, errs[r] = Connect(ctx, Options{Timeout: 10 * time.Second, WireProtection: mode, Env: &env, Getenv: getenv})
			}()
		}
		wg.Wait()
		want := mode
		if want == "" {
			want = tcp.WireMAC
		}
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%q: rank %d: %v", mode, r, err)
			}
			if got := conns[r].(*Conn).WireProtection(); got != want {
				t.Errorf("rank %d: wire protection %q, want %q", r, got, want)
			}
		}
		checkAllReduce(t, conns)
	}
}
