// Package floorproxy is the floor of the proxy benchmarks: the least a Go
// reverse proxy can do per request on this machine, measured as a path of
// its own. One goroutine per client connection with its own kept-alive
// upstream connection, the sockets read and written as continuum's are
// (h1.SocketIO: system calls the scheduler is not told of, waits in the
// network poller), and no HTTP work beyond finding where a request and an
// answer end; its bytes go through as they are. Against it, the part of
// continuum's cost that is the router's own work (heads parsed and written
// again, routing, metrics) shows apart from what any Go proxy pays for its
// goroutines and sockets. bench-proxy runs it as a process; the router's
// benchmarks run it in theirs.
//
// It serves only what the benchmarks send: requests with a Content-Length
// (or none), answers with a Content-Length or chunked; anything else ends
// the connection.
//
// Imports: h1.
package floorproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/continuum-router/continuum/internal/h1"
)

// floorBuf is the size of one read.
const floorBuf = 16 << 10

// maxFloorHead bounds a request or answer head, maxFloorRequest a whole
// request (the benchmarks' are a few hundred bytes).
const (
	maxFloorHead    = 64 << 10
	maxFloorRequest = 1 << 20
)

// Options are Serve's settings; the zero value is the floor itself.
type Options struct {
	// Logf, when set, receives the errors of single connections.
	Logf func(format string, args ...any)
	// PerRequest, when set, runs once per request between reading it and
	// sending it on: work added to the floor's on purpose, to see how
	// the benchmarks' figures move with a proxy's own work per request.
	PerRequest func()
}

// Serve proxies every connection ln accepts to upstream (HOST:PORT) until
// ln is closed.
func Serve(ln net.Listener, upstream string, o Options) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			err := floorConn(c, upstream, o.PerRequest)
			if err != nil && !errors.Is(err, io.EOF) && o.Logf != nil {
				o.Logf("floor: %s: %v", c.RemoteAddr(), err)
			}
		}()
	}
}

// floorConn relays the requests of one client connection, one at a time,
// over one upstream connection dialed at the first, running work (when
// set) for each.
func floorConn(c net.Conn, upstream string, work func()) error {
	defer func() { _ = c.Close() }()
	client := h1.SocketIO(c)
	var up net.Conn
	var upIO io.ReadWriter
	defer func() {
		if up != nil {
			_ = up.Close()
		}
	}()
	in := make([]byte, 0, floorBuf)
	buf := make([]byte, floorBuf)
	var resp framing
	for {
		n, err := wholeRequest(client, &in, buf)
		if err != nil {
			return err
		}
		if up == nil {
			if up, err = net.Dial("tcp", upstream); err != nil {
				return err
			}
			upIO = h1.SocketIO(up)
		}
		if work != nil {
			work()
		}
		if _, err := upIO.Write(in[:n]); err != nil {
			return err
		}
		in = append(in[:0], in[n:]...)
		resp.reset()
		for !resp.done {
			k, err := upIO.Read(buf)
			if err != nil {
				return fmt.Errorf("upstream: %w", err)
			}
			if _, err := client.Write(buf[:k]); err != nil {
				return err
			}
			if err := resp.feed(buf[:k]); err != nil {
				return err
			}
		}
	}
}

// wholeRequest reads from r into *in until it holds a whole request, and
// returns the request's length.
func wholeRequest(r io.Reader, in *[]byte, buf []byte) (int, error) {
	for {
		if end := bytes.Index(*in, []byte("\r\n\r\n")); end >= 0 {
			length, chunked, err := bodyLength((*in)[:end+4])
			if err != nil || chunked || length > maxFloorRequest {
				return 0, errors.Join(errors.New("a request the floor does not serve"), err)
			}
			if n := end + 4 + length; len(*in) >= n {
				return n, nil
			}
		} else if len(*in) > maxFloorHead {
			return 0, errors.New("request head too large")
		}
		k, err := r.Read(buf)
		if err != nil {
			return 0, err
		}
		*in = append(*in, buf[:k]...)
	}
}

// bodyLength reads a head's Content-Length (0 when it has none) or
// whether its body is chunked.
func bodyLength(head []byte) (length int, chunked bool, err error) {
	for line := range bytes.SplitSeq(head, []byte("\r\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.Atoi(string(value))
			if err != nil || n < 0 {
				return 0, false, fmt.Errorf("content-length %q", value)
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) {
				return 0, false, fmt.Errorf("transfer-encoding %q", value)
			}
			chunked = true
		}
	}
	return length, chunked, nil
}

// framing follows an answer's bytes as they pass to find where it ends.
type framing struct {
	head    []byte // the head so far, until it is whole
	inBody  bool
	chunked bool
	left    int // bytes of the body (or of the current chunk's data) still to come
	state   int // chunked: chunkSize, chunkData, chunkDataEnd, chunkTrailer
	line    []byte
	done    bool
}

const (
	chunkSize = iota
	chunkData
	chunkDataEnd
	chunkTrailer
)

func (f *framing) reset() {
	*f = framing{head: f.head[:0], line: f.line[:0]}
}

// feed takes the answer's next bytes.
func (f *framing) feed(p []byte) error {
	if !f.inBody {
		f.head = append(f.head, p...)
		end := bytes.Index(f.head, []byte("\r\n\r\n"))
		if end < 0 {
			if len(f.head) > maxFloorHead {
				return errors.New("answer head too large")
			}
			return nil
		}
		length, chunked, err := bodyLength(f.head[:end+4])
		if err != nil {
			return err
		}
		f.inBody, f.chunked, f.left = true, chunked, length
		p = f.head[end+4:]
	}
	if !f.chunked {
		f.left -= len(p)
		f.done = f.left <= 0
		return nil
	}
	return f.chunks(p)
}

func (f *framing) chunks(p []byte) error {
	for len(p) > 0 && !f.done {
		if f.state == chunkData {
			k := min(len(p), f.left)
			f.left -= k
			p = p[k:]
			if f.left == 0 {
				f.state = chunkDataEnd
			}
			continue
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			f.line = append(f.line, p...)
			if len(f.line) > maxFloorHead {
				return errors.New("chunk line too long")
			}
			return nil
		}
		line := bytes.TrimSuffix(append(f.line, p[:i]...), []byte("\r"))
		f.line = f.line[:0]
		p = p[i+1:]
		switch f.state {
		case chunkSize:
			size, _, _ := bytes.Cut(line, []byte(";"))
			n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 32)
			if err != nil || n < 0 {
				return fmt.Errorf("chunk size %q", line)
			}
			f.left, f.state = int(n), chunkData
			if n == 0 {
				f.state = chunkTrailer
			}
		case chunkDataEnd:
			if len(line) != 0 {
				return errors.New("chunk data longer than its size")
			}
			f.state = chunkSize
		case chunkTrailer:
			f.done = len(line) == 0
		}
	}
	return nil
}
