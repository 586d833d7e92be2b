// Package selftest lets a command's tests run the test binary itself as
// the ranks of a multi-process job: the launcher starts the test binary
// with the job's arguments in an environment variable, and the test
// binary's TestMain runs the command's main with them instead of the tests.
package selftest

import (
	"encoding/json"
	"os"
	"testing"
)

// argsVar carries a rank's command line (JSON) to the re-executed binary.
const argsVar = "RINGDDP_SELFTEST_ARGS"

// Main is TestMain's body: in a rank started by RankCommand it runs main
// as the program name with the job's arguments and exits (main exits
// non-zero itself on an error); otherwise it runs the tests.
func Main(m *testing.M, name string, main func()) {
	if a := os.Getenv(argsVar); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			panic(err)
		}
		os.Args = append([]string{name}, args...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// RankCommand is the command a launcher runs as each rank: this test
// binary, running no tests, with the job's arguments passed to Main. (The
// binary is found with os.Executable, not os.Args[0], which Main
// replaces: a launcher started by a test as a process of its own, as a
// node of a multi-node job, starts its ranks with it too.)
func RankCommand(args []string) (path string, argv, env []string, err error) {
	b, err := json.Marshal(args)
	if err != nil {
		return "", nil, nil, err
	}
	path, err = os.Executable()
	return path, []string{"-test.run=^$"}, []string{argsVar + "=" + string(b)}, err
}
