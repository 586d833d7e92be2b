//go:build !linux

package tcp

import (
	"errors"
	"net"
	"runtime"
	"syscall"
)

var errNoCongestion = errors.New("setting a connection's congestion control is supported on linux only, not " + runtime.GOOS)

// setCongestionRaw cannot set a congestion control here.
func setCongestionRaw(syscall.RawConn, string) error { return errNoCongestion }

// congestionOf cannot read it either.
func congestionOf(*net.TCPConn) (string, error) { return "", errNoCongestion }

// trySocketCongestion: no name can be set here.
func trySocketCongestion(string) error { return errNoCongestion }
