package router

import (
	"bufio"
	"io"
	"net/http"

	"github.com/continuum-router/continuum/internal/h1"
)

// readResponse reads an answer's head from br as http.ReadResponse does.
// The common answer (HTTP/1.1, a final status that has a body, one
// Content-Length, a head already in the buffer) is read here, with one
// allocation for the whole head; anything else goes to http.ReadResponse,
// which also has the last word on malformed heads. A backend's buffered
// answer spends most of its time in the router between this head and the
// client's write, and http.ReadResponse builds a textproto reader, a
// header map of one slice per field and a transfer reader for it.
//
// A plain answer's body reads through lb when it is given (a caller that
// allocates it with its own state), else through one allocated here.
func readResponse(br *bufio.Reader, req *http.Request, lb *lengthBody) (*http.Response, error) {
	if br.Buffered() == 0 {
		// The first read, made here so that its error is the answer's,
		// as http.ReadResponse would report it (a failed read is not
		// read again: a reset connection reads as closed the second time).
		if _, err := br.Peek(1); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	if resp, ok := readPlainResponse(br, req, lb); ok {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

// readPlainResponse reads the head at the start of br when it is plain (see
// readResponse); false leaves br as it was, but for what it buffered.
func readPlainResponse(br *bufio.Reader, req *http.Request, lb *lengthBody) (*http.Response, bool) {
	if req != nil && req.Method == http.MethodHead {
		return nil, false
	}
	head, ok := peekHead(br)
	if !ok {
		return nil, false
	}
	resp, ok := h1.ParseResponseHead(head)
	if !ok {
		return nil, false
	}
	_, _ = br.Discard(len(head))
	resp.Request = req
	if resp.ContentLength == 0 {
		resp.Body = http.NoBody
	} else {
		if lb == nil {
			lb = new(lengthBody)
		}
		*lb = lengthBody{br: br, left: resp.ContentLength}
		resp.Body = lb
	}
	return resp, true
}

// peekHead returns the head (through its blank line) when it is all in
// br's buffer, reading the connection once when the buffer is empty (as
// http.ReadResponse would first); false when the head is not all there,
// when a line ends in a bare line feed, or when the read failed.
// http.ReadResponse then reads on from where it is.
func peekHead(br *bufio.Reader) ([]byte, bool) {
	if br.Buffered() == 0 {
		if _, err := br.Peek(1); err != nil {
			return nil, false
		}
	}
	buf, _ := br.Peek(br.Buffered())
	end, plain := h1.HeadEnd(buf)
	if end < 0 || !plain {
		return nil, false
	}
	return buf[:end], true
}

// lengthBody is an answer's body of a known length read from the
// connection's buffer: io.EOF with its last bytes, io.ErrUnexpectedEOF when
// the connection ends before them (as net/http's body reads).
type lengthBody struct {
	br   *bufio.Reader
	left int64
	err  error
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		b.err = io.EOF
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		b.err = io.EOF
		return n, io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }
