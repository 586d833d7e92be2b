//go:build !linux

package launch

import "errors"

var errBindUnsupported = errors.New("binding to processors needs linux")

func allowedCPUs() ([]int, error) { return nil, errBindUnsupported }

func pinProcess([]int) error { return errBindUnsupported }
