package launch

import "encoding/json"

// Decoding what the launchers read from their rendezvous: each value is
// opened (its MAC under the launcher key checked, nodes_seal.go), decoded
// from JSON and checked field by field (nodes_check.go), in that order, so
// nothing of a value that does not check is acted on. The three decoders
// are the fuzz targets' entry points (nodes_decode_test.go).

// decodePlan reads node 0's plan for attempt n, read at storeKey, as a
// launcher of a job of nnodes nodes running ranks ranks each.
func decodePlan(s sealer, storeKey string, v []byte, n, nnodes, ranks int) (nodePlan, error) {
	var p nodePlan
	if err := s.decode(storeKey, v, &p); err != nil {
		return p, err
	}
	return p, checkPlan(&p, n, nnodes, ranks)
}

// decodeReport reads node's report for the rendezvous after attempt
// attempt (-1: joining), read at storeKey.
func decodeReport(s sealer, storeKey string, v []byte, node, attempt int) (nodeReport, error) {
	var rep nodeReport
	if err := s.decode(storeKey, v, &rep); err != nil {
		return rep, err
	}
	return rep, checkReport(&rep, node, attempt)
}

// decodeStop reads a stop request of a job of nnodes nodes, read at
// storeKey.
func decodeStop(s sealer, storeKey string, v []byte, nnodes int) (stopMsg, error) {
	var m stopMsg
	if err := s.decode(storeKey, v, &m); err != nil {
		return m, err
	}
	return m, checkStop(&m, nnodes)
}

// decode opens the value v read at storeKey and decodes its JSON into dst.
func (s sealer) decode(storeKey string, v []byte, dst any) error {
	body, err := s.open(storeKey, v)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, dst)
}
