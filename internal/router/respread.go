package router

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"

	"github.com/continuum-router/continuum/internal/h1"
)

// readResponse reads an answer's head from br as http.ReadResponse does.
// The common answer (HTTP/1.1, a final status that has a body, one
// Content-Length or a chunked stream, a head already in the buffer) is
// read here, with one allocation for the whole head; anything else goes to
// http.ReadResponse, which also has the last word on malformed heads. A
// backend's buffered answer spends most of its time in the router between
// this head and the client's write, and http.ReadResponse builds a
// textproto reader, a header map of one slice per field and a transfer
// reader for it.
//
// A plain answer's body reads through pb when it is given (a caller that
// allocates it with its own state), else through one allocated here.
func readResponse(br *bufio.Reader, req *http.Request, pb *plainBody) (*http.Response, error) {
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
	if resp, ok := readPlainResponse(br, req, pb); ok {
		return resp, nil
	}
	head, whole := wholeHead(br)
	twoWays := whole && h1.FramesTwoWays(head) // before the read reuses the buffer
	resp, err := http.ReadResponse(br, req)
	if err == nil && (twoWays || !whole && resp.TransferEncoding != nil) {
		// Its framing is faulty (RFC 9112): what follows it on the
		// connection may be part of it, so no other answer is read there.
		// A chunked answer whose head did not fit the buffer may have been
		// framed two ways too (http.ReadResponse drops the length without
		// a word): it is not trusted either.
		resp.Close = true
	}
	return resp, err
}

// wholeHead reads until br holds an answer's whole head and returns it;
// false when a line of it ends in a bare LF, the head does not fit br's
// buffer, or the connection ends first (http.ReadResponse then reads it,
// or fails).
func wholeHead(br *bufio.Reader) ([]byte, bool) {
	for {
		buf, _ := br.Peek(br.Buffered())
		end, plain := h1.HeadEnd(buf)
		if end >= 0 {
			return buf[:end], true
		}
		if !plain || br.Buffered() >= br.Size() {
			// A line ending in a bare LF (which HeadEnd does not follow
			// to the head's end), or a head longer than the buffer.
			return nil, false
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			return nil, false
		}
	}
}

// readPlainResponse reads the head at the start of br when it is plain (see
// readResponse); false leaves br as it was, but for what it buffered.
func readPlainResponse(br *bufio.Reader, req *http.Request, pb *plainBody) (*http.Response, bool) {
	if req != nil && req.Method == http.MethodHead {
		return nil, false
	}
	head, ok := peekHead(br)
	if !ok {
		return nil, false
	}
	if pb == nil {
		pb = new(plainBody)
	}
	resp := &pb.resp
	fields, ok := h1.ParseResponseHeadTo(resp, head, !pb.fieldsOnly)
	if !ok {
		return nil, false
	}
	_, _ = br.Discard(len(head))
	resp.Request = req
	pb.fields = fields
	switch {
	case resp.TransferEncoding != nil:
		pb.chunked = chunkedBody{br: br, cr: httputil.NewChunkedReader(br), trailer: &resp.Trailer}
		resp.Body = &pb.chunked
	case resp.ContentLength == 0:
		resp.Body = http.NoBody
	default:
		pb.length = lengthBody{br: br, left: resp.ContentLength}
		resp.Body = &pb.length
	}
	return resp, true
}

// plainBody holds the body readers of a plain answer, one of which reads
// it, and its head's field lines.
type plainBody struct {
	// resp is the answer (allocated with its body's readers).
	resp    http.Response
	length  lengthBody
	chunked chunkedBody
	// fieldsOnly: the answer's header map is left unbuilt (resp.Header
	// nil), fields holding what it would be made of.
	fieldsOnly bool
	fields     string
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

// chunkedBody is a chunked answer's body read from the connection's
// buffer: net/http's chunk decoder, then the trailer read as an answer's
// body reads it (fields before the final empty line go to the answer's
// Trailer; the router relays none). Reads return what is buffered of the
// current chunk without waiting for the next, so a stream's events pass
// one by one.
type chunkedBody struct {
	br      *bufio.Reader
	cr      io.Reader
	trailer *http.Header
	err     error
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.cr.Read(p)
	if errors.Is(err, io.EOF) {
		if terr := b.readTrailer(); terr != nil {
			err = terr
		}
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *chunkedBody) Close() error { return nil }

// The trailer's failures, worded as net/http's (they reach the logs).
var (
	errTrailerEOF  = errors.New("http: unexpected EOF reading trailer")
	errLongTrailer = errors.New("http: suspiciously long trailer after chunked body")
)

// readTrailer reads what follows the last chunk: the empty line alone in
// the common case, else trailer fields through an empty line that must
// come within the buffer's size (the bound on a trailer).
func (b *chunkedBody) readTrailer() error {
	end, err := b.br.Peek(2)
	if len(end) == 2 && end[0] == '\r' && end[1] == '\n' {
		_, _ = b.br.Discard(2)
		return nil
	}
	if len(end) < 2 {
		return errTrailerEOF
	}
	if err != nil {
		return err
	}
	if !blankLineAhead(b.br) {
		return errLongTrailer
	}
	fields, err := textproto.NewReader(b.br).ReadMIMEHeader()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errTrailerEOF
		}
		return err
	}
	if *b.trailer == nil {
		*b.trailer = http.Header(fields)
		return nil
	}
	for k, v := range fields {
		(*b.trailer)[k] = v
	}
	return nil
}

// blankLineAhead reports whether a CRLF CRLF comes within br's buffer
// size, reading no further than it must to see one.
func blankLineAhead(br *bufio.Reader) bool {
	for {
		buf, _ := br.Peek(br.Buffered())
		if bytes.Contains(buf, []byte("\r\n\r\n")) {
			return true
		}
		if len(buf) >= br.Size() {
			return false
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return false // nothing more came
		}
	}
}
