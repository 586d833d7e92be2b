package tcp

import (
	"net"
	"testing"
	"time"
)

// lateVerdictConn delays the acceptor's verdict: an acceptor whose
// goroutine was not scheduled until after the dialer's handshake deadline.
type lateVerdictConn struct {
	net.Conn
	delay time.Duration
}

func (c lateVerdictConn) Write(b []byte) (int, error) {
	if len(b) > 6 && b[6] == hsVerdict {
		time.Sleep(c.delay)
	}
	return c.Conn.Write(b)
}

// TestDialerWaitsForVerdict: an acceptor that admits the dialer (and so
// claims its rank) after the dialer's handshake deadline has passed. With
// verdictBy the dialer reads the verdict and the link forms on both ends;
// without it the dialer gives up while the acceptor holds the link, the
// window that made a loaded mesh wait out its whole join timeout.
func TestDialerWaitsForVerdict(t *testing.T) {
	const handshakeTimeout, late = 100 * time.Millisecond, 300 * time.Millisecond
	for _, tc := range []struct {
		name      string
		verdictBy time.Duration
		formed    bool
	}{
		{"verdictBy set", 5 * time.Second, true},
		{"no verdictBy", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			secret := []byte("s3cret")
			pd := &handshakeParams{secret: secret, mode: modeHMAC, size: 2, rank: 1, runID: "r"}
			if tc.verdictBy > 0 {
				pd.verdictBy = time.Now().Add(tc.verdictBy)
			}
			pa := &handshakeParams{secret: secret, mode: modeHMAC, size: 2, rank: 0, runID: "r"}
			admitted := make(chan bool, 1)
			go func() {
				res, err := acceptHandshake(lateVerdictConn{b, late}, pa, acceptHooks{admit: func(int) string { return "" }, release: func(int) {}})
				admitted <- err == nil && res.out == acceptOK
			}()
			_ = a.SetDeadline(time.Now().Add(handshakeTimeout))
			_, _, err := dialHandshake(a, pd, 0)
			if tc.formed && err != nil {
				t.Fatalf("dialer gave up on an admitting acceptor: %v", err)
			}
			if !tc.formed && err == nil {
				t.Fatalf("dialer read a verdict sent after its deadline without verdictBy: the test no longer reproduces the window")
			}
			if !tc.formed {
				// A pipe has no buffer: the verdict's write ends when the
				// dialer's end closes (over TCP it lands in the socket
				// buffer, unread, and the acceptor keeps the link).
				_ = a.Close()
				<-admitted
				return
			}
			if !<-admitted {
				t.Errorf("acceptor did not admit the dialer")
			}
		})
	}
}
