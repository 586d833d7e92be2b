package testbed

import (
	"encoding/json"
	"fmt"
	"os/exec"
)

// TxBytes is the number of bytes host's end of its link (eth0) has sent
// since the bed was built: every frame, headers included (the kernel's
// interface counter, ip -s link). What a job sent to other hosts is the
// difference of two readings, plus the frames' headers and the
// acknowledgements of what it received.
func (h *Host) TxBytes() (int64, error) {
	out, err := exec.Command("ip", "-n", h.ns, "-j", "-s", "link", "show", "dev", "eth0").Output()
	if err != nil {
		return 0, fmt.Errorf("testbed: host %d's link counters: %w", h.index, err)
	}
	var links []struct {
		Stats struct {
			Tx struct {
				Bytes int64 `json:"bytes"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return 0, fmt.Errorf("testbed: host %d's link counters: cannot read %q (%v)", h.index, out, err)
	}
	return links[0].Stats.Tx.Bytes, nil
}
