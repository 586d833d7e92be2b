package launch

import (
	"fmt"
	"net"
	"os"
)

// A lost node: a node whose launcher did not come back to node 0 after an
// attempt (killed with its host, cut off by the network). Its ranks
// vanished with it, so node 0's own ranks fail first, each with the
// connection it lost ("rank 2 failed: connection lost"): those are
// consequences. The root cause node 0 names is the node, by its index and
// the address it joined from (nodeAddr, reported when it joined), and the
// ranks it ran.

// maxAddrLen bounds a node's reported address, in bytes.
const maxAddrLen = 512

// NodeLostError is a node lost during an attempt: the root cause of that
// attempt's failure when no node reported a failure of its own.
type NodeLostError struct {
	Node   int    // its -node-rank when the job started
	Addr   string // "host (ip)" as it reported when it joined; "" unknown
	Ranks  []int  // the ranks it ran in the attempt
	Reason string // why it counts as lost: "its launcher did not come back within 30s"
}

func (e *NodeLostError) Error() string {
	s := fmt.Sprintf("node %d", e.Node)
	if e.Addr != "" {
		s += " (" + e.Addr + ")"
	}
	return s + " was lost with its " + ranksText(e.Ranks) + ": " + e.Reason
}

// nodeAddr is this host as node 0 knows it: its name and the address it
// reaches master (host:port) from ("" when it has neither).
func nodeAddr(master string) string {
	name, _ := os.Hostname()
	c, err := net.Dial("udp", master) // picks the route's source address; sends nothing
	if err != nil {
		return name
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP.String()
	if name == "" {
		return ip
	}
	return name + " (" + ip + ")"
}
