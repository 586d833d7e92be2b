package launch

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
)

// jobVars are the variables every rank of this host gets besides its
// rank. On one host without -master it also binds the store's socket on
// a free loopback port (storeLn, to hand to rank 0).
func jobVars(cfg Config, getenv func(string) string) (vars []string, storeLn *os.File, err error) {
	host, port := "127.0.0.1", 0
	if cfg.Master != "" {
		if host, port, err = splitMaster(cfg.Master); err != nil {
			return nil, nil, fmt.Errorf("launch: %w", err)
		}
	} else if cfg.mostNodes() > 1 {
		return nil, nil, fmt.Errorf("launch: %d nodes need the master's host:port", cfg.Nnodes)
	} else {
		if port, storeLn, err = bindStorePort(host); err != nil {
			return nil, nil, fmt.Errorf("launch: binding a port for the store: %w", err)
		}
		defer func() {
			if err != nil {
				storeLn.Close()
				storeLn = nil
			}
		}()
	}
	vars = append(vars, "MASTER_ADDR="+host, "MASTER_PORT="+strconv.Itoa(port))

	runID := getenv(EnvRunID)
	switch {
	case cfg.Insecure:
		if getenv(EnvSecret) != "" {
			return nil, nil, fmt.Errorf("launch: insecure run requested but %s is set: drop one", EnvSecret)
		}
		vars = append(vars, EnvInsecure+"=1")
	case cfg.mostNodes() > 1:
		secret := getenv(EnvSecret)
		if secret == "" {
			return nil, nil, fmt.Errorf("launch: %w", errNoSharedSecret)
		}
		// The ranks get a secret derived from the job's, not the job's
		// own: they cannot join the launchers' rendezvous or author what
		// the launchers accept (nodes_seal.go).
		vars = append(vars, EnvSecret+"="+rankSecret(secret))
	default:
		// One host: a fresh secret that only this job's ranks know.
		secret, err := randomHex(32)
		if err != nil {
			return nil, nil, fmt.Errorf("launch: making the job's secret: %w", err)
		}
		vars = append(vars, EnvSecret+"="+secret)
		if runID == "" {
			if runID, err = randomHex(8); err != nil {
				return nil, nil, fmt.Errorf("launch: making the run id: %w", err)
			}
			runID = "standalone-" + runID
		}
	}
	if runID != "" {
		vars = append(vars, EnvRunID+"="+runID)
	}
	return vars, storeLn, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// bindStorePort binds a listening socket on a free TCP port of host and
// returns the port and the socket as a file for rank 0 to inherit: the
// port is never free between the pick and the store's listen, so no other
// process can squat it (torchrun --standalone picks and closes instead).
func bindStorePort(host string) (int, *os.File, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, nil, err
	}
	defer ln.Close() // f is a duplicate descriptor
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return 0, nil, err
	}
	return ln.Addr().(*net.TCPAddr).Port, f, nil
}
