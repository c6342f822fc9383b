package gateway

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// frameLimit enforces API Gateway's 32 KB limit on a single WebSocket
// frame (a message may still be up to 128 KB in several frames). The
// WebSocket library reassembles fragments before the gateway sees a
// message, so the limit is checked on the wire: the hijacked connection
// reads every client frame header as it passes, and a data frame over the
// limit gets a close frame 1009 ("message too big") and the connection is
// closed, as AWS does.
type frameLimit struct {
	http.ResponseWriter
	max int64
}

// Hijack hands the WebSocket library a connection that watches frame sizes.
func (f frameLimit) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(f.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	fc := &frameConn{Conn: conn, max: f.max}
	// Bytes the server already read past the upgrade request are frames
	// too: the library reads them from rw.Reader before the connection.
	if b, _ := rw.Reader.Peek(rw.Reader.Buffered()); fc.scan(b) {
		fc.pending = true
	}
	rw.Writer = bufio.NewWriter(fc)
	return fc, rw, nil
}

// frameConn parses client frame headers (RFC 6455 §5.2) from the bytes read.
type frameConn struct {
	net.Conn
	max int64

	wmu      sync.Mutex // whole writes: the close frame never splits another
	closed   atomic.Bool
	draining atomic.Bool
	header   []byte // header bytes gathered so far
	payload  int64  // payload bytes of the current frame still to pass
	pending  bool   // an oversize frame was among the bytes read before the upgrade
}

func (c *frameConn) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	if c.pending {
		c.tooBig()
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Read(p)
	if n > 0 && c.scan(p[:n]) {
		c.tooBig()
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *frameConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// Close closes the connection, unless it is draining after a close 1009:
// then the drain closes it (closing with unread bytes would reset it, and
// the client would see a reset instead of the close frame).
func (c *frameConn) Close() error {
	if c.draining.Load() {
		return nil
	}
	return c.Conn.Close()
}

// scan feeds bytes through the header parser; true means a data frame over
// the limit started.
func (c *frameConn) scan(b []byte) bool {
	for len(b) > 0 {
		if c.payload > 0 {
			skip := min(int64(len(b)), c.payload)
			c.payload -= skip
			b = b[skip:]
			continue
		}
		c.header = append(c.header, b[0])
		b = b[1:]
		need, length, ok := headerLength(c.header)
		if !ok || len(c.header) < need {
			continue
		}
		opcode := c.header[0] & 0x0f
		c.header = c.header[:0]
		if opcode <= 2 && length > c.max { // continuation, text, binary
			return true
		}
		c.payload = length
	}
	return false
}

// headerLength returns the full header size of h and the payload length
// once enough of h is known.
func headerLength(h []byte) (need int, length int64, ok bool) {
	if len(h) < 2 {
		return 2, 0, false
	}
	masked := h[1]&0x80 != 0
	need = 2
	switch l := int64(h[1] & 0x7f); l {
	case 126:
		need += 2
	case 127:
		need += 8
	default:
		length = l
	}
	if masked {
		need += 4
	}
	if len(h) < need {
		return need, 0, true
	}
	switch h[1] & 0x7f {
	case 126:
		length = int64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		length = int64(binary.BigEndian.Uint64(h[2:10]) &^ (1 << 63))
	}
	return need, length, true
}

// tooBig sends close 1009, stops writing, and closes the connection once
// the client's remaining bytes are read (or after a second).
func (c *frameConn) tooBig() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Swap(true) {
		return
	}
	c.draining.Store(true)
	reason := "frame exceeds 32 KB"
	frame := []byte{0x88, byte(2 + len(reason)), 0x03, 0xf1} // FIN+close, 1009
	frame = append(frame, reason...)
	_, _ = c.Conn.Write(frame)
	go func() {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_ = c.Conn.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, c.Conn)
		_ = c.Conn.Close()
	}()
}
