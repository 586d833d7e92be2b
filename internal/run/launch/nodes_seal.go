package launch

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// The keys of a job of several nodes. Only the launchers hold the job's
// secret S (RINGDDP_SECRET of every node's launcher); the ranks never do.
// From S every launcher derives, with HMAC-SHA256 under a label of its own:
//
//	rank secret   = hex(HMAC-SHA256(S, "ringddp/launch/rank-secret/v1"))
//	launcher key  = HMAC-SHA256(S, "ringddp/launch/launcher/v1")
//
// The rank secret is the ranks' RINGDDP_SECRET: it authenticates rank 0's
// store and the mesh, and is the same on every node since every launcher
// derives it from the same S. The launcher key MACs every value the
// launchers exchange through their rendezvous (node 0's plans, the nodes'
// reports, stop requests). HMAC is one-way: a rank, or anything a rank
// runs, holding the rank secret can compute neither S nor the launcher key,
// so it can neither join the launchers' store (authenticated with S) nor
// author a plan, report or stop request they accept. Without a secret
// (-insecure) values go unsealed and are only validated.

const (
	labelRankSecret  = "ringddp/launch/rank-secret/v1"
	labelLauncherKey = "ringddp/launch/launcher/v1"
	labelSealedValue = "ringddp/launch/value\x00"
)

// deriveKey is HMAC-SHA256(secret, label).
func deriveKey(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// rankSecret is the RINGDDP_SECRET the ranks of a job whose launchers
// hold secret get.
func rankSecret(secret string) string {
	return hex.EncodeToString(deriveKey([]byte(secret), labelRankSecret))
}

// sealer MACs the values the launchers exchange under the launcher key
// (nil key: an insecure job, values unsealed).
type sealer struct{ key []byte }

// newSealer is the sealer of the job whose launchers hold secret ("" with
// -insecure).
func newSealer(secret string) sealer {
	if secret == "" {
		return sealer{}
	}
	return sealer{key: deriveKey([]byte(secret), labelLauncherKey)}
}

var errBadMAC = errors.New("its MAC does not check: it was not written by a launcher of this job (only launchers hold the key; a rank cannot author it)")

// mac is HMAC(key, labelSealedValue | storeKey | 0 | body): bound to the
// store key, so a value cannot be moved to another key (another attempt's
// plan, another node's report).
func (s sealer) mac(storeKey string, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(labelSealedValue))
	m.Write([]byte(storeKey))
	m.Write([]byte{0})
	m.Write(body)
	return m.Sum(nil)
}

// seal is the value to store at storeKey for body: its MAC, then body.
func (s sealer) seal(storeKey string, body []byte) []byte {
	if s.key == nil {
		return body
	}
	return append(s.mac(storeKey, body), body...)
}

// open checks a value read at storeKey and returns its body.
func (s sealer) open(storeKey string, v []byte) ([]byte, error) {
	if s.key == nil {
		return v, nil
	}
	if len(v) < sha256.Size {
		return nil, errBadMAC
	}
	body := v[sha256.Size:]
	if !hmac.Equal(v[:sha256.Size], s.mac(storeKey, body)) {
		return nil, errBadMAC
	}
	return body, nil
}
