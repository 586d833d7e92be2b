package rendezvous

import (
	"io"
	"net"

	"github.com/ringddp/ringddp/allreduce/internal/frameseal"
)

// Frame sealing. With a secret, every request and every reply is
// authenticated after the handshake, whatever the two ends' addresses:
// store traffic is small (a rendezvous moves kilobytes), so the cost does
// not matter, and neither end has a per-link choice the other could see
// differently. A frame is two records, its header and its body (key and
// value for a request, possibly empty), each followed by its 16-byte tag:
//
//	request: header [16] | tagH [16] | key | value | tagB [16]
//	reply:   header [8]  | tagH [16] | body        | tagB [16]
//
// A tag is the GMAC of its record under the key of its direction (client
// to server, or server to client) and the direction's record counter
// (package frameseal). The keys come from the connection's session key:
//
//	session = HMAC-SHA256(secret, "ringddp/rendezvous/v2/session\x00" | hello | answer)
//	key of a direction = HKDF-SHA256(session, info: "ringddp/rendezvous v2 frames: client to server"
//	                                          or "ringddp/rendezvous v2 frames: server to client")
//
// with hello and answer the handshake's first two messages (both nonces;
// the answer with the client's MAC). So a relay without the secret cannot
// change, drop, replay, reorder or splice a frame, nor move one to
// another connection: the next record fails its check, and the reader
// closes the connection with an error wrapping ErrFrameAuth. The header is
// checked before anything is allocated for the body. Insecure stores (no
// secret) send frames without tags.
const (
	labelSession  = "ringddp/rendezvous/v2/session\x00"
	labelToServer = "ringddp/rendezvous v2 frames: client to server"
	labelToClient = "ringddp/rendezvous v2 frames: server to client"
)

// ErrFrameAuth is what a frame that fails its authentication returns,
// wrapped: its bytes were changed, dropped, replayed, reordered or spliced
// in transit.
var ErrFrameAuth = frameseal.ErrAuth

// storeLink is one store connection after its handshake: it writes and
// reads frames, sealed when send and recv are set.
type storeLink struct {
	net.Conn
	send, recv *frameseal.Dir // nil: an insecure store
	tagH, tagB [frameseal.TagLen]byte
	in         [frameseal.TagLen]byte
}

// newStoreLink makes the link of c; key is the session key, nil for an
// insecure store; client is the side that dialed.
func newStoreLink(c net.Conn, key *[frameseal.KeyLen]byte, client bool) (*storeLink, error) {
	l := &storeLink{Conn: c}
	if key == nil {
		return l, nil
	}
	out, in := labelToClient, labelToServer
	if client {
		out, in = in, out
	}
	var err error
	if l.send, err = frameseal.Open(*key, out); err != nil {
		return nil, err
	}
	if l.recv, err = frameseal.Open(*key, in); err != nil {
		return nil, err
	}
	return l, nil
}

// writeFrame writes one frame, header hdr and body; body is not copied (it
// may be a stored value).
func (l *storeLink) writeFrame(hdr, body []byte) error {
	bufs := net.Buffers{hdr, body}
	if l.send != nil {
		l.send.Seal(l.tagH[:], hdr)
		l.send.Seal(l.tagB[:], body)
		bufs = net.Buffers{hdr, l.tagH[:], body, l.tagB[:]}
	}
	_, err := bufs.WriteTo(l.Conn)
	return err
}

// readRecord reads a record into b, whose first have bytes the caller has
// read already, and its tag, and checks it.
func (l *storeLink) readRecord(b []byte, have int) error {
	if _, err := io.ReadFull(l.Conn, b[have:]); err != nil {
		return err
	}
	if l.recv == nil {
		return nil
	}
	if _, err := io.ReadFull(l.Conn, l.in[:]); err != nil {
		return err
	}
	return l.recv.Check(b, l.in[:])
}

// tamperNote says what a failed frame check means, for errors: the peer
// proved the secret in the handshake, so the frame was not the peer's.
const tamperNote = "the connection's bytes were changed, dropped, replayed or reordered in transit (an on-path attacker, or a broken relay)"
